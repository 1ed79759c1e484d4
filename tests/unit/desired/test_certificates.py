"""The webhook's self-signed CA and serving certificate, and when to renew them."""

from __future__ import annotations

import datetime
import ssl

from cryptography import x509

from vpol.desired.certificates import from_secret_data, needs_renewal, new_serving_certificate, to_secret_data

NOW = datetime.datetime(2026, 11, 25, tzinfo=datetime.timezone.utc)
NAMES = ["vpol-webhook.vpol-system.svc"]


def test_serving_certificate_is_signed_by_the_ca_and_names_the_service(tmp_path):
    b = new_serving_certificate(NAMES, ["127.0.0.1"], now=NOW)
    cert = x509.load_pem_x509_certificate(b.cert_pem)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(b.ca_pem))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == NAMES
    assert [str(i) for i in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    # ssl accepts the pair (what the server loads)
    (tmp_path / "c").write_bytes(b.cert_pem)
    (tmp_path / "k").write_bytes(b.key_pem)
    ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(tmp_path / "c", tmp_path / "k")


def test_renewal():
    b = new_serving_certificate(NAMES, now=NOW)
    assert not needs_renewal(b, NAMES, now=NOW)
    assert needs_renewal(None, NAMES, now=NOW)
    assert needs_renewal(b, NAMES, now=NOW + datetime.timedelta(days=340))  # within 30 days of expiry
    assert needs_renewal(b, NAMES + ["other.svc"], now=NOW)  # a name is missing
    assert needs_renewal(b, NAMES, ["10.0.0.1"], now=NOW)
    other = new_serving_certificate(NAMES, now=NOW)
    assert needs_renewal(type(b)(b.ca_pem, other.cert_pem, other.key_pem), NAMES, now=NOW)  # wrong CA
    assert needs_renewal(type(b)(b.ca_pem, b.cert_pem, other.key_pem), NAMES, now=NOW)  # wrong key
    assert needs_renewal(type(b)(b"junk", b.cert_pem, b.key_pem), NAMES, now=NOW)


def test_secret_round_trip_in_cert_managers_layout():
    b = new_serving_certificate(NAMES, now=NOW)
    data = to_secret_data(b)
    assert set(data) == {"ca.crt", "tls.crt", "tls.key"}
    assert from_secret_data(data) == b
    assert from_secret_data({"tls.crt": data["tls.crt"]}) is None and from_secret_data(None) is None

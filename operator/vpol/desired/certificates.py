"""The webhook's serving certificate: a self-signed CA and a serving pair it signs (pure, `cryptography`).

The CA goes into the webhook configuration's ``caBundle``; the serving pair
is what every replica serves with. Both live in one Secret laid out as
cert-manager lays out its own (``ca.crt``, ``tls.crt``, ``tls.key``), so a
cert-manager Secret can be used instead (``--webhook-cert-secret``).
Renewal makes a new CA and pair well before expiry.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)


@dataclass(frozen=True)
class ServingCertificate:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "vpol")])


def new_serving_certificate(dns_names: Sequence[str], ip_addresses: Sequence[str] = (), *,
                            now: datetime.datetime, valid_for: datetime.timedelta = VALID_FOR) -> ServingCertificate:
    """A new CA and a serving certificate for these names, signed by it."""
    start = now - datetime.timedelta(minutes=5)  # tolerate clocks a little behind
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("vpol webhook CA")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(now + valid_for)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    cert = (x509.CertificateBuilder().subject_name(_name((list(dns_names) or list(ip_addresses) or ["vpol"])[0]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(now + valid_for)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return ServingCertificate(
        ca_pem=ca.public_bytes(pem),
        cert_pem=cert.public_bytes(pem),
        key_pem=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def needs_renewal(bundle: ServingCertificate | None, dns_names: Sequence[str], ip_addresses: Sequence[str] = (),
                  *, now: datetime.datetime, renew_before: datetime.timedelta = RENEW_BEFORE) -> bool:
    """True when there is no usable certificate for these names until ``now + renew_before``."""
    if bundle is None:
        return True
    try:
        ca = x509.load_pem_x509_certificate(bundle.ca_pem)
        cert = x509.load_pem_x509_certificate(bundle.cert_pem)
        key = serialization.load_pem_private_key(bundle.key_pem, password=None)
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return True
    if key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) != \
            cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo):
        return True
    horizon = now + renew_before
    if min(ca.not_valid_after_utc, cert.not_valid_after_utc) <= horizon or cert.not_valid_before_utc > now:
        return True
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return True
    have_dns = set(sans.get_values_for_type(x509.DNSName))
    have_ips = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    return not (set(dns_names) <= have_dns and {str(ipaddress.ip_address(i)) for i in ip_addresses} <= have_ips)


def from_secret_data(data: Mapping[str, str] | None) -> ServingCertificate | None:
    """The bundle in a Secret's ``data`` (base64 values), None when a part is missing."""
    data = data or {}
    try:
        parts = [base64.b64decode(data[k]) for k in ("ca.crt", "tls.crt", "tls.key")]
    except (KeyError, ValueError, TypeError):
        return None
    if not all(parts):
        return None
    return ServingCertificate(*parts)


def to_secret_data(bundle: ServingCertificate) -> dict[str, str]:
    return {"ca.crt": base64.b64encode(bundle.ca_pem).decode(), "tls.crt": base64.b64encode(bundle.cert_pem).decode(),
            "tls.key": base64.b64encode(bundle.key_pem).decode()}

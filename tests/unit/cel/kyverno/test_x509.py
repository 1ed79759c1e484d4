"""x509.decode.

The first test uses the certificate and the expected values of Kyverno's
own test (pkg/cel/libs/x509/impl_test.go). The others build certificates
with ``cryptography`` and check the mapping to Go's x509 fields and enums
(KeyUsage bits: digitalSignature=1 ... cRLSign=64; ExtKeyUsage serverAuth=1,
clientAuth=2; PublicKeyAlgorithm RSA=1).
"""

from __future__ import annotations

import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.unit.cel.kyverno.conftest import error, value

KYVERNO_CERT = """-----BEGIN CERTIFICATE-----
MIIC7TCCAdWgAwIBAgIBADANBgkqhkiG9w0BAQsFADAYMRYwFAYDVQQDDA0qLmt5
dmVybm8uc3ZjMB4XDTIyMTAxMDExNDYzMloXDTIzMTAxMDEyNDYzMlowGDEWMBQG
A1UEAwwNKi5reXZlcm5vLnN2YzCCASIwDQYJKoZIhvcNAQEBBQADggEPADCCAQoC
ggEBAOKF+2P0Ufp855hpdsGD4lYkd6oU7HZAOWm1XskAMwrdsqWwTNNAinyHRoPQ
IbNbGDQ+r6Cggc2mlxHJ90PnC2weHj5otaD17Z+ARZpJZ4HMWkEfFt8sxwo9vuQJ
RWihqNwFheowjswoSB1DHnPufrZHfztkMoRx278ZfHaIMdlSTg50ektkNDoHA3OJ
sxxw54X3HR1iq6SZwN8xNT0TI6B6BbfAYWMNmKCiZ2iV6kW//XnTEqGd2WcmhuP0
SjwO4tCJbj9oV6+Bj/uhFr7J4foErMaodYDBtQs/ul2tcAwSBHfnC2KcLbiZTZsC
0Rs0WPJ4YwF/cOsD7Z/RmLs4FHsCAwEAAaNCMEAwDgYDVR0PAQH/BAQDAgKkMA8G
A1UdEwEB/wQFMAMBAf8wHQYDVR0OBBYEFJaK+3Wfnf7rVkYBzMCLSaV56NMqMA0G
CSqGSIb3DQEBCwUAA4IBAQDY7F6b+t9BX7098JyGk6zeT39MoLdSv+8IaKXn+m8G
yOKn3CZkruko57ycvPd4taC0gggtmUYynFhwPMQr+boNrrK9rat8Jw3yPPsBq/8D
/s6tvwxSNXBfPUI5OvNIB/hA5XpJpdHQaCkYm+FWkcJsolkkbSOfVjUjImW26JHB
nnPPtR4Y7dx0SVoPS19IC0T5RmdvgqlXj4XbhTnX3QOujVHn8u+wQ8po7EngHDQs
+onfkp8ipe0QpEJL1ZdW2LhyDXGKrZ2y8UPZ9wYNzxHWaj1Thu4B9YFdsPUwWqSx
n9e+FygpoktlD8YgT7jwgiVKX7Koz++zyvMIdhvRrtgS
-----END CERTIFICATE-----"""

KYVERNO_N = (
    "28595925905962223424520947352207105451744616797088171943239289907331901888529856098458304611629660120574607501039902142361333982065793213267074854658525100799280158707840279479550961169213763526857247298653141711003931642606662052674943191476488665842309583311097351331994267413776792462637192775240062778036062353517979538994974045127175206597906751521558536719043095219698535279694800624795673809356898452438518041024126624051887044932164506019573725987204208750674129677584956156611454245004918943771571492757639432459688931855526941886354880727024912384140238027697348634609952850513122734230521040730560514233467"
)


def decode(pem: str) -> dict:
    result = value("x509.decode(variables.pem)", variables={"pem": pem})
    assert isinstance(result, dict)
    return result


def test_kyverno_certificate() -> None:
    cert = decode(KYVERNO_CERT)
    assert cert["IsCA"] is True
    assert cert["BasicConstraintsValid"] is True
    assert cert["KeyUsage"] == 37.0
    assert cert["SerialNumber"] == 0.0
    assert cert["PublicKeyAlgorithm"] == 1.0
    assert cert["MaxPathLen"] == -1.0
    assert cert["MaxPathLenZero"] is False
    assert cert["NotBefore"] == "2022-10-10T11:46:32Z"
    assert cert["NotAfter"] == "2023-10-10T12:46:32Z"
    assert cert["Issuer"]["CommonName"] == "*.kyverno.svc"
    assert cert["Issuer"]["SerialNumber"] == ""
    assert cert["Issuer"]["Names"] == [{"Type": [2.0, 5.0, 4.0, 3.0], "Value": "*.kyverno.svc"}]
    assert cert["PublicKey"]["E"] == 65537.0
    assert cert["PublicKey"]["N"] == KYVERNO_N
    assert len(cert["Extensions"]) == 3
    assert cert["Extensions"][0]["Critical"] is True
    assert cert["Extensions"][0]["Id"] == [2.0, 5.0, 29.0, 15.0]
    for field in ("Raw", "RawIssuer", "RawSubject", "RawSubjectPublicKeyInfo", "RawTBSCertificate", "Signature"):
        assert isinstance(cert[field], str) and cert[field]
    # Raw is the DER of the PEM body, base64 again
    assert cert["Raw"] == "".join(KYVERNO_CERT.splitlines()[1:-1])
    # Go's JSON: numbers are doubles, empty lists are null
    assert cert["DNSNames"] is None and cert["ExtKeyUsage"] is None


def test_numbers_are_doubles_in_cel() -> None:
    assert value("x509.decode(variables.pem).KeyUsage == 37.0 && type(x509.decode(variables.pem).KeyUsage) == double",
                 variables={"pem": KYVERNO_CERT}) is True


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme")])


def _leaf(key: object, *, serial: int = 4242) -> str:
    issuer_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name("leaf.example.com"))
        .issuer_name(_name("Example CA"))
        .public_key(key.public_key())  # type: ignore[attr-defined]
        .serial_number(serial)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("leaf.example.com"), x509.DNSName("www.example.com"),
                 x509.IPAddress(ipaddress.ip_address("10.0.0.1")), x509.RFC822Name("ops@example.com")]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True, data_encipherment=False,
                          key_agreement=False, key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    cert = builder.sign(issuer_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_generated_certificate_fields() -> None:
    cert = decode(_leaf(rsa.generate_private_key(public_exponent=3, key_size=2048)))
    assert cert["DNSNames"] == ["leaf.example.com", "www.example.com"]
    assert cert["IPAddresses"] == ["10.0.0.1"]
    assert cert["EmailAddresses"] == ["ops@example.com"]
    assert cert["ExtKeyUsage"] == [1.0, 2.0]
    assert cert["KeyUsage"] == 5.0  # digitalSignature | keyEncipherment
    assert cert["IsCA"] is False and cert["BasicConstraintsValid"] is True
    assert cert["SerialNumber"] == 4242.0
    assert cert["PublicKey"]["E"] == 3.0
    assert cert["Issuer"]["CommonName"] == "Example CA"
    assert cert["Issuer"]["Organization"] == ["Acme"]
    assert cert["Issuer"]["Country"] is None
    assert cert["NotBefore"] == "2024-01-01T00:00:00Z"


def test_ca_extensions() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime(2024, 6, 1, 12, 30, tzinfo=datetime.timezone.utc)
    aki = x509.AuthorityKeyIdentifier(key_identifier=b"\x01\x02\x03", authority_cert_issuer=None, authority_cert_serial_number=None)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("Sub CA"))
        .issuer_name(_name("Root CA"))
        .public_key(key.public_key())
        .serial_number(2**64 + 5)  # Go's big.Int.Int64 keeps the low 64 bits
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(aki, critical=False)
        .add_extension(
            x509.NameConstraints(
                permitted_subtrees=[x509.DNSName("example.com"), x509.IPAddress(ipaddress.ip_network("10.0.0.0/8"))],
                excluded_subtrees=[x509.RFC822Name("bad.example.com")],
            ),
            critical=True,
        )
        .add_extension(
            x509.AuthorityInformationAccess([
                x509.AccessDescription(x509.oid.AuthorityInformationAccessOID.OCSP, x509.UniformResourceIdentifier("http://ocsp.example.com")),
                x509.AccessDescription(x509.oid.AuthorityInformationAccessOID.CA_ISSUERS, x509.UniformResourceIdentifier("http://ca.example.com/ca.crt")),
            ]),
            critical=False,
        )
        .add_extension(
            x509.CRLDistributionPoints([x509.DistributionPoint([x509.UniformResourceIdentifier("http://crl.example.com/1.crl")], None, None, None)]),
            critical=False,
        )
        .add_extension(x509.CertificatePolicies([x509.PolicyInformation(x509.ObjectIdentifier("2.23.140.1.2.1"), None)]), critical=False)
        .add_extension(
            x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False,
                          key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    got = decode(cert.public_bytes(serialization.Encoding.PEM).decode())
    assert got["IsCA"] is True and got["MaxPathLen"] == 0.0 and got["MaxPathLenZero"] is True
    assert got["SerialNumber"] == 5.0
    assert got["KeyUsage"] == 96.0  # certSign | cRLSign
    assert got["AuthorityKeyId"] == "AQID"
    assert got["PermittedDNSDomainsCritical"] is True
    assert got["PermittedDNSDomains"] == ["example.com"]
    assert got["PermittedIPRanges"] == [{"IP": "10.0.0.0", "Mask": "/wAAAA=="}]
    assert got["ExcludedEmailAddresses"] == ["bad.example.com"]
    assert got["ExcludedDNSDomains"] is None
    assert got["OCSPServer"] == ["http://ocsp.example.com"]
    assert got["IssuingCertificateURL"] == ["http://ca.example.com/ca.crt"]
    assert got["CRLDistributionPoints"] == ["http://crl.example.com/1.crl"]
    assert got["PolicyIdentifiers"] == [[2.0, 23.0, 140.0, 1.0, 2.0, 1.0]]
    assert got["NotBefore"] == "2024-06-01T12:30:00Z"
    assert [e["Id"] for e in got["Extensions"]][0] == [2.0, 5.0, 29.0, 19.0]


def test_pem_with_leading_text_is_found() -> None:
    pem = "some comment\n" + KYVERNO_CERT + "\ntrailing"
    assert decode(pem)["Issuer"]["CommonName"] == "*.kyverno.svc"


def test_certificate_request() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(_name("svc.example.com"))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("svc.example.com"),
                                                    x509.UniformResourceIdentifier("spiffe://example.com/ns/a")]),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    got = decode(csr.public_bytes(serialization.Encoding.PEM).decode())
    assert got["Subject"]["CommonName"] == "svc.example.com"
    assert got["DNSNames"] == ["svc.example.com"]
    assert got["SignatureAlgorithm"] == 4.0  # SHA256WithRSA
    assert got["PublicKeyAlgorithm"] == 1.0
    assert got["URIs"][0]["Scheme"] == "spiffe" and got["URIs"][0]["Host"] == "example.com"
    assert got["PublicKey"]["N"] == str(key.public_key().public_numbers().n)


@pytest.mark.parametrize("pem", ["not a valid PEM", "", "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----"])
def test_bad_pem(pem: str) -> None:
    assert "failed to decode PEM block" in error("x509.decode(variables.pem)", variables={"pem": pem})


def test_other_pem_block() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    assert "neither contains a CERTIFICATE or CERTIFICATE REQUEST" in error("x509.decode(variables.pem)", variables={"pem": pem})


def test_non_rsa_certificate() -> None:
    pem = _leaf(ec.generate_private_key(ec.SECP256R1()))
    assert "certificate should use rsa algorithm" in error("x509.decode(variables.pem)", variables={"pem": pem})


def test_garbage_certificate_body() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----"
    assert error("x509.decode(variables.pem)", variables={"pem": pem})

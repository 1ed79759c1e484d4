"""Kyverno's x509 library: ``x509.decode(pem)``.

The first PEM block of the string is decoded. A ``CERTIFICATE`` gives a map
shaped like Kyverno's output, which is Go's ``x509.Certificate`` fields
encoded to JSON and decoded again: ``Raw``, ``RawTBSCertificate``,
``RawSubjectPublicKeyInfo``, ``RawSubject``, ``RawIssuer``, ``Signature``
(base64), ``PublicKeyAlgorithm`` (Go's enum, RSA = 1), ``PublicKey``
(``{"N": decimal string, "E": number}``), ``SerialNumber``, ``Issuer`` (a
``pkix.Name``: ``CommonName``, ``Organization``..., ``Names``), ``NotBefore``/
``NotAfter`` (RFC 3339), ``KeyUsage`` (Go's bit set), ``Extensions``
(``{"Id": [oid ints], "Critical", "Value": base64}``), ``ExtKeyUsage``,
``BasicConstraintsValid``, ``IsCA``, ``MaxPathLen`` (-1 when unset),
``MaxPathLenZero``, ``AuthorityKeyId``, ``OCSPServer``,
``IssuingCertificateURL``, ``DNSNames``, ``EmailAddresses``, ``IPAddresses``,
name constraints, ``CRLDistributionPoints`` and ``PolicyIdentifiers``. Every
number is a double and empty lists are ``null``, as after Go's JSON round
trip. A ``CERTIFICATE REQUEST`` gives Go's ``x509.CertificateRequest`` fields
the same way. Only RSA keys are accepted, as in Kyverno.

Errors: ``failed to decode PEM block``, ``certificate should use rsa
algorithm``, ``PEM block neither contains a CERTIFICATE or CERTIFICATE
REQUEST``, or the parser's reason.

Parsing uses ``cryptography``; the mapping to Go's field names, enums and
JSON encoding is written here.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import urllib.parse
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from cel_expr_python import cel
from cryptography import x509
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import AuthorityInformationAccessOID, ExtendedKeyUsageOID, ExtensionOID

from vpol.cel.declare import STRING
from vpol.cel.libraries.kyverno.declarations import Fn
from vpol.cel.libraries.kyverno.values import go_json

LIBRARY = "kyverno.x509"

_PEM_BLOCK = re.compile(
    r"-----BEGIN (?P<type>[^-\r\n]*)-----\r?\n(?P<body>.*?)-----END (?P=type)-----", re.DOTALL
)

# Go's x509.ExtKeyUsage enum by OID.
_EXT_KEY_USAGE = {
    "2.5.29.37.0": 0,
    ExtendedKeyUsageOID.SERVER_AUTH.dotted_string: 1,
    ExtendedKeyUsageOID.CLIENT_AUTH.dotted_string: 2,
    ExtendedKeyUsageOID.CODE_SIGNING.dotted_string: 3,
    ExtendedKeyUsageOID.EMAIL_PROTECTION.dotted_string: 4,
    "1.3.6.1.5.5.7.3.5": 5,
    "1.3.6.1.5.5.7.3.6": 6,
    "1.3.6.1.5.5.7.3.7": 7,
    ExtendedKeyUsageOID.TIME_STAMPING.dotted_string: 8,
    ExtendedKeyUsageOID.OCSP_SIGNING.dotted_string: 9,
    "1.3.6.1.4.1.311.10.3.3": 10,
    "2.16.840.1.113730.4.1": 11,
    "1.3.6.1.4.1.311.2.1.22": 12,
    "1.3.6.1.4.1.311.61.1.1": 13,
}

# Go's x509.SignatureAlgorithm enum by OID.
_SIGNATURE_ALGORITHM = {
    "1.2.840.113549.1.1.2": 1,
    "1.2.840.113549.1.1.4": 2,
    "1.2.840.113549.1.1.5": 3,
    "1.2.840.113549.1.1.11": 4,
    "1.2.840.113549.1.1.12": 5,
    "1.2.840.113549.1.1.13": 6,
    "1.2.840.10040.4.3": 7,
    "2.16.840.1.101.3.4.3.2": 8,
    "1.2.840.10045.4.1": 9,
    "1.2.840.10045.4.3.2": 10,
    "1.2.840.10045.4.3.3": 11,
    "1.2.840.10045.4.3.4": 12,
    "1.2.840.113549.1.1.10": 13,  # RSASSA-PSS; Go distinguishes the hash, SHA-256 assumed
    "1.3.101.112": 16,
}

# pkix.Name fields filled from attributes 2.5.4.<n>.
_NAME_LISTS = {6: "Country", 7: "Locality", 8: "Province", 9: "StreetAddress", 10: "Organization", 11: "OrganizationalUnit", 17: "PostalCode"}


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _oid(dotted: str) -> list[int]:
    return [int(part) for part in dotted.split(".")]


def _or_none(items: list[Any]) -> list[Any] | None:
    return items or None


def _pem_block(text: str) -> tuple[str, bytes]:
    """The first PEM block (type, bytes), like Go's ``pem.Decode``."""
    for match in _PEM_BLOCK.finditer(text):
        lines = match.group("body").splitlines()
        if any(":" in line for line in lines):
            # Skip RFC 1421 headers up to the blank line that ends them.
            while lines and lines[0].strip():
                lines.pop(0)
        try:
            return match.group("type"), base64.b64decode("".join(line.strip() for line in lines), validate=True)
        except (binascii.Error, ValueError):
            continue
    raise ValueError("failed to decode PEM block")


def _name(name: x509.Name) -> dict[str, Any]:
    out: dict[str, Any] = {field: None for field in _NAME_LISTS.values()}
    out.update({"SerialNumber": "", "CommonName": "", "Names": None, "ExtraNames": None})
    names = []
    for rdn in name.rdns:
        for attr in rdn:
            value = attr.value
            names.append({"Type": _oid(attr.oid.dotted_string), "Value": value if isinstance(value, str) else _b64(value)})
            if not isinstance(value, str):
                continue
            parts = _oid(attr.oid.dotted_string)
            if len(parts) == 4 and parts[:3] == [2, 5, 4]:
                if parts[3] == 3:
                    out["CommonName"] = value
                elif parts[3] == 5:
                    out["SerialNumber"] = value
                elif parts[3] in _NAME_LISTS:
                    field = _NAME_LISTS[parts[3]]
                    out[field] = (out[field] or []) + [value]
    out["Names"] = _or_none(names)
    return out


def _rsa_key(public_key: Any) -> dict[str, Any]:
    if not isinstance(public_key, rsa.RSAPublicKey):
        raise ValueError("certificate should use rsa algorithm")
    numbers = public_key.public_numbers()
    return {"N": str(numbers.n), "E": numbers.e}


def _extension_value(ext: x509.Extension[Any]) -> str | None:
    return _b64(ext.value.public_bytes())


def _extensions(exts: x509.Extensions) -> list[dict[str, Any]] | None:
    return _or_none(
        [{"Id": _oid(ext.oid.dotted_string), "Critical": ext.critical, "Value": _extension_value(ext)} for ext in exts]
    )


def _get(exts: x509.Extensions, oid: x509.ObjectIdentifier) -> x509.Extension[Any] | None:
    try:
        return exts.get_extension_for_oid(oid)
    except x509.ExtensionNotFound:
        return None


def _key_usage(exts: x509.Extensions) -> int:
    ext = _get(exts, ExtensionOID.KEY_USAGE)
    if ext is None:
        return 0
    ku = ext.value
    bits = [
        ku.digital_signature,
        ku.content_commitment,
        ku.key_encipherment,
        ku.data_encipherment,
        ku.key_agreement,
        ku.key_cert_sign,
        ku.crl_sign,
        ku.key_agreement and ku.encipher_only,
        ku.key_agreement and ku.decipher_only,
    ]
    return sum(1 << i for i, bit in enumerate(bits) if bit)


def _ip_text(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _san(exts: x509.Extensions) -> tuple[list[str], list[str], list[str], list[x509.UniformResourceIdentifier]]:
    ext = _get(exts, ExtensionOID.SUBJECT_ALTERNATIVE_NAME)
    if ext is None:
        return [], [], [], []
    san = ext.value
    return (
        list(san.get_values_for_type(x509.DNSName)),
        list(san.get_values_for_type(x509.RFC822Name)),
        [_ip_text(ip) for ip in san.get_values_for_type(x509.IPAddress)],
        [name for name in san if isinstance(name, x509.UniformResourceIdentifier)],
    )


def _ip_net(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> dict[str, Any]:
    return {"IP": _ip_text(net.network_address), "Mask": _b64(net.netmask.packed)}


def _constraints(trees: Iterable[x509.GeneralName] | None) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {"dns": [], "ip": [], "email": [], "uri": []}
    for tree in trees or ():
        if isinstance(tree, x509.DNSName):
            out["dns"].append(tree.value)
        elif isinstance(tree, x509.IPAddress) and isinstance(tree.value, ipaddress.IPv4Network | ipaddress.IPv6Network):
            out["ip"].append(_ip_net(tree.value))
        elif isinstance(tree, x509.RFC822Name):
            out["email"].append(tree.value)
        elif isinstance(tree, x509.UniformResourceIdentifier):
            out["uri"].append(tree.value)
    return out


def _access(exts: x509.Extensions, method: x509.ObjectIdentifier) -> list[str] | None:
    ext = _get(exts, ExtensionOID.AUTHORITY_INFORMATION_ACCESS)
    if ext is None:
        return None
    return _or_none(
        [
            desc.access_location.value
            for desc in ext.value
            if desc.access_method == method and isinstance(desc.access_location, x509.UniformResourceIdentifier)
        ]
    )


def _crl_points(exts: x509.Extensions) -> list[str] | None:
    ext = _get(exts, ExtensionOID.CRL_DISTRIBUTION_POINTS)
    if ext is None:
        return None
    return _or_none(
        [
            name.value
            for point in ext.value
            for name in point.full_name or ()
            if isinstance(name, x509.UniformResourceIdentifier)
        ]
    )


def _int64(n: int) -> int:
    """Go's ``big.Int.Int64()``: the low 64 bits, with the sign applied."""
    low = abs(n) & 0xFFFFFFFFFFFFFFFF
    if low >= 1 << 63:
        low -= 1 << 64
    return -low if n < 0 else low


def _rfc3339(when: Any) -> str:
    return str(when.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _certificate(cert: x509.Certificate) -> dict[str, Any]:
    public_key = cert.public_key()
    exts = cert.extensions
    key = _rsa_key(public_key)
    basic = _get(exts, ExtensionOID.BASIC_CONSTRAINTS)
    max_path_len = 0
    if basic is not None:
        max_path_len = -1 if basic.value.path_length is None else basic.value.path_length
    eku = _get(exts, ExtensionOID.EXTENDED_KEY_USAGE)
    aki = _get(exts, ExtensionOID.AUTHORITY_KEY_IDENTIFIER)
    policies = _get(exts, ExtensionOID.CERTIFICATE_POLICIES)
    constraints = _get(exts, ExtensionOID.NAME_CONSTRAINTS)
    permitted = _constraints(constraints.value.permitted_subtrees if constraints else None)
    excluded = _constraints(constraints.value.excluded_subtrees if constraints else None)
    dns, emails, ips, _uris = _san(exts)
    spki = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return {
        "Raw": _b64(cert.public_bytes(serialization.Encoding.DER)),
        "RawTBSCertificate": _b64(cert.tbs_certificate_bytes),
        "RawSubjectPublicKeyInfo": _b64(spki),
        "RawSubject": _b64(cert.subject.public_bytes()),
        "RawIssuer": _b64(cert.issuer.public_bytes()),
        "Signature": _b64(cert.signature),
        "PublicKeyAlgorithm": 1,
        "PublicKey": key,
        "SerialNumber": _int64(cert.serial_number),
        "Issuer": _name(cert.issuer),
        "NotBefore": _rfc3339(cert.not_valid_before_utc),
        "NotAfter": _rfc3339(cert.not_valid_after_utc),
        "KeyUsage": _key_usage(exts),
        "Extensions": _extensions(exts),
        "ExtraExtensions": None,
        "ExtKeyUsage": _or_none([_EXT_KEY_USAGE[o.dotted_string] for o in eku.value if o.dotted_string in _EXT_KEY_USAGE])
        if eku
        else None,
        "BasicConstraintsValid": basic is not None,
        "IsCA": bool(basic and basic.value.ca),
        "MaxPathLen": max_path_len,
        "MaxPathLenZero": basic is not None and max_path_len == 0,
        "AuthorityKeyId": _b64(aki.value.key_identifier) if aki else None,
        "OCSPServer": _access(exts, AuthorityInformationAccessOID.OCSP),
        "IssuingCertificateURL": _access(exts, AuthorityInformationAccessOID.CA_ISSUERS),
        "DNSNames": _or_none(dns),
        "EmailAddresses": _or_none(emails),
        "IPAddresses": _or_none(ips),
        "PermittedDNSDomainsCritical": bool(constraints and constraints.critical),
        "PermittedDNSDomains": _or_none(permitted["dns"]),
        "ExcludedDNSDomains": _or_none(excluded["dns"]),
        "PermittedIPRanges": _or_none(permitted["ip"]),
        "ExcludedIPRanges": _or_none(excluded["ip"]),
        "PermittedEmailAddresses": _or_none(permitted["email"]),
        "ExcludedEmailAddresses": _or_none(excluded["email"]),
        "PermittedURIDomains": _or_none(permitted["uri"]),
        "ExcludedURIDomains": _or_none(excluded["uri"]),
        "CRLDistributionPoints": _crl_points(exts),
        "PolicyIdentifiers": _or_none([_oid(p.policy_identifier.dotted_string) for p in policies.value]) if policies else None,
    }


def _url(uri: str) -> dict[str, Any]:
    """Go's ``url.URL`` struct as JSON (the fields ``x509.CertificateRequest.URIs`` carries)."""
    parts = urllib.parse.urlsplit(uri)
    return {
        "Scheme": parts.scheme,
        "Opaque": "",
        "User": None,
        "Host": parts.netloc,
        "Path": parts.path,
        "RawPath": "",
        "OmitHost": False,
        "ForceQuery": False,
        "RawQuery": parts.query,
        "Fragment": parts.fragment,
        "RawFragment": "",
    }


def _request(csr: x509.CertificateSigningRequest) -> dict[str, Any]:
    public_key = csr.public_key()
    key = _rsa_key(public_key)
    exts = csr.extensions
    dns, emails, ips, uris = _san(exts)
    der = csr.public_bytes(serialization.Encoding.DER)
    spki = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return {
        "Raw": _b64(der),
        "RawTBSCertificateRequest": _b64(csr.tbs_certrequest_bytes),
        "RawSubjectPublicKeyInfo": _b64(spki),
        "RawSubject": _b64(csr.subject.public_bytes()),
        "Version": 0,
        "Signature": _b64(csr.signature),
        "SignatureAlgorithm": _SIGNATURE_ALGORITHM.get(csr.signature_algorithm_oid.dotted_string, 0),
        "PublicKeyAlgorithm": 1,
        "PublicKey": key,
        "Subject": _name(csr.subject),
        # Go's deprecated Attributes field is not reproduced.
        "Attributes": None,
        "Extensions": _extensions(exts),
        "ExtraExtensions": None,
        "DNSNames": _or_none(dns),
        "EmailAddresses": _or_none(emails),
        "IPAddresses": _or_none(ips),
        "URIs": _or_none([_url(u.value) for u in uris]),
    }


def decode(pem: str) -> Any:
    block_type, der = _pem_block(pem)
    with warnings.catch_warnings():
        # Go accepts serial numbers RFC 5280 forbids (zero, negative), as does
        # Kyverno; cryptography warns about them.
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        if block_type == "CERTIFICATE":
            return go_json(_certificate(x509.load_der_x509_certificate(der)))
        if block_type == "CERTIFICATE REQUEST":
            return go_json(_request(x509.load_der_x509_csr(der)))
    raise ValueError("PEM block neither contains a CERTIFICATE or CERTIFICATE REQUEST")


def functions() -> Sequence[Fn]:
    return [Fn(LIBRARY, "x509.decode", "kyverno_x509_decode_string", cel.Type.DYN, (STRING,), decode)]

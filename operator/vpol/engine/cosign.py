"""Checking cosign signatures and attestations (pure: the bytes come from the registry, vpol.oci).

What cosign v3 writes and Kyverno 1.19.1 accepts (docs/internals/image-validating.md, "Signatures"):

- **Sigstore bundles** (cosign's default since v3): OCI 1.1 referrers of the image whose one layer is a bundle
  (``application/vnd.dev.sigstore.bundle.v0.3+json``) holding a DSSE envelope. The envelope signs, over DSSE's
  pre-authentication encoding (PAE), an in-toto Statement whose ``subject`` names the image digest; a plain
  ``cosign sign`` is such a statement too (predicate type ``https://sigstore.dev/cosign/sign/v1``). Kyverno counts
  any verified bundle of the image as a signature, and a verified bundle of the requested predicate type as an
  attestation.
- **The legacy layout** (``--new-bundle-format=false``): signatures in the manifest tagged ``sha256-<hex>.sig``,
  each a ``simplesigning`` layer whose annotation ``dev.cosignproject.cosign/signature`` signs the layer's bytes,
  a JSON payload whose ``critical.image.docker-manifest-digest`` must be the image's; attestations in
  ``sha256-<hex>.att``, each a DSSE envelope layer.

Signatures are checked with ``cryptography`` against the attestor's public key (ECDSA, RSA PKCS#1 v1.5 or Ed25519,
hashed with the attestor's ``hashAlgorithm``, SHA-256 by default). The Python ``sigstore`` package verifies bundles
too, but only against Sigstore's trust root with transparency-log entries; the offline key checks Kyverno makes with
``ctlog.insecureIgnoreTlog`` are these few signature checks, written here.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

from vpol.model.attestation import COSIGN_PREDICATE_TYPES

BUNDLE_MEDIA_TYPE_PREFIX = "application/vnd.dev.sigstore.bundle"
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
DSSE_LAYER = "application/vnd.dsse.envelope.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
SIGN_PREDICATE = "https://sigstore.dev/cosign/sign/v1"
_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "": hashes.SHA256, "sha224": hashes.SHA224, "sha256": hashes.SHA256, "sha384": hashes.SHA384,
    "sha512": hashes.SHA512,
}


class SignatureError(Exception):
    """A signature or attestation does not verify; the message says why."""


def predicate_uri(kind: str) -> str:
    """The predicate type an attestation's ``intoto.type`` names (cosign's short names expanded)."""
    return COSIGN_PREDICATE_TYPES.get(kind, kind)


@dataclass(frozen=True)
class PublicKey:
    """A verification key and the hash its signatures use."""

    key: Any
    hash_algorithm: str = ""

    @classmethod
    def from_pem(cls, pem: str, hash_algorithm: str = "") -> PublicKey:
        try:
            key = serialization.load_pem_public_key(pem.strip().encode())
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise SignatureError(f"failed to load public key from PEM: {exc}") from None
        if hash_algorithm not in _HASHES:
            raise SignatureError(f"unsupported hash algorithm {hash_algorithm!r}")
        return cls.of(key, hash_algorithm)

    @classmethod
    def of(cls, key: Any, hash_algorithm: str = "") -> PublicKey:
        """``key`` (a certificate's, a PEM's) when it is of a kind cosign signs with."""
        if not isinstance(key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey, ed25519.Ed25519PublicKey)):
            raise SignatureError(f"unsupported public key type {type(key).__name__}")
        return cls(key, hash_algorithm)

    def verify(self, signature: bytes, data: bytes) -> bool:
        algorithm = _HASHES[self.hash_algorithm]()
        try:
            if isinstance(self.key, ec.EllipticCurvePublicKey):
                self.key.verify(signature, data, ec.ECDSA(algorithm))
            elif isinstance(self.key, rsa.RSAPublicKey):
                self.key.verify(signature, data, padding.PKCS1v15(), algorithm)
            else:
                self.key.verify(signature, data)
        except (InvalidSignature, ValueError):
            return False
        return True


def _certificates(pem: str, what: str) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(pem.strip().encode())
    except ValueError as exc:
        raise SignatureError(f"failed to load {what}: {exc}") from None
    if not certs:
        raise SignatureError(f"no certificate in {what}")
    return certs


def certificate_key(cert_pem: str, chain_pem: str = "", *, now: datetime.datetime | None = None) -> PublicKey:
    """The verification key of a certificate attestor: the certificate's public key, once the certificate is
    shown to be valid now and, with a chain, issued through it up to its root (a self-signed certificate, the
    chain's last), as cosign checks a certificate given for verification (--certificate, --certificate-chain)."""
    [leaf, *_rest] = _certificates(cert_pem, "the certificate")
    path = [leaf, *(_certificates(chain_pem, "the certificate chain") if chain_pem else [])]
    check_valid_now(path, now)
    if chain_pem:
        check_issued_along(path)
        if not issued(path[-1], path[-1]):
            raise SignatureError("the certificate chain does not end with a self-signed root")
    return PublicKey.of(leaf.public_key())


def check_valid_now(certs: Sequence[x509.Certificate], now: datetime.datetime | None = None) -> None:
    """Every certificate is valid at ``now`` (the current time by default)."""
    moment = now or datetime.datetime.now(datetime.timezone.utc)
    for cert in certs:
        if not cert.not_valid_before_utc <= moment <= cert.not_valid_after_utc:
            raise SignatureError(f"certificate {cert.subject.rfc4514_string()} is not valid now (valid from "
                                 f"{cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ} to "
                                 f"{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ})")


def check_issued_along(path: Sequence[x509.Certificate]) -> None:
    """Each certificate of ``path`` is issued by the next."""
    for child, parent in zip(path, path[1:]):
        if not issued(child, parent):
            raise SignatureError(f"certificate {child.subject.rfc4514_string()} is not issued by "
                                 f"{parent.subject.rfc4514_string()}")


def issued(child: x509.Certificate, parent: x509.Certificate) -> bool:
    """Whether ``parent`` signed ``child``."""
    try:
        child.verify_directly_issued_by(parent)
        return True
    except (ValueError, TypeError, InvalidSignature):
        return False


#: Fulcio's certificate extensions naming the OIDC issuer (v2, a DER UTF8String; v1, raw bytes).
ISSUER_V2 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
ISSUER_V1 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
CERTIFICATE_ANNOTATION = "dev.sigstore.cosign/certificate"
CHAIN_ANNOTATION = "dev.sigstore.cosign/chain"


@dataclass(frozen=True)
class KeylessIdentity:
    issuer: str = ""
    subject: str = ""
    issuer_regexp: str = ""
    subject_regexp: str = ""


def _oidc_issuer(cert: x509.Certificate) -> str:
    for oid in (ISSUER_V2, ISSUER_V1):
        try:
            value = cert.extensions.get_extension_for_oid(oid).value
        except x509.ExtensionNotFound:
            continue
        raw = value.value if isinstance(value, x509.UnrecognizedExtension) else b""
        if oid == ISSUER_V2 and len(raw) >= 2 and raw[0] == 0x0C:  # DER UTF8String: tag, length, text
            length, start = raw[1], 2
            if length & 0x80:
                count = length & 0x7F
                length, start = int.from_bytes(raw[2:2 + count], "big"), 2 + count
            return raw[start:start + length].decode(errors="replace")
        return raw.decode(errors="replace")
    return ""


def _subjects(cert: x509.Certificate) -> list[str]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    out: list[str] = [*names.get_values_for_type(x509.RFC822Name), *names.get_values_for_type(
        x509.UniformResourceIdentifier), *names.get_values_for_type(x509.DNSName)]
    return out


def _identity_matches(identity: KeylessIdentity, issuer: str, subjects: Sequence[str]) -> bool:
    """cosign's rule: the exact values when given, else the regular expressions (Go's regexp.MatchString: a match
    anywhere, unless anchored); an identity without any matches anything."""
    if identity.issuer and identity.issuer != issuer:
        return False
    if not identity.issuer and identity.issuer_regexp and not re.search(identity.issuer_regexp, issuer):
        return False
    if identity.subject and identity.subject not in subjects:
        return False
    if not identity.subject and identity.subject_regexp and \
            not any(re.search(identity.subject_regexp, s) for s in subjects):
        return False
    return True


def keyless_key(material: Mapping[str, Any], roots_pem: str, identities: Sequence[KeylessIdentity], *,
                now: datetime.datetime | None = None) -> PublicKey:
    """The key of a keyless signature: the certificate it carries (a bundle's ``verificationMaterial``, or a legacy
    signature's certificate annotations), once it is shown valid now, issued through the given intermediates to one
    of ``roots_pem``'s self-signed roots, and naming one of ``identities`` (OIDC issuer and subject)."""
    certs: list[x509.Certificate] = []
    try:
        annotations = material.get("annotations") if isinstance(material.get("annotations"), Mapping) else None
        if annotations is not None:
            if annotations.get(CERTIFICATE_ANNOTATION):
                certs += x509.load_pem_x509_certificates(str(annotations[CERTIFICATE_ANNOTATION]).encode())
            if annotations.get(CHAIN_ANNOTATION):
                certs += x509.load_pem_x509_certificates(str(annotations[CHAIN_ANNOTATION]).encode())
        else:
            single = material.get("certificate")
            chain = material.get("x509CertificateChain")
            raws = [single.get("rawBytes")] if isinstance(single, Mapping) else \
                [c.get("rawBytes") for c in (chain or {}).get("certificates") or [] if isinstance(c, Mapping)]
            certs += [x509.load_der_x509_certificate(base64.b64decode(str(r))) for r in raws if r]
    except (ValueError, TypeError, binascii.Error):
        raise SignatureError("the signature's certificate cannot be read") from None
    if not certs:
        raise SignatureError("the signature carries no certificate (a keyless signature has one)")
    pool = [*certs[1:], *_certificates(roots_pem, "keyless.roots")] if roots_pem else certs[1:]
    roots = [c for c in pool if c.issuer == c.subject]
    if not roots:
        raise SignatureError("keyless verification needs the policy's roots (keyless.roots): Sigstore's public TUF "
                             "root is out of reach")
    path, current = [certs[0]], certs[0]
    while current not in roots and len(path) < 10:
        parent = next((c for c in pool if c != current and c.subject == current.issuer and issued(current, c)),
                      None)
        if parent is None:
            raise SignatureError("certificate chain is not trusted: no issuer of "
                                 f"{current.subject.rfc4514_string()} among keyless.roots")
        path.append(parent)
        current = parent
    if current not in roots:
        raise SignatureError("certificate chain is not trusted")
    check_valid_now(path, now)
    issuer, subjects = _oidc_issuer(certs[0]), _subjects(certs[0])
    if identities and not any(_identity_matches(i, issuer, subjects) for i in identities):
        raise SignatureError(f"none of the expected identities matched what was in the certificate: issuer "
                             f"{issuer!r}, subjects {subjects}")
    return PublicKey.of(certs[0].public_key())


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what an envelope's signatures sign."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise SignatureError(f"{what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError(f"{what} is not valid base64") from None


@dataclass
class Checked:
    """A signature or attestation that verified: its in-toto statement (None for a simple signing payload), the
    payload's annotations and the layer's."""

    statement: dict[str, Any] | None
    payload_annotations: Mapping[str, str] = field(default_factory=dict)
    layer_annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def predicate_type(self) -> str:
        return str((self.statement or {}).get("predicateType") or "")

    def has_annotations(self, wanted: Mapping[str, str]) -> bool:
        """Whether every wanted pair is among the signature's annotations: those cosign's ``-a`` writes into the
        payload (simple signing ``optional``, in-toto subject annotations) or those on the layer (the only ones
        Kyverno reads, which never hold ``-a``'s: vpol reads both, docs/kyverno-compatibility.md)."""
        merged = {**self.layer_annotations, **self.payload_annotations}
        return all(merged.get(key) == value for key, value in wanted.items())


def verify_envelope(envelope: Any, key: PublicKey, image_digest: str) -> Checked:
    """A DSSE envelope whose payload is an in-toto statement about ``image_digest``, signed by ``key``."""
    if not isinstance(envelope, Mapping):
        raise SignatureError("the DSSE envelope is not an object")
    payload_type = envelope.get("payloadType")
    if payload_type != IN_TOTO_PAYLOAD:
        raise SignatureError(f"unsupported DSSE payload type {payload_type!r}")
    payload = _b64(envelope.get("payload"), "the DSSE payload")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, Sequence) or not signatures:
        raise SignatureError("the DSSE envelope holds no signature")
    signed = pae(str(payload_type), payload)
    if not any(isinstance(s, Mapping) and key.verify(_b64(s.get("sig"), "a DSSE signature"), signed)
               for s in signatures):
        raise SignatureError("invalid signature when validating ASN.1 encoded signature" if isinstance(
            key.key, ec.EllipticCurvePublicKey) else "the signature does not verify with the key")
    try:
        statement = json.loads(payload)
    except ValueError:
        raise SignatureError("the in-toto statement is not JSON") from None
    if not isinstance(statement, dict):
        raise SignatureError("the in-toto statement is not an object")
    algorithm, _, hexdigest = image_digest.partition(":")
    subjects: list[Any] = statement["subject"] if isinstance(statement.get("subject"), list) else []
    matching = [s for s in subjects if isinstance(s, Mapping) and isinstance(s.get("digest"), Mapping)
                and s["digest"].get(algorithm) == hexdigest]
    if not matching:
        raise SignatureError(f"no in-toto subject matches the image digest {image_digest}")
    annotations = {str(k): str(v) for s in matching for k, v in (s.get("annotations") or {}).items()}
    return Checked(statement, payload_annotations=annotations)


#: The key that verifies a signature, or how to find it from the signature's verification material (a keyless
#: signature's certificate): the bundle's ``verificationMaterial``, or a legacy signature's layer annotations.
KeySource = PublicKey | Callable[[Mapping[str, Any]], PublicKey]


def _key_of(key: KeySource, material: Mapping[str, Any]) -> PublicKey:
    return key if isinstance(key, PublicKey) else key(material)


def verify_bundle(bundle_bytes: bytes, key: KeySource, image_digest: str) -> Checked:
    """A Sigstore bundle (as cosign v3 stores it): its DSSE envelope verified by :func:`verify_envelope`."""
    try:
        bundle = json.loads(bundle_bytes)
    except ValueError:
        raise SignatureError("the bundle is not JSON") from None
    if not isinstance(bundle, dict) or not str(bundle.get("mediaType", "")).startswith(BUNDLE_MEDIA_TYPE_PREFIX):
        raise SignatureError("not a Sigstore bundle")
    if "dsseEnvelope" not in bundle:
        raise SignatureError("bundle does not contain a DSSE envelope")
    material = bundle.get("verificationMaterial") if isinstance(bundle.get("verificationMaterial"), Mapping) else {}
    checked = verify_envelope(bundle["dsseEnvelope"], _key_of(key, material or {}), image_digest)
    checked.layer_annotations = {SIGNATURE_ANNOTATION: ""}
    return checked


def verify_simple_signing(payload: bytes, layer_annotations: Mapping[str, str], key_source: KeySource,
                          image_digest: str) -> Checked:
    """A legacy cosign signature: the layer's bytes signed (annotation ``dev.cosignproject.cosign/signature``), a
    simple signing payload naming ``image_digest``."""
    signature = _b64(layer_annotations.get(SIGNATURE_ANNOTATION), "the signature annotation")
    key = _key_of(key_source, {"annotations": dict(layer_annotations)})
    if not key.verify(signature, payload):
        raise SignatureError("invalid signature when validating ASN.1 encoded signature" if isinstance(
            key.key, ec.EllipticCurvePublicKey) else "the signature does not verify with the key")
    try:
        document = json.loads(payload)
        digest = document["critical"]["image"]["docker-manifest-digest"]
    except (ValueError, KeyError, TypeError):
        raise SignatureError("the signature payload is not a simple signing document") from None
    if digest != image_digest:
        raise SignatureError(f"invalid or missing digest in claim: {digest}")
    optional = document.get("optional") if isinstance(document.get("optional"), Mapping) else {}
    return Checked(None, payload_annotations={str(k): str(v) for k, v in (optional or {}).items()},
                   layer_annotations=dict(layer_annotations))

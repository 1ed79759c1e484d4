"""Checking cosign signatures and attestations (pure: the bytes come from the registry, vpol.oci).

What cosign v3 writes and Kyverno 1.19.1 accepts (docs/image-validating-policy.md, "Signatures"):

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

from vpol.model.image_validating import COSIGN_PREDICATE_TYPES

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
        if not isinstance(key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey, ed25519.Ed25519PublicKey)):
            raise SignatureError(f"unsupported public key type {type(key).__name__}")
        if hash_algorithm not in _HASHES:
            raise SignatureError(f"unsupported hash algorithm {hash_algorithm!r}")
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
    moment = now or datetime.datetime.now(datetime.timezone.utc)
    path = [leaf, *(_certificates(chain_pem, "the certificate chain") if chain_pem else [])]
    for cert in path:
        if not cert.not_valid_before_utc <= moment <= cert.not_valid_after_utc:
            raise SignatureError(f"certificate {cert.subject.rfc4514_string()} is not valid now (valid from "
                                 f"{cert.not_valid_before_utc:%Y-%m-%dT%H:%M:%SZ} to "
                                 f"{cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ})")
    if chain_pem:
        for child, parent in zip(path, path[1:]):
            try:
                child.verify_directly_issued_by(parent)
            except (ValueError, TypeError, InvalidSignature):
                raise SignatureError(f"certificate {child.subject.rfc4514_string()} is not issued by "
                                     f"{parent.subject.rfc4514_string()}") from None
        root = path[-1]
        try:
            root.verify_directly_issued_by(root)
        except (ValueError, TypeError, InvalidSignature):
            raise SignatureError("the certificate chain does not end with a self-signed root") from None
    key = leaf.public_key()
    if not isinstance(key, (ec.EllipticCurvePublicKey, rsa.RSAPublicKey, ed25519.Ed25519PublicKey)):
        raise SignatureError(f"unsupported public key type {type(key).__name__}")
    return PublicKey(key)


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


def verify_bundle(bundle_bytes: bytes, key: PublicKey, image_digest: str) -> Checked:
    """A Sigstore bundle (as cosign v3 stores it): its DSSE envelope verified by :func:`verify_envelope`."""
    try:
        bundle = json.loads(bundle_bytes)
    except ValueError:
        raise SignatureError("the bundle is not JSON") from None
    if not isinstance(bundle, dict) or not str(bundle.get("mediaType", "")).startswith(BUNDLE_MEDIA_TYPE_PREFIX):
        raise SignatureError("not a Sigstore bundle")
    if "dsseEnvelope" not in bundle:
        raise SignatureError("bundle does not contain a DSSE envelope")
    checked = verify_envelope(bundle["dsseEnvelope"], key, image_digest)
    checked.layer_annotations = {SIGNATURE_ANNOTATION: ""}
    return checked


def verify_simple_signing(payload: bytes, layer_annotations: Mapping[str, str], key: PublicKey,
                          image_digest: str) -> Checked:
    """A legacy cosign signature: the layer's bytes signed (annotation ``dev.cosignproject.cosign/signature``), a
    simple signing payload naming ``image_digest``."""
    signature = _b64(layer_annotations.get(SIGNATURE_ANNOTATION), "the signature annotation")
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

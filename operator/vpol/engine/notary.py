"""Checking Notary Project signatures (pure: the bytes come from the registry, vpol.oci).

What the notation CLI writes and Kyverno 1.19.1 accepts (its notary verifier runs notation-go's verifier with a
trust policy of level ``strict``, every registry scope and identity, and the attestor's ``certs`` as the CA trust
store): a signature is an OCI 1.1 referrer of the signed artifact, of artifact type
``application/vnd.cncf.notary.signature``, whose one layer is a JWS envelope (``application/jose+json``, the
notation default):

- the protected header names the algorithm (``PS256``/``PS384``/``PS512``: RSASSA-PSS with the digest's length as
  salt; ``ES256``/``ES384``/``ES512``: ECDSA, the signature as raw ``r || s``), the payload content type
  ``application/vnd.cncf.notary.payload.v1+json``, the signing scheme (``notary.x509``) and time, and may set an
  expiry;
- the unprotected header carries the certificate chain (``x5c``, leaf first, base64 DER);
- the payload names the target artifact (its digest, media type and size);
- the signature signs ``protected "." payload`` (both as written, base64url).

Verification, as notation's strict level: the signature verifies with the leaf's key; the leaf is a code-signing
certificate; each certificate is issued by the next and the chain ends in a certificate of the trust store (or one
issued by it); every certificate is valid now (no timestamp authority is consulted: ``tsaCerts`` are not used);
the signature has not expired; the payload's target is the artifact verified. Hand-written with ``cryptography``:
no maintained Python package verifies Notary envelopes, and the checks are these few.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
from collections.abc import Sequence
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.oid import ExtendedKeyUsageOID

from vpol.engine.cosign import SignatureError, check_issued_along, check_valid_now, issued

SIGNATURE_ARTIFACT = "application/vnd.cncf.notary.signature"
JWS = "application/jose+json"
COSE = "application/cose"
PAYLOAD_TYPE = "application/vnd.cncf.notary.payload.v1+json"
SCHEMES = ("notary.x509", "notary.x509.signingAuthority")
_ALGORITHMS: dict[str, tuple[str, type[hashes.HashAlgorithm]]] = {
    "PS256": ("rsa", hashes.SHA256), "PS384": ("rsa", hashes.SHA384), "PS512": ("rsa", hashes.SHA512),
    "ES256": ("ec", hashes.SHA256), "ES384": ("ec", hashes.SHA384), "ES512": ("ec", hashes.SHA512),
}


def load_trust_store(pem: str) -> list[x509.Certificate]:
    """The trust store an attestor's ``certs`` give (PEM certificates)."""
    try:
        certs = x509.load_pem_x509_certificates(pem.strip().encode())
    except ValueError as exc:
        raise SignatureError(f"failed to load the Notary trust store: {exc}") from None
    if not certs:
        raise SignatureError("the Notary trust store holds no certificate")
    return certs


def _b64url(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise SignatureError(f"{what} is not a string")
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise SignatureError(f"{what} is not base64url") from None


def _verify_signature(leaf: x509.Certificate, alg: str, signature: bytes, signed: bytes) -> None:
    kind, digest = _ALGORITHMS.get(alg, ("", hashes.SHA256))
    key = leaf.public_key()
    try:
        if kind == "rsa" and isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, signed, padding.PSS(mgf=padding.MGF1(digest()), salt_length=padding.PSS.DIGEST_LENGTH),
                       digest())
        elif kind == "ec" and isinstance(key, ec.EllipticCurvePublicKey):
            half = len(signature) // 2
            der = encode_dss_signature(int.from_bytes(signature[:half], "big"), int.from_bytes(signature[half:], "big"))
            key.verify(der, signed, ec.ECDSA(digest()))
        else:
            raise SignatureError(f"unsupported signature algorithm {alg!r} for a {type(key).__name__}")
    except InvalidSignature:
        raise SignatureError("signature is not produced by a trusted signer: the signature does not verify with the "
                             "signing certificate's key") from None


def _trusted(chain: Sequence[x509.Certificate], store: Sequence[x509.Certificate]) -> bool:
    top = chain[-1]
    return any(top == trusted or issued(top, trusted) for trusted in store)


def verify_jws(envelope_bytes: bytes, store: Sequence[x509.Certificate], target_digest: str, *,
               now: datetime.datetime | None = None) -> dict[str, Any]:
    """The payload of a JWS Notary signature of ``target_digest`` that verifies against ``store``; raises
    :class:`SignatureError` saying why not."""
    try:
        envelope = json.loads(envelope_bytes)
    except ValueError:
        raise SignatureError("the signature envelope is not JSON") from None
    if not isinstance(envelope, dict):
        raise SignatureError("the signature envelope is not an object")
    protected_b64, payload_b64 = envelope.get("protected"), envelope.get("payload")
    try:
        header = json.loads(_b64url(protected_b64, "the protected header"))
        payload = json.loads(_b64url(payload_b64, "the payload"))
    except ValueError:
        raise SignatureError("the protected header or the payload is not JSON") from None
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise SignatureError("the protected header or the payload is not an object")
    if header.get("cty") != PAYLOAD_TYPE:
        raise SignatureError(f"unsupported payload content type {header.get('cty')!r}")
    if header.get("io.cncf.notary.signingScheme") not in SCHEMES:
        raise SignatureError(f"unsupported signing scheme {header.get('io.cncf.notary.signingScheme')!r}")
    unprotected: dict[str, Any] = envelope["header"] if isinstance(envelope.get("header"), dict) else {}
    try:
        chain = [x509.load_der_x509_certificate(base64.b64decode(c)) for c in unprotected.get("x5c") or []]
    except (ValueError, TypeError, binascii.Error):
        raise SignatureError("the certificate chain (x5c) cannot be read") from None
    if not chain:
        raise SignatureError("the signature carries no certificate chain")
    _verify_signature(chain[0], str(header.get("alg") or ""), _b64url(envelope.get("signature"), "the signature"),
                      f"{protected_b64}.{payload_b64}".encode())
    try:
        usage = chain[0].extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        if ExtendedKeyUsageOID.CODE_SIGNING not in usage:
            raise SignatureError("the signing certificate is not a code-signing certificate")
    except x509.ExtensionNotFound:
        pass
    check_issued_along(chain)
    if not _trusted(chain, store):
        raise SignatureError("signature is not produced by a trusted signer: the certificate chain does not lead to "
                             "a certificate of the attestor's certs")
    check_valid_now(chain, now)
    moment = now or datetime.datetime.now(datetime.timezone.utc)
    expiry = header.get("io.cncf.notary.expiry")
    if isinstance(expiry, str):
        try:
            if datetime.datetime.fromisoformat(expiry.replace("Z", "+00:00")) < moment:
                raise SignatureError(f"the signature expired at {expiry}")
        except ValueError:
            raise SignatureError(f"the signature's expiry {expiry!r} is not a time") from None
    target: dict[str, Any] = payload["targetArtifact"] if isinstance(payload.get("targetArtifact"), dict) else {}
    if target.get("digest") != target_digest:
        raise SignatureError(f"the signature is of {target.get('digest')}, not of {target_digest}")
    return payload

"""What verifying an image reads of the signed statements about it: an ``attestations[]`` entry (an in-toto
predicate type or an OCI referrer's artifact type) and cosign's short names for predicate types. Shared by the
ImageValidatingPolicy model (vpol.policies.image_validating.model) and the verification (vpol.engine.image_verification,
vpol.engine.cosign)."""

from __future__ import annotations

from dataclasses import dataclass

#: cosign's short names for predicate types (``cosign attest --type``), which ``intoto.type`` accepts too.
COSIGN_PREDICATE_TYPES = {
    "custom": "https://cosign.sigstore.dev/attestation/v1",
    "slsaprovenance": "https://slsa.dev/provenance/v0.2",
    "slsaprovenance02": "https://slsa.dev/provenance/v0.2",
    "slsaprovenance1": "https://slsa.dev/provenance/v1",
    "spdx": "https://spdx.dev/Document",
    "spdxjson": "https://spdx.dev/Document",
    "cyclonedx": "https://cyclonedx.org/bom",
    "link": "https://in-toto.io/Link/v1",
    "vuln": "https://cosign.sigstore.dev/attestation/vuln/v1",
    "openvex": "https://openvex.dev/ns",
}


@dataclass(frozen=True)
class Attestation:
    """A signed statement about the image: ``intoto`` (its predicate type) or ``referrer`` (its artifact type)."""

    name: str
    intoto_type: str = ""
    referrer_type: str = ""

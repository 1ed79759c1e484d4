"""Kyverno's imageverify library: the functions only an ImageValidatingPolicy's expressions have
(docs/internals/image-validating.md, "Libraries and functions").

- ``verifyImageSignatures(image, [attestors])`` -> int: how many of the attestors verified a signature of the
  image (0 for an image the policy's matchImageReferences do not select);
- ``verifyAttestationSignatures(image, attestation, [attestors])`` -> int: the same for a signed attestation;
- ``extractPayload(image, attestation)`` -> dyn: the attestation's statement (an in-toto one must have been
  verified first in the same evaluation);
- ``getImageData(image)`` -> dyn: the image's registry data (digest, manifest, config...).

They are declared only in ImageValidatingPolicy environments (``EnvSpec.image_validating``), as in Kyverno.
The work is the verifier's the engine opens around an evaluation (:func:`verifying`); an evaluation without one
(an expression evaluated outside an image verification) gets a CEL error naming the function.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from cel_expr_python import cel

from vpol.cel.declare import LIST, STRING
from vpol.cel.libraries.kyverno.declarations import Fn, KyvernoFunctionError

LIBRARY = "kyverno.imageverify"
FUNCTIONS = ("verifyImageSignatures", "verifyAttestationSignatures", "extractPayload", "getImageData")


class Verifier(Protocol):
    """What the functions ask of the verification the engine runs (vpol.engine.image_verification)."""

    def verify_signatures(self, image: str, attestors: Sequence[Any]) -> int: ...

    def verify_attestations(self, image: str, attestation: str, attestors: Sequence[Any]) -> int: ...

    def extract_payload(self, image: str, attestation: str) -> Any: ...

    def image_data(self, image: str) -> Any: ...


_VERIFIER: contextvars.ContextVar[Verifier | None] = contextvars.ContextVar("vpol_image_verifier", default=None)


@contextlib.contextmanager
def verifying(verifier: Verifier) -> Iterator[Verifier]:
    """Serve the functions from ``verifier`` in the evaluations made inside."""
    token = _VERIFIER.set(verifier)
    try:
        yield verifier
    finally:
        _VERIFIER.reset(token)


def _verifier(function: str) -> Verifier:
    verifier = _VERIFIER.get()
    if verifier is None:
        raise KyvernoFunctionError(f"{function}: no image verification in progress")
    return verifier


def functions() -> Sequence[Fn]:
    return [
        Fn(LIBRARY, "verifyImageSignatures", "kyverno_verify_image_signatures_string_list", cel.Type.INT,
           (STRING, LIST), lambda image, attestors: _verifier("verifyImageSignatures").verify_signatures(
               image, list(attestors))),
        Fn(LIBRARY, "verifyAttestationSignatures", "kyverno_verify_attestation_signatures_string_string_list",
           cel.Type.INT, (STRING, STRING, LIST),
           lambda image, attestation, attestors: _verifier("verifyAttestationSignatures").verify_attestations(
               image, attestation, list(attestors))),
        Fn(LIBRARY, "extractPayload", "kyverno_extract_payload_string_string", cel.Type.DYN, (STRING, STRING),
           lambda image, attestation: _verifier("extractPayload").extract_payload(image, attestation)),
        Fn(LIBRARY, "getImageData", "kyverno_get_image_data_string", cel.Type.DYN, (STRING,),
           lambda image: _verifier("getImageData").image_data(image)),
    ]

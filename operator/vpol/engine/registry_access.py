"""What image verification asks of a registry (the protocol; vpol.oci.registry serves it over HTTP), and the
errors a registry's answers become."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol


class RegistryError(Exception):
    """A registry could not answer: unreachable, refused, timed out, or sent what does not check out."""


class NotFound(RegistryError):
    """The registry has no such manifest or blob."""


@dataclass(frozen=True)
class Fetched:
    """A manifest as fetched: its bytes, media type and digest."""

    body: bytes
    media_type: str
    digest: str

    def json(self) -> dict[str, Any]:
        try:
            data = json.loads(self.body)
        except ValueError:
            raise RegistryError(f"manifest {self.digest} is not JSON") from None
        if not isinstance(data, dict):
            raise RegistryError(f"manifest {self.digest} is not a JSON object")
        return data


class Registry(Protocol):
    """Reads of OCI registries; ``deadline``: a ``time.monotonic()`` instant after which a call gives up."""

    def manifest(self, registry: str, repository: str, reference: str,
                 deadline: float | None = None) -> Fetched: ...

    def blob(self, registry: str, repository: str, digest: str, deadline: float | None = None) -> bytes: ...

    def referrers(self, registry: str, repository: str, digest: str,
                  deadline: float | None = None) -> list[dict[str, Any]]: ...

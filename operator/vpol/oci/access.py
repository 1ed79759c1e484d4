"""How to reach registries, as plain data: what an evaluation worker is sent to build its own registry client
(vpol.policies.image_validating.evaluation), since a client (its connection pool, its tokens) cannot cross to
another process."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vpol.oci.registry import Credentials, RegistryClient


@dataclass(frozen=True)
class RegistryAccess:
    """A registry client's settings: the Docker config JSON documents of its pull Secrets (as text, so equal
    accesses compare and hash equal), ``allowInsecureRegistry``, and the longest one request may take."""

    configs: tuple[str, ...] = ()
    insecure: bool = False
    timeout: float = 5.0

    @classmethod
    def of(cls, configs: Sequence[Mapping[str, Any]], *, insecure: bool = False,
           timeout: float = 5.0) -> "RegistryAccess":
        return cls(tuple(json.dumps(c, sort_keys=True) for c in configs), insecure, timeout)

    def __call__(self, on_request: Callable[[str], None] | None = None) -> RegistryClient:
        """A client with these settings, telling ``on_request`` the kind of every request it sends."""
        credentials = Credentials([json.loads(c) for c in self.configs]) if self.configs else None
        return RegistryClient(credentials, insecure=self.insecure, timeout=self.timeout, on_request=on_request)

"""Which policy generations vpol's webhook configuration covers, recorded on the configuration itself (pure).

The replica that writes the ValidatingWebhookConfiguration is not necessarily
the one that writes policy status. So the configuration carries, in the
annotation ``vpol.kyverno.io/policies``, the generation of every policy its
rules were computed from; a policy's ``AdmissionEnforced=True`` (reason
``Webhook``) is written only once the configuration in the cluster covers the
policy's current generation. Level-based: it is read from the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol


ANNOTATION = "vpol.kyverno.io/policies"


class Covered(Protocol):
    """What the annotation records of a policy a webhook covers: its key and generation."""

    @property
    def key(self) -> str: ...
    @property
    def generation(self) -> int: ...


#: An ImageValidatingPolicy's key in the annotation (``ivpol:<key>``: a ValidatingPolicy may have the same key).
IMAGE_PREFIX = "ivpol:"


#: The kind whose policies are covered under IMAGE_PREFIX.
IMAGE_KIND = "ImageValidatingPolicy"


def coverage_key(kind: str, policy_key: str) -> str:
    """The key a policy of ``kind`` (the cluster-wide kind's name) with ``policy_key`` is covered under."""
    return IMAGE_PREFIX + policy_key if kind == IMAGE_KIND else policy_key


def covered_policy(key: str, kind: str) -> tuple[str, str]:
    """The (kind, policy key) a coverage key of a configuration that covers policies of ``kind`` stands for (an
    ImageValidatingPolicy's under IMAGE_PREFIX in either configuration)."""
    return (IMAGE_KIND, key[len(IMAGE_PREFIX):]) if key.startswith(IMAGE_PREFIX) else (kind, key)


def coverage(policies: Iterable[Covered],
             images: Iterable[Covered] = ()) -> dict[str, int]:
    """Policy key -> generation."""
    return {**{p.key: p.generation for p in policies}, **{IMAGE_PREFIX + p.key: p.generation for p in images}}


def coverage_annotation(policies: Iterable[Covered],
                        images: Iterable[Covered] = ()) -> dict[str, str]:
    return {ANNOTATION: json.dumps(coverage(policies, images), sort_keys=True, separators=(",", ":"))}


def covered(config: Mapping[str, Any] | None) -> dict[str, int]:
    """What a configuration object (as read from the cluster) covers; {} when unreadable."""
    annotations = ((config or {}).get("metadata") or {}).get("annotations") or {}
    try:
        data = json.loads(annotations.get(ANNOTATION) or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): int(v) for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool)}


def covered_generation(config: Mapping[str, Any] | None, key: str) -> int | None:
    """The generation of policy ``key`` the configuration covers, None when it does not cover it."""
    return covered(config).get(key)

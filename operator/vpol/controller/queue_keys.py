"""The work queue's keys: which policy a piece of work is about, typed.

A :class:`PolicyKey` is (kind, namespace, name): ``kind`` is the cluster-wide kind as the registry
(vpol.policies.registry) names it, also for its namespaced variant, which a non-empty ``namespace`` says. The reconciler
(vpol.controller.reconcile) takes the kind's plan from it; nothing parses a key's text. Its text (``str()``: the
policy's key, ``name`` or ``namespace/name``, after its kind's queue prefix and a colon for every kind but
ValidatingPolicy, ``mpol:team/m``) is only for people: log lines and the ``policy`` label of the per-policy metrics,
unchanged from before keys were typed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vpol.model.kind import PolicyKind
from vpol.policies.registry import kind_named


@dataclass(frozen=True, order=True)
class PolicyKey:
    """One policy: its kind (the cluster-wide kind's name), namespace ("" when cluster-wide) and name."""

    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, kind: str, key: str) -> PolicyKey:
        """The key of the policy of ``kind`` (either variant's name) with policy key ``key`` (``name`` or
        ``namespace/name``). Raises KeyError for a kind that is no policy kind."""
        namespace, _, name = key.rpartition("/")
        return cls(_cluster_kind(kind), namespace, name)

    @classmethod
    def from_meta(cls, kind: str, meta: Mapping[str, Any]) -> PolicyKey:
        """The key of the policy of ``kind`` with ``meta`` (its metadata)."""
        return cls(_cluster_kind(kind), str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    @property
    def policy_key(self) -> str:
        """``name``, or ``namespace/name`` for a namespaced policy (the key policies carry, ``Policy.key``)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def policy_kind(self) -> PolicyKind:
        """The registry's description of the kind."""
        registered = kind_named(self.kind)
        assert registered is not None, self.kind
        return registered

    @property
    def variant(self) -> str:
        """The kind of the policy itself: ``Namespaced<kind>`` for a namespaced policy."""
        return f"Namespaced{self.kind}" if self.namespace else self.kind

    def __str__(self) -> str:
        prefix = self.policy_kind.queue_prefix
        return f"{prefix}:{self.policy_key}" if prefix else self.policy_key


def _cluster_kind(kind: str) -> str:
    registered = kind_named(kind)
    if registered is None:
        raise KeyError(f"{kind} is not a policy kind")
    return registered.kind

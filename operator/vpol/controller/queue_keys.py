"""The work queue's keys: one string per policy, saying which reconciler takes it and which policy it is.

A ValidatingPolicy's key is the policy's own (``name``, or ``namespace/name`` for a NamespacedValidatingPolicy);
the other kinds' carry their prefix (vpol.engine.kinds: ``mpol:``, ``gpol:``, ``dpol:`` and ``ivpol:``) before the
policy's key. :data:`QUEUE_KEYS` makes the key of a policy of each kind as PolicyExceptions name kinds (their
``policyRefs``).
"""

from __future__ import annotations

from collections.abc import Callable

from vpol.engine.kinds import KINDS, PolicyKind


def _prefix(kind: str) -> str:
    return next(k.queue_prefix for k in KINDS if k.kind == kind)


MUTATING, GENERATING, DELETING, IMAGE_VALIDATING = (
    _prefix(k) for k in ("MutatingPolicy", "GeneratingPolicy", "DeletingPolicy", "ImageValidatingPolicy"))


def mutating_key(key: str) -> str:
    return f"{MUTATING}:{key}"


def lifecycle_key(kind: str, key: str) -> str:
    """The key of a GeneratingPolicy, DeletingPolicy or ImageValidatingPolicy (``kind``: their prefix)."""
    return f"{kind}:{key}"


def _queue_key(kind: PolicyKind) -> Callable[[str], str]:
    prefix = kind.queue_prefix
    return (lambda key: f"{prefix}:{key}") if prefix else str


#: Each kind a PolicyException's policyRefs may name -> the queue key of one of its policies, from the policy's key.
QUEUE_KEYS: dict[str, Callable[[str], str]] = {name: _queue_key(k) for k in KINDS for name in k.kinds}

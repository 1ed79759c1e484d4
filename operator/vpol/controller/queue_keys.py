"""The work queue's keys: one string per policy, saying which reconciler takes it and which policy it is.

A ValidatingPolicy's key is the policy's own (``name``, or ``namespace/name`` for a NamespacedValidatingPolicy);
the other kinds' carry a prefix: ``mpol:``, ``gpol:``, ``dpol:`` and ``ivpol:`` before the policy's key.
:data:`QUEUE_KEYS` makes the key of a policy of each kind as PolicyExceptions name kinds (their ``policyRefs``).
"""

from __future__ import annotations

from collections.abc import Callable

MUTATING, GENERATING, DELETING, IMAGE_VALIDATING = "mpol", "gpol", "dpol", "ivpol"


def mutating_key(key: str) -> str:
    return f"{MUTATING}:{key}"


def lifecycle_key(kind: str, key: str) -> str:
    """The key of a GeneratingPolicy, DeletingPolicy or ImageValidatingPolicy (``kind``: their prefix)."""
    return f"{kind}:{key}"


def _prefixed(prefix: str) -> Callable[[str], str]:
    return lambda key: f"{prefix}:{key}"


#: Each kind a PolicyException's policyRefs may name -> the queue key of one of its policies, from the policy's key.
QUEUE_KEYS: dict[str, Callable[[str], str]] = {
    "ValidatingPolicy": str, "NamespacedValidatingPolicy": str,
    **{f"{namespaced}{kind}": _prefixed(prefix)
       for kind, prefix in (("MutatingPolicy", MUTATING), ("GeneratingPolicy", GENERATING),
                            ("DeletingPolicy", DELETING), ("ImageValidatingPolicy", IMAGE_VALIDATING))
       for namespaced in ("", "Namespaced")},
}

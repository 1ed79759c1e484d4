"""What the background scans know of the policies at start-up, and which policies they scan with.

The first scan after a start waits until every policy whose results the reports hold has been handed to the
scanner once (:class:`StartupGate`): without them, it would take their results for stale and rewrite every report
that holds one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vpol.controller.queue_keys import PolicyKey
from vpol.kube.objects import Objects
from vpol.policies.registry import KINDS
from vpol.policies.validating.compile import compile_verdict
from vpol.policies.validating.model import ValidatingPolicy, parse_policy

def background_scanned(policy: ValidatingPolicy | None) -> bool:
    """Whether background scans evaluate ``policy`` and report its results: background evaluation enabled and no
    ``reports.kyverno.io/disabled`` label (Kyverno's reports controller leaves such a policy out)."""
    return policy is not None and policy.spec.evaluation.background_enabled and not policy.reports_disabled


def scanned_policy(body: Mapping[str, Any]) -> ValidatingPolicy | None:
    """What background scans evaluate of a policy object: None when it is invalid, does not compile or is not
    background-scanned (:func:`background_scanned`; the reconciler's decision, made from the object itself, so a
    watch event can tell the scanner before the reconcile runs)."""
    policy, _problems = parse_policy(dict(body))
    if policy is None or not background_scanned(policy):
        return None
    return policy if compile_verdict(policy).ok else None


@dataclass(frozen=True)
class StartupPolicies:
    """Every policy of every kind (vpol.policies.registry), as listed at one moment: the cluster-wide kind's name -> the
    policies of both its variants."""

    bodies: Mapping[str, list[dict[str, Any]]]

    @classmethod
    def read(cls, objects: Objects) -> "StartupPolicies":
        return cls({kind.kind: objects.list_policies(kind.plurals) for kind in KINDS})

    def keys(self) -> list[PolicyKey]:
        """The key of every policy listed."""
        return [PolicyKey.from_meta(kind, body.get("metadata") or {})
                for kind, bodies in self.bodies.items() for body in bodies]


class StartupGate:
    """Open once every policy that existed at start-up has been seen (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expected: set[PolicyKey] | None = None
        self._seen: set[PolicyKey] = set()
        self._open = threading.Event()

    def expect(self, keys: Iterable[PolicyKey]) -> None:
        """The policies that exist at start-up (the first call counts)."""
        with self._lock:
            if self._expected is None:
                self._expected = set(keys)
                self._check()

    def seen(self, key: PolicyKey) -> None:
        with self._lock:
            self._seen.add(key)
            self._check()

    def is_open(self) -> bool:
        return self._open.is_set()

    def wait(self, timeout: float) -> bool:
        return self._open.wait(timeout)

    def _check(self) -> None:
        if self._expected is not None and self._expected <= self._seen:
            self._open.set()

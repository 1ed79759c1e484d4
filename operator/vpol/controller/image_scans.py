"""ImageValidatingPolicies in background scans: the scanner's part for the kind (vpol.controller.scanner).

Existing objects the policies match (and their pod-controller variants' kinds) are evaluated as Kyverno's
background scan evaluates them: as CREATE requests, without digest mutation, each policy on its own (``required``
across the policies of one object). Their results go into the objects' PolicyReports beside the other policies'.
Registries are read from the scanner's thread; successful verifications are cached as at admission (an hour,
keyed by the policy's generation, the attestor as evaluated and the image digest), where Kyverno verifies again at
every scan.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from vpol.cel.backend import Backend, current, using
from vpol.controller.background_runner import Handed, RunnerDefaults
from vpol.controller.registry_credentials import RegistryClients
from vpol.engine.evaluate import CompiledException, Result
from vpol.engine.image_verification import Outcomes, VerificationCache
from vpol.engine.request import Subject
from vpol.engine.scope import matched_resources
from vpol.model.discovery import Discovery, ResourceInfo
from vpol.policies.image_validating.engine import ImagePolicyEngine, apply_required
from vpol.policies.image_validating.model import ImageValidatingPolicy
from vpol.policies.registry import kind_of

GVR = tuple[str, str, str]
#: Longest one object's image verifications may take in a scan.
OBJECT_SECONDS = 30.0


def scanned(policy: ImageValidatingPolicy | None) -> bool:
    """Whether ``policy`` (one that compiles: the reconciler hands over no other) runs in background scans
    (background enabled, Kubernetes mode)."""
    return policy is not None and policy.spec.evaluation.background_enabled and not policy.json_mode


class ImageScans(RunnerDefaults):
    kind = "ImageValidatingPolicy"
    reports_results = True

    def __init__(self, exceptions: Callable[[], Sequence[CompiledException]] = lambda: (),
                 clients: RegistryClients | None = None, backend: Backend | None = None):
        self.exceptions = exceptions
        #: What serves the policies' I/O libraries (None: the process's default).
        self.backend = backend
        #: The registry client of each policy (its pull Secrets, allowInsecureRegistry).
        self.clients = clients or RegistryClients(None, "")
        self.cache = VerificationCache()
        self._lock = threading.Lock()
        self._policies: dict[str, ImageValidatingPolicy] = {}
        self._engines: list[ImagePolicyEngine] | None = None

    def set_policy(self, key: str, policy: ImageValidatingPolicy | None) -> bool:
        """Scan with ``policy`` (None, or one not scanned: stop); whether that changed anything."""
        wanted = policy if scanned(policy) else None
        with self._lock:
            old = self._policies.get(key)
            if old == wanted and (old is None or wanted is None or old.annotations == wanted.annotations):
                return False
            if wanted is None:
                self._policies.pop(key, None)
            else:
                self._policies[key] = wanted
            self._engines = None
        return True

    def hand_over(self, key: str, policy: Any | None, **details: Any) -> Handed:
        return Handed(changed=True, event=("images", key)) if self.set_policy(key, policy) else Handed()

    def exceptions_changed(self) -> None:
        with self._lock:
            self._engines = None

    def policies(self) -> list[ImageValidatingPolicy]:
        with self._lock:
            return sorted(self._policies.values(), key=lambda p: p.key)

    def keys(self) -> list[str]:
        return [p.key for p in self.policies()]

    def fingerprint(self) -> tuple[Any, ...]:
        """What the results depend on besides the objects (for the scanner's scan keys)."""
        return tuple((p.key, repr(p.raw.get("spec")), tuple(sorted(p.annotations.items()))) for p in self.policies())

    def watched(self, discovery: Discovery, keys: Sequence[str] | None = None) -> dict[GVR, ResourceInfo]:
        """The listable kinds the policies (``keys``: only those) and their autogen variants match."""
        return {(info.group, info.version, info.resource): info for policy in self.policies()
                if keys is None or policy.key in keys
                for info in matched_resources(kind_of(policy).variants(policy), discovery)
                if "list" in info.verbs or not info.verbs}

    def _current(self) -> list[ImagePolicyEngine]:
        with self._lock:
            if self._engines is None:
                exceptions = list(self.exceptions())
                self._engines = [ImagePolicyEngine(p, exceptions) for p in
                                 sorted(self._policies.values(), key=lambda p: p.key)]
            return self._engines

    def evaluate(self, subject: Subject, only: Sequence[str] | None = None) -> list[Result]:
        """The results of the policies (``only``: those of these keys) on one object."""
        engines = [e for e in self._current() if only is None or e.policy.key in only]
        if not engines:
            return []
        verified = Outcomes()
        loaded: dict[str, Any] = {}
        deadline = time.monotonic() + OBJECT_SECONDS
        with using(self.backend or current()):
            outcomes = [o for e in engines if (o := e.evaluate(subject, registry=self.clients.for_policy(e.policy),
                                                               outcomes=verified, cache=self.cache,
                                                               deadline=deadline, loaded=loaded)) is not None]
        apply_required(outcomes, verified)
        return [o.result for o in outcomes]

"""ImageValidatingPolicies in background scans: the scanner's part for the kind (vpol.controller.scanner).

Existing objects the policies match (and their pod-controller variants' kinds) are evaluated as Kyverno's
background scan evaluates them: as CREATE requests, without digest mutation (``required`` across the policies of
one object). Their results go into the objects' PolicyReports beside the other policies'. They are evaluated in the
scanner's evaluation worker (vpol.policies.sandbox), with the deadline and memory cap of every other kind's CEL plus
:data:`OBJECT_SECONDS` per object for registry reads; the worker builds the registry clients from each policy's
access (its pull Secrets, read here). Successful verifications are cached as at admission (an hour, keyed by the
policy's generation, the attestor as evaluated and the image digest) while the set is unchanged, where Kyverno
verifies again at every scan.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from vpol.controller import metrics
from vpol.controller.background_runner import Handed, RunnerDefaults
from vpol.controller.registry_credentials import RegistryClients
from vpol.engine.evaluate import Result
from vpol.engine.request import Subject
from vpol.engine.scope import matched_resources
from vpol.model.discovery import Discovery, ResourceInfo
from vpol.model.policy import PolicyException
from vpol.oci.access import RegistryAccess
from vpol.policies.image_validating.evaluation import Evaluated, ImageEvaluation, failed
from vpol.policies.image_validating.model import ImageValidatingPolicy
from vpol.policies.registry import kind_of
from vpol.policies.sandbox import SandboxedEvaluator

GVR = tuple[str, str, str]
#: Longest one object's image verifications may take in a scan (registry reads), beyond the CEL deadline.
OBJECT_SECONDS = 30.0
#: The key the policies are held under in the evaluation worker (one engine for the set: ``required`` is decided
#: across them).
WORKER_KEY = "ImageValidatingPolicy:scans"


def scanned(policy: ImageValidatingPolicy | None) -> bool:
    """Whether ``policy`` (one that compiles: the reconciler hands over no other) runs in background scans
    (background enabled, Kubernetes mode)."""
    return policy is not None and policy.spec.evaluation.background_enabled and not policy.json_mode


class ImageScans(RunnerDefaults):
    kind = "ImageValidatingPolicy"
    reports_results = True

    def __init__(self, exceptions: Callable[[], Sequence[PolicyException]] = lambda: (),
                 clients: RegistryClients | None = None, worker: SandboxedEvaluator | None = None):
        self.exceptions = exceptions
        #: The registry access of each policy (its pull Secrets, allowInsecureRegistry).
        self.clients = clients or RegistryClients(None, "")
        #: Where the policies are evaluated (None: in this process, with no deadline: tests).
        self.worker = worker
        self._lock = threading.Lock()
        self._policies: dict[str, ImageValidatingPolicy] = {}
        #: Bumped when the policies or the exceptions change.
        self._version = 0
        #: (version, access) the worker (or ``_local``) holds the policies with.
        self._loaded: tuple[int, dict[str, RegistryAccess]] | None = None
        self._local: ImageEvaluation | None = None

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
            self._version += 1
        return True

    def hand_over(self, key: str, policy: Any | None, **details: Any) -> Handed:
        return Handed(changed=True, event=("images", key)) if self.set_policy(key, policy) else Handed()

    def exceptions_changed(self) -> None:
        with self._lock:
            self._version += 1

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

    def _load(self) -> list[ImageValidatingPolicy]:
        """The policies, held by the worker (or here) as they are now, with their access as it is now."""
        with self._lock:
            version = self._version
            policies = sorted(self._policies.values(), key=lambda p: p.key)
        access = self.clients.access(policies)
        if self._loaded != (version, access):
            exceptions = list(self.exceptions())
            if self.worker is not None:
                self.worker.load(WORKER_KEY, "ImageValidatingPolicy", policies, exceptions, access)
            else:
                self._local = ImageEvaluation(policies, exceptions, access)
            self._loaded = (version, access)
        return policies

    def evaluate_many(self, subjects: Sequence[Subject], only: Sequence[str] | None = None) -> list[list[Result]]:
        """The results of the policies (``only``: those of these keys) on each object, in one round trip with the
        worker when nothing goes wrong. A batch that fails is redone one object at a time, and an object that fails
        one policy at a time: a policy whose evaluation runs out of time or memory gets an ``error`` there (and
        ``required`` is then decided by each policy alone), every other result is still computed."""
        policies = self._load()
        if not subjects or not policies:
            return [[] for _ in subjects]
        wanted = None if only is None else list(only)
        if self.worker is None:
            assert self._local is not None
            return [self._counted(self._local.evaluate(s, OBJECT_SECONDS, wanted)) for s in subjects]
        status, payload = self.worker.call(WORKER_KEY, "evaluate", subjects, OBJECT_SECONDS, wanted,
                                           io_seconds=OBJECT_SECONDS)
        if status == "ok":
            return [self._counted(e) for e in payload]
        if len(subjects) > 1:
            return [r for s in subjects for r in self.evaluate_many([s], only)]
        if wanted is not None and len(wanted) == 1:
            return [failed([p for p in policies if p.key in wanted], subjects[0], str(payload))]
        return [[r for p in policies if wanted is None or p.key in wanted
                 for r in self.evaluate_many(subjects, [p.key])[0]]]

    def evaluate(self, subject: Subject, only: Sequence[str] | None = None) -> list[Result]:
        """The results of the policies (``only``: those of these keys) on one object."""
        return self.evaluate_many([subject], only)[0]

    @staticmethod
    def _counted(evaluated: Evaluated) -> list[Result]:
        metrics.image_registry_requests(evaluated.tally.requests)
        return evaluated.results

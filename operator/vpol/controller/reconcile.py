"""Reconciling one policy of any kind: read it, run its kind's plan, write its status.

One loop for every kind (vpol.policies.registry): the work queue hands it a
:class:`~vpol.controller.queue_keys.PolicyKey`,
it reads the policy, and its kind's plan (vpol.controller.plans) applies what the policy wants (generated VAPs and
MAPs, the policy handed to the background work) and says what it found; the loop makes the status of that, writes
it only when it changed, and keeps the resourceVersion of its write, whose watch event then needs no reconcile
(:meth:`Reconciler.is_echo`). The cluster's PolicyExceptions are read here too: the policies an unexpired one names
are reconciled again when it expires. Everything is level-based: the same cluster state always leads to the same
writes, and a second pass writes nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from kubernetes import client

from vpol.controller.discovery_cache import DiscoveryCache
from vpol.controller.enforcement_proof import EnforcementProver
from vpol.controller.generated_apply import GeneratedObjects
from vpol.controller.plan_context import Plan, ReconcileContext, ReconcileResult, Runner
from vpol.controller.plans import PLANS
from vpol.controller.queue_keys import PolicyKey
from vpol.desired.enforcement import GENERATION_ELIGIBLE
from vpol.desired.status import status_changed
from vpol.kube.access import AccessChecker
from vpol.kube.objects import Objects
from vpol.model.policy import PolicyException, active_exceptions
from vpol.policies.registry import kind_named

#: Seconds after an exception's expiresAt at which the policies it names are reconciled again (it has expired then).
EXPIRY_MARGIN = 1.0


def exception_policy_keys(exc: PolicyException) -> list[PolicyKey]:
    """The keys of the policies an exception names, a namespaced kind's in the exception's namespace; a reference
    without a kind names a ValidatingPolicy."""
    out = []
    for ref in exc.policy_refs:
        kind = ref.kind or "ValidatingPolicy"
        if kind_named(kind) is None:
            continue
        key = f"{exc.namespace}/{ref.name}" if kind.startswith("Namespaced") and exc.namespace else ref.name
        out.append(PolicyKey.of(kind, key))
    return out


class Reconciler:
    def __init__(self, api: client.ApiClient, *, discovery: DiscoveryCache | None = None,
                 runner: Runner | None = None, generation: str = GENERATION_ELIGIBLE, webhook: bool = True,
                 webhook_configuration: str = "", prover: EnforcementProver | None = None,
                 requeue: Callable[[PolicyKey, float], None] | None = None, http_enabled: bool = True,
                 plans: Mapping[str, Callable[[ReconcileContext], Plan]] = PLANS, objects: Objects | None = None):
        self.objects = objects or Objects(api)
        self.access = AccessChecker(api)
        self.runner = runner
        #: requeue(key, delay): reconcile a policy again later (when an exception naming it expires).
        self.requeue = requeue or (lambda key, delay: None)
        #: (policy key, expiresAt) of the exception expiries already scheduled.
        self._expiries: set[tuple[PolicyKey, float]] = set()
        self._expiries_lock = threading.Lock()
        self.context = ReconcileContext(self.objects, discovery or DiscoveryCache(api), self.exceptions,
                                        access=self.access, prover=prover, runner=runner, generation=generation,
                                        webhook=webhook, webhook_configuration=webhook_configuration,
                                        http_enabled=http_enabled)
        #: Each kind's plan, by the kind's name.
        self.plans: dict[str, Plan] = {kind: make(self.context) for kind, make in plans.items()}
        #: resourceVersion of each policy right after our own status write: the watch event that write causes
        #: needs no reconcile.
        self.written_versions: dict[PolicyKey, str] = {}

    @property
    def generated(self) -> GeneratedObjects:
        """The generated objects applied (vpol.controller.generated_apply.GeneratedObjects)."""
        return self.context.generated

    def exceptions(self) -> list[PolicyException]:
        """The cluster's PolicyExceptions that have not expired (Kyverno leaves expired ones out when it lists them),
        handed to the background work too; the policies an unexpired one names are reconciled again when it expires,
        so their generated objects, scans and background work stop applying it then."""
        now = time.time()
        out, _next = active_exceptions(self.objects.policy_exceptions(), now)
        with self._expiries_lock:
            self._expiries = {(k, at) for k, at in self._expiries if at >= now}
            for exc in out:
                if exc.expires_at is None:
                    continue
                for key in exception_policy_keys(exc):
                    if (key, exc.expires_at) not in self._expiries:
                        self._expiries.add((key, exc.expires_at))
                        self.requeue(key, exc.expires_at - now + EXPIRY_MARGIN)
        if self.runner is not None:
            self.runner.set_exceptions(out)
        return out

    def is_echo(self, key: PolicyKey, resource_version: str) -> bool:
        """Whether a watch event of the policy at ``resource_version`` is the echo of our own status write."""
        return bool(resource_version) and self.written_versions.get(key) == resource_version

    def reconcile(self, key: PolicyKey) -> ReconcileResult:
        plan = self.plans[key.kind]
        plurals = key.policy_kind.plurals
        body = self.objects.get_policy(key.policy_key, plurals)
        if body is None:
            self.written_versions.pop(key, None)
            self.context.written_at.pop(key, None)
            if self.context.prover is not None:
                self.context.prover.forget(key)
            return plan.gone(key)
        result, findings = plan.plan(key, body)
        current = body.get("status") or {}
        desired = plan.status(findings, current)
        result.ready = bool(desired["conditionStatus"]["ready"])
        result.generated = bool(desired.get("generated"))
        result.permissions_missing = bool(findings.missing_permissions)
        if status_changed(current, desired):
            self.written_versions[key] = self.objects.patch_policy_status(key.policy_key, desired, plurals)
            result.status_written = True
        return result

"""What the reconciler (vpol.controller.reconcile) hands each kind's plan (vpol.controller.plans), and what a plan
answers.

A plan is what one kind adds to the one reconcile loop: from a policy that exists, the objects it applies and the
findings its status is made of (:meth:`Plan.plan`); what is left to undo when the policy is gone
(:meth:`Plan.gone`); and how its findings become a status (:attr:`Plan.status`). Reading the policy, writing the
status only when it changed, skipping the watch echo of that write and requeueing at an exception's expiry are the
loop's, the same for every kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from vpol.controller.discovery_cache import DiscoveryCache
from vpol.controller.enforcement_proof import EnforcementProver
from vpol.controller.generated_apply import GeneratedObjects
from vpol.controller.queue_keys import PolicyKey
from vpol.desired.enforcement import GENERATION_ELIGIBLE
from vpol.desired.status import Findings
from vpol.kube.access import AccessChecker
from vpol.kube.objects import Objects
from vpol.model.policy import PolicyException


@dataclass
class ReconcileResult:
    key: PolicyKey
    status_written: bool = False
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    ready: bool | None = None
    #: For the vpol_policy_info metric.
    actions: str = ""
    background: bool = False
    generated: bool = False
    #: NativeVAP, Webhook, None or NotApplicable ("" when the policy is gone).
    enforcement: str = ""
    #: The operator lacks permissions the policy needs (RBACPermissionsGranted is False): checked again soon, as
    #: nothing tells the operator when a ClusterRole grants them.
    permissions_missing: bool = False


class Runner(Protocol):
    """What plans tell the background work (vpol.controller.scanner.Scanner) of the policies they reconcile: each
    policy of any kind (None when it is invalid, not for background work, or gone), handed to its kind's runner, and
    the cluster's PolicyExceptions."""

    generation: Any
    deletion: Any
    images: Any

    def hand_over(self, key: PolicyKey, policy: Any | None, **details: Any) -> None: ...

    def set_exceptions(self, exceptions: list[PolicyException]) -> None: ...

    def retry_generation(self, key: str) -> None: ...


@dataclass
class ReconcileContext:
    """The parts and settings every kind's plan reconciles with (one of each per operator)."""

    objects: Objects
    discovery: DiscoveryCache
    #: The cluster's PolicyExceptions that have not expired (the scanner is handed them too):
    #: vpol.controller.reconcile.Reconciler.exceptions.
    exceptions: Callable[[], list[PolicyException]]
    #: Asks what the operator may do (None: every permission is taken as granted; for tests of a plan alone).
    access: AccessChecker | None = None
    #: Proves the API server enforces what was written before a policy is called enforced (None: trust writes).
    prover: EnforcementProver | None = None
    #: The background work (None: the operator runs none, --scan-interval=0).
    runner: Runner | None = None
    #: --vap-generation: "eligible" or "opt-in".
    generation: str = GENERATION_ELIGIBLE
    #: Whether this operator runs its admission webhook, and the name of its validating configuration.
    webhook: bool = True
    webhook_configuration: str = ""
    #: Whether http.* can be served (the operator was given --http-allow prefixes): vpol.cel.library_use.
    http_enabled: bool = True
    #: The VAPs, MAPs and bindings applied (vpol.controller.generated_apply), and their resourceVersions.
    generated: GeneratedObjects = field(init=False)
    #: When (monotonic) each policy's native objects last changed in this process (vpol.controller.enforcement_state).
    written_at: dict[PolicyKey, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.generated = GeneratedObjects(self.objects)


class Plan(Protocol):
    """One kind's part of reconciling (vpol.controller.plans)."""

    def status(self, findings: Findings, current: Mapping[str, Any]) -> dict[str, Any]:
        """The desired status from the findings and the status the policy has now."""
        ...

    def plan(self, key: PolicyKey, body: dict[str, Any]) -> tuple[ReconcileResult, Findings]:
        """Reconcile what the policy ``body`` (of ``key``) wants, except its status: apply and delete its generated
        objects, hand it to the background work, and say what was found."""
        ...

    def gone(self, key: PolicyKey) -> ReconcileResult:
        """The policy is deleted: forget it and delete what was generated for it."""
        ...

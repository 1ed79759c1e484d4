"""What the policy kinds' typed models share, with Kyverno's defaults: the API group and versions, match
constraints, named expressions, validations and audit annotations, the admission-policy spec a ValidatingPolicy and
an ImageValidatingPolicy share (:class:`PolicySpec`), what every policy says of itself (:class:`PolicyIdentity`)
and PolicyExceptions. Each kind's own model is its package's (vpol.policies.<kind>.model).

Everything above this layer works on these classes, never on raw dicts. A policy's ``raw`` keeps the object as
written, for the places that need the text itself: the pod-controller autogen rewrite and the generated admission
policies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from vpol.model.problems import Position, Problem

GROUP = "policies.kyverno.io"
VERSIONS = ("v1", "v1beta1", "v1alpha1")
#: Versions Kyverno serves for the namespaced policy kinds (no v1alpha1).
NAMESPACED_VERSIONS = ("v1", "v1beta1")

ACTION_DENY, ACTION_WARN, ACTION_AUDIT = "Deny", "Warn", "Audit"
VALIDATION_ACTIONS = (ACTION_DENY, ACTION_WARN, ACTION_AUDIT)
FAILURE_POLICIES = ("Fail", "Ignore")
MODES = ("Kubernetes", "JSON")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT", "*")
SCOPES = ("*", "Cluster", "Namespaced")

#: Pod controllers Kyverno generates rules for when none are listed.
DEFAULT_POD_CONTROLLERS = ("daemonsets", "deployments", "replicasets", "statefulsets", "jobs", "cronjobs")

ANNOTATION_SEVERITY = "policies.kyverno.io/severity"
ANNOTATION_CATEGORY = "policies.kyverno.io/category"
ANNOTATION_SCORED = "policies.kyverno.io/scored"
#: A policy carrying this label (any value) is left out of Kyverno's background scans and reports
#: (pkg/controllers/report/utils: every policy lister selects "reports.kyverno.io/disabled" DoesNotExist), and
#: the ValidatingAdmissionPolicy or MutatingAdmissionPolicy generated from it is labelled so too.
LABEL_REPORTS_DISABLED = "reports.kyverno.io/disabled"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.match_expressions


@dataclass(frozen=True)
class Rule:
    """A resource rule (admissionregistration's NamedRuleWithOperations)."""

    api_groups: tuple[str, ...] = ()
    api_versions: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    operations: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    scope: str = "*"


@dataclass(frozen=True)
class MatchResources:
    resource_rules: tuple[Rule, ...] = ()
    exclude_resource_rules: tuple[Rule, ...] = ()
    namespace_selector: LabelSelector | None = None
    object_selector: LabelSelector | None = None
    match_policy: str = "Equivalent"


@dataclass(frozen=True)
class NamedExpression:
    name: str
    expression: str


@dataclass(frozen=True)
class Validation:
    expression: str
    message: str = ""
    message_expression: str = ""
    reason: str = ""


@dataclass(frozen=True)
class AuditAnnotation:
    key: str
    value_expression: str


@dataclass(frozen=True)
class Evaluation:
    admission_enabled: bool = True
    background_enabled: bool = True
    mode: str = "Kubernetes"


class PodControllers:
    """``spec.autogen.podControllers.controllers`` of any policy kind: None for the default set, () for none."""

    pod_controllers: tuple[str, ...] | None

    def controllers(self) -> tuple[str, ...]:
        return DEFAULT_POD_CONTROLLERS if self.pod_controllers is None else self.pod_controllers


@dataclass(frozen=True)
class Autogen(PodControllers):
    pod_controllers: tuple[str, ...] | None = None
    #: spec.autogen.validatingAdmissionPolicy.enabled as written: None when unset (the operator's
    #: --vap-generation mode decides), else the policy's explicit choice.
    vap_enabled: bool | None = None


@dataclass(frozen=True)
class PolicySpec:
    match_constraints: MatchResources | None = None
    match_conditions: tuple[NamedExpression, ...] = ()
    variables: tuple[NamedExpression, ...] = ()
    validations: tuple[Validation, ...] = ()
    audit_annotations: tuple[AuditAnnotation, ...] = ()
    validation_actions: tuple[str, ...] = (ACTION_DENY,)
    failure_policy: str = "Fail"
    evaluation: Evaluation = Evaluation()
    autogen: Autogen = Autogen()
    webhook_timeout_seconds: int | None = None


def policy_key(metadata: Mapping[str, Any]) -> str:
    """A policy object's key from its metadata, also when it does not parse (:attr:`PolicyIdentity.key`)."""
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    return f"{namespace}/{name}" if namespace else name


class PolicyIdentity:
    """What every policy kind says of itself: its key, its reference and where its problems are."""

    name: str
    namespace: str
    kind: str
    source: str
    positions: Mapping[str, Position]
    annotations: dict[str, str]
    labels: dict[str, str]

    def locate(self, problem: Problem) -> Problem:
        """The problem with this policy's file, reference and the field's position filled in."""
        return problem.located(file=self.source, object=self.ref, position=self.positions.get(problem.path))

    @property
    def key(self) -> str:
        """What identifies the policy among all policies: ``name``, or ``namespace/name`` when namespaced."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}" if not self.namespace else f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def severity(self) -> str:
        return self.annotations.get(ANNOTATION_SEVERITY, "")

    @property
    def category(self) -> str:
        return self.annotations.get(ANNOTATION_CATEGORY, "")

    @property
    def scored(self) -> bool:
        return self.annotations.get(ANNOTATION_SCORED, "true") != "false"

    @property
    def reports_disabled(self) -> bool:
        """Labelled out of background scans and reports (:data:`LABEL_REPORTS_DISABLED`)."""
        return LABEL_REPORTS_DISABLED in self.labels


def validation_expressions(spec: PolicySpec) -> list[tuple[str, str, str]]:
    """The expressions of a spec's validations (and their messageExpressions) and audit annotations as (field path,
    source, role), in evaluation order: the end of a ValidatingPolicy's and an ImageValidatingPolicy's
    ``expressions()``."""
    out: list[tuple[str, str, str]] = []
    for i, val in enumerate(spec.validations):
        out.append((f"spec.validations[{i}].expression", val.expression, "validation"))
        if val.message_expression:
            out.append((f"spec.validations[{i}].messageExpression", val.message_expression, "messageExpression"))
    for i, aa in enumerate(spec.audit_annotations):
        out.append((f"spec.auditAnnotations[{i}].valueExpression", aa.value_expression, "auditAnnotation"))
    return out


@dataclass(frozen=True, kw_only=True)
class PolicyObject(PolicyIdentity):
    """The metadata every kind's typed policy carries: each kind's dataclass (vpol.policies.<kind>.model) derives
    from it and puts its ``name``, ``spec`` and ``kind`` in front (these are keyword-only)."""

    api_version: str = f"{GROUP}/v1"
    #: Set for a namespaced variant.
    namespace: str = ""
    uid: str = ""
    generation: int = 0
    labels: dict[str, str] = field(default_factory=dict, compare=False)
    annotations: dict[str, str] = field(default_factory=dict, compare=False)
    #: The object as written (after parsing), for text rewrites and output.
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: Where it came from (file name) when read from disk.
    source: str = field(default="", compare=False)
    #: Position in the source file of each field, by field path.
    positions: Mapping[str, Position] = field(default_factory=dict, compare=False, repr=False)


class Referable(Protocol):
    """What a PolicyException's ``policyRefs`` compare a policy by."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...


@dataclass(frozen=True)
class PolicyRef:
    name: str
    kind: str = "ValidatingPolicy"


def active_exceptions(exceptions: Iterable[PolicyException], now: float) -> tuple[list[PolicyException], float | None]:
    """The exceptions that have not expired at ``now``, and the next moment one of them expires (None: none will)."""
    active = [e for e in exceptions if not e.expired(now)]
    upcoming = [e.expires_at for e in active if e.expires_at is not None]
    return active, (min(upcoming) if upcoming else None)


@dataclass(frozen=True)
class PolicyException:
    """A Kyverno PolicyException (policies.kyverno.io) for CEL policies."""

    name: str
    namespace: str = ""
    policy_refs: tuple[PolicyRef, ...] = ()
    match_conditions: tuple[NamedExpression, ...] = ()
    allowed_images: tuple[str, ...] = ()
    allowed_values: tuple[str, ...] = ()
    #: Kyverno's reportResult: "skip" (default) or "pass".
    report_result: str = "skip"
    #: ``spec.expiresAt`` as POSIX seconds (None: never). In a cluster an expired exception exempts nothing (Kyverno
    #: leaves it out when it lists exceptions); offline it applies as written, as in Kyverno's CLI.
    expires_at: float | None = None
    #: Its labels (``polex.kyverno.io/priority`` picks the exception whose reportResult a GeneratingPolicy uses).
    labels: dict[str, str] = field(default_factory=dict, compare=False)
    source: str = field(default="", compare=False)

    @property
    def priority(self) -> int:
        """The integer of its ``polex.kyverno.io/priority`` label (0 when absent or not an integer)."""
        try:
            return int(self.labels.get("polex.kyverno.io/priority", ""))
        except ValueError:
            return 0

    @property
    def key(self) -> str:
        """``namespace/name``, or ``name`` when it has no namespace."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def expired(self, now: float) -> bool:
        """Whether ``spec.expiresAt`` has passed at ``now`` (POSIX seconds), as Kyverno's IsExpired: after it."""
        return self.expires_at is not None and now > self.expires_at

    def applies_to(self, policy: Referable) -> bool:
        return any(
            ref.name == policy.name and (not ref.kind or ref.kind == policy.kind) for ref in self.policy_refs
        )

"""The typed MutatingPolicy model (Kyverno's ``policies.kyverno.io`` MutatingPolicy) with its defaults.

A MutatingPolicy shares the admission-policy frame of a ValidatingPolicy
(matchConstraints, matchConditions, variables, failurePolicy, evaluation,
autogen) and replaces validations with ``mutations``: CEL expressions that
produce either an apply configuration (``Object{...}``, merged into the
object with server-side apply semantics) or a list of JSON patches, applied
in order, as a MutatingAdmissionPolicy does (seeds: the MAP reference).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vpol.model.policy import (
    GROUP,
    AuditAnnotation,
    MatchResources,
    NamedExpression,
    PodControllers,
    PolicyIdentity,
)
from vpol.model.problems import Position

MUTATING_KIND = "MutatingPolicy"
#: The namespaced twin: the same spec, acting only on objects in its own namespace.
NAMESPACED_MUTATING_KIND = "NamespacedMutatingPolicy"
MUTATING_KINDS = (MUTATING_KIND, NAMESPACED_MUTATING_KIND)
#: Versions Kyverno serves for MutatingPolicy (../shared/NOTES.md section 10); v1alpha1 is deprecated.
MUTATING_VERSIONS = ("v1", "v1beta1", "v1alpha1")
#: Versions Kyverno serves for the namespaced policy kinds (no v1alpha1).
NAMESPACED_VERSIONS = ("v1", "v1beta1")

PATCH_APPLY_CONFIGURATION = "ApplyConfiguration"
PATCH_JSON_PATCH = "JSONPatch"
PATCH_TYPES = (PATCH_APPLY_CONFIGURATION, PATCH_JSON_PATCH)
REINVOCATION_POLICIES = ("Never", "IfNeeded")


@dataclass(frozen=True)
class Mutation:
    patch_type: str
    expression: str

    @property
    def field(self) -> str:
        """The spec field holding the expression: ``applyConfiguration`` or ``jsonPatch``."""
        return "applyConfiguration" if self.patch_type == PATCH_APPLY_CONFIGURATION else "jsonPatch"


@dataclass(frozen=True)
class MutatingEvaluation:
    admission_enabled: bool = True
    background_enabled: bool = True
    #: Mutation of existing objects (the targets: targetMatchConstraints, else what matchConstraints matches).
    mutate_existing_enabled: bool = False
    #: Changes made by vpol's own mutation of existing objects do not trigger it again (Kyverno's default).
    skip_background_requests: bool = True
    #: Apply configurations merged with server-side-apply semantics, atomic fields included (Kyverno's
    #: ``useServerSideApply``; false keeps a native MAP's refusal of atomic fields).
    use_server_side_apply: bool = False


@dataclass(frozen=True)
class MutatingAutogen(PodControllers):
    pod_controllers: tuple[str, ...] | None = None
    #: spec.autogen.mutatingAdmissionPolicy.enabled as written (None: the operator's mode decides).
    map_enabled: bool | None = None


@dataclass(frozen=True)
class MutatingSpec:
    match_constraints: MatchResources | None = None
    match_conditions: tuple[NamedExpression, ...] = ()
    variables: tuple[NamedExpression, ...] = ()
    mutations: tuple[Mutation, ...] = ()
    failure_policy: str = "Fail"
    reinvocation_policy: str = "Never"
    audit_annotations: tuple[AuditAnnotation, ...] = ()
    evaluation: MutatingEvaluation = MutatingEvaluation()
    autogen: MutatingAutogen = MutatingAutogen()
    webhook_timeout_seconds: int | None = None
    target_match_constraints: MatchResources | None = None
    #: ``spec.targetMatchConstraints.expression``: resolves the targets (one object, or ``{items: [...]}``) from
    #: the trigger; "" when the targets are listed.
    target_expression: str = ""
    target_match_conditions: tuple[NamedExpression, ...] = ()


@dataclass(frozen=True)
class MutatingPolicy(PolicyIdentity):
    name: str
    spec: MutatingSpec
    kind: str = MUTATING_KIND
    api_version: str = f"{GROUP}/v1"
    namespace: str = ""
    uid: str = ""
    generation: int = 0
    labels: dict[str, str] = field(default_factory=dict, compare=False)
    annotations: dict[str, str] = field(default_factory=dict, compare=False)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    source: str = field(default="", compare=False)
    positions: Mapping[str, Position] = field(default_factory=dict, compare=False, repr=False)

    @property
    def json_mode(self) -> bool:
        return False

    @property
    def targets_others(self) -> bool:
        """Whether ``spec.targetMatchConstraints`` chooses the targets (resource rules or an expression): then the
        request that matches the policy only triggers the mutation of its targets and is not mutated itself
        (Kyverno's NoTargetMatchConstraintPolicy, negated)."""
        target = self.spec.target_match_constraints
        return bool(self.spec.target_expression or (target is not None and target.resource_rules))

    def expressions(self) -> list[tuple[str, str, str]]:
        """Every CEL expression as (field path, source, role), in evaluation order."""
        out: list[tuple[str, str, str]] = []
        s = self.spec
        for i, mc in enumerate(s.match_conditions):
            out.append((f"spec.matchConditions[{i}].expression", mc.expression, "matchCondition"))
        for i, var in enumerate(s.variables):
            out.append((f"spec.variables[{i}].expression", var.expression, "variable"))
        for i, m in enumerate(s.mutations):
            out.append((f"spec.mutations[{i}].{m.field}.expression", m.expression, m.field))
        if s.target_expression:
            out.append(("spec.targetMatchConstraints.expression", s.target_expression, "targetExpression"))
        for i, mc in enumerate(s.target_match_conditions):
            out.append((f"spec.targetMatchConditions[{i}].expression", mc.expression, "matchCondition"))
        return out

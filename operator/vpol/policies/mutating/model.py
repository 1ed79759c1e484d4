"""The typed MutatingPolicy model (Kyverno's ``policies.kyverno.io`` MutatingPolicy) with its defaults, and its parsing.

A MutatingPolicy shares the admission-policy frame of a ValidatingPolicy
(matchConstraints, matchConditions, variables, failurePolicy, evaluation,
autogen) and replaces validations with ``mutations``: CEL expressions that
produce either an apply configuration (``Object{...}``, merged into the
object with server-side apply semantics) or a list of JSON patches, applied
in order, as a MutatingAdmissionPolicy does (seeds: the MAP reference).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vpol.model.documents import Document
from vpol.model.parse import Reader, audit_annotation, match_resources, named_expressions, parse_kind
from vpol.model.policy import (
    FAILURE_POLICIES,
    GROUP,
    VERSIONS,
    AuditAnnotation,
    MatchResources,
    NamedExpression,
    PodControllers,
    PolicyObject,
)
from vpol.model.problems import Problem

MUTATING_KIND = "MutatingPolicy"
#: The namespaced twin: the same spec, acting only on objects in its own namespace.
NAMESPACED_MUTATING_KIND = "NamespacedMutatingPolicy"
MUTATING_KINDS = (MUTATING_KIND, NAMESPACED_MUTATING_KIND)
#: Versions Kyverno serves for MutatingPolicy (../shared/NOTES.md section 10); v1alpha1 is deprecated.
MUTATING_VERSIONS = VERSIONS

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
class MutatingPolicy(PolicyObject):
    name: str
    spec: MutatingSpec
    kind: str = MUTATING_KIND

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


# --- MutatingPolicy ---------------------------------------------------------------------

_MUTATING_SPEC_FIELDS = ("matchConstraints", "matchConditions", "variables", "mutations", "failurePolicy",
                         "reinvocationPolicy", "auditAnnotations", "evaluation", "autogen", "webhookConfiguration",
                         "targetMatchConstraints", "targetMatchConditions")


#: ``spec.targetMatchConstraints``: a MatchResources and the expression resolving targets from the trigger.
_TARGET_FIELDS = ("resourceRules", "excludeResourceRules", "namespaceSelector", "objectSelector", "matchPolicy",
                  "expression")


def _mutation(r: Reader, item: dict[str, Any], here: str) -> Mutation | None:
    r.obj(item, here, ("patchType", "applyConfiguration", "jsonPatch"))
    patch_type = r.str_(item, "patchType", here, required=True, choices=PATCH_TYPES)
    if not patch_type:
        return None
    wanted = "applyConfiguration" if patch_type == PATCH_APPLY_CONFIGURATION else "jsonPatch"
    other = "jsonPatch" if wanted == "applyConfiguration" else "applyConfiguration"
    if item.get(other) is not None:
        r.problem(f"{here}.{other}", f"must not be set when patchType is {patch_type}")
    body = r.obj(item.get(wanted), f"{here}.{wanted}", ("expression",))
    if item.get(wanted) is None:
        r.problem(f"{here}.{wanted}", f"required when patchType is {patch_type}")
        return None
    expression = r.expression(body, "expression", f"{here}.{wanted}")
    return Mutation(patch_type, expression) if expression else None


def _mutating_spec(r: Reader, data: Any) -> MutatingSpec:
    d = r.obj(data, "spec", _MUTATING_SPEC_FIELDS)
    ev = r.obj(d.get("evaluation"), "spec.evaluation",
               ("admission", "background", "mode", "mutateExisting", "useServerSideApply", "skipBackgroundRequests"))
    mode = ev.get("mode")
    if mode not in (None, "", "Kubernetes"):
        r.problem("spec.evaluation.mode", f'evaluation mode "{mode}" is not supported for a MutatingPolicy '
                                          "(supported: Kubernetes)")
    mutate_existing = r.bool_(r.obj(ev.get("mutateExisting"), "spec.evaluation.mutateExisting", ("enabled",)),
                              "enabled", "spec.evaluation.mutateExisting", False)
    evaluation = MutatingEvaluation(
        admission_enabled=r.bool_(r.obj(ev.get("admission"), "spec.evaluation.admission", ("enabled",)),
                                  "enabled", "spec.evaluation.admission", True),
        background_enabled=r.bool_(r.obj(ev.get("background"), "spec.evaluation.background", ("enabled",)),
                                   "enabled", "spec.evaluation.background", True),
        mutate_existing_enabled=mutate_existing,
        skip_background_requests=r.bool_(ev, "skipBackgroundRequests", "spec.evaluation", True),
        use_server_side_apply=r.bool_(ev, "useServerSideApply", "spec.evaluation", False),
    )
    if not evaluation.admission_enabled and not evaluation.mutate_existing_enabled:
        # Kyverno's rule (its MutatingPolicy validation), whatever background says.
        r.problem("spec.evaluation", "disabling both admission and mutateExisting evaluation modes is not allowed")
    ag = r.obj(d.get("autogen"), "spec.autogen", ("podControllers", "mutatingAdmissionPolicy"))
    pc = r.obj(ag.get("podControllers"), "spec.autogen.podControllers", ("controllers",))
    controllers = None
    if pc.get("controllers") is not None:
        controllers = tuple(c.lower() for c in r.strings(pc, "controllers", "spec.autogen.podControllers"))
    native = r.obj(ag.get("mutatingAdmissionPolicy"), "spec.autogen.mutatingAdmissionPolicy", ("enabled",))
    map_enabled = None if native.get("enabled") is None else \
        r.bool_(native, "enabled", "spec.autogen.mutatingAdmissionPolicy", False)

    wh = r.obj(d.get("webhookConfiguration"), "spec.webhookConfiguration", ("timeoutSeconds",))
    timeout = r.int_(wh, "timeoutSeconds", "spec.webhookConfiguration")
    if timeout is not None and not 1 <= timeout <= 30:
        r.problem("spec.webhookConfiguration.timeoutSeconds", "must be between 1 and 30 seconds")

    match = match_resources(r, d.get("matchConstraints"), "spec.matchConstraints")
    if match is None or not match.resource_rules:
        r.problem("spec.matchConstraints", "a matchConstraints with at least one resource rule is required")
    target = r.obj(d.get("targetMatchConstraints"), "spec.targetMatchConstraints", _TARGET_FIELDS)
    mutations = r.objects(d, "mutations", "spec", lambda i, h: _mutation(r, i, h))
    if not d.get("mutations"):
        r.problem("spec.mutations", "at least one mutation is required")
    return MutatingSpec(
        match_constraints=match,
        match_conditions=named_expressions(r, d, "matchConditions", "spec", ident=False),
        variables=named_expressions(r, d, "variables", "spec", ident=True),
        mutations=mutations,
        failure_policy=r.str_(d, "failurePolicy", "spec", default="Fail", choices=FAILURE_POLICIES),
        reinvocation_policy=r.str_(d, "reinvocationPolicy", "spec", default="Never", choices=REINVOCATION_POLICIES),
        audit_annotations=r.objects(d, "auditAnnotations", "spec", lambda i, h: audit_annotation(r, i, h)),
        evaluation=evaluation,
        autogen=MutatingAutogen(controllers, map_enabled),
        webhook_timeout_seconds=timeout,
        target_match_constraints=match_resources(r, {k: v for k, v in target.items() if k != "expression"},
                                                  "spec.targetMatchConstraints") if target else None,
        target_expression=r.expression(target, "expression", "spec.targetMatchConstraints", required=False)
        if target else "",
        target_match_conditions=named_expressions(r, d, "targetMatchConditions", "spec", ident=False),
    )


def is_mutating_policy_document(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("apiVersion", "")).startswith(f"{GROUP}/") and \
        data.get("kind") in MUTATING_KINDS


def parse_mutating_policy(data: Any, doc: Document | None = None) -> tuple[MutatingPolicy | None, list[Problem]]:
    """Parse one MutatingPolicy or NamespacedMutatingPolicy document. Returns the policy (None when invalid) and
    all problems."""
    return parse_kind(data, doc, (MUTATING_KINDS[0], MUTATING_KINDS[1]), MUTATING_VERSIONS, _mutating_spec,
                      MutatingPolicy)

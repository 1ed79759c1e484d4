"""The typed GeneratingPolicy model (Kyverno's ``policies.kyverno.io`` GeneratingPolicy and
NamespacedGeneratingPolicy), its defaults and its parsing (docs/internals/generating-and-deleting.md).

A GeneratingPolicy shares the admission-policy frame (matchConstraints, matchConditions, variables,
auditAnnotations, webhookConfiguration) and replaces validations with ``generate``: each item a bool CEL
``expression`` whose ``generator.Apply(namespace, objects)`` calls produce the objects, or a YAML ``template``
(with ``(( ... ))`` CEL placeholders when ``interpolate: cel``). The request that matches (the *trigger*) is never
denied: generation runs after it, and its objects (the *downstreams*) are created, and with ``synchronize`` kept
as generated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vpol.model.documents import Document
from vpol.model.parse import Reader, audit_annotation, match_resources, named_expressions, parse_kind
from vpol.model.policy import GROUP, VERSIONS, AuditAnnotation, MatchResources, NamedExpression, PolicyObject
from vpol.model.problems import Problem

GENERATING_KIND = "GeneratingPolicy"
NAMESPACED_GENERATING_KIND = "NamespacedGeneratingPolicy"
GENERATING_KINDS = (GENERATING_KIND, NAMESPACED_GENERATING_KIND)
#: Served as the MutatingPolicy kinds: v1, v1beta1 (storage) and v1alpha1 (deprecated); the namespaced kind v1, v1beta1.
GENERATING_VERSIONS = VERSIONS
INTERPOLATE_NONE, INTERPOLATE_CEL = "none", "cel"


@dataclass(frozen=True)
class Generation:
    """One ``spec.generate[]`` item: an ``expression``, or a ``template`` (its ``value`` and ``interpolate``)."""

    expression: str = ""
    template: str = ""
    interpolate: str = INTERPOLATE_NONE

    @property
    def is_template(self) -> bool:
        return not self.expression


@dataclass(frozen=True)
class GeneratingEvaluation:
    admission_enabled: bool = True
    #: Also generate for the triggers that exist when the policy is created or changed (and at each full scan).
    generate_existing: bool = False
    #: Keep downstreams as generated: revert edits, recreate deleted ones, follow clone sources, delete them with
    #: their trigger or when no longer generated.
    synchronize: bool = False
    #: On policy deletion keep the synchronized data downstreams (default: they are deleted with the policy).
    orphan_downstream_on_policy_delete: bool = False
    #: Requests made by vpol's own generation do not trigger it again.
    skip_background_requests: bool = True


@dataclass(frozen=True)
class GeneratingSpec:
    match_constraints: MatchResources | None = None
    match_conditions: tuple[NamedExpression, ...] = ()
    variables: tuple[NamedExpression, ...] = ()
    generate: tuple[Generation, ...] = ()
    audit_annotations: tuple[AuditAnnotation, ...] = ()
    evaluation: GeneratingEvaluation = GeneratingEvaluation()
    use_server_side_apply: bool = False
    webhook_timeout_seconds: int | None = None


@dataclass(frozen=True)
class GeneratingPolicy(PolicyObject):
    name: str
    spec: GeneratingSpec
    kind: str = GENERATING_KIND

    @property
    def json_mode(self) -> bool:
        return False

    def expressions(self) -> list[tuple[str, str, str]]:
        """Every CEL expression written as such, as (field path, source, role), in evaluation order (template
        placeholders are found in their templates: vpol.engine.templates)."""
        s = self.spec
        out: list[tuple[str, str, str]] = []
        for i, mc in enumerate(s.match_conditions):
            out.append((f"spec.matchConditions[{i}].expression", mc.expression, "matchCondition"))
        for i, var in enumerate(s.variables):
            out.append((f"spec.variables[{i}].expression", var.expression, "variable"))
        for i, item in enumerate(s.generate):
            if not item.is_template:
                out.append((f"spec.generate[{i}].expression", item.expression, "generate"))
        for i, aa in enumerate(s.audit_annotations):
            out.append((f"spec.auditAnnotations[{i}].valueExpression", aa.value_expression, "auditAnnotation"))
        return out


_SPEC_FIELDS = ("matchConstraints", "matchConditions", "variables", "evaluation", "webhookConfiguration",
                "generate", "auditAnnotations", "useServerSideApply")


def _generation(r: Reader, item: dict[str, Any], here: str) -> Generation | None:
    r.obj(item, here, ("expression", "template"))
    has_expression, has_template = item.get("expression") is not None, item.get("template") is not None
    if has_expression and has_template:
        r.problem(here, "only one of expression or template may be set")
        return None
    if not has_expression and not has_template:
        r.problem(here, "one of expression or template must be set")
        return None
    if has_expression:
        expression = r.expression(item, "expression", here)
        return Generation(expression=expression) if expression else None
    template = r.obj(item.get("template"), f"{here}.template", ("value", "interpolate"))
    value = r.str_(template, "value", f"{here}.template", required=True)
    if template.get("value") is not None and not value.strip():
        r.problem(f"{here}.template.value", "must not be empty")
    interpolate = r.str_(template, "interpolate", f"{here}.template", default=INTERPOLATE_NONE,
                         choices=(INTERPOLATE_NONE, INTERPOLATE_CEL))
    return Generation(template=value, interpolate=interpolate) if value.strip() else None


def _generating_spec(r: Reader, data: Any) -> GeneratingSpec:
    d = r.obj(data, "spec", _SPEC_FIELDS)
    ev = r.obj(d.get("evaluation"), "spec.evaluation",
               ("admission", "generateExisting", "synchronize", "orphanDownstreamOnPolicyDelete",
                "skipBackgroundRequests"))

    def enabled(key: str, default: bool) -> bool:
        return r.bool_(r.obj(ev.get(key), f"spec.evaluation.{key}", ("enabled",)), "enabled", f"spec.evaluation.{key}",
                       default)

    evaluation = GeneratingEvaluation(
        admission_enabled=enabled("admission", True), generate_existing=enabled("generateExisting", False),
        synchronize=enabled("synchronize", False),
        orphan_downstream_on_policy_delete=enabled("orphanDownstreamOnPolicyDelete", False),
        skip_background_requests=r.bool_(ev, "skipBackgroundRequests", "spec.evaluation", True))
    wh = r.obj(d.get("webhookConfiguration"), "spec.webhookConfiguration", ("timeoutSeconds",))
    timeout = r.int_(wh, "timeoutSeconds", "spec.webhookConfiguration")
    if timeout is not None and not 1 <= timeout <= 30:
        r.problem("spec.webhookConfiguration.timeoutSeconds", "must be between 1 and 30 seconds")
    match = match_resources(r, d.get("matchConstraints"), "spec.matchConstraints")
    if match is None or not match.resource_rules:
        r.problem("spec.matchConstraints", "a matchConstraints with at least one resource rule is required")
    if not isinstance(d.get("generate"), list) or not d.get("generate"):
        r.problem("spec.generate", "at least one generate item is required")
    return GeneratingSpec(
        match_constraints=match,
        match_conditions=named_expressions(r, d, "matchConditions", "spec", ident=False),
        variables=named_expressions(r, d, "variables", "spec", ident=True),
        generate=r.objects(d, "generate", "spec", lambda i, h: _generation(r, i, h)),
        audit_annotations=r.objects(d, "auditAnnotations", "spec", lambda i, h: audit_annotation(r, i, h)),
        evaluation=evaluation,
        use_server_side_apply=r.bool_(d, "useServerSideApply", "spec", False),
        webhook_timeout_seconds=timeout,
    )


def is_generating_policy_document(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("apiVersion", "")).startswith(f"{GROUP}/") and \
        data.get("kind") in GENERATING_KINDS


def parse_generating_policy(data: Any, doc: Document | None = None) -> tuple[GeneratingPolicy | None, list[Problem]]:
    """Parse one GeneratingPolicy or NamespacedGeneratingPolicy document: the policy (None when invalid) and every
    problem."""
    return parse_kind(data, doc, GENERATING_KINDS, GENERATING_VERSIONS, _generating_spec, GeneratingPolicy)


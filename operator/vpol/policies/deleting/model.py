"""The typed DeletingPolicy model (Kyverno's ``policies.kyverno.io`` DeletingPolicy and NamespacedDeletingPolicy)
and its parsing (docs/internals/generating-and-deleting.md).

On its ``schedule`` (cron, vpol.model.schedule) a DeletingPolicy lists the objects its ``matchConstraints`` name
(a namespaced policy: in its namespace only), evaluates its ``conditions`` on each (with ``object``,
``namespaceObject`` and its ``variables``) and deletes those for which every condition holds, with its
``deletionPropagationPolicy``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vpol.model import schedule
from vpol.model.documents import Document
from vpol.model.parse import Reader, match_resources, named_expressions, parse_kind
from vpol.model.policy import GROUP, VERSIONS, MatchResources, NamedExpression, PolicyObject
from vpol.model.problems import Problem

DELETING_KIND = "DeletingPolicy"
NAMESPACED_DELETING_KIND = "NamespacedDeletingPolicy"
DELETING_KINDS = (DELETING_KIND, NAMESPACED_DELETING_KIND)
DELETING_VERSIONS = VERSIONS
PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


@dataclass(frozen=True)
class DeletingSpec:
    match_constraints: MatchResources | None = None
    conditions: tuple[NamedExpression, ...] = ()
    variables: tuple[NamedExpression, ...] = ()
    schedule: str = ""
    #: Foreground, Background or Orphan; "" leaves the API server's default.
    deletion_propagation_policy: str = ""


@dataclass(frozen=True)
class DeletingPolicy(PolicyObject):
    name: str
    spec: DeletingSpec
    kind: str = DELETING_KIND

    @property
    def json_mode(self) -> bool:
        return False

    def expressions(self) -> list[tuple[str, str, str]]:
        """Every CEL expression as (field path, source, role): the variables, then the conditions."""
        s = self.spec
        out = [(f"spec.variables[{i}].expression", v.expression, "variable") for i, v in enumerate(s.variables)]
        out += [(f"spec.conditions[{i}].expression", c.expression, "matchCondition")
                for i, c in enumerate(s.conditions)]
        return out


def _deleting_spec(r: Reader, data: Any) -> DeletingSpec:
    d = r.obj(data, "spec", ("matchConstraints", "conditions", "variables", "schedule", "deletionPropagationPolicy"))
    match = match_resources(r, d.get("matchConstraints"), "spec.matchConstraints")
    if match is None or not match.resource_rules:
        r.problem("spec.matchConstraints", "a matchConstraints with at least one resource rule is required")
    cron = r.str_(d, "schedule", "spec")
    if d.get("schedule") is None or not cron.strip():
        r.problem("spec.schedule", "schedule is required")
    elif (why := schedule.validate(cron)):
        r.problem("spec.schedule", f"schedule spec in the deletingPolicy is not in proper cron format: {why}")
    return DeletingSpec(
        match_constraints=match,
        conditions=named_expressions(r, d, "conditions", "spec", ident=False),
        variables=named_expressions(r, d, "variables", "spec", ident=True),
        schedule=cron,
        deletion_propagation_policy=r.str_(d, "deletionPropagationPolicy", "spec", choices=PROPAGATION_POLICIES),
    )


def is_deleting_policy_document(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("apiVersion", "")).startswith(f"{GROUP}/") and \
        data.get("kind") in DELETING_KINDS


def parse_deleting_policy(data: Any, doc: Document | None = None) -> tuple[DeletingPolicy | None, list[Problem]]:
    """Parse one DeletingPolicy or NamespacedDeletingPolicy document: the policy (None when invalid) and every
    problem."""
    return parse_kind(data, doc, DELETING_KINDS, DELETING_VERSIONS, _deleting_spec, DeletingPolicy)

"""The typed ValidatingPolicy model (Kyverno's ``policies.kyverno.io`` ValidatingPolicy and
NamespacedValidatingPolicy) and its parsing. Its spec (:class:`vpol.model.policy.PolicySpec`: matchConstraints,
matchConditions, variables, validations, auditAnnotations, evaluation, autogen...) is the frame an
ImageValidatingPolicy shares, so it is vpol.model's, as is the parsing of it (vpol.model.parse.policy_spec)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vpol.model.documents import Document
from vpol.model.parse import policy_head, policy_metadata, policy_spec
from vpol.model.policy import GROUP, VERSIONS, PolicyObject, PolicySpec, validation_expressions
from vpol.model.problems import Problem

KINDS = ("ValidatingPolicy", "NamespacedValidatingPolicy")


@dataclass(frozen=True)
class ValidatingPolicy(PolicyObject):
    name: str
    spec: PolicySpec
    kind: str = "ValidatingPolicy"


    @property
    def json_mode(self) -> bool:
        return self.spec.evaluation.mode == "JSON"

    def expressions(self) -> list[tuple[str, str, str]]:
        """Every CEL expression as (field path, source, role), in evaluation order."""
        out: list[tuple[str, str, str]] = []
        s = self.spec
        for i, mc in enumerate(s.match_conditions):
            out.append((f"spec.matchConditions[{i}].expression", mc.expression, "matchCondition"))
        for i, var in enumerate(s.variables):
            out.append((f"spec.variables[{i}].expression", var.expression, "variable"))
        return [*out, *validation_expressions(s)]


def is_policy_document(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("apiVersion", "")).startswith(f"{GROUP}/") and \
        data.get("kind") in KINDS


def parse_policy(data: Any, doc: Document | None = None) -> tuple[ValidatingPolicy | None, list[Problem]]:
    """Parse one ValidatingPolicy document. Returns the policy (None when invalid) and all problems."""
    r, api_version, kind = policy_head(data, doc, KINDS, VERSIONS)
    if api_version is None:
        return None, r.problems
    name, namespace, labels, annotations, uid, generation = policy_metadata(
        r, data, kind == "NamespacedValidatingPolicy")
    if "spec" not in data or data.get("spec") is None:
        r.problem("spec", "required field is missing")
        return None, r.problems
    spec = policy_spec(r, data.get("spec"))
    if r.failed:
        return None, r.problems
    return ValidatingPolicy(
        name=name, spec=spec, kind=kind, api_version=api_version, namespace=namespace, uid=uid,
        generation=generation, labels=labels, annotations=annotations, raw=data,
        source=doc.file if doc else "", positions=doc.positions if doc else {},
    ), r.problems

"""Compiling a (Namespaced)MutatingPolicy: its variables and matchConditions, its mutations (apply configurations
and JSON patches) and the targets of its mutation of existing objects (all errors, not just the first)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vpol.cel.compiler import CompiledOutcome, Frame, Program, namespaced_forbidden
from vpol.model.problems import Position, Problem
from vpol.policies.mutating.model import MutatingPolicy


@dataclass
class CompiledMutatingPolicy(CompiledOutcome):
    policy: MutatingPolicy
    match_conditions: list[tuple[str, Program]] = field(default_factory=list)
    variables: list[tuple[str, Program]] = field(default_factory=list)
    #: (mutation index, patch type, expression)
    mutations: list[tuple[int, str, Program]] = field(default_factory=list)
    #: ``spec.targetMatchConstraints.expression`` (None when the targets are listed).
    target_expression: Program | None = None
    #: ``spec.targetMatchConditions``, evaluated on each target of a mutation of existing objects.
    target_match_conditions: list[tuple[str, Program]] = field(default_factory=list)


def compile_mutating_policy(policy: MutatingPolicy, *, kubernetes_only: bool = False) -> CompiledMutatingPolicy:
    """Compile every expression of a MutatingPolicy (all errors, not just the first)."""
    out = CompiledMutatingPolicy(policy)
    s = policy.spec
    frame = Frame(out, "Kubernetes", kubernetes_only)
    frame.variables_and_conditions(s.variables, s.match_conditions, conditions_see_variables=True)
    for i, mutation in enumerate(s.mutations):
        prog = frame.add(mutation.expression, f"spec.mutations[{i}].{mutation.field}.expression", mutation.field)
        if prog:
            out.mutations.append((i, mutation.patch_type, prog))
    if s.target_expression:
        path = "spec.targetMatchConstraints.expression"
        prog = frame.add(s.target_expression, path, "targetExpression")
        # Kyverno requires a map (one object, or {"items": [...]}). vpol's resource.Get is typed dyn where Kyverno's
        # is a map (it may answer null), so dyn passes here and a non-map value is an error at run time.
        if prog and not (prog.result_type.startswith("map") or prog.result_type == "dyn"):
            out.problems.append(Problem("output type must be a map", path=path, expression_position=Position(1, 1)))
        elif prog:
            out.target_expression = prog
    for i, mc in enumerate(s.target_match_conditions):
        prog = frame.add(mc.expression, f"spec.targetMatchConditions[{i}].expression", "matchCondition")
        if prog:
            out.target_match_conditions.append((mc.name, prog))
    if policy.namespace:
        out.problems.extend(namespaced_forbidden(policy.expressions()))
    out.problems = [policy.locate(p) for p in out.problems]
    return out

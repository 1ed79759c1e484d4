"""Compiling a (Namespaced)DeletingPolicy: its variables and its conditions."""

from __future__ import annotations

from dataclasses import dataclass, field

from vpol.cel.compiler import CompiledOutcome, Frame, Program, namespaced_forbidden
from vpol.policies.deleting.model import DeletingPolicy


@dataclass
class CompiledDeletingPolicy(CompiledOutcome):
    policy: DeletingPolicy
    #: ``spec.conditions`` (evaluated after the variables are declared, as in Kyverno).
    match_conditions: list[tuple[str, Program]] = field(default_factory=list)
    variables: list[tuple[str, Program]] = field(default_factory=list)


def compile_deleting_policy(policy: DeletingPolicy) -> CompiledDeletingPolicy:
    """Compile a (Namespaced)DeletingPolicy's variables and conditions (bools; they may read the variables)."""
    out = CompiledDeletingPolicy(policy)
    s = policy.spec
    frame = Frame(out, "Kubernetes", False)
    frame.variables_and_conditions(s.variables, (), conditions_see_variables=True)
    for i, condition in enumerate(s.conditions):
        prog = frame.add(condition.expression, f"spec.conditions[{i}].expression", "matchCondition")
        if prog:
            out.match_conditions.append((condition.name, prog))
    if policy.namespace:
        out.problems.extend(namespaced_forbidden(policy.expressions()))
    out.problems = [policy.locate(p) for p in out.problems]
    return out

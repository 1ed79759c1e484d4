"""Compiling a (Namespaced)GeneratingPolicy: its variables and matchConditions, each ``generate`` item's expression
or template placeholders, and its audit annotations (all errors, not just the first)."""

from __future__ import annotations

from dataclasses import dataclass, field

from vpol.cel.compat import line_column
from vpol.cel.compiler import CompiledOutcome, Frame, Program, compile_expression, excerpt_at, namespaced_forbidden
from vpol.model.problems import Position, Problem
from vpol.model.templates import Template, TemplateError
from vpol.model.templates import parse as parse_template
from vpol.policies.generating.model import INTERPOLATE_CEL, GeneratingPolicy


@dataclass
class CompiledGeneratingPolicy(CompiledOutcome):
    policy: GeneratingPolicy
    match_conditions: list[tuple[str, Program]] = field(default_factory=list)
    variables: list[tuple[str, Program]] = field(default_factory=list)
    #: Per generate item: (index, the expression) or (index, the parsed template and its placeholders' programs).
    expressions: list[tuple[int, Program]] = field(default_factory=list)
    templates: list[tuple[int, Template, dict[str, Program]]] = field(default_factory=list)
    audit_annotations: list[tuple[str, Program]] = field(default_factory=list)


def _template_problem(template_text: str, offset: int | None, message: str, path: str) -> Problem:
    at = Position(*line_column(template_text, offset)) if offset is not None else None
    return Problem(message, path=path, expression_position=at,
                   excerpt=excerpt_at(template_text, at) if at is not None else "")


def compile_generating_policy(policy: GeneratingPolicy) -> CompiledGeneratingPolicy:
    """Compile every expression of a (Namespaced)GeneratingPolicy, template placeholders included (all errors).

    As Kyverno's compiler: matchConditions and variables as for the other kinds, each ``generate[].expression``
    must be a bool (its ``generator.Apply`` calls are what it generates), a template must parse and each of its
    placeholders compile, audit annotations are strings."""
    out = CompiledGeneratingPolicy(policy)
    s = policy.spec
    frame = Frame(out, "Kubernetes", False, generating="namespaced" if policy.namespace else "cluster")
    frame.variables_and_conditions(s.variables, s.match_conditions, conditions_see_variables=False)
    for i, item in enumerate(s.generate):
        if not item.is_template:
            prog = frame.add(item.expression, f"spec.generate[{i}].expression", "generate")
            if prog:
                out.expressions.append((i, prog))
            continue
        path = f"spec.generate[{i}].template.value"
        try:
            parsed = parse_template(item.template, item.interpolate == INTERPOLATE_CEL)
        except TemplateError as exc:
            out.problems.append(_template_problem(item.template, exc.offset, str(exc), path))
            continue
        programs: dict[str, Program] = {}
        for placeholder in parsed.placeholders:
            if placeholder.expression in programs:
                continue
            prog, problems = compile_expression(placeholder.expression, path, "placeholder", frame.spec_now())
            after = item.template[placeholder.offset + 2:]
            # Positions in the expression count from its first character (spaces after `((` are not part of it).
            start = Position(*line_column(item.template, placeholder.offset + 2 + len(after) - len(after.lstrip())))
            for problem in problems:
                at = problem.expression_position or Position(1, 1)
                line = start.line + at.line - 1
                column = start.column + at.column - 1 if at.line == 1 else at.column
                where = Position(line, column)
                out.problems.append(Problem(f"invalid placeholder expression {placeholder.expression!r}: "
                                            f"{problem.message}", path=path, expression_position=where,
                                            excerpt=excerpt_at(item.template, where)))
            if prog:
                programs[placeholder.expression] = prog
        out.templates.append((i, parsed, programs))
    for i, aa in enumerate(s.audit_annotations):
        prog = frame.add(aa.value_expression, f"spec.auditAnnotations[{i}].valueExpression", "auditAnnotation")
        if prog:
            out.audit_annotations.append((aa.key, prog))
    if policy.namespace:
        placeholders = [(f"spec.generate[{i}].template.value", p.expression, "placeholder")
                        for i, t, _progs in out.templates for p in t.placeholders]
        out.problems.extend(namespaced_forbidden([*policy.expressions(), *placeholders]))
    out.problems = [policy.locate(p) for p in out.problems]
    return out

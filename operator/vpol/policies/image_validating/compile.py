"""Compiling a (Namespaced)ImageValidatingPolicy: every expression (all errors), with Kyverno's environment for the
kind and its result types."""

from __future__ import annotations

from dataclasses import dataclass, field

from vpol.cel.compiler import CompiledOutcome, Frame, Program, spelled
from vpol.cel.environment import EnvSpec
from vpol.model.problems import Position, Problem
from vpol.policies.image_validating.model import ImageValidatingPolicy


@dataclass
class CompiledImageValidatingPolicy(CompiledOutcome):
    policy: ImageValidatingPolicy
    match_conditions: list[tuple[str, Program]] = field(default_factory=list)
    variables: list[tuple[str, Program]] = field(default_factory=list)
    #: Per matchImageReferences[] entry: its glob, or its compiled expression over ``ref``.
    image_references: list[str | Program] = field(default_factory=list)
    #: (name, expression) of the user's image extractors (the defaults are the engine's).
    extractors: list[tuple[str, Program]] = field(default_factory=list)
    #: (attestor index, field path under it, expression) of the attestors' CEL fields.
    attestors: list[tuple[int, str, Program]] = field(default_factory=list)
    validations: list[tuple[int, Program, Program | None]] = field(default_factory=list)
    audit_annotations: list[tuple[str, Program]] = field(default_factory=list)


def compile_image_validating_policy(policy: ImageValidatingPolicy) -> CompiledImageValidatingPolicy:
    """Compile every expression of a (Namespaced)ImageValidatingPolicy (all errors), with Kyverno's environment for
    the kind (vpol.cel.environment, ``image_validating``) and its result types: matchConditions, validations and
    matchImageReferences expressions (over ``ref`` alone) are bools, image extractors lists of image references,
    messageExpressions strings, auditAnnotations strings or null. The attestors' expressions must compile; Kyverno
    checks no result type for them and fails at verification when one is not a string, which vpol warns about."""
    out = CompiledImageValidatingPolicy(policy)
    s = policy.spec
    frame = Frame(out, s.evaluation.mode, False, image_validating=True, kind=policy.kind)
    frame.variables_and_conditions(s.variables, s.match_conditions, conditions_see_variables=False)
    reference_env = EnvSpec(image_reference=True)
    for i, ref in enumerate(s.match_image_references):
        if ref.glob:
            out.image_references.append(ref.glob)
        elif (prog := frame.add(ref.expression, f"spec.matchImageReferences[{i}].expression", "imageReference",
                                reference_env)):
            out.image_references.append(prog)
    for i, (name, expression) in enumerate(s.images):
        if (prog := frame.add(expression, f"spec.images[{i}].expression", "imageExtractor")):
            out.extractors.append((name, prog))
    for path, src, _role in policy.attestor_expressions():
        index = int(path.split("[", 1)[1].split("]", 1)[0])
        if not (prog := frame.add(src, path, "attestor")):
            continue
        if prog.result_type not in ("string", "dyn"):
            out.problems.append(Problem(f"expression must evaluate to string, not {spelled(prog.result_type)}: "
                                        "every verification with this attestor fails", path=path,
                                        expression_position=Position(1, 1), severity="warning"))
        out.attestors.append((index, path.split("]", 1)[1].lstrip("."), prog))
    frame.validations_and_audits(s.validations, s.audit_annotations)
    frame.finish(policy)
    return out

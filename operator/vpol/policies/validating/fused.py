"""A ValidatingPolicy's matchConditions, variables and validations as one CEL program.

Evaluating a policy expression by expression costs, per expression, a call
into cel-expr-python, an Activation and a conversion of the values it reads
(vpol.engine.evaluate); for the Pod Security policies that is about two thirds
of the time of a (policy, Pod) pair. The fused program evaluates the same
expressions in one call, on the subject's shared Activation::

    (c1) && (c2) ? dyn([{"a": dyn(A)}].map(variables,
                        [{"a": variables["a"], "b": dyn(B)}].map(variables,
                          [(v1), (v2)])[0])[0])
                 : dyn(null)

(``[init].map(v, body)[0]`` is cel-go's ``cel.bind``, see vpol.cel.compat.EAGER_BINDINGS;
each variable level holds the ones before it, so a variable reads those
declared before it.) Its value is ``null`` when a condition is false, else
the list of the validations' values.

It is a fast path, not a second meaning: the engine takes its value only when
it evaluates without an error to exactly that shape (a bool per validation), and
otherwise evaluates the policy expression by expression as before (which names
the false condition, the failing expression, and keeps lazy variables). Where
no expression fails, the two agree: every variable then has a value, and the
first false validation is the same whether the later ones were evaluated or
not. Variables keep their CEL values between expressions here, as in cel-go
(expression by expression, vpol passes them through Python values).

Built from each Program's evaluated text (the compiler's rewrites included),
in the policy's environment without its typed ``variables`` (each variable is
``dyn``, as an untyped variable is to cel-go's checker); a program that does
not compile simply has no fused form.

Several policies' fused programs also make one program (:func:`batch_program`):
the list of their values, ``[(fused 1), (fused 2), ...]``, in one call instead
of one per policy (each part is evaluated as it would be alone: a list literal's
elements are independent; an error in any makes the whole an error, and the
caller then evaluates the policies one by one).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from cel_expr_python import cel

from vpol.cel.compat import EAGER_BINDINGS, rewrite
from vpol.cel.compat.rules import lazy_binding_at_risk
from vpol.cel.compiler import Program, compile_written
from vpol.cel.environment import EnvSpec, environment
from vpol.policies.validating.compile import CompiledPolicy

_IDENT_RX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _part(prog: Program) -> str:
    # Own lines: a `//` comment at the end of an expression must not swallow what follows it.
    return f"(\n{prog.evaluated}\n)"


def fused_text(compiled: CompiledPolicy) -> str | None:
    """The fused program's text (module docstring), or None when the policy has no fused form: audit
    annotations (evaluated for their side values), variables whose names are not identifiers. Made once per
    compiled policy (a rewrite of its tokens: milliseconds)."""
    if compiled.fused_source is None:
        compiled.fused_source = (_text(compiled),)
    return compiled.fused_source[0]


def _text(compiled: CompiledPolicy) -> str | None:
    if compiled.audit_annotations or not compiled.ok:
        return None
    progs = [p for _n, p in compiled.match_conditions] + [p for _n, p in compiled.variables] + \
        [p for _i, p, _m in compiled.validations]
    if any(not p.evaluated for p in progs):
        return None
    names = [name for name, _p in compiled.variables]
    if any(not _IDENT_RX.fullmatch(name) for name in names) or len(set(names)) != len(names):
        return None
    conditions = " && ".join(_part(p) for _n, p in compiled.match_conditions) or "true"
    body = "[" + ", ".join(_part(p) for _i, p, _m in compiled.validations) + "]"
    for k in range(len(names) - 1, -1, -1):
        held = [f'"{n}": variables["{n}"]' for n in names[:k]]
        held.append(f'"{names[k]}": dyn({_part(compiled.variables[k][1])})')
        body = f"[{{{', '.join(held)}}}].map(variables, {body})[0]"
    text = f"({conditions}) ? dyn({body}) : dyn(null)"
    eager = rewrite(text, (EAGER_BINDINGS,))
    if lazy_binding_at_risk(eager.tokens):
        return None  # a cel.bind left lazy beside a comprehension that may stop early: no fused form
    return eager.text


def fused_program(compiled: CompiledPolicy) -> cel.Expression | None:
    """The policy's fused program (module docstring), built once per compiled policy; None when it has none."""
    if compiled.fused is None:
        compiled.fused = (_build(compiled),)
    return compiled.fused[0]


def _build(compiled: CompiledPolicy) -> cel.Expression | None:
    text = fused_text(compiled)
    if text is None:
        return None
    try:
        # Ordering between int, uint and double is built unchecked, as each expression is.
        expression, _unchecked = compile_written(environment(EnvSpec(mode=compiled.policy.spec.evaluation.mode)),
                                                 text)
    except Exception:  # noqa: BLE001 - no fused form: the policy is evaluated expression by expression
        return None
    return expression


def batch_program(texts: Sequence[str], mode: str) -> cel.Expression | None:
    """The fused programs whose texts (:func:`fused_text`) are ``texts``, of policies of evaluation ``mode``, as one
    program whose value is the list of theirs, in order (module docstring); None when the whole does not
    type-check (its parts are then evaluated one by one)."""
    if not texts:
        return None
    text = "[" + ",".join(f"(\n{t}\n)" for t in texts) + "]"
    try:
        # Checked only (no unchecked fallback, as compile_written has): a part that needs it stays on its own.
        expression: cel.Expression = environment(EnvSpec(mode=mode)).compile(text)
    except Exception:  # noqa: BLE001 - no batch: the policies are evaluated one by one
        return None
    return expression

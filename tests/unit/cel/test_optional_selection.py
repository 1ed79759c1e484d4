"""Optional selection and presence tests on values of the wrong type evaluate as in cel-go (Kyverno).

The Kyverno differential (tests/differential) found these classes; here each is pinned: cel-go gives
optional.none() for `x.?f` / `x[?k]` and false for `has(x.f)` when x is a string, number, bool or null,
where cel-cpp alone errors. Maps, lists and optionals keep their meaning.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from vpol.cel.compiler import compile_expression
from vpol.cel.environment import EnvSpec, environment
from vpol.cel.compat import OR_VALUE, rewrite
from vpol.cel.compat.rules import PRESENCE_GUARDS, SELECTION_GUARDS


def guard(src: str) -> str:
    return rewrite(src, (PRESENCE_GUARDS, SELECTION_GUARDS)).text


def or_value_compat(src: str) -> str:
    return rewrite(src, (OR_VALUE,)).text


def _eval(src: str, obj: Any) -> Any:
    prog, problems = compile_expression(src, "spec.validations[0].expression", "validation", EnvSpec())
    assert prog is not None, problems
    env = environment(EnvSpec())
    value = prog.expression.eval(env.Activation(data={"object": obj}))
    return value.plain_value() if value.type() != value.type().ERROR else ("error", str(value.value()))


@pytest.mark.parametrize(("src", "obj", "expected"), [
    ("object.spec.?containers.orValue([]).size() == 0", {"spec": "x"}, True),
    ("object.spec.?containers.orValue([]).size() == 0", {"spec": 7}, True),
    ("object.spec.?containers.orValue([]).size() == 1", {"spec": {"containers": [1]}}, True),
    ("object.?a.?b.?c.orValue(0) == 1", {"a": {"b": {"c": 1}}}, True),
    ("object.?a.?b.?c.orValue(0) == 0", {"a": {"b": "x"}}, True),
    ("object.?a.?b.c.orValue(0) == 1", {"a": {"b": {"c": 1}}}, True),
    ("object.m[?'k'].orValue('') == 'v'", {"m": {"k": "v"}}, True),
    ("object.m[?'k'].orValue('none') == 'none'", {"m": True}, True),
    ("object.l[?1].orValue(0) == 2", {"l": [1, 2]}, True),
    ("'ALL' in object.c.?securityContext.?capabilities.?drop.orValue([])", {"c": {"securityContext": 7}}, False),
    ("!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))", {"spec": {"volumes": ["x"]}},
     True),
    ("!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))",
     {"spec": {"volumes": [{"hostPath": {}}]}}, False),
    ("has(object.spec.hostNetwork)", {"spec": "x"}, False),
    ("optional.of(object.a).?b.orValue(3) == 1", {"a": {"b": 1}}, True),
    # A plain selection after `.?` selects inside the optional: none on a null or a scalar, as in cel-go.
    ("object.c.?securityContext.allowPrivilegeEscalation.orValue(true) == false", {"c": {"securityContext": None}},
     False),
    ("object.c.?securityContext.allowPrivilegeEscalation.orValue(true) == false", {"c": {"securityContext": "x"}},
     False),
    ("object.c.?securityContext.allowPrivilegeEscalation.orValue(true) == false",
     {"c": {"securityContext": {"allowPrivilegeEscalation": False}}}, True),
    ("object.c.?securityContext.allowPrivilegeEscalation.orValue(true) == false", {"c": {}}, False),
    ("object.?a.b.c.orValue(0) == 2", {"a": {"b": {"c": 2}}}, True),
    ("object.?a.b.c.orValue(0) == 0", {"a": {"b": 7}}, True),
])
def test_wrong_typed_receivers(src: str, obj: Any, expected: Any) -> None:
    assert _eval(src, obj) == expected


def test_errors_and_positions_come_from_the_expression_as_written() -> None:
    _prog, problems = compile_expression("object.spec.?containers.orValue([]) +", "p", "validation", EnvSpec())
    assert problems and problems[0].excerpt.count("cel.bind") == 0


def test_nothing_to_guard_is_left_alone() -> None:
    assert guard("object.spec.containers.size() > 0") == "object.spec.containers.size() > 0"
    assert guard("'has(' + object.kind") == "'has(' + object.kind"


# `R.orValue(D)` as Kyverno's environments evaluate it (pkg/cel/compiler OrValueCompatEnvOptions, found by the
# differential on Kyverno's public catalogue): R that is not an optional is the result; D is always evaluated.
@pytest.mark.parametrize(("src", "obj", "expected"), [
    # A plain field selection: the value itself (cel-cpp alone: no matching overload).
    ("object.metadata.labels.orValue({}).app == 'x'", {"metadata": {"labels": {"app": "x"}}}, True),
    ("object.r.requests.orValue({}).cpu == object.r.limits.orValue({}).cpu",
     {"r": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}, True),
    ("object.name.orValue('') == 'n'", {"name": "n"}, True),
    ("object.n.orValue(0) + 1 == 8", {"n": 7}, True),
    ("object.list.orValue([]).size() == 2", {"list": [1, 2]}, True),
    # Optionals keep their meaning, wherever they come from.
    ("object.?labels.orValue({'a': 'b'}).a == 'b'", {}, True),
    ("optional.none().orValue(3) == 3", {}, True),
    ("optional.of(object.x).orValue(3) == 1", {"x": 1}, True),
    ("[object.?a, object.?b].map(o, o.orValue(0)) == [1, 0]", {"a": 1}, True),
    # Nested calls, in the receiver and in the default.
    ("object.a.orValue(object.?b.orValue(2)) == 1", {"a": 1}, True),
    ("object.?a.orValue(object.?b.orValue(2)) == 2", {}, True),
])
def test_or_value_on_what_is_not_an_optional(src: str, obj: Any, expected: Any) -> None:
    assert _eval(src, obj) == expected


@pytest.mark.parametrize(("src", "obj"), [
    # The default is evaluated even when the optional has a value: its error is the result.
    ("object.?a.orValue(object.missing) == 1", {"a": 1}),
    ("object.a.orValue(object.missing) == 1", {"a": 1}),
    # An error in the receiver stays the error.
    ("object.missing.orValue(5) == 5", {}),
])
def test_or_value_errors_as_kyverno(src: str, obj: Any) -> None:
    outcome = _eval(src, obj)
    assert isinstance(outcome, tuple) and outcome[0] == "error", outcome


def test_or_value_rewrite_leaves_optionals_with_literal_defaults_and_other_arities_as_written() -> None:
    for src in ("object.spec.?x.orValue([])", "object.m[?'k'].orValue({'a': -1})", "x.orValue(a, b)", "x.orValue()",
                "object.metadata.?annotations['a/b'].orValue('')", "object.?a.b[0].c.orValue(1)"):
        assert or_value_compat(src) == src
    for src in ("object.spec.x.orValue([])", "object.spec.?x.orValue(1/0)", "f(object.?a).orValue(1)",
                "m[object.?a].orValue(1)", "object.?a.orValue(1).b.orValue(2)"):
        assert or_value_compat(src) != src


def test_or_value_is_not_rewritten_for_the_api_server() -> None:
    # Kubernetes' own environment (generated VAPs/MAPs) has cel-go's orValue, without Kyverno's compatibility.
    prog, problems = compile_expression("object.metadata.labels.orValue({}).app == 'x'", "p", "validation",
                                        EnvSpec(kubernetes_only=True))
    assert prog is not None, problems
    value = prog.expression.eval(environment(EnvSpec(kubernetes_only=True)).Activation(
        data={"object": {"metadata": {"labels": {"app": "x"}}}}))
    assert value.type() == value.type().ERROR


def test_tokens_from_an_offset_are_the_whole_texts_tokens_from_there() -> None:
    """An edit re-reads only the tokens it changed (vpol.cel.compat.stream, with vpol.cel.compat.tokens.scan from
    a start offset): from any token's start, the tokens are those of the whole text, at the same offsets (strings,
    comments and operators included)."""
    from vpol.cel.compat.tokens import scan

    src = "object.?spec.c.all(x, x.?n == 'a.?b' || x[?'k'] >= 2) // c.?d\n && has(y.z) ? r'''q''' : 1.5e3"
    whole = list(scan(src))
    for k, tok in enumerate(whole):
        assert list(scan(src, tok.start)) == whole[k:]


def test_a_long_chain_of_optional_selections_is_guarded_in_linear_passes() -> None:
    """The expression is read once and each rewrite re-reads only the tokens it changed (it was quadratic in the
    number of selections: a Pod Security policy with 30 of them took 0.4 s to compile). Counted in tokens read,
    not time."""
    from vpol.cel.compat import stream, tokens

    src = " && ".join(f"object.spec.?c{i}.orValue('') != 'x'" for i in range(40))
    read = 0
    real = tokens.scan

    def counting(text: str, start: int = 0):  # type: ignore[no-untyped-def]
        nonlocal read
        for tok in real(text, start):
            read += 1
            yield tok

    tokens.tokenize.cache_clear()
    stream.scan = tokens.scan = counting  # type: ignore[assignment]
    try:
        guarded = rewrite.__wrapped__(src, (SELECTION_GUARDS,)).text
    finally:
        stream.scan = tokens.scan = real  # type: ignore[assignment]
    assert len(set(re.findall(r"vpol_opt_\d+", guarded))) == 40
    final = len(list(real(guarded)))
    assert read < 2 * final, (read, final)

"""Optional selection and presence tests on values of the wrong type evaluate as in cel-go (Kyverno).

The Kyverno differential (tests/differential) found these classes; here each is pinned: cel-go gives
optional.none() for `x.?f` / `x[?k]` and false for `has(x.f)` when x is a string, number, bool or null,
where cel-cpp alone errors. Maps, lists and optionals keep their meaning.
"""

from __future__ import annotations

from typing import Any

import pytest

from vpol.cel.compiler import compile_expression
from vpol.cel.environment import EnvSpec, environment
from vpol.cel.optional_selection import guard


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
])
def test_wrong_typed_receivers(src: str, obj: Any, expected: Any) -> None:
    assert _eval(src, obj) == expected


def test_errors_and_positions_come_from_the_expression_as_written() -> None:
    _prog, problems = compile_expression("object.spec.?containers.orValue([]) +", "p", "validation", EnvSpec())
    assert problems and problems[0].excerpt.count("cel.bind") == 0


def test_nothing_to_guard_is_left_alone() -> None:
    assert guard("object.spec.containers.size() > 0") == "object.spec.containers.size() > 0"
    assert guard("'has(' + object.kind") == "'has(' + object.kind"

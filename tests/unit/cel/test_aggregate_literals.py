"""Mixed-type list and map literals are compile errors, as cel-go's HomogeneousAggregateLiterals makes them in
the API server and in Kyverno (messages and positions as Kyverno's compiler gives them for the same text)."""

from __future__ import annotations

import pytest

from vpol.cel.compiler import compile_expression
from vpol.cel.environment import EnvSpec


def _problems(src: str, spec: EnvSpec = EnvSpec()) -> list[tuple[int, str]]:
    prog, problems = compile_expression(src, "spec.validations[0].expression", "validation", spec)
    assert (prog is None) == bool(problems)
    return [(p.expression_position.column if p.expression_position else 0, p.message) for p in problems]


def test_mixed_literals_are_refused_where_the_mismatch_is() -> None:
    src = "[1, 'a'].size() > 0 && {'a': 1, 'b': 'x'}.size() > 0 && '%s'.format([[1, 'a']]) != ''"
    assert _problems(src) == [(5, "expected type 'int' but found 'string'"),
                              (38, "expected type 'int' but found 'string'")]
    assert _problems(src, EnvSpec(kubernetes_only=True)) == _problems(src)  # the API server refuses them too


@pytest.mark.parametrize(("src", "column", "message"), [
    ("[1, 2.0].size() > 0", 5, "expected type 'int' but found 'double'"),
    ("[[1], ['a']].size() > 0", 7, "expected type 'list(int)' but found 'list(string)'"),
    ("{'a': 1, 2: 1}.size() > 0", 10, "expected type 'string' but found 'int'"),
    ("[null, 1].size() > 0", 8, "expected type 'null_type' but found 'int'"),
])
def test_each_kind_of_mismatch(src: str, column: int, message: str) -> None:
    assert _problems(src) == [(column, message)]


@pytest.mark.parametrize("src", [
    "[1, 2, 3].size() > 0",
    "'%s: %d'.format(['a', 1]) != ''",              # format's arguments may mix (cel-go exempts format)
    "[dyn(1), dyn('a')].size() > 0",
    "object.spec.containers.map(c, [c.name, c.image]).size() > 0",
    "[?object.?x, ?object.?y].size() >= 0",
    # dyn next to a concrete type: cel-go refuses it, but vpol's dyn may be a type cel-go knows exactly
    # (a variable's), so it is left alone rather than risk refusing what Kyverno accepts.
    "[object.x, 1].size() > 0",
])
def test_homogeneous_or_uncertain_literals_compile(src: str) -> None:
    assert _problems(src) == []

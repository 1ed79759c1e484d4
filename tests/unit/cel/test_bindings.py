"""cel.bind reads its own value, also after a comprehension that stopped early (cel-cpp's lazy bindings read the
stale comprehension variable there; vpol.cel.bindings)."""

from __future__ import annotations

from typing import Any

import pytest

from vpol.cel.compat import EAGER_BINDINGS, rewrite
from vpol.cel.compiler import compile_expression
from vpol.cel.environment import EnvSpec, environment


def _eval(src: str, obj: Any = None) -> Any:
    prog, problems = compile_expression(src, "spec.validations[0].expression", "validation", EnvSpec())
    assert prog is not None, problems
    value = prog.expression.eval(environment(EnvSpec()).Activation(data={"object": obj or {}}))
    return ("error", str(value.value())) if value.type() == value.type().ERROR else value.plain_value()


@pytest.mark.parametrize("src", [
    "[1, 2].exists(c, true) && cel.bind(v, 5, v) == 5",
    "[1, 2].all(c, c == 2) || cel.bind(v, 5, v) == 5",
    "{'a': 1, 'b': 2}.exists(k, true) && cel.bind(v, 5, v + 1) == 6",
    "[1, 2].exists(i, x, true) && cel.bind(x, 7, cel.bind(y, 8, x + y)) == 15",
    # vpol's own guard of has() binds too: the policy that showed it (a Pod with two containers).
    "object.spec.containers.exists(c, c.image.startsWith('corp/')) && "
    "!(has(object.spec.imagePullSecrets) && object.spec.imagePullSecrets.exists(s, s.name == 'my-secret'))",
])
def test_bindings_after_an_early_stop_read_their_own_value(src: str) -> None:
    obj = {"spec": {"containers": [{"image": "corp/a"}, {"image": "b"}], "imagePullSecrets": [{"name": "x"}]}}
    assert _eval(src, obj) is True


def eager_bindings(src: str) -> str:
    return rewrite(src, (EAGER_BINDINGS,)).text


def test_rewrite_only_where_needed_and_only_well_formed_calls() -> None:
    assert eager_bindings("cel.bind(v, 5, v) == 5") == "cel.bind(v, 5, v) == 5"  # nothing stops early
    assert eager_bindings("[1].all(c, true) && cel.bind(x, 7, cel.bind(y, 8, x + y)) == 15") == \
        "[1].all(c, true) && [7].map(x, [8].map(y, x + y)[0])[0] == 15"
    for src in ("[1].exists(c, true) && cel.bind(v, 1)", "[1].exists(c, true) && 'cel.bind(a, b, c)' != ''",
                "[1].exists(c, true) && a.cel.bind(v, 1, 2)"):
        assert eager_bindings(src) == src


def test_the_binding_is_evaluated_when_it_is_made_as_in_cel_go() -> None:
    outcome = _eval("[1, 2].exists(c, true) && cel.bind(v, {'a': 1}.missing, true)")
    assert isinstance(outcome, tuple) and outcome[0] == "error"

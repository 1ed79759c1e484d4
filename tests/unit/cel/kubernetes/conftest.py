"""Helpers to evaluate expressions with the Kubernetes CEL libraries.

``value(expr, **vars)`` compiles against the policy environment and returns
the plain value; ``error(expr, **vars)`` returns the message of the CEL
error value the expression must produce; ``compile_error(expr)`` the text of
a compile error. Evaluation must never raise: an exception out of ``eval``
fails the test.

Expected values in these tests are Kubernetes' documented examples (the
godoc of k8s.io/apiserver/pkg/cel/library and the "CEL in Kubernetes" page)
and results of the real Kubernetes 1.37 CEL environment
(k8s.io/apiserver v0.37.2 ``MustBaseEnvSet``) for the same expressions
(see ``oracle/``).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from cel_expr_python import cel

from vpol.cel import types
from vpol.cel.environment import environment
from vpol.cel.libraries import kubernetes

T = cel.Type

#: cel-expr-python prefixes error values with a status code ("UNKNOWN: ...").
_STATUS = re.compile(r"^[A-Z_]+: ")

BASE_DATA: dict[str, Any] = {
    "object": None,
    "oldObject": None,
    "request": {},
    "namespaceObject": None,
    "variables": {},
    "exceptions": {},
}


def wired(env: cel.Env) -> bool:
    """Whether ``env`` has the overloads of :func:`kubernetes.extensions`."""
    try:
        env.compile("[1].indexOf(1) == 0 && format.dns1123Label().validate('a').hasValue() == false")
    except RuntimeError:
        return False
    return True


@functools.cache
def policy_env() -> cel.Env:
    """``environment()``, or the same environment plus our extensions until it passes them."""
    env = environment()
    if wired(env):
        return env
    # vpol.cel.environment does not pass kubernetes.extensions() yet (see
    # test_k8s_declarations.py::test_environment_passes_the_extensions):
    # build the identical environment with them.
    from vpol.cel import environment as envmod

    spec = envmod.EnvSpec()
    return cel.NewEnv(
        descriptor_pool=types.POOL,
        config=cel.NewEnvConfigFromYaml(envmod._EXTENSIONS_YAML),
        variables=envmod.variable_types(spec),
        functions=list(envmod._function_decls(False)),
        extensions=kubernetes.extensions(),
    )


class Failed(Exception):
    """An expression that should have produced a value produced an error, or the reverse."""


def _eval(expr: str, check: bool, variables: dict[str, Any]) -> cel.Value:
    compiled = policy_env().compile(expr, disable_check=not check)
    data = dict(BASE_DATA)
    data.update(variables)
    return compiled.eval(data=data)


def value(expr: str, *, check: bool = True, **variables: Any) -> Any:
    result = _eval(expr, check, variables)
    if result.type() == T.ERROR:
        raise Failed(f"{expr!r} failed: {result.value()}")
    return result.plain_value()


def error(expr: str, *, check: bool = True, **variables: Any) -> str:
    """The message of the error value (cel-expr-python's status prefix removed)."""
    result = _eval(expr, check, variables)
    if result.type() != T.ERROR:
        raise Failed(f"{expr!r} gave {result.plain_value()!r}, expected an error")
    return _STATUS.sub("", str(result.value()), count=1)


def compile_error(expr: str, env: cel.Env | None = None) -> str:
    try:
        (env or policy_env()).compile(expr)
    except RuntimeError as exc:
        return str(exc)
    raise Failed(f"{expr!r} compiled, expected a compile error")

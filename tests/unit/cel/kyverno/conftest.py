"""Helpers to evaluate expressions with the Kyverno CEL libraries.

``run(expr, obj=..., backend=...)`` compiles against the real policy
environment, evaluates with the library variables (``resource``, ``http``,
``image``, ...) bound, and returns an :class:`Outcome` (value or error
message). ``value(...)`` and ``error(...)`` assert which one it is.
Evaluation must never raise: an exception out of ``eval`` fails the test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from cel_expr_python import cel

from vpol.cel.backend import Backend, using
from vpol.cel.environment import environment, library_variables


@dataclass(frozen=True)
class Outcome:
    value: Any = None
    error: str | None = None


def run(expr: str, *, obj: Any = None, backend: Backend | None = None, variables: dict[str, Any] | None = None) -> Outcome:
    return run_with(expr, obj=obj, backend=backend, variables=variables)


def run_with(
    expr: str,
    *,
    obj: Any = None,
    backend: Backend | None = None,
    variables: dict[str, Any] | None = None,
    request: dict[str, Any] | None = None,
    namespace_object: Any = None,
) -> Outcome:
    compiled = environment().compile(expr)
    data: dict[str, Any] = {
        "object": obj if obj is not None else {},
        "oldObject": None,
        "request": request or {},
        "namespaceObject": namespace_object,
        "variables": variables or {},
        "exceptions": {},
    }
    data.update({name: value for name, (_type, value) in library_variables().items()})
    if backend is None:
        result = compiled.eval(data=data)
    else:
        with using(backend):
            result = compiled.eval(data=data)
    if result.type() == cel.Type.ERROR:
        return Outcome(error=str(result.value()))
    return Outcome(value=result.plain_value())


def value(expr: str, **kwargs: Any) -> Any:
    outcome = run(expr, **kwargs)
    assert outcome.error is None, f"{expr!r} failed: {outcome.error}"
    return outcome.value


def error(expr: str, **kwargs: Any) -> str:
    outcome = run(expr, **kwargs)
    assert outcome.error is not None, f"{expr!r} evaluated to {outcome.value!r}, expected an error"
    return outcome.error


@pytest.fixture
def cel_run() -> Callable[..., Outcome]:
    return run


@pytest.fixture
def cel_value() -> Callable[..., Any]:
    return value


@pytest.fixture
def cel_error() -> Callable[..., str]:
    return error

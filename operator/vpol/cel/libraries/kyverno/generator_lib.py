"""Kyverno's generator library: the ``generator`` variable of a GeneratingPolicy's expressions.

``generator.Apply(namespace, objects)`` (a GeneratingPolicy) and ``generator.Apply(objects)`` (a
NamespacedGeneratingPolicy, whose namespace is its own), also spelled ``apply``: the objects are what the policy
generates for this trigger; the call returns true. The library only records them, in the collector the engine
opens around the evaluation (:func:`collecting`): placing them (namespaces, ``*List`` objects expanded, labels) is
the engine's (vpol.policies.generating.engine). Each object must be a map; anything else is an error, as in Kyverno (its
objects pass through a protobuf Struct).

The ``generator`` variable is declared only in a GeneratingPolicy's environments (``EnvSpec.generating``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from cel_expr_python import cel

from vpol.cel import types
from vpol.cel.declare import STRING, list_of, message
from vpol.cel.libraries.kyverno.declarations import Fn, KyvernoFunctionError

LIBRARY = "kyverno.generator"
VARIABLE = "generator"

GENERATOR_TYPE, GeneratorContext = types.opaque_type("vpol.kyverno.GeneratorContext", {})
#: A NamespacedGeneratingPolicy's ``generator``: only ``Apply(objects)``, as in Kyverno, where each kind of policy
#: gets its own overload and the other arity does not compile.
NAMESPACED_GENERATOR_TYPE, NamespacedGeneratorContext = types.opaque_type("vpol.kyverno.NamespacedGeneratorContext",
                                                                          {})
_CTX = message(GENERATOR_TYPE, GeneratorContext)
_NAMESPACED_CTX = message(NAMESPACED_GENERATOR_TYPE, NamespacedGeneratorContext)
_OBJECTS = list_of(cel.Type.Map(cel.Type.STRING, cel.Type.DYN))

#: (namespace given, or None for the one-argument form; the objects) of each call, in order.
Calls = list[tuple[str | None, list[dict[str, Any]]]]
_CALLS: contextvars.ContextVar[Calls | None] = contextvars.ContextVar("vpol_generator_calls", default=None)


@contextlib.contextmanager
def collecting() -> Iterator[Calls]:
    """Record the ``generator.Apply`` calls of the evaluations made inside."""
    calls: Calls = []
    token = _CALLS.set(calls)
    try:
        yield calls
    finally:
        _CALLS.reset(token)


def _apply(name: str, namespace: str | None, objects: Sequence[Any]) -> bool:
    calls = _CALLS.get()
    if calls is None:
        raise KyvernoFunctionError(f"generator.{name}: failed to generate resources: no generation in progress")
    out: list[dict[str, Any]] = []
    for i, obj in enumerate(objects):
        if not isinstance(obj, Mapping):
            raise KyvernoFunctionError(f"generator.{name}: failed to generate resources: object {i} is "
                                       f"{type(obj).__name__}, not a map")
        out.append(dict(obj))
    calls.append((namespace, out))
    return True


def variables() -> dict[str, tuple[cel.Type, Any]]:
    """The cluster-wide policies' ``generator`` (a namespaced policy's environment declares it with
    :data:`NAMESPACED_GENERATOR_TYPE` instead: vpol.cel.environment)."""
    return {VARIABLE: (GENERATOR_TYPE, GeneratorContext())}


def functions() -> Sequence[Fn]:
    out: list[Fn] = []
    for name in ("Apply", "apply"):
        out.append(Fn(LIBRARY, name, f"kyverno_generator_{name.lower()}_{'pascal' if name[0].isupper() else 'camel'}"
                                     "_string_list", cel.Type.BOOL, (_CTX, STRING, _OBJECTS),
                      lambda _c, ns, objs, name=name: _apply(name, ns, objs), member=True))
        out.append(Fn(LIBRARY, name, f"kyverno_generator_{name.lower()}_{'pascal' if name[0].isupper() else 'camel'}"
                                     "_list", cel.Type.BOOL, (_NAMESPACED_CTX, _OBJECTS),
                      lambda _c, objs, name=name: _apply(name, None, objs), member=True))
    return out

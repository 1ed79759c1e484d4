"""Runtime support for ``transformMap`` and ``transformMapEntry`` (two-variable comprehensions).

The cel-go extension that Kubernetes enables (and cel-expr-python's
``two-var-comprehensions``) expands these macros into calls of the internal
function ``cel.@mapInsert``. cel-expr-python 0.1.3 declares it but has no
implementation, so both macros fail at evaluation ("No overload found in
reference resolve step for cel.@mapInsert"). We register one.

Its declared types (``map(string, dyn)``) do not matter for type checking
(the existing declaration with type parameters does that); they only make
the runtime register an implementation for map arguments without clashing
with that declaration. Semantics are cel-go's ``InsertMapKeyValue``: a key
already present is an error.

cel-expr-python converts the accumulator map to a Python dict and back on
every call, so a transform over n entries costs O(n^2); the 10,000
iterations cap on comprehensions bounds it.
"""

from __future__ import annotations

from typing import Any

from vpol.cel.declare import DYN, Fn, T, map_of
from vpol.cel.libraries.kubernetes.overloads import KubernetesLibraryError

LIBRARY = "kubernetes.twoVarComprehensions"


def _present(accumulator: dict[Any, Any], key: Any) -> bool:
    if key not in accumulator:
        return False
    # Python makes True == 1 and False == 0; CEL map keys of different kinds differ.
    return any(existing == key and isinstance(existing, bool) == isinstance(key, bool) for existing in accumulator)


def _text(key: Any) -> str:
    return str(key).lower() if isinstance(key, bool) else str(key)


def insert(accumulator: dict[Any, Any], key: Any, value: Any) -> dict[Any, Any]:
    if _present(accumulator, key):
        raise KubernetesLibraryError(f"insert failed: key {_text(key)} already exists")
    out = dict(accumulator)
    out[key] = value
    return out


def merge(accumulator: dict[Any, Any], update: dict[Any, Any]) -> dict[Any, Any]:
    out = dict(accumulator)
    for key, value in update.items():
        if _present(out, key):
            raise KubernetesLibraryError(f"insert failed: key {_text(key)} already exists")
        out[key] = value
    return out


def functions() -> list[Fn]:
    accumulator = map_of(T.STRING, T.DYN)
    return [
        Fn(LIBRARY, "cel.@mapInsert", "vpol_mapInsert_map_key_value", (accumulator, DYN, DYN), T.DYN,
           insert, env="run"),
        Fn(LIBRARY, "cel.@mapInsert", "vpol_mapInsert_map_map", (accumulator, accumulator), T.DYN,
           merge, env="run"),
    ]

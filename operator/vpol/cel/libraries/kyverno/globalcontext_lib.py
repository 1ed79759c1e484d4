"""Kyverno's globalContext library: the ``globalContext`` variable, served by the backend.

``globalContext.Get(name)`` / ``globalContext.Get(name, projection)`` (also
``get``) return the data of the GlobalContextEntry ``name``, or of one of its
projections (dyn). Failures are CEL errors ``<call>: failed to get global
reference: <reason>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cel_expr_python import cel

from vpol.cel import types
from vpol.cel.declare import STRING, message
from vpol.cel.libraries.kyverno.backend_call import call, describe
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.globalcontext"

GLOBAL_CONTEXT_TYPE, GlobalContext = types.opaque_type("vpol.kyverno.GlobalContext", {})
_CTX = message(GLOBAL_CONTEXT_TYPE, GlobalContext)


def get(name: str, entry: str, projection: str | None = None) -> Any:
    args = [entry] + ([projection] if projection is not None else [])
    return call(
        describe(f"globalContext.{name}", *args),
        "failed to get global reference",
        lambda b: b.global_context(entry, projection or ""),
    )


def variables() -> dict[str, tuple[cel.Type, Any]]:
    return {"globalContext": (GLOBAL_CONTEXT_TYPE, GlobalContext())}


def functions() -> Sequence[Fn]:
    T = cel.Type
    out = []
    for name, style in (("Get", "pascal"), ("get", "camel")):
        out += [
            Fn(LIBRARY, name, f"kyverno_globalcontext_get_string_{style}", T.DYN, (_CTX, STRING),
               lambda _c, e, n=name: get(n, e), member=True),
            Fn(LIBRARY, name, f"kyverno_globalcontext_get_string_string_{style}", T.DYN, (_CTX, STRING, STRING),
               lambda _c, e, p, n=name: get(n, e, p), member=True),
        ]
    return out

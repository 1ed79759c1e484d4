"""Calling the current I/O backend on behalf of a Kyverno library function.

The I/O libraries (``resource``, ``http``, ``globalContext``,
``image.GetMetadata``) do no I/O themselves: they ask the backend that is
current for the evaluation (:func:`vpol.cel.backend.current`). A failure,
whatever its cause (missing object, no backend, network error), becomes a CEL
error value whose message names the call and carries Kyverno's wording, for
instance ``resource.Get("v1", "configmaps", "default", "cm"): failed to get
resource: configmaps "cm" not found``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from vpol.cel import backend
from vpol.cel.libraries.kyverno.declarations import KyvernoFunctionError


def _show(arg: Any) -> str:
    if isinstance(arg, str):
        return json.dumps(arg)
    if isinstance(arg, dict):
        return "{...}"
    if isinstance(arg, list):
        return "[...]"
    return repr(arg)


def describe(function: str, *args: Any) -> str:
    """``function(arg, ...)`` as it would be written in an expression."""
    return f"{function}({', '.join(_show(a) for a in args)})"


def call(description: str, failure: str, request: Callable[[backend.Backend], Any]) -> Any:
    """Run ``request`` against the current backend; wrap its failure in a CEL error."""
    try:
        return request(backend.current())
    except Exception as exc:  # any backend failure is reported, never raised out of eval
        reason = str(exc) or type(exc).__name__
        raise KyvernoFunctionError(f"{description}: {failure}: {reason}") from exc

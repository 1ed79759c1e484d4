"""The Kyverno libraries' rules for turning overloads into declarations.

Every Kyverno function is described as an :class:`Fn` (one overload) and
:func:`build` groups them with :mod:`vpol.cel.declare`: one ``FunctionDecl``
per name, every overload declared for type checking, and per distinct kind
signature a single registered implementation that picks the right overload
in Python by looking at the actual arguments. That is how member functions
of the same name on different message receivers coexist, for instance
``http.Get(url)`` and ``globalContext.Get(name)``.

What is particular to these libraries: every implementation's result is
checked and copied with :func:`vpol.cel.declare.guard_result`, whatever it
raises becomes a CEL error value (a missing key worded like CEL's ``no such
key``), every group tests its arguments, a carrier keeps its own result type,
and an :class:`Fn` is written result type first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from cel_expr_python import cel

from vpol.cel import declare

# Names other code imports from here (unchanged since before vpol.cel.declare).
from vpol.cel.declare import INT, STRING, message

__all__ = ["INT", "KYVERNO", "STRING", "Fn", "KyvernoFunctionError", "build", "message"]


class KyvernoFunctionError(RuntimeError):
    """Raised by implementations; cel-expr-python turns it into an error value."""


KYVERNO = declare.Conventions(
    error=KyvernoFunctionError,
    prefix="kyverno",
    no_overload=lambda name: f"no matching overload for '{name}'",
    result=declare.guard_result,
    describe=declare.cel_message_of,
    test_lone_overload=True,
    dyn_mixed_results=True,  # http.Post and resource.Post share runtime kinds but not results
)


class Fn(declare.Fn):
    """One overload of a Kyverno function, written ``(library, name, id, result, params, impl)``."""

    def __init__(
        self,
        library: str,
        name: str,
        overload_id: str,
        result: cel.Type,
        params: tuple[declare.Param, ...],
        impl: Callable[..., Any],
        member: bool = False,
    ) -> None:
        super().__init__(library, name, overload_id, params, result, impl, member)


def build(fns: Iterable[declare.Fn], extended: frozenset[str] = frozenset()) -> declare.Declarations:
    """Declarations per library, one ``FunctionDecl`` per function name; those named in ``extended``
    (functions the environment already has) apart, for a ``CelExtension``.

    A name used by several libraries (``Get``) is declared once, in the first
    library that uses it.
    """
    return declare.run_declarations(fns, KYVERNO, extend=lambda name, _fns: name in extended)

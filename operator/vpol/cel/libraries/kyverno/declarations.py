"""Turning Kyverno function signatures into cel-expr-python declarations.

cel-expr-python checks types against the declared parameter types, but its
runtime picks an implementation by the *kind* of each argument only (string,
int, map, list, message, ...). Two overloads whose parameters have the same
kinds, for instance ``http.Get(url)`` and ``globalContext.Get(name)`` whose
receivers are both messages, cannot both be registered with an
implementation ("already registered"). And a function name may be declared
once per environment.

So every Kyverno function is described here as an :class:`Fn` (one overload),
and :func:`build` groups them: one ``FunctionDecl`` per name, every overload
declared for type checking, and per distinct kind signature a single
registered implementation that picks the right overload in Python by looking
at the actual arguments (message type, map, list...).

Every implementation is wrapped so that what it returns is a value CEL
accepts (see :mod:`.values`) and whatever it raises becomes a CEL error value
with a readable message, never an exception out of ``eval``.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel
from google.protobuf.message import Message

from vpol.cel.libraries.kyverno import values

T = cel.Type


class KyvernoFunctionError(RuntimeError):
    """Raised by implementations; cel-expr-python turns it into an error value."""


@dataclass(frozen=True)
class Param:
    """One declared parameter: its CEL type, its runtime kind and a Python test."""

    type: cel.Type
    kind: str
    accepts: Callable[[Any], bool]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


STRING = Param(T.STRING, "string", lambda v: isinstance(v, str))
INT = Param(T.INT, "int", _is_int)
UINT = Param(T.UINT, "uint", _is_int)
DOUBLE = Param(T.DOUBLE, "double", lambda v: isinstance(v, float))
BOOL = Param(T.BOOL, "bool", lambda v: isinstance(v, bool))
BYTES = Param(T.BYTES, "bytes", lambda v: isinstance(v, bytes | bytearray))
NULL = Param(T.NULL, "null", lambda v: v is None)
TIMESTAMP = Param(T.TIMESTAMP, "timestamp", lambda v: isinstance(v, datetime.datetime))
DURATION = Param(T.DURATION, "duration", lambda v: isinstance(v, datetime.timedelta))
LIST = Param(T.List(T.DYN), "list", lambda v: isinstance(v, list))
STRING_LIST = Param(T.List(T.STRING), "list", lambda v: isinstance(v, list))
MAP = Param(T.Map(T.DYN, T.DYN), "map", lambda v: isinstance(v, dict))
STRING_MAP = Param(T.Map(T.STRING, T.DYN), "map", lambda v: isinstance(v, dict))
STRING_STRING_MAP = Param(T.Map(T.STRING, T.STRING), "map", lambda v: isinstance(v, dict))

#: One parameter per runtime kind, for Kyverno parameters typed ``dyn``/``any``
#: (a ``dyn`` parameter does not dispatch at runtime in cel-expr-python).
ANY_VALUE: tuple[Param, ...] = (MAP, LIST, STRING, INT, UINT, DOUBLE, BOOL, NULL, BYTES, TIMESTAMP, DURATION)
#: The kinds a JSON document can hold (request bodies).
JSON_VALUE: tuple[Param, ...] = (MAP, LIST, STRING, INT, UINT, DOUBLE, BOOL, NULL)


def message(cel_type: cel.Type, cls: type[Message]) -> Param:
    """A parameter of an opaque message type (receivers, Image, GVR...)."""
    full_name = cls.DESCRIPTOR.full_name
    return Param(
        cel_type,
        "message",
        lambda v: isinstance(v, Message) and v.DESCRIPTOR.full_name == full_name,
    )


@dataclass(frozen=True)
class Fn:
    """One overload of a Kyverno function."""

    library: str
    name: str
    overload_id: str
    result: cel.Type
    params: tuple[Param, ...]
    impl: Callable[..., Any]
    member: bool = False


def _message_of(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return f"no such key: {exc.args[0]}"
    text = str(exc)
    return text or type(exc).__name__


def _guarded(fns: Sequence[Fn]) -> Callable[..., Any]:
    """The single runtime implementation serving ``fns`` (same kinds)."""
    name = fns[0].name

    def call(*args: Any) -> Any:
        for fn in fns:
            if len(fn.params) == len(args) and all(p.accepts(a) for p, a in zip(fn.params, args)):
                break
        else:
            raise KyvernoFunctionError(f"no matching overload for '{name}'")
        try:
            return values.to_cel(fn.impl(*args))
        except KyvernoFunctionError:
            raise
        except Exception as exc:  # any failure of an implementation is a CEL error
            raise KyvernoFunctionError(_message_of(exc)) from exc

    call.__name__ = f"kyverno_{name.replace('.', '_')}"
    return call


def build(fns: Iterable[Fn]) -> dict[str, list[cel.FunctionDecl]]:
    """Declarations per library, one ``FunctionDecl`` per function name.

    A name used by several libraries (``Get``) is declared once, in the first
    library that uses it.
    """
    by_name: dict[str, list[Fn]] = {}
    seen_ids: set[str] = set()
    for fn in fns:
        if fn.overload_id in seen_ids:
            raise ValueError(f"duplicate overload id {fn.overload_id}")
        seen_ids.add(fn.overload_id)
        by_name.setdefault(fn.name, []).append(fn)
    out: dict[str, list[cel.FunctionDecl]] = {}
    for name, group in by_name.items():
        by_kinds: dict[tuple[bool, tuple[str, ...]], list[Fn]] = {}
        for fn in group:
            by_kinds.setdefault((fn.member, tuple(p.kind for p in fn.params)), []).append(fn)
        overloads: list[cel.Overload] = []
        for same_kinds in by_kinds.values():
            impl = _guarded(same_kinds)
            for i, fn in enumerate(same_kinds):
                params = [p.type for p in fn.params]
                if i == 0:
                    overloads.append(cel.Overload(fn.overload_id, fn.result, params, is_member=fn.member, impl=impl))
                else:
                    # Declared for type checking; the first overload's
                    # implementation dispatches to it at runtime.
                    overloads.append(cel.Overload(fn.overload_id, fn.result, params, is_member=fn.member))
        out.setdefault(group[0].library, []).append(cel.FunctionDecl(name, overloads))
    return out

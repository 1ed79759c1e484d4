"""Declaring Python-implemented CEL functions for cel-expr-python.

The Kubernetes and the Kyverno libraries both describe their functions as
one :class:`Fn` per overload (name, exact parameter and result types, a
Python implementation) and turn those into ``cel.FunctionDecl`` values with
the builders here. The builders exist because cel-expr-python 0.1.3 imposes
rules cel-go does not (all measured here):

* Its runtime picks an implementation by the *kind* of each argument only
  (int, string, list, map, message, ...). Two overloads with the same kinds,
  such as ``isLessThan(Quantity, Quantity)`` and ``isLessThan(Semver,
  Semver)`` (both messages) or ``http.Get(url)`` and ``globalContext.Get(name)``
  (both message receivers), cannot both carry an implementation ("already
  registered"). A declaration may however carry *no* implementation: it then
  only serves type checking and the one implementation registered for those
  kinds serves it at runtime. So per group of same-kind overloads one
  overload (the *carrier*) gets a :func:`dispatcher` that picks the right
  overload in Python from the actual arguments (:attr:`Param.accepts`).
* The Python value an implementation returns is converted according to the
  declared result type of the overload that carries it.
* A ``dyn`` parameter does not dispatch at runtime when declared through
  ``NewEnv(functions=...)``: declare one overload per concrete kind
  (:data:`ANY_VALUE`, :data:`JSON_VALUE`) or, as the Kubernetes libraries do
  for a few functions, route the function through a ``cel.CelExtension``
  (see ``run_declarations(extend=...)``).
* A value cel-expr-python cannot represent (an int beyond 64 bits, an
  arbitrary object) makes ``eval`` itself raise instead of yielding an error
  value; :func:`guard_result` turns such results into ordinary errors.

The two library families were written apart and differ in small, observable
ways (how a lone overload tests its arguments, error wording, result
guarding, the declared type of a carrier). Each keeps its own behaviour
through a :class:`Conventions` value; the library-specific rules on top
(Kubernetes' extension route, Kyverno's argument order) live in
``vpol.cel.libraries.kubernetes.overloads`` and
``vpol.cel.libraries.kyverno.declarations``.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cel_expr_python import cel
from google.protobuf.message import Message

T = cel.Type


# --- parameters -------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """A declared parameter: CEL type, runtime kind, and a test on Python values.

    ``kind`` is what cel-expr-python dispatches on; ``accepts`` tells the
    overloads of one kind apart in Python (see :func:`dispatcher`).
    """

    type: cel.Type
    kind: str
    accepts: Callable[[Any], bool]

    def lenient(self) -> Param:
        """The same parameter, accepting any Python value at dispatch."""
        return dataclasses.replace(self, accepts=accept_any)


def is_int(value: Any) -> bool:
    """A CEL int or uint as cel-expr-python passes it (a Python int, never a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def accept_any(_: Any) -> bool:
    """The dispatch test of a parameter that takes every value."""
    return True


STRING = Param(T.STRING, "string", lambda v: isinstance(v, str))
INT = Param(T.INT, "int", is_int)
UINT = Param(T.UINT, "uint", is_int)
DOUBLE = Param(T.DOUBLE, "double", lambda v: isinstance(v, float))
BOOL = Param(T.BOOL, "bool", lambda v: isinstance(v, bool))
BYTES = Param(T.BYTES, "bytes", lambda v: isinstance(v, bytes | bytearray))
NULL = Param(T.NULL, "null", lambda v: v is None)
TIMESTAMP = Param(T.TIMESTAMP, "timestamp", lambda v: isinstance(v, datetime.datetime))
DURATION = Param(T.DURATION, "duration", lambda v: isinstance(v, datetime.timedelta))
#: Only dispatches through a ``cel.CelExtension`` (see the module docstring).
DYN = Param(T.DYN, "dyn", accept_any)


def list_of(element: cel.Type) -> Param:
    """A list parameter; the element type only matters to type checking."""
    return Param(T.List(element), "list", lambda v: isinstance(v, list))


def map_of(key: cel.Type, value: cel.Type) -> Param:
    """A map parameter; key and value types only matter to type checking."""
    return Param(T.Map(key, value), "map", lambda v: isinstance(v, dict))


LIST = list_of(T.DYN)
STRING_LIST = list_of(T.STRING)
MAP = map_of(T.DYN, T.DYN)
STRING_MAP = map_of(T.STRING, T.DYN)
STRING_STRING_MAP = map_of(T.STRING, T.STRING)

#: One parameter per runtime kind, standing for a parameter typed ``dyn``.
ANY_VALUE: tuple[Param, ...] = (MAP, LIST, STRING, INT, UINT, DOUBLE, BOOL, NULL, BYTES, TIMESTAMP, DURATION)
#: The kinds a JSON document can hold (request bodies).
JSON_VALUE: tuple[Param, ...] = (MAP, LIST, STRING, INT, UINT, DOUBLE, BOOL, NULL)


def message(cel_type: cel.Type, cls: type[Message], *, match: Literal["full_name", "class"] = "full_name") -> Param:
    """A parameter of one of our opaque message types (Quantity, Image, receivers...).

    ``match="full_name"`` accepts any message whose descriptor has the full
    name of ``cls``; ``match="class"`` accepts instances of ``cls`` only.
    """
    if match == "class":
        return Param(cel_type, "message", lambda v: isinstance(v, cls))
    full_name = cls.DESCRIPTOR.full_name
    return Param(cel_type, "message", lambda v: isinstance(v, Message) and v.DESCRIPTOR.full_name == full_name)


# --- overloads ----------------------------------------------------------------


@dataclass(frozen=True)
class Fn:
    """One overload of a library function, with its exact CEL signature."""

    library: str
    name: str
    overload_id: str
    params: tuple[Param, ...]
    result: cel.Type
    impl: Callable[..., Any]
    member: bool = False
    #: "both", or "run"/"check" for declarations that only make sense in
    #: the evaluating environment or in a check-only environment.
    env: Literal["both", "run", "check"] = "both"
    #: Within a group of same-kind overloads, the one whose declaration
    #: carries the dispatcher (else the first of the group carries it).
    carrier: bool = False

    @property
    def kinds(self) -> tuple[bool, tuple[str, ...]]:
        """What cel-expr-python's runtime tells overloads apart by."""
        return self.member, tuple(p.kind for p in self.params)


# --- results and errors ---------------------------------------------------------

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


class Checked:
    """A result its implementation has already made of types CEL accepts (with :func:`guard_result`, once, for
    data it serves again and again): :func:`guard_result` passes it on without walking it a second time."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def guard_result(value: Any) -> Any:
    """A copy of ``value`` made of types CEL accepts; raises ValueError otherwise."""
    if type(value) is Checked:
        return value.value
    if value is None or isinstance(value, bool | str | float):
        return value
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"integer {value} does not fit in 64 bits")
        return value
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str | int | bool):
                raise ValueError(f"unsupported map key type {type(key).__name__}")
            out[guard_result(key)] = guard_result(item)
        return out
    if isinstance(value, list | tuple):
        return [guard_result(item) for item in value]
    if isinstance(value, bytes | bytearray):
        # cel-expr-python 0.1.3 reads Python bytes as a C string (cut at the first NUL byte); a bytearray
        # reaches CEL whole.
        return bytearray(value)
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
    if isinstance(value, datetime.timedelta | Message):
        return value
    raise ValueError(f"unsupported value type {type(value).__name__}")


def unguarded(value: Any) -> Any:
    """A result handed to cel-expr-python as the implementation returned it."""
    return value


def message_of(exc: BaseException) -> str:
    """The text of an error value raised from ``exc``."""
    text = str(exc)
    return text or type(exc).__name__


def cel_message_of(exc: BaseException) -> str:
    """Like :func:`message_of`, with a missing map key worded as CEL does."""
    if isinstance(exc, KeyError) and exc.args:
        return f"no such key: {exc.args[0]}"
    return message_of(exc)


@dataclass(frozen=True)
class Conventions:
    """How one family of libraries turns its implementations into CEL functions."""

    #: Raised for invalid input; cel-expr-python turns it into an error value.
    #: Raised as is; any other exception is re-raised as this class.
    error: type[Exception]
    #: Prefix of the dispatchers' Python names (seen in cel-expr-python errors).
    prefix: str
    #: The error text when no overload of a group accepts the arguments
    #: (given the function name).
    no_overload: Callable[[str], str]
    #: Applied to every result (inside the error handling).
    result: Callable[[Any], Any] = unguarded
    #: The error text of an exception raised by an implementation.
    describe: Callable[[BaseException], str] = message_of
    #: Whether a group with a single overload tests its arguments too (else
    #: the implementation receives whatever the runtime matched by kind).
    test_lone_overload: bool = True
    #: Whether the carrier of a group whose result types differ is declared
    #: ``dyn`` (else it keeps its own result type, which every overload of
    #: the group must then return).
    dyn_mixed_results: bool = True


def dispatcher(fns: Sequence[Fn], conventions: Conventions) -> Callable[..., Any]:
    """The single runtime implementation serving ``fns`` (same name, same kinds)."""
    error, describe, result = conventions.error, conventions.describe, conventions.result
    test = conventions.test_lone_overload or len(fns) > 1
    no_overload = conventions.no_overload(fns[0].name)

    def call(*args: Any) -> Any:
        fn = fns[0]
        if test:
            # The arity test never fails for overloads of one kind group (same
            # arity); it only guards callers that pass fewer arguments.
            for fn in fns:
                if len(fn.params) == len(args) and all(p.accepts(a) for p, a in zip(fn.params, args)):
                    break
            else:
                raise error(no_overload)
        try:
            return result(fn.impl(*args))
        except error:
            raise
        except Exception as exc:  # an implementation failing is a CEL error
            raise error(describe(exc)) from exc

    call.__name__ = call.__qualname__ = f"{conventions.prefix}_{fns[0].name.replace('.', '_')}"
    return call


# --- builders -------------------------------------------------------------------


def _carrier_first(group: list[Fn]) -> list[Fn]:
    carriers = [fn for fn in group if fn.carrier]
    if len(carriers) > 1:
        raise ValueError(f"several carriers for {group[0].name}")
    return carriers + [fn for fn in group if not fn.carrier]


def _groups(fns: Iterable[Fn]) -> dict[str, dict[tuple[bool, tuple[str, ...]], list[Fn]]]:
    """Overloads by function name, then by kinds, carrier first; overload ids checked unique."""
    by_name: dict[str, dict[tuple[bool, tuple[str, ...]], list[Fn]]] = {}
    seen: set[str] = set()
    for fn in fns:
        if fn.overload_id in seen:
            raise ValueError(f"duplicate overload id {fn.overload_id}")
        seen.add(fn.overload_id)
        by_name.setdefault(fn.name, {}).setdefault(fn.kinds, []).append(fn)
    return {name: {kinds: _carrier_first(group) for kinds, group in groups.items()} for name, groups in by_name.items()}


def _overload(fn: Fn, result: cel.Type | None = None, impl: Callable[..., Any] | None = None) -> cel.Overload:
    params = [p.type for p in fn.params]
    if impl is None:
        return cel.Overload(fn.overload_id, fn.result if result is None else result, params, is_member=fn.member)
    return cel.Overload(fn.overload_id, fn.result if result is None else result, params, is_member=fn.member, impl=impl)


def _carrier_result(group: Sequence[Fn], conventions: Conventions) -> cel.Type:
    first = group[0].result
    if not conventions.dyn_mixed_results or all(fn.result == first for fn in group):
        return first
    return T.DYN


def never(_name: str, _fns: Sequence[Fn]) -> bool:
    """No function goes through a ``cel.CelExtension``."""
    return False


@dataclass
class Declarations:
    """Declarations for an evaluating environment."""

    #: library name -> declarations to pass through ``NewEnv(functions=)``;
    #: a function name used by several libraries is declared once, in the
    #: first library that uses it.
    by_library: dict[str, list[cel.FunctionDecl]] = field(default_factory=dict)
    #: Declarations for a ``cel.CelExtension`` (see ``extend``).
    extended: list[cel.FunctionDecl] = field(default_factory=list)


def run_declarations(
    fns: Iterable[Fn], conventions: Conventions, *, extend: Callable[[str, Sequence[Fn]], bool] = never
) -> Declarations:
    """One ``FunctionDecl`` per function name, with one dispatcher per kind group.

    Every overload is declared for type checking; the carrier of each group
    has the dispatcher. Functions for which ``extend(name, overloads)`` is
    true go to :attr:`Declarations.extended` instead, where every declaration
    is registered at runtime: there each group is a single overload, its
    carrier's.
    """
    out = Declarations()
    run = [fn for fn in fns if fn.env in ("both", "run")]
    first_library: dict[str, str] = {}
    for fn in run:
        first_library.setdefault(fn.name, fn.library)
    for name, groups in _groups(run).items():
        extended = extend(name, [fn for group in groups.values() for fn in group])
        overloads: list[cel.Overload] = []
        for group in groups.values():
            overloads.append(
                _overload(group[0], _carrier_result(group, conventions), dispatcher(group, conventions))
            )
            if not extended:
                # Declared for type checking; the carrier dispatches to them.
                overloads.extend(_overload(fn) for fn in group[1:])
        decl = cel.FunctionDecl(name, overloads)
        if extended:
            out.extended.append(decl)
        else:
            out.by_library.setdefault(first_library[name], []).append(decl)
    return out


def check_declarations(fns: Iterable[Fn]) -> list[cel.FunctionDecl]:
    """Exact declarations (no implementations) for an environment that never evaluates."""
    by_name: dict[str, list[Fn]] = {}
    for fn in fns:
        if fn.env in ("both", "check"):
            by_name.setdefault(fn.name, []).append(fn)
    return [cel.FunctionDecl(name, [_overload(fn) for fn in group]) for name, group in by_name.items()]

"""Turning the Kubernetes library functions into cel-expr-python declarations.

Every function of the Kubernetes libraries is described as one :class:`Fn`
per overload, with the exact Kubernetes signature. This module builds three
kinds of declarations out of them, because cel-expr-python 0.1.3 imposes
rules that cel-go does not (all measured here):

* Its runtime picks an implementation by the *kind* of each argument only
  (int, string, list, map, message, ...). Two overloads with the same kinds,
  such as ``isLessThan(Quantity, Quantity)`` and ``isLessThan(Semver,
  Semver)`` (both messages) or ``sum(list(int))`` and ``sum(list(double))``
  (both lists), cannot both carry an implementation. Declarations passed
  through ``NewEnv(functions=...)`` may however carry *no* implementation:
  they then only serve type checking and the one implementation registered
  for those kinds serves them at runtime. So per kind group we register one
  *dispatcher* that picks the right overload in Python by looking at the
  actual arguments (message type), and declare the others without one.
* The Python value an implementation returns is converted according to the
  declared result type of the overload that carries it, so a carrier shared
  by overloads with different result types is declared with a ``dyn`` result.
* A function that already exists in the environment (the builtin
  ``string``, ``indexOf``/``lastIndexOf`` of the strings extension,
  ``hasValue``/``value`` of the optional extension) cannot be
  declared again through ``functions=`` ("declared multiple times"), but it
  can be extended through a ``cel.CelExtension``. Declarations there are all
  registered at runtime, so each kind group is collapsed into a single
  overload (see :data:`EXTENDED_NAMES`).
* A ``dyn`` parameter declared through ``functions=`` never matches at
  runtime ("No matching overloads found"); declared in a CelExtension it
  matches any kind. So functions with a ``dyn`` parameter (``includes``)
  go through the extension as well.
* Finally, :func:`check_extension` gives the exact Kubernetes declarations
  (optional results, ``string(CIDR)``...) for an environment that is only
  used for type checking and never evaluates: there, same-kind overloads do
  not matter.

Implementations raise :class:`KubernetesLibraryError` (or anything else,
which is converted) for invalid input; cel-expr-python turns that into a CEL
error value, so nothing escapes ``eval``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel
from google.protobuf.message import Message

T = cel.Type

#: Functions that exist before our libraries are added: they can only be
#: extended through a CelExtension, never declared through ``functions=``.
EXTENDED_NAMES = frozenset({"string", "indexOf", "lastIndexOf", "hasValue", "value"})


class KubernetesLibraryError(RuntimeError):
    """An invalid argument or result; becomes a CEL error value."""


@dataclass(frozen=True)
class Param:
    """A declared parameter: CEL type, runtime kind, and a test on Python values."""

    type: cel.Type
    kind: str
    accepts: Callable[[Any], bool]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _any(_: Any) -> bool:
    return True


STRING = Param(T.STRING, "string", lambda v: isinstance(v, str))
INT = Param(T.INT, "int", _is_int)
UINT = Param(T.UINT, "uint", _is_int)
DOUBLE = Param(T.DOUBLE, "double", lambda v: isinstance(v, float))
BOOL = Param(T.BOOL, "bool", lambda v: isinstance(v, bool))
BYTES = Param(T.BYTES, "bytes", lambda v: isinstance(v, (bytes, bytearray)))
DURATION = Param(T.DURATION, "duration", _any)
TIMESTAMP = Param(T.TIMESTAMP, "timestamp", _any)
DYN = Param(T.DYN, "dyn", _any)


def list_of(element: cel.Type) -> Param:
    return Param(T.List(element), "list", lambda v: isinstance(v, list))


def map_of(key: cel.Type, value: cel.Type) -> Param:
    return Param(T.Map(key, value), "map", lambda v: isinstance(v, dict))


def message(cel_type: cel.Type, cls: type[Message]) -> Param:
    """A parameter of one of our opaque message types."""
    return Param(cel_type, "message", lambda v: isinstance(v, cls))


@dataclass(frozen=True)
class Fn:
    """One overload of a Kubernetes library function."""

    library: str
    name: str
    overload_id: str
    params: tuple[Param, ...]
    result: cel.Type
    impl: Callable[..., Any]
    member: bool = False
    #: "both", or "run"/"check" for declarations that only make sense in
    #: the evaluating environment (optional emulation) or in a check-only
    #: environment (exact optional results, same-kind builtin extensions).
    env: str = "both"
    #: Within a group of same-kind overloads, the one whose declaration
    #: carries the dispatcher (the others are declared for checking only).
    carrier: bool = False

    @property
    def kinds(self) -> tuple[bool, tuple[str, ...]]:
        return self.member, tuple(p.kind for p in self.params)


def _message_of(exc: BaseException) -> str:
    text = str(exc)
    return text or type(exc).__name__


def _dispatcher(fns: Sequence[Fn]) -> Callable[..., Any]:
    """The single runtime implementation for overloads sharing kinds."""
    if len(fns) == 1:
        only = fns[0].impl

        def call_one(*args: Any) -> Any:
            try:
                return only(*args)
            except KubernetesLibraryError:
                raise
            except Exception as exc:  # an implementation failing is a CEL error
                raise KubernetesLibraryError(_message_of(exc)) from exc

        call_one.__name__ = f"k8s_{fns[0].overload_id}"
        return call_one

    def call(*args: Any) -> Any:
        for fn in fns:
            if all(p.accepts(a) for p, a in zip(fn.params, args)):
                break
        else:
            raise KubernetesLibraryError("no such overload")
        try:
            return fn.impl(*args)
        except KubernetesLibraryError:
            raise
        except Exception as exc:  # an implementation failing is a CEL error
            raise KubernetesLibraryError(_message_of(exc)) from exc

    call.__name__ = f"k8s_{fns[0].name.replace('.', '_')}"
    return call


def _groups(fns: Iterable[Fn]) -> dict[str, dict[tuple[bool, tuple[str, ...]], list[Fn]]]:
    by_name: dict[str, dict[tuple[bool, tuple[str, ...]], list[Fn]]] = {}
    seen: set[str] = set()
    for fn in fns:
        if fn.overload_id in seen:
            raise ValueError(f"duplicate overload id {fn.overload_id}")
        seen.add(fn.overload_id)
        by_name.setdefault(fn.name, {}).setdefault(fn.kinds, []).append(fn)
    return by_name


def _carrier_first(group: list[Fn]) -> list[Fn]:
    carriers = [fn for fn in group if fn.carrier]
    if len(carriers) > 1:
        raise ValueError(f"several carriers for {group[0].name}")
    return carriers + [fn for fn in group if not fn.carrier]


def _result(group: Sequence[Fn]) -> cel.Type:
    first = group[0].result
    return first if all(fn.result == first for fn in group) else T.DYN


@dataclass
class RunDeclarations:
    """Declarations for the evaluating environment."""

    #: library name -> declarations to pass through ``NewEnv(functions=)``.
    by_library: dict[str, list[cel.FunctionDecl]] = field(default_factory=dict)
    #: Declarations extending existing functions, for a ``CelExtension``.
    extended: list[cel.FunctionDecl] = field(default_factory=list)


def run_declarations(fns: Iterable[Fn]) -> RunDeclarations:
    out = RunDeclarations()
    for name, groups in _groups(fn for fn in fns if fn.env in ("both", "run")).items():
        overloads: list[cel.Overload] = []
        library = next(iter(groups.values()))[0].library
        extended = name in EXTENDED_NAMES or any(
            p.kind == "dyn" for group in groups.values() for fn in group for p in fn.params
        )
        for group in groups.values():
            group = _carrier_first(group)
            impl = _dispatcher(group)
            head = group[0]
            if extended:
                # Every declaration in an extension is registered at runtime:
                # one overload per kind group, typed by its carrier.
                overloads.append(
                    cel.Overload(
                        head.overload_id, _result(group), [p.type for p in head.params], is_member=head.member, impl=impl
                    )
                )
                continue
            overloads.append(
                cel.Overload(
                    head.overload_id, _result(group), [p.type for p in head.params], is_member=head.member, impl=impl
                )
            )
            for fn in group[1:]:
                overloads.append(
                    cel.Overload(fn.overload_id, fn.result, [p.type for p in fn.params], is_member=fn.member)
                )
        decl = cel.FunctionDecl(name, overloads)
        if extended:
            out.extended.append(decl)
        else:
            out.by_library.setdefault(library, []).append(decl)
    return out


def check_declarations(fns: Iterable[Fn]) -> list[cel.FunctionDecl]:
    """Exact declarations (no implementations) for a check-only environment."""
    out: list[cel.FunctionDecl] = []
    by_name: dict[str, list[Fn]] = {}
    for fn in fns:
        if fn.env in ("both", "check"):
            by_name.setdefault(fn.name, []).append(fn)
    for name, group in by_name.items():
        out.append(
            cel.FunctionDecl(
                name,
                [cel.Overload(fn.overload_id, fn.result, [p.type for p in fn.params], is_member=fn.member) for fn in group],
            )
        )
    return out

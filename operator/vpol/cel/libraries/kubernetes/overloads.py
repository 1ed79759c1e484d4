"""The Kubernetes libraries' rules for turning overloads into declarations.

Every function of the Kubernetes libraries is one :class:`vpol.cel.declare.Fn`
per overload, with the exact Kubernetes signature; :mod:`vpol.cel.declare`
explains the general scheme (one dispatcher per group of same-kind
overloads). What is particular to these libraries (all measured with
cel-expr-python 0.1.3):

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
* A carrier shared by overloads with different result types is declared
  with a ``dyn`` result; a group with a single overload does not test its
  arguments (``string(ip)``'s implementation also serves CIDRs, see the
  package docstring); results are handed over unguarded.
* Finally, :func:`check_declarations` gives the exact Kubernetes declarations
  (optional results, ``string(CIDR)``...) for an environment that is only
  used for type checking and never evaluates: there, same-kind overloads do
  not matter.

Implementations raise :class:`KubernetesLibraryError` (or anything else,
which is converted) for invalid input; cel-expr-python turns that into a CEL
error value, so nothing escapes ``eval``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cel_expr_python import cel
from google.protobuf.message import Message

from vpol.cel import declare

# Names other code imports from here (unchanged since before vpol.cel.declare).
from vpol.cel.declare import STRING, Declarations, Fn, check_declarations

__all__ = [
    "DURATION",
    "EXTENDED_NAMES",
    "KUBERNETES",
    "STRING",
    "TIMESTAMP",
    "Fn",
    "KubernetesLibraryError",
    "RunDeclarations",
    "check_declarations",
    "message",
    "run_declarations",
]

#: Functions that exist before our libraries are added: they can only be
#: extended through a CelExtension, never declared through ``functions=``.
EXTENDED_NAMES = frozenset({"string", "indexOf", "lastIndexOf", "hasValue", "value"})


class KubernetesLibraryError(RuntimeError):
    """An invalid argument or result; becomes a CEL error value."""


KUBERNETES = declare.Conventions(
    error=KubernetesLibraryError,
    prefix="k8s",
    no_overload=lambda _name: "no such overload",
    test_lone_overload=False,
    dyn_mixed_results=True,
)

#: Duration and timestamp parameters of these libraries accept any value at
#: dispatch (they have only typed list elements so far, never told
#: overloads apart).
DURATION = declare.DURATION.lenient()
TIMESTAMP = declare.TIMESTAMP.lenient()


def message(cel_type: cel.Type, cls: type[Message]) -> declare.Param:
    """A parameter of one of our opaque message types: instances of ``cls``."""
    return declare.message(cel_type, cls, match="class")


#: Declarations for the evaluating environment: ``by_library`` for
#: ``NewEnv(functions=)``, ``extended`` for a ``CelExtension``.
RunDeclarations = Declarations


def _extended(name: str, fns: Sequence[Fn]) -> bool:
    return name in EXTENDED_NAMES or any(p.kind == "dyn" for fn in fns for p in fn.params)


def run_declarations(fns: Iterable[Fn]) -> RunDeclarations:
    """Declarations for the evaluating environment."""
    return declare.run_declarations(fns, KUBERNETES, extend=_extended)

"""The Kubernetes CEL libraries, as the kube-apiserver has them (Kubernetes 1.37).

Implemented with the semantics and error messages of
k8s.io/apiserver/pkg/cel/library and the packages it relies on (checked
against the real Kubernetes 1.37 CEL environment, see
tests/unit/cel/kubernetes/oracle):

* lists (:mod:`.lists`): ``isSorted()``, ``sum()``, ``min()``, ``max()``,
  ``indexOf(x)``, ``lastIndexOf(x)``, ``includes(x)`` (new in 1.37).
* regex (:mod:`.regex`): ``find(re)``, ``findAll(re)``, ``findAll(re, n)``, RE2.
* URLs (:mod:`.urls`, Go's net/url in :mod:`.gourl`): ``url()``, ``isURL()``,
  ``getScheme/getHost/getHostname/getPort/getEscapedPath/getQuery()``.
* quantity (:mod:`.quantity`): ``quantity()``, ``isQuantity()``, ``sign(q)``,
  ``isInteger/asInteger/asApproximateFloat()``, ``add/sub(q or int)``,
  ``isLessThan/isGreaterThan/compareTo()``; exact decimal arithmetic.
* IP and CIDR (:mod:`.network`): ``ip()``, ``isIP()``, ``ip.isCanonical()``,
  ``family()``, ``isUnspecified/isLoopback/isLinkLocalMulticast/
  isLinkLocalUnicast/isGlobalUnicast()``, ``string(ip)``; ``cidr()``,
  ``isCIDR()``, ``containsIP(ip or string)``, ``containsCIDR(cidr or
  string)``, ``ip()``, ``prefixLength()``, ``masked()``, ``string(cidr)``.
* format (:mod:`.format`, validations in :mod:`.names`): ``format.dns1123Label()``
  and the 12 other named formats, ``format.named(name)``, ``validate(s)``.
* semver (:mod:`.semver`): ``semver(s[, normalize])``, ``isSemver(s[, normalize])``,
  ``major/minor/patch()``, ``isLessThan/isGreaterThan/compareTo()``.
* JSON patch (:mod:`.jsonpatch`): ``jsonpatch.escapeKey(s)``.
* ``transformMap``/``transformMapEntry`` (:mod:`.comprehensions`): the runtime
  function their macros need, missing from cel-expr-python 0.1.3.

The rest of the Kubernetes environment (strings v2, optional types, sets,
two-variable comprehensions, lists v3, ``matches``) comes from the
cel-go-equivalent extensions enabled in ``vpol.cel.environment``. Note that
Kubernetes' environment has no ``cel.bind`` (bindings), ``math.*`` or
``base64.*``.

How to wire them (see :mod:`.overloads` for why there are three parts):

* ``LIBRARIES``: one :class:`Library` per Kubernetes library, declarations
  for ``NewEnv(functions=...)``.
* :func:`extensions`: a ``cel.CelExtension`` with the overloads that extend
  functions the environment already has (``string``, ``indexOf``,
  ``lastIndexOf``, the optional emulation ``hasValue``/``value``,
  ``cel.@mapInsert``) or take ``dyn`` parameters (``includes``); it must be
  passed through ``NewEnv(extensions=...)`` of the evaluating environment,
  or those functions are missing.
* :func:`check_extension`: the exact Kubernetes declarations, without
  implementations, for an environment that only type-checks (never
  evaluates); use it *instead of* the two above there.

Known deviations from Kubernetes (forced by cel-expr-python 0.1.3 unless
said otherwise):

* Optionals: ``format.named()`` and ``validate()`` cannot return optionals;
  they return a Format (empty name = none) and a list of errors (empty =
  valid) with ``hasValue()``/``value()`` emulated (see :mod:`.format`).
  ``orValue()``, ``or()``, ``optMap()`` on them are not available (cel-cpp
  evaluates those only on real optionals), and ``hasValue()``/``value()``
  also accept any ``list(string)`` (an error in Kubernetes).
* ``string(cidr)`` only type-checks in the check-only environment, or when the
  evaluating environment compiles with ``disable_check=True``: a builtin
  like ``string`` can be extended with a single message-typed overload, and
  ``string(ip)`` holds that place (its implementation serves CIDRs too).
* Lists: cel-expr-python passes uint elements as Python ints, so
  ``sum/min/max`` of a ``list(uint)`` return an int (still ``==`` to the
  uint) and overflow at 2^63; the sum of an empty ``list(double)`` or
  ``list(duration)`` is the int ``0`` (Kubernetes: ``0.0``/``0s``); durations
  and timestamps only keep microseconds. ``indexOf``/``lastIndexOf``/
  ``includes`` take ``dyn`` (no type parameters in cel-expr-python), so
  mismatched element types are not compile errors. The uint overloads of
  ``sum/min/max`` type-check as ``dyn``.
* Quantity ``isInteger/asInteger`` look at the value, while Kubernetes looks
  at its internal representation: Kubernetes says ``quantity('1000m')``,
  ``quantity('1.0')``, ``quantity('1.5Gi')``, ``quantity('1Pi')`` or any
  19-digit quantity are not integers (``asInteger`` errors); we convert
  them. Keeping the representation would make ``==`` compare
  representations instead of values (it is a field-wise message
  comparison), and semantic ``==`` matters more. ``asApproximateFloat`` uses
  Kubernetes' arithmetic on the normalized value and can differ by an ulp
  when Kubernetes' representation differs. Kubernetes fails ``==`` between
  two results of ``add``/``sub`` ("no such overload", a Kubernetes bug); we
  compare them. Quantities with more than 4096 digits, or arithmetic
  needing more, are errors (a resource bound; Kubernetes accepts them).
* IP parse error messages carry Python's reason instead of netip's (the
  accepted set and canonical forms are the same).
* Error values carry cel-expr-python's status prefix (``UNKNOWN: ...``).
* Invalid regex patterns are runtime errors (Kubernetes rejects a literal
  bad pattern at compile time).
* ``mul``/``div``/``divInt`` on quantities (newer than 1.37) and the
  authorizer library (not in ValidatingPolicies) are not provided.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from cel_expr_python import cel

from vpol.cel.declare import Fn
from vpol.cel.libraries.kubernetes import format as format_library
from vpol.cel.libraries.kubernetes import comprehensions, jsonpatch, lists, network, quantity, regex, semver, urls
from vpol.cel.libraries.kubernetes.overloads import check_declarations, run_declarations
from vpol.cel.library import Library

#: Function names (and their overloads) that the Kubernetes libraries own.
#: Other libraries must not declare these names: each is one FunctionDecl.
SHARED_NAMES = frozenset(
    {"isLessThan", "isGreaterThan", "compareTo", "add", "sub", "indexOf", "lastIndexOf", "includes", "string",
     "hasValue", "value", "ip", "cel.@mapInsert"}
)

_LIBRARY_ORDER = (
    lists.LIBRARY,
    regex.LIBRARY,
    urls.LIBRARY,
    quantity.LIBRARY,
    network.IP_LIBRARY,
    network.CIDR_LIBRARY,
    format_library.LIBRARY,
    semver.LIBRARY,
    jsonpatch.LIBRARY,
)


@functools.cache
def all_functions() -> tuple[Fn, ...]:
    """Every overload of every Kubernetes library."""
    return (
        *lists.functions(),
        *regex.functions(),
        *urls.functions(),
        *quantity.functions(),
        *network.functions(),
        *format_library.functions(),
        *semver.functions(),
        *comprehensions.functions(),
        *jsonpatch.functions(),
    )


@functools.cache
def _run() -> tuple[dict[str, tuple[cel.FunctionDecl, ...]], tuple[cel.FunctionDecl, ...]]:
    built = run_declarations(all_functions())
    return {name: tuple(decls) for name, decls in built.by_library.items()}, tuple(built.extended)


def _library_functions(name: str) -> Sequence[cel.FunctionDecl]:
    return _run()[0].get(name, ())


def extensions() -> list[cel.CelExtension]:
    """Overloads extending existing functions, for the evaluating environment."""
    return [cel.CelExtension("kubernetes.extended", list(_run()[1]))]


def check_extension() -> cel.CelExtension:
    """Exact Kubernetes declarations for a check-only environment (never evaluate it)."""
    return cel.CelExtension("kubernetes.check", check_declarations(all_functions()))


LIBRARIES: list[Library] = [
    Library(name=name, kubernetes=True, functions=functools.partial(_library_functions, name))
    for name in _LIBRARY_ORDER
]

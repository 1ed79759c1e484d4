"""Kubernetes list library: isSorted, sum, min, max, indexOf, lastIndexOf, includes.

Semantics follow k8s.io/apiserver/pkg/cel/library/lists.go (Kubernetes
1.37, where ``includes`` appeared). With a dynamically typed list, cel-go
picks the overload from the type of the *first* element (an empty list
takes the ``int`` overload), then runs the algorithm with cel-go's
comparisons, which quietly skip pairs that cannot be ordered. We reproduce
that, including its quirks (``[1, 'a'].isSorted()`` on dyn data is true).

cel-expr-python hands us a list of plain Python values and cannot tell a
``list(uint)`` from a ``list(int)`` or an empty ``list(double)`` from an
empty ``list(int)``: see the deviations in the package docstring.
"""

from __future__ import annotations

import datetime
import itertools
from typing import Any

from vpol.cel.declare import BOOL, BYTES, DOUBLE, DYN, INT, STRING, UINT, Fn, Param, T, list_of
from vpol.cel.libraries.kubernetes import comparison
from vpol.cel.libraries.kubernetes.overloads import DURATION, TIMESTAMP, KubernetesLibraryError
from vpol.cel.values import scalar

LIBRARY = "kubernetes.lists"

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: cel-go durations are int64 nanoseconds.
_MAX_DURATION_US = _INT64_MAX // 1000

_COMPARABLE: tuple[tuple[str, Param], ...] = (
    ("int", INT),
    ("uint", UINT),
    ("double", DOUBLE),
    ("bool", BOOL),
    ("duration", DURATION),
    ("timestamp", TIMESTAMP),
    ("string", STRING),
    ("bytes", BYTES),
)
_SUMMABLE: tuple[tuple[str, Param], ...] = (("int", INT), ("uint", UINT), ("double", DOUBLE), ("duration", DURATION))


def _no_overload(function: str) -> KubernetesLibraryError:
    return KubernetesLibraryError(f"no such overload: {function}(list)")


def _check_dispatch(function: str, items: list[Any], summable: bool) -> None:
    """cel-go chooses the overload by the first element; fail like it when none fits."""
    if not items:
        return
    first = items[0]
    if summable:
        ok = isinstance(first, (int, float, datetime.timedelta)) and not isinstance(first, bool)
    else:
        ok = comparison.comparable(first)
    if not ok:
        raise _no_overload(function)


def _cel_value(v: Any) -> Any:
    """A value cel-expr-python accepts from a ``dyn``-typed result."""
    return scalar(v)


def _homogeneous(items: list[Any]) -> type | None:
    """The common type of a list of ints, strings or NaN-free floats (fast paths), else None."""
    if not items:
        return None
    kind = type(items[0])
    if kind not in (int, str, float):
        return None
    for item in items:
        if type(item) is not kind or (kind is float and item != item):
            return None
    return kind


def is_sorted(items: list[Any]) -> bool:
    if _homogeneous(items) is not None:
        return all(a <= b for a, b in zip(items, items[1:]))
    _check_dispatch("isSorted", items, summable=False)
    prev: Any = None
    have_prev = False
    for item in items:
        if not comparison.comparable(item):
            raise KubernetesLibraryError("no such overload")
        if have_prev and comparison.compare(prev, item) == 1:
            return False
        prev, have_prev = item, True
    return True


def _add(acc: Any, item: Any) -> Any:
    """cel-go's Adder for the values a summable list may hold."""
    if isinstance(acc, bool) or isinstance(item, bool):
        raise KubernetesLibraryError("no such overload")
    if isinstance(acc, int) and isinstance(item, int):
        total = acc + item
        if not _INT64_MIN <= total <= _INT64_MAX:
            raise KubernetesLibraryError("integer overflow")
        return total
    if isinstance(acc, float) and isinstance(item, float):
        return acc + item
    if isinstance(acc, datetime.timedelta) and isinstance(item, datetime.timedelta):
        total_td = acc + item
        if abs(total_td // datetime.timedelta(microseconds=1)) > _MAX_DURATION_US:
            raise KubernetesLibraryError("integer overflow")
        return total_td
    if isinstance(acc, datetime.timedelta) and isinstance(item, datetime.datetime):
        return item + acc
    if isinstance(acc, datetime.datetime) and isinstance(item, datetime.timedelta):
        return acc + item
    raise KubernetesLibraryError("no such overload")


def sum_(items: list[Any]) -> Any:
    kind = _homogeneous(items)
    if kind is int:
        partial = list(itertools.accumulate(items))
        if max(partial) > _INT64_MAX or min(partial) < _INT64_MIN:
            raise KubernetesLibraryError("integer overflow")
        return partial[-1]
    if kind is float:
        return _float_sum(items)
    _check_dispatch("sum", items, summable=True)
    first = items[0] if items else 0
    acc: Any
    if isinstance(first, float):
        acc = 0.0
    elif isinstance(first, datetime.timedelta):
        acc = datetime.timedelta(0)
    else:
        acc = 0
    for item in items:
        acc = _add(acc, item)
    return _cel_value(acc)


def _float_sum(items: list[float]) -> float:
    """Left-to-right addition, as cel-go does (Python 3.12's ``sum`` compensates rounding)."""
    total = 0.0
    for item in items:
        total += item
    return total


def _extreme(function: str, items: list[Any], replace_when: int) -> Any:
    if _homogeneous(items) is not None:
        # min/max return the first of equal extremes, as cel-go keeps its first choice
        return min(items) if replace_when == 1 else max(items)
    _check_dispatch(function, items, summable=False)
    result: Any = None
    have = False
    for item in items:
        if not comparison.comparable(item):
            raise KubernetesLibraryError("no such overload")
        if not have:
            result, have = item, True
        elif comparison.compare(result, item) == replace_when:
            result = item
    if not have:
        raise KubernetesLibraryError(f"{function} called on empty list")
    return _cel_value(result)


def min_(items: list[Any]) -> Any:
    return _extreme("min", items, 1)


def max_(items: list[Any]) -> Any:
    return _extreme("max", items, -1)


def index_of(items: list[Any], item: Any) -> int:
    if type(item) is str:
        for i, value in enumerate(items):
            if type(value) is str and value == item:
                return i
        return -1
    for i, value in enumerate(items):
        if comparison.equal(value, item):
            return i
    return -1


def last_index_of(items: list[Any], item: Any) -> int:
    for i in range(len(items) - 1, -1, -1):
        if comparison.equal(items[i], item):
            return i
    return -1


def includes(target: Any, item: Any) -> bool:
    if isinstance(target, list):
        return any(comparison.equal(value, item) for value in target)
    return comparison.equal(target, item)


def functions() -> list[Fn]:
    fns: list[Fn] = []
    for name, param in _COMPARABLE:
        fns.append(
            Fn(LIBRARY, "isSorted", f"list_{name}_is_sorted_bool", (list_of(param.type),), T.BOOL, is_sorted,
               member=True, carrier=name == "int")
        )
    for name, param in _SUMMABLE:
        # The uint overload carries the implementation (declared dyn, see
        # overloads.py), so the common int/double/duration ones stay precise.
        fns.append(
            Fn(LIBRARY, "sum", f"list_{name}_sum_{name}", (list_of(param.type),), param.type, sum_,
               member=True, carrier=name == "uint")
        )
    for function, impl in (("max", max_), ("min", min_)):
        for name, param in _COMPARABLE:
            fns.append(
                Fn(LIBRARY, function, f"list_{name}_{function}_{name}", (list_of(param.type),), param.type, impl,
                   member=True, carrier=name == "uint")
            )
    # Kubernetes declares these with a type parameter (list(A), A); type
    # parameters are not available in cel-expr-python declarations, so they
    # are dyn (which also keeps them usable on schema-typed lists).
    fns.append(Fn(LIBRARY, "indexOf", "list_a_index_of_int", (list_of(T.DYN), DYN), T.INT, index_of, member=True))
    fns.append(
        Fn(LIBRARY, "lastIndexOf", "list_a_last_index_of_int", (list_of(T.DYN), DYN), T.INT, last_index_of,
           member=True)
    )
    fns.append(Fn(LIBRARY, "includes", "list_includes_dyn_dyn", (DYN, DYN), T.BOOL, includes, member=True))
    return fns

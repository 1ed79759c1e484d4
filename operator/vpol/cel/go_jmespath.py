"""JMESPath as Kyverno evaluates it: ``jmespath`` (the reference Python implementation) with Go's numbers.

Kyverno computes GlobalContextEntry projections (and its CLI's mocked entries) with its fork of go-jmespath
(github.com/kyverno/go-jmespath), whose value model is Go's: data decoded from JSON holds every number as a
``float64``, Kubernetes objects (``unstructured``) hold integers as ``int64``, and go-jmespath itself knows
only ``float64`` as a number. Python's ``jmespath`` parses the same language; what differs is how numbers
behave, and that is what this module changes (a Python ``float`` stands for a Go float64, an ``int`` for an
int64):

* literals (`` `2` ``) are floats, as Go decodes them;
* ``==`` and ``!=`` compare as Go's ``reflect.DeepEqual`` (``1`` and ``1.0`` differ, so do ``true`` and ``1``);
* ``<``, ``<=``, ``>``, ``>=`` order two floats, and give null for anything else (an int included);
* a field missing from an object is go-jmespath's ``NotFoundError``: inside projections, filters, function
  arguments, ``||``, ``!`` and pipes it reads as null, but at the top of the expression (``missing``,
  ``a.missing``) it is an error, ``Unknown key "missing" in path``;
* a function taking a number accepts only a float (an int is an invalid type, as in go-jmespath), and the
  functions that return numbers (``length``, ``sum``, ``avg``, ``abs``, ``ceil``, ``floor``, ``to_number``)
  return floats; ``contains`` on an array compares as ``==`` does.

Kyverno's own extra JMESPath functions (``to_upper``, ``regex_match``...) are not provided: an expression
using one fails with an unknown-function error when it is evaluated.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jmespath
from jmespath import functions, visitor
from jmespath.exceptions import JMESPathError

__all__ = ["JMESPathError", "NotFound", "compile_query", "go_json", "go_equal", "search"]


def go_json(value: Any) -> Any:
    """``value`` as Go's ``encoding/json`` decodes it into ``interface{}``: every number a float64."""
    if isinstance(value, bool) or value is None or isinstance(value, str | float):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: go_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [go_json(v) for v in value]
    return value


def go_equal(left: Any, right: Any) -> bool:
    """``reflect.DeepEqual`` on JSON-like values: types must agree (an int64 is not a float64)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(go_equal(v, right[k]) for k, v in left.items())
    if isinstance(left, list):
        return len(left) == len(right) and all(go_equal(a, b) for a, b in zip(left, right))
    return bool(left == right)


_REVERSE_TYPES = dict(functions.REVERSE_TYPES_MAP, number=("float",), expref=("_Expression", "_SoftExpression"))


class _GoFunctions(functions.Functions):
    """The built-in functions with go-jmespath's number model."""

    def _get_allowed_pytypes(self, types: Any) -> tuple[list[Any], list[Any]]:
        allowed: list[Any] = []
        subtypes: list[Any] = []
        for t in types:
            kind, _, sub = t.partition("-")
            if sub:
                subtypes.append(_REVERSE_TYPES[sub])
            allowed.extend(_REVERSE_TYPES[kind])
        return allowed, subtypes

    @functions.signature({"types": ["string", "array", "object"]})
    def _func_length(self, arg: Any) -> float:
        return float(len(arg))

    @functions.signature({"types": ["number"]})
    def _func_abs(self, arg: float) -> float:
        return abs(arg)

    @functions.signature({"types": ["number"]})
    def _func_ceil(self, arg: float) -> float:
        return float(math.ceil(arg))

    @functions.signature({"types": ["number"]})
    def _func_floor(self, arg: float) -> float:
        return float(math.floor(arg))

    @functions.signature({"types": ["array-number"]})
    def _func_sum(self, arg: list[float]) -> float:
        return float(sum(arg))

    @functions.signature({"types": ["array-number"]})
    def _func_avg(self, arg: list[float]) -> float | None:
        return sum(arg) / len(arg) if arg else None

    @functions.signature({"types": []})
    def _func_to_number(self, arg: Any) -> float | None:
        if isinstance(arg, float):
            return arg
        if isinstance(arg, str):
            try:
                return float(arg)  # strconv.ParseFloat
            except ValueError:
                return None
        return None

    @functions.signature({"types": ["array", "string"]}, {"types": []})
    def _func_contains(self, subject: Any, search: Any) -> bool:
        if isinstance(subject, str):
            return isinstance(search, str) and search in subject
        return any(go_equal(item, search) for item in subject)


class NotFound(JMESPathError):
    """go-jmespath's ``NotFoundError``: a field missing from an object. Most expressions read it as null; what
    reaches the top of an expression is an error."""

    def __init__(self, key: str) -> None:
        super().__init__(f'Unknown key "{key}" in path')


def _is_false(value: Any) -> bool:
    """go-jmespath's ``isFalse``: false, null, and empty strings, lists and objects (numbers never are)."""
    return value is None or value is False or (isinstance(value, str | list | dict) and len(value) == 0)


class _SoftExpression(visitor._Expression):  # type: ignore[misc]
    """An expression argument (``sort_by(@, &x)``...): functions read a missing field as null."""

    def visit(self, node: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.interpreter.visit(node, *args, **kwargs)
        except NotFound:
            return None


class _GoInterpreter(visitor.TreeInterpreter):  # type: ignore[misc]
    """The tree interpreter with go-jmespath's rules (its treeInterpreter.execute): where a missing field is an
    error and where it is null, which errors a projection's left side swallows, equality and ordering."""

    def _soft(self, node: Any, value: Any) -> Any:
        try:
            return self.visit(node, value)
        except NotFound:
            return None

    def _or_none(self, node: Any, value: Any) -> Any:
        try:
            return self.visit(node, value)
        except JMESPathError:
            return None

    def visit_field(self, node: dict[str, Any], value: Any) -> Any:
        if isinstance(value, dict):
            if node["value"] in value:
                return value[node["value"]]
            raise NotFound(node["value"])
        return None

    def visit_literal(self, node: dict[str, Any], value: Any) -> Any:
        return go_json(node["value"])

    def visit_comparator(self, node: dict[str, Any], value: Any) -> Any:
        left = self._soft(node["children"][0], value)
        right = self._soft(node["children"][1], value)
        op = node["value"]
        if op == "eq":
            return go_equal(left, right)
        if op == "ne":
            return not go_equal(left, right)
        if type(left) is not float or type(right) is not float:
            return None
        return self.COMPARATOR_FUNC[op](left, right)

    def visit_expref(self, node: dict[str, Any], value: Any) -> Any:
        return _SoftExpression(node["children"][0], self)

    def visit_function_expression(self, node: dict[str, Any], value: Any) -> Any:
        args = [self._soft(child, value) for child in node["children"]]
        return self._functions.call_function(node["value"], args)

    def visit_filter_projection(self, node: dict[str, Any], value: Any) -> Any:
        base = self._or_none(node["children"][0], value)
        if not isinstance(base, list):
            return None
        collected = []
        for element in base:
            if not _is_false(self._soft(node["children"][2], element)):
                current = self._soft(node["children"][1], element)
                if current is not None:
                    collected.append(current)
        return collected

    def visit_flatten(self, node: dict[str, Any], value: Any) -> Any:
        base = self._or_none(node["children"][0], value)
        if not isinstance(base, list):
            return None
        out: list[Any] = []
        for element in base:
            out.extend(element) if isinstance(element, list) else out.append(element)
        return out

    def visit_projection(self, node: dict[str, Any], value: Any) -> Any:
        base = self._soft(node["children"][0], value)
        if not isinstance(base, list):
            return None
        return [c for c in (self._soft(node["children"][1], e) for e in base) if c is not None]

    def visit_value_projection(self, node: dict[str, Any], value: Any) -> Any:
        base = self._or_none(node["children"][0], value)
        if not isinstance(base, dict):
            return None
        return [c for c in (self._soft(node["children"][1], e) for e in base.values()) if c is not None]

    def visit_multi_select_dict(self, node: dict[str, Any], value: Any) -> Any:
        if value is None:
            return None
        return {child["value"]: self._soft(child, value) for child in node["children"]}

    def visit_multi_select_list(self, node: dict[str, Any], value: Any) -> Any:
        if value is None:
            return None
        return [self._soft(child, value) for child in node["children"]]

    def visit_or_expression(self, node: dict[str, Any], value: Any) -> Any:
        matched = self._soft(node["children"][0], value)
        if _is_false(matched):
            matched = self._soft(node["children"][1], value)
        return matched

    def visit_and_expression(self, node: dict[str, Any], value: Any) -> Any:
        matched = self._soft(node["children"][0], value)
        if _is_false(matched):
            return matched
        return self.visit(node["children"][1], value)

    def visit_not_expression(self, node: dict[str, Any], value: Any) -> Any:
        return _is_false(self._soft(node["children"][0], value))

    def visit_pipe(self, node: dict[str, Any], value: Any) -> Any:
        result = value
        for child in node["children"]:
            result = self._soft(child, result)
        return result


_OPTIONS = jmespath.Options(custom_functions=_GoFunctions())


@functools.lru_cache(maxsize=512)
def compile_query(expression: str) -> Any:
    """The parsed expression (raises JMESPathError for a syntax error)."""
    return jmespath.compile(expression)


def search(expression: str, data: Any) -> Any:
    """Evaluate ``expression`` on ``data`` as Kyverno would; raises JMESPathError when it cannot."""
    return _GoInterpreter(_OPTIONS).visit(compile_query(expression).parsed, data)

"""Kubernetes list library: isSorted, sum, min, max, indexOf, lastIndexOf, includes."""

from __future__ import annotations

import datetime

import pytest

from tests.unit.cel.kubernetes.conftest import error, value


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # godoc examples of lists.go
        ("[1, 2, 3].isSorted()", True),
        ("['a', 'b', 'b', 'c'].isSorted()", True),
        ("[2.0, 1.0].isSorted()", False),
        ("[1].isSorted()", True),
        ("[].isSorted()", True),
        # numeric, not lexical, order once converted (the example)
        ("'1,2,10'.split(',').map(x, int(x)).isSorted()", True),
        ("['1', '2', '10'].isSorted()", False),
        ("[true, false].isSorted()", False),
        ("[false, true].isSorted()", True),
        ("[b'a', b'b'].isSorted()", True),
        ("[duration('1s'), duration('1m')].isSorted()", True),
        ("[timestamp('2021-01-01T00:00:00Z'), timestamp('2020-01-01T00:00:00Z')].isSorted()", False),
        ("[2u, 1u].isSorted()", False),
    ],
)
def test_is_sorted(expr: str, expected: bool) -> None:
    assert value(expr) is expected


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        # cel-go compares int and double; pairs it cannot order are skipped
        ([1, 0.5], False),
        ([0.5, 1], True),
        ([1, "a"], True),
        ([2, "a", 1], True),
    ],
)
def test_is_sorted_on_dynamic_lists(items: list[object], expected: bool) -> None:
    assert value("object.isSorted()", object=items) is expected


def test_is_sorted_rejects_lists_of_uncomparable_values() -> None:
    assert error("object.isSorted()", object=[{"a": 1}, {"a": 0}]) == "no such overload: isSorted(list)"
    assert error("object.isSorted()", object=[None, None]) == "no such overload: isSorted(list)"
    assert error("object.isSorted()", object=[1, None]) == "no such overload"


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("[1, 3].sum()", 4),
        ("[1.0, 3.0].sum()", 4.0),
        ("[].sum()", 0),
        ("[-1, 1].sum()", 0),
        ("[0.5, 0.25].sum() == 0.75", True),
    ],
)
def test_sum(expr: str, expected: object) -> None:
    result = value(expr)
    assert result == expected and type(result) is type(expected)


def test_sum_of_durations_is_a_duration() -> None:
    assert value("[duration('1m'), duration('1s')].sum()") == datetime.timedelta(minutes=1, seconds=1)
    assert value("[duration('1m'), duration('1s')].sum() == duration('61s')") is True
    assert value("type([duration('1s')].sum()) == google.protobuf.Duration") is True


def test_sum_type_checks_precisely_for_int_and_double() -> None:
    assert value("[1, 2].sum() + 1") == 4
    assert value("[1.5].sum() + 1.0") == 2.5


def test_sum_errors() -> None:
    assert error("[1, 9223372036854775807].sum()") == "integer overflow"
    assert error("[-9223372036854775807, -2].sum()") == "integer overflow"
    # the first element picks the overload; a mismatched later element is an error
    assert error("object.sum()", object=[1, 2.5]) == "no such overload"
    assert error("object.sum()", object=[2.5, 1]) == "no such overload"
    assert error("object.sum()", object=["a", "b"]) == "no such overload: sum(list)"
    assert error("object.sum()", object=[True]) == "no such overload: sum(list)"
    assert value("object.sum()", object=[1.5, 2.25]) == 3.75
    assert value("object.sum()", object=[]) == 0


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("[1, 3].min()", 1),
        ("[1, 3].max()", 3),
        ("[1].min()", 1),
        ("([0] + []).min()", 0),
        ("['b', 'a', 'c'].max()", "c"),
        ("[true, false].min()", False),
        ("[1u, 5u, 3u].max()", 5),
        ("[2.5, -1.5].min()", -1.5),
    ],
)
def test_min_max(expr: str, expected: object) -> None:
    assert value(expr) == expected


def test_min_max_of_bytes_durations_timestamps() -> None:
    assert value("[b'b', b'a'].min()") == b"a"
    assert value("[duration('1h'), duration('2m')].min() == duration('2m')") is True
    assert value(
        "[timestamp('2020-01-01T00:00:00Z'), timestamp('2019-01-01T00:00:00Z')].min()"
        " == timestamp('2019-01-01T00:00:00Z')"
    ) is True


def test_min_max_of_empty_list_is_an_error() -> None:
    assert error("[].min()") == "min called on empty list"
    assert error("[].max()") == "max called on empty list"


def test_min_max_on_dynamic_lists() -> None:
    assert value("object.min()", object=["a", 1]) == "a"
    assert value("object.min()", object=[2, "a", 1]) == 1
    assert value("object.min()", object=[1, 2.5, 0]) == 0
    assert value("object.max()", object=[0.5, 1, 0.7]) == 1
    assert error("object.min()", object=[{"a": 1}]) == "no such overload: min(list)"
    assert error("object.min()", object=[3, [1]]) == "no such overload"


def test_kubernetes_doc_examples() -> None:
    # https://kubernetes.io/docs/reference/using-api/cel/#kubernetes-list-library
    assert value("object.names.isSorted()", object={"names": ["a", "b"]}) is True
    items = [{"weight": 0.25}, {"weight": 0.75}]
    assert value("object.items.map(x, x.weight).sum() == 1.0", object={"items": items}) is True
    prios = {"low": [{"priority": 1}, {"priority": 3}], "high": [{"priority": 5}, {"priority": 9}]}
    assert value("object.low.map(x, x.priority).max() < object.high.map(x, x.priority).min()", object=prios) is True
    assert value("object.names.indexOf('should-be-first') == 1", object={"names": ["x", "should-be-first"]}) is True


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("[1, 2, 2, 3].indexOf(2)", 1),
        ("['a', 'b', 'b', 'c'].lastIndexOf('b')", 2),
        ("[1.0].indexOf(1.1)", -1),
        ("[].indexOf('string')", -1),
        ("[[1], [2]].indexOf([2])", 1),
        ("[{'a': 1}, {'a': 2}].lastIndexOf({'a': 2})", 1),
        # the strings extension's indexOf still works
        ("'abc'.indexOf('c')", 2),
        ("'abcabc'.lastIndexOf('b')", 4),
    ],
)
def test_index_of(expr: str, expected: int) -> None:
    assert value(expr) == expected


def test_index_of_uses_cel_equality() -> None:
    # heterogeneous numeric equality, but a bool is never a number
    assert value("object.indexOf(1.0)", object=[1, 1.0]) == 0
    assert value("object.indexOf(true)", object=[1, "a", True]) == 2
    assert value("object.indexOf(1)", object=[True, 1]) == 1
    assert value("object.indexOf(oldObject)", object=[{"a": 1}], oldObject=None) == -1
    assert value("object.indexOf(null)", object=[1, None]) == 1
    assert value("object.lastIndexOf(1)", object=[1, 1.0, "1"]) == 1
    assert value("object.indexOf({'a': 1.0})", object=[{"a": 1}]) == 0


def test_includes() -> None:
    assert value("[1, 2, 3].includes(2)") is True
    assert value("[1, 2, 3].includes(4)") is False
    assert value("'model-a'.includes('model-a')") is True
    assert value("'model-a'.includes('model-b')") is False
    assert value("object.includes(1)", object=[1.0]) is True

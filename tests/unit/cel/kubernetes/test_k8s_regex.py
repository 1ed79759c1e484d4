"""Kubernetes regex library: find, findAll (RE2, Go's FindAllString rules)."""

from __future__ import annotations

import time

import pytest

from tests.unit.cel.kubernetes.conftest import error, value


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # godoc examples of regex.go
        ("'abc 123'.find('[0-9]*')", ""),  # the empty match at 0 comes first
        ("'abc 123'.find('[0-9]+')", "123"),
        ("'abc 123'.find('xyz')", ""),
        ("'123 abc 456'.findAll('[0-9]*')", ["123", "", "", "", "", "456"]),
        ("'123 abc 456'.findAll('[0-9]+')", ["123", "456"]),
        ("'123 abc 456'.findAll('[0-9]*', 1)", ["123"]),
        ("'123 abc 456'.findAll('xyz')", []),
        # Go drops an empty match right after a match (Python's re keeps it)
        ("'baaa'.findAll('a*')", ["", "aaa"]),
        ("'baaab'.findAll('a*')", ["", "aaa", ""]),
        ("'ab'.findAll('a|')", ["a", ""]),
        ("'aaa'.findAll('')", ["", "", "", ""]),
        ("''.findAll('')", [""]),
        ("'abc'.findAll('', 2)", ["", ""]),
        ("'abc'.findAll('.', 0)", []),
        ("'abc'.findAll('.', -5)", ["a", "b", "c"]),
        ("'a1b22c333'.findAll('\\\\d+', 2)", ["1", "22"]),
        # UTF-8 and RE2 syntax
        ("'héllo wörld'.findAll('[^ ]+')", ["héllo", "wörld"]),
        ("'日本語'.findAll('\\\\p{Han}')", ["日", "本", "語"]),
        ("'AbC'.find('(?i)b')", "b"),
        ("'line1\\nline2'.findAll('(?m)^line\\\\d')", ["line1", "line2"]),
    ],
)
def test_find(expr: str, expected: object) -> None:
    assert value(expr) == expected


def test_doc_example_sum_of_numbers() -> None:
    # https://kubernetes.io/docs/reference/using-api/cel/#kubernetes-regex-library
    # ('[0-9]+' rather than the page's '[0-9]*', whose empty matches int() rejects)
    assert value("'1, 2, 3, 4'.findAll('[0-9]+').map(x, int(x)).sum() < 100") is True


def test_invalid_pattern_is_an_error_value() -> None:
    assert error("'x'.find(object)", object="[").startswith("Illegal regex: error parsing regexp:")
    assert error("'x'.findAll('(a')").startswith("Illegal regex:")


def test_re2_refuses_backreferences_and_runs_in_linear_time() -> None:
    assert error("'aa'.find('(a)\\\\1')").startswith("Illegal regex:")
    # catastrophic for a backtracking engine, instant for RE2
    start = time.perf_counter()
    assert value("object.find('(a+)+$')", object="a" * 5000 + "b") == ""
    assert value("object.find('(a+)+b')", object="a" * 5000 + "b") == "a" * 5000 + "b"
    assert time.perf_counter() - start < 1.0

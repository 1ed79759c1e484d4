"""Property names as CEL identifiers, following Kubernetes' escaping rules."""

from __future__ import annotations

import pytest

from vpol.cel.schemas import CEL_RESERVED, escape


@pytest.mark.parametrize(
    ("name", "escaped"),
    [
        # the examples of the Kubernetes CEL documentation
        ("namespace", "__namespace__"),
        ("x-prop", "x__dash__prop"),
        ("redact__d", "redact__underscores__d"),
        # one rule at a time
        ("a.b", "a__dot__b"),
        ("a/b", "a__slash__b"),
        ("example.com/my-key", "example__dot__com__slash__my__dash__key"),
        ("replicas", "replicas"),
        ("_private", "_private"),
        ("a_b", "a_b"),
        ("___x", "__underscores___x"),  # leftmost pairs first, as Go's regexp does
        ("in", "__in__"),
        ("if", "__if__"),
        ("while", "__while__"),
        (".hidden", "__dot__hidden"),
    ],
)
def test_escaping(name: str, escaped: str) -> None:
    assert escape(name) == escaped


@pytest.mark.parametrize("name", ["", "1abc", "9", "a b", "a:b", "ünï", "a@b", "a+b"])
def test_names_kubernetes_cannot_expose(name: str) -> None:
    assert escape(name) is None


def test_reserved_words_are_cels() -> None:
    assert {"true", "false", "null", "in", "namespace", "package", "return"} <= CEL_RESERVED
    assert "object" not in CEL_RESERVED and "spec" not in CEL_RESERVED

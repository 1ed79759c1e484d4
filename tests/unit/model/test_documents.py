"""YAML documents keep positions; bad YAML is an InputError naming file, line and column."""

from __future__ import annotations

import pytest

from vpol.model.documents import parse_documents
from vpol.model.problems import InputError


def test_positions_point_at_values():
    [doc] = parse_documents("a: 1\nspec:\n  validations:\n  - expression: \"x\"\n", "f.yaml")
    pos = doc.position("spec.validations[0].expression")
    assert (pos.line, pos.column) == (4, 18)  # inside the quotes


def test_multi_document_stream():
    docs = parse_documents("a: 1\n---\nb: 2\n---\n", "f.yaml")
    assert [d.data for d in docs] == [{"a": 1}, {"b": 2}]


def test_yaml_11_booleans_stay_strings():
    [doc] = parse_documents("x: on\ny: yes\nz: true\n", "f.yaml")
    assert doc.data == {"x": "on", "y": "yes", "z": True}


def test_malformed_yaml_names_file_and_position():
    with pytest.raises(InputError) as info:
        parse_documents("a: [1,\nb: c\n", "bad.yaml")
    p = info.value.problem
    assert p.file == "bad.yaml" and p.position is not None and p.position.line >= 1
    assert "invalid YAML" in p.message


def test_oversized_document_is_refused():
    with pytest.raises(InputError):
        parse_documents("a: " + "x" * (9 * 1024 * 1024), "big.yaml")

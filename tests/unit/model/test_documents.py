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


TRICKY = """\
a: plain
ints: [1, -2, +3, 0x1F, 0o17, 1_000, 0, 007]
floats: [1.5, -0.0, .inf, -.Inf, .nan, 1e3, 6.8523015e+5]
bools: [true, False, TRUE, yes, no, on, off, y, n]
nulls: [null, ~, Null, ]
empty:
quoted: ["1", '2', "true", 'null']
1: int key
2.5: float key
true: bool key
~: null key
dup: first
dup: second
deep: {x: [{y: [[], {}, [{}]]}]}
date: 2001-12-14t21:59:43.10-05:00
block: |
  two
  lines
folded: >
  one
  line
---
tagged: !!str 5
binary: !!binary aGVsbG8=
---
base: &b {k: 1}
merged:
  <<: *b
  j: 2
---
? [complex, key]
: value
---
set: !!set {a, b}
---
- a list document
- 2
"""


def test_alias_free_documents_are_built_as_pyyaml_builds_them():
    # iter_documents resolves scalars and builds plain documents itself (faster than PyYAML's generic resolver
    # and constructor) and hands anything else (tags, merge keys, aliases, complex keys) to that constructor:
    # same values, same types.
    import yaml

    from vpol.model.documents import _Loader, iter_documents

    class PyYAML(yaml.CSafeLoader):  # PyYAML's own resolver and constructor, vpol's implicit resolvers
        yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers

    def typed(value):
        if isinstance(value, dict):
            return {(type(k).__name__, repr(k)): typed(v) for k, v in value.items()}
        if isinstance(value, list):
            return [typed(v) for v in value]
        return (type(value).__name__, repr(value))

    for text in TRICKY.split("---\n"):
        if "? [complex" in text:  # a list as a key: refused, as PyYAML refuses it
            with pytest.raises(InputError):
                list(iter_documents(text, "x.yaml"))
            continue
        want = [d for d in yaml.load_all(text, Loader=PyYAML) if d is not None]
        assert [typed(d.data) for d in iter_documents(text, "x.yaml")] == [typed(d) for d in want]


def test_a_deeply_nested_plain_document_is_still_read():
    from vpol.model.documents import iter_documents

    depth = 400
    text = "a: " + "[" * depth + "1" + "]" * depth + "\n"
    [doc] = list(iter_documents(text, "deep.yaml"))
    value = doc.data["a"]
    for _ in range(depth):
        value = value[0]
    assert value == 1

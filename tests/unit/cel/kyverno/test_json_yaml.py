"""json.unmarshal / json.marshal and yaml.parse.

Expectations follow Go's encoding/json (numbers decode to float64; Marshal
sorts keys, writes 1.0 as 1, escapes <, > and &) and sigs.k8s.io/yaml
(go-yaml v2 YAML 1.1 scalars, then JSON), plus Kyverno's yaml tests.
"""

from __future__ import annotations

import pytest

from tests.unit.cel.kyverno.conftest import error, value


def test_unmarshal_object() -> None:
    assert value("""json.unmarshal('{"foo": "bar", "n": [1, 2.5, true, null]}')""") == {
        "foo": "bar",
        "n": [1.0, 2.5, True, None],
    }


def test_unmarshal_numbers_are_doubles() -> None:
    assert value("""type(json.unmarshal('{"a": 1}').a) == double""") is True
    assert value("""json.unmarshal('{"a": 1}').a == 1.0""") is True


def test_unmarshal_scalars() -> None:
    assert value("json.unmarshal('\"x\"')") == "x"
    assert value("json.unmarshal('null')") is None
    assert value("json.unmarshal(' [1] ')") == [1.0]


@pytest.mark.parametrize(
    "text",
    ["", "   ", "{", "{'a': 1}", "NaN", '{"a": Infinity}', "[1] [2]", "1e400", "tru"],
)
def test_unmarshal_errors(text: str) -> None:
    assert error(f"json.unmarshal({text!r})")


def test_unmarshal_empty_message() -> None:
    assert "unexpected end of JSON input" in error("json.unmarshal('')")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("json.marshal({'b': 1, 'a': 'x'})", '{"a":"x","b":1}'),
        ("json.marshal([1.0, 2.5, -0.5, 100.0])", "[1,2.5,-0.5,100]"),
        ("json.marshal(1e21)", "1e+21"),
        ("json.marshal(1e20)", "100000000000000000000"),
        ("json.marshal(0.000001)", "0.000001"),
        ("json.marshal(0.0000001)", "1e-7"),
        ("json.marshal(1.5e-10)", "1.5e-10"),
        ("json.marshal('<a href=\"x\">&</a>')", '"\\u003ca href=\\"x\\"\\u003e\\u0026\\u003c/a\\u003e"'),
        ("json.marshal('line\\nbreak\\ttab')", '"line\\nbreak\\ttab"'),
        ("json.marshal(null)", "null"),
        ("json.marshal(true)", "true"),
        ("json.marshal(b'hi')", '"aGk="'),
        ("json.marshal(timestamp('2025-01-02T03:04:05Z'))", '"2025-01-02T03:04:05Z"'),
        ("json.marshal(duration('1s'))", "1000000000"),
        ("json.marshal({'n': {'z': [], 'a': {}}})", '{"n":{"a":{},"z":[]}}'),
        ("json.marshal(42u)", "42"),
        ("json.marshal('é')", '"é"'),
    ],
)
def test_marshal(expr: str, expected: str) -> None:
    assert value(expr) == expected


def test_marshal_of_dyn_object_round_trips() -> None:
    obj = {"metadata": {"name": "x", "labels": {"b": "2", "a": "1"}}, "spec": {"replicas": 3}}
    assert value("json.marshal(object)", obj=obj) == '{"metadata":{"labels":{"a":"1","b":"2"},"name":"x"},"spec":{"replicas":3}}'
    assert value("json.unmarshal(json.marshal(object)).spec.replicas == 3.0", obj=obj) is True


def test_marshal_rejects_non_finite() -> None:
    assert "unsupported value" in error("json.marshal(double('NaN'))")


# Kyverno's yaml tests (pkg/cel/libs/yaml)
def test_yaml_nested_document() -> None:
    text = "species:\\n  dog: lab\\n  name: dory\\n  isGoodBoi: false\\nsnacks:\\n- chimken\\n- fries\\n- pizza\\n"
    assert value(f'yaml.parse("{text}")') == {
        "species": {"dog": "lab", "name": "dory", "isGoodBoi": False},
        "snacks": ["chimken", "fries", "pizza"],
    }


def test_yaml_scalars_lists_and_empty() -> None:
    assert value("yaml.parse('42')") == 42.0
    assert value("yaml.parse('- a\\n- b\\n- c\\n')") == ["a", "b", "c"]
    assert value("yaml.parse('')") is None
    assert value("yaml.parse('data: test').data") == "test"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: yes", {"a": True}),
        ("a: y", {"a": True}),
        ("a: On", {"a": True}),
        ("a: no", {"a": False}),
        ("a: N", {"a": False}),
        ("a: off", {"a": False}),
        ("a: ~", {"a": None}),
        ("a: 0x1F", {"a": 31.0}),
        ("a: 017", {"a": 15.0}),
        ("a: 0o17", {"a": 15.0}),
        ("a: 0b101", {"a": 5.0}),
        ("a: 1_000", {"a": 1000.0}),
        ("a: 1e3", {"a": 1000.0}),
        ("a: .5", {"a": 0.5}),
        ("a: 1:30", {"a": "1:30"}),  # no sexagesimal numbers in go-yaml
        ("a: 2024-01-02", {"a": "2024-01-02"}),  # timestamps stay text
        ("a: 2024-01-02T03:04:05Z", {"a": "2024-01-02T03:04:05Z"}),
        ("1: x", {"1": "x"}),
        ("true: x", {"true": "x"}),
        ("a: '1'", {"a": "1"}),
        ("base: &b {x: 1}\\nother:\\n  <<: *b\\n  z: 2", {"base": {"x": 1.0}, "other": {"x": 1.0, "z": 2.0}}),
        # go-yaml v2 reads the key y as the boolean true (ghodss/yaml#14, go-yaml/yaml#283)
        ("x: 10\\ny: 20", {"x": 10.0, "true": 20.0}),
    ],
)
def test_yaml_go_scalar_rules(text: str, expected: object) -> None:
    assert value(f'yaml.parse("{text}")') == expected


def test_yaml_first_document_only() -> None:
    assert value('yaml.parse("a: 1\\n---\\na: 2\\n")') == {"a": 1.0}


def test_yaml_numbers_are_doubles() -> None:
    assert value("type(yaml.parse('a: 1').a) == double") is True


@pytest.mark.parametrize("text", ["a: [1, 2", "a: b: c", "key: .inf", "{: x}"])
def test_yaml_errors(text: str) -> None:
    assert error(f'yaml.parse("{text}")')

"""The cel-go extensions Kyverno's environments have and the API server's lacks (pkg/cel/compiler
DefaultEnvOptions: encoders, math, regex), Kyverno's gzip library, and bytes that hold NUL bytes."""

from __future__ import annotations

import base64
import gzip
from typing import Any

import pytest

from tests.unit.policies import make_policy, pod
from vpol.cel.compiler import compile_expression
from vpol.cel.environment import EnvSpec, environment
from vpol.engine.subjects import subject_for
from vpol.policies.validating.engine import PolicyEngine


def _eval(src: str, spec: EnvSpec = EnvSpec()) -> Any:
    prog, problems = compile_expression(src, "spec.validations[0].expression", "variable", spec)
    assert prog is not None, problems
    value = prog.expression.eval(environment(spec).Activation(data={"object": {}}))
    return ("error", str(value.value())) if value.type() == value.type().ERROR else value.plain_value()


@pytest.mark.parametrize(("src", "expected"), [
    ("base64.encode(b'hi')", "aGk="),
    ("base64.decode('aGk=') == b'hi'", True),
    ("math.greatest(1, 5, 3)", 5),
    ("math.least([1.5, 0.5])", 0.5),
    ("math.ceil(1.2)", 2.0),
    ("math.abs(-3)", 3),
    ("math.bitAnd(6, 3)", 2),
    ("math.round(2.5)", 3.0),          # cel-go's math.round(double)
    ("math.round(10.125, 2)", 10.13),  # and Kyverno's math.round(double, int), side by side
    ("regex.replace('abcb', 'b', 'x')", "axcx"),
    ("regex.extract('abc', 'a(b)').value()", "b"),
    ("regex.extract('abc', 'z').orValue('none')", "none"),
    ("regex.extractAll('abcb', 'b')", ["b", "b"]),
    ("gzip.decompress(gzip.compress('hello, world'))", "hello, world"),
])
def test_kyverno_environment_has_the_extensions(src: str, expected: Any) -> None:
    assert _eval(src) == expected


@pytest.mark.parametrize("src", ["base64.encode(b'hi')", "math.greatest(1, 2)", "regex.replace('a', 'a', 'b')",
                                 "gzip.compress('x')"])
def test_the_api_servers_environment_does_not(src: str) -> None:
    _prog, problems = compile_expression(src, "p", "variable", EnvSpec(kubernetes_only=True))
    assert problems and "undeclared reference" in problems[0].message


def test_gzip_reads_what_go_wrote_and_refuses_the_rest() -> None:
    go_written = "H4sIAAAAAAAA/8pIzcnJBwQAAP//hqYQNgUAAAA="  # Go's compress/gzip of "hello", mtime 0
    assert _eval(f"gzip.decompress(base64.decode('{go_written}'))") == "hello"
    assert _eval("gzip.decompress(b'not gzip')")[0] == "error"
    assert _eval("gzip.compress(1)")[0] == "error"
    compressed = _eval("gzip.compress('abc')")
    assert gzip.decompress(bytes(compressed)) == b"abc" and compressed[4:8] == b"\0\0\0\0"  # mtime 0


def test_bytes_with_nul_bytes_stay_whole_through_libraries_and_variables() -> None:
    raw = b"\x00\x01binary\x00tail"
    encoded = base64.b64encode(raw).decode()
    policy = make_policy(
        variables=[{"name": "raw", "expression": f"base64.decode('{encoded}')"},
                   {"name": "packed", "expression": f"gzip.compress(string(base64.decode('{encoded}')))"},
                   {"name": "when", "expression": "duration('1h')"}],  # a value an Activation refuses: converted
        validations=[{"expression": f"size(variables.raw) == {len(raw)} && "
                                    f"variables.raw == base64.decode('{encoded}') && size(variables.packed) > 20 && "
                                    "variables.when == duration('60m')"}])
    result = PolicyEngine(policy).evaluate(subject_for(pod()))
    assert result is not None and result.result == "pass", result

"""vpol refuses the literal arguments Kyverno's compiler refuses, and no others: string literals that must parse
(``matches`` and the Kubernetes ``find``/``findAll`` patterns, ``duration``, ``timestamp``), each expression
compiled in a policy by vpol and by Kyverno's ValidatingPolicy compiler (tests/kyverno's oracle), verdict against
verdict; where both refuse, Kyverno's error carries vpol's reason (cel-go's words) and, when cel-go gives one, its
position. The cases sit on both sides of each parser's edges (Go's regexp, time.ParseDuration and RFC 3339).

Locally skipped without Go; under CI=true (or VPOL_REQUIRE_E2E=1) that is a failure.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.differential.test_kyverno import oracle
from vpol.policies.validating.compile import compile_policy
from vpol.policies.validating.model import parse_policy

RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
T0 = "timestamp('2020-01-01T00:00:00Z')"
CASES = [
    # regular expressions (Go's regexp: RE2's syntax without \C, repeats up to 1000)
    "object.data.m.matches('[')", "matches(object.data.m, '(')", "object.data.m.matches('^[a-z]+$')",
    "object.data.m.matches('(?i)abc\\\\d\\\\pL\\\\z')", "object.data.m.matches('x{1001}')",
    "object.data.m.matches('x{1000}')", "object.data.m.matches('a\\\\Cb')", "object.data.m.matches('a\\\\\\\\Cb')",
    "object.data.m.matches('(?P<n>a)')", "object.data.m.matches('(?=a)')", "object.data.m.matches(object.data.m)",
    "object.data.m.find('(') == ''", "object.data.m.findAll('[', 2).size() == 0",
    "object.data.m.findAll('[a-z]').size() == 0", "object.data.m.find('\\\\C') == ''",
    "regex.replace(object.data.m, '(', 'x') == ''",
    # durations (Go's time.ParseDuration)
    "duration('1x') > duration('1s')", "duration('1h30m') > duration('1s')", "duration('-1.5s') < duration('1s')",
    "duration('1us') > duration('0s')", "duration('1\u00b5s') > duration('0s')", "duration('.5s') > duration('0')",
    "duration('1.s') > duration('0')", "duration('inf') > duration('0s')", "duration('') > duration('0s')",
    "duration('1') > duration('0s')", "duration('2562047h') > duration('0s')",
    "duration('2562048h') > duration('0s')", "duration('-2562047h47m16.854775808s') < duration('0s')",
    # timestamps (Go's RFC 3339, years 1 to 9999)
    f"timestamp('x') > {T0}", f"timestamp('2020-01-01T00:00:00.5+01:00') > {T0}",
    f"timestamp('2020-01-01t00:00:00z') > {T0}", f"timestamp('2020-01-01T00:00:00') > {T0}",
    f"timestamp('2020-02-30T00:00:00Z') > {T0}", f"timestamp('2020-02-29T00:00:00Z') > {T0}",
    f"timestamp('2020-01-01T24:00:00Z') > {T0}", f"timestamp('2020-01-01T23:59:60Z') > {T0}",
    f"timestamp('0000-01-01T00:00:00Z') > {T0}", f"timestamp('9999-12-31T23:59:59Z') > {T0}",
    f"timestamp('0001-01-01T00:00:00+01:00') > {T0}", f"timestamp('2020-01-01T00:00:00+24:00') > {T0}",
    f"timestamp('2020-01-01T00:00:00.123456789123Z') > {T0}", f"timestamp(1) > {T0}",
]


def policy(expression: str) -> dict:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": "p"},
            "spec": {"validationActions": ["Audit"], "matchConstraints": {"resourceRules": [RULE]},
                     "validations": [{"expression": expression, "message": "m"}]}}


def kyverno_error(binary: str, expression: str) -> str:
    case = {"validating": [policy(expression)], "namespacedValidating": [], "mutating": [], "exceptions": [],
            "resources": [], "operation": "CREATE", "namespaces": [], "userInfo": {},
            "context": {"resources": [], "images": [], "httpMocks": {}, "globalContextEntries": []}}
    proc = subprocess.run([binary], input=json.dumps(case), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return str(json.loads(proc.stdout).get("error") or "")


@pytest.fixture(scope="module")
def binary() -> str:
    return oracle()


@pytest.mark.parametrize("expression", CASES)
def test_literal_arguments_are_refused_as_kyverno_refuses_them(binary: str, expression: str) -> None:
    parsed, problems = parse_policy(policy(expression))
    assert parsed is not None, problems
    errors = compile_policy(parsed).errors()
    theirs = kyverno_error(binary, expression)
    assert bool(errors) == bool(theirs), f"vpol: {[e.render() for e in errors]}; kyverno: {theirs}"
    if errors:
        (error,) = errors
        assert error.message in theirs, (error.message, theirs)
        position = error.expression_position
        assert position is not None
        if "ERROR: <input>:" in theirs:
            assert f"<input>:{position.line}:{position.column}: {error.message}" in theirs, theirs

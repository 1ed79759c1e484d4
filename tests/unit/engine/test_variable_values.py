"""Every kind of CEL value a variable can hold reaches the expressions that use it, as in cel-go."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policies import make_policy, pod
from vpol.engine.subjects import subject_for
from vpol.policies.validating.engine import PolicyEngine


@pytest.mark.parametrize("variable,check", [
    ("duration('4380h')", "variables.v > duration('1h') && variables.v == duration('262800m')"),
    ("timestamp('2024-01-01T00:00:00Z')", "variables.v < timestamp('2025-01-01T00:00:00Z') && "
                                          "variables.v.getFullYear() == 2024"),
    ("b'abc'", "variables.v.size() == 3 && variables.v == b'abc'"),
    ("{'a': [duration('1s'), duration('2s')]}", "variables.v.a[1] - variables.v.a[0] == duration('1s')"),
    ("[timestamp('2024-01-01T00:00:00Z')]", "variables.v[0] + duration('24h') == timestamp('2024-01-02T00:00:00Z')"),
    ("{'when': {'at': timestamp('2024-05-01T10:00:00Z')}}", "variables.v.when.at.getMonth() == 4"),
    ("[dyn(1), dyn('x'), dyn({'k': [true]})]", "variables.v[2].k[0]"),  # mixed literals only through dyn
])
def test_values_round_trip_through_variables(variable: str, check: str) -> None:
    policy = make_policy(variables=[{"name": "v", "expression": variable}], validations=[{"expression": check}])
    result = PolicyEngine(policy).evaluate(subject_for(pod()))
    assert result is not None and result.result == "pass", result


def test_variables_chain_through_each_other_with_durations() -> None:
    policy = make_policy(variables=[{"name": "a", "expression": "duration('1h')"},
                                    {"name": "b", "expression": "variables.a + variables.a"}],
                         validations=[{"expression": "variables.b == duration('2h')"}])
    result = PolicyEngine(policy).evaluate(subject_for(pod()))
    assert result is not None and result.result == "pass", result


def test_request_leaves_out_empty_fields_as_kyverno_hands_it_to_cel() -> None:
    # Kyverno converts the AdmissionRequest to an unstructured map: empty omitempty fields are absent, so reading
    # them is a "no such key" error (checked against Kyverno's engine, tests/differential/suites/request-fields).
    def outcome(expression: str, **subject: Any) -> str:
        policy = make_policy(validations=[{"expression": expression}])
        result = PolicyEngine(policy).evaluate(subject_for(pod(), **subject))
        assert result is not None
        return result.result

    assert outcome("request.userInfo.username == ''") == "error"
    assert outcome("!has(request.userInfo.username) && !has(request.userInfo.groups) && has(request.userInfo)") == \
        "pass"
    assert outcome("!has(request.subResource) && !has(request.requestSubResource) && has(request.name)") == "pass"
    assert outcome("request.object.metadata.name == object.metadata.name && request.oldObject == null") == "pass"
    assert outcome("request.dryRun == false && request.options == null && request.kind.group == ''") == "pass"
    known = {"user_info": {"username": "admin", "groups": ["system:masters"], "uid": ""}}
    assert outcome("request.userInfo.username == 'admin' && request.userInfo.groups == ['system:masters'] && "
                   "!has(request.userInfo.uid)", **known) == "pass"


@pytest.mark.parametrize("spec,expected", [
    ({"securityContext": None}, "pass"),                      # a YAML field left empty
    ({"securityContext": {"privileged": None}}, "pass"),
    ({"securityContext": {"privileged": True}}, "fail"),
])
def test_optional_selection_through_a_null_gives_none_as_in_cel_go(spec: dict, expected: str) -> None:
    policy = make_policy(validations=[{"expression": "object.spec.?securityContext.?privileged.orValue(false) "
                                                    "!= true"}])
    obj = pod()
    obj["spec"].update(spec)
    result = PolicyEngine(policy).evaluate(subject_for(obj))
    assert result is not None and result.result == expected, result


def test_nulls_are_kept_where_the_policy_did_not_error() -> None:
    policy = make_policy(validations=[{"expression": "has(object.spec.securityContext) && "
                                                    "object.spec.securityContext == null"}])
    obj = pod()
    obj["spec"]["securityContext"] = None
    result = PolicyEngine(policy).evaluate(subject_for(obj))
    assert result is not None and result.result == "pass", result


def test_a_failing_variable_is_an_error_only_where_it_is_read():
    """Variables are lazy (cel-go, Kyverno): one that fails on a branch not taken does not fail the policy."""
    from vpol.policies.validating.engine import PolicyEngine
    from vpol.engine.subjects import subject_for
    from vpol.policies.validating.model import parse_policy

    doc = {
        "apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": "lazy"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}]},
            "variables": [
                {"name": "bad", "expression": "object.spec.template.spec.containers.size() > 0"},
                {"name": "kind", "expression": "object.kind == 'Pod' ? 'pod' : (variables.bad ? 'x' : 'y')"},
            ],
            "validations": [{"expression": "variables.kind == 'pod'"},
                            {"expression": "object.kind == 'Pod' || variables.bad"}],
        },
    }
    policy, problems = parse_policy(doc)
    assert policy is not None, problems
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"}, "spec": {"containers": []}}
    assert PolicyEngine(policy).evaluate(subject_for(pod)).result == "pass"
    doc["spec"]["validations"] = [{"expression": "variables.bad"}]
    policy, _ = parse_policy(doc)
    result = PolicyEngine(policy).evaluate(subject_for(pod))
    assert result.result == "error" and result.message == "error: no such key: template"

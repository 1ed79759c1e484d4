"""A policy calling a library the operator cannot serve (http.* without --http-allow) is not Ready, whatever its
kind, and says which expressions call it; a mention in a string or a comment does not count."""

from __future__ import annotations

from tests.unit.policies import make_policy
from vpol.cel.library_use import unserved_libraries
from vpol.desired.status import LIBRARIES_SERVED, READY, Findings, conditions_for
from vpol.policies.deleting.model import parse_deleting_policy
from vpol.policies.generating.model import parse_generating_policy

CALLS_HTTP = make_policy(name="calls", validations=[
    {"expression": "object.metadata.name != ''"},
    {"expression": "http.Get('http://svc.local/allowed').allowed == true"}])
MENTIONS_HTTP = make_policy(name="mentions", validations=[
    {"expression": "'http.Get(x)' != object.metadata.name // http.Get in a comment"}])


def conditions(unserved: list[str]) -> dict[str, tuple[bool, str]]:
    return {c.type: (c.status, c.message) for c in conditions_for(Findings(generation=1, unserved_libraries=unserved))}


def test_http_calls_without_an_allowlist_keep_the_policy_from_ready() -> None:
    unserved = unserved_libraries(CALLS_HTTP.expressions(), http_enabled=False)
    assert len(unserved) == 1 and "spec.validations[1].expression" in unserved[0]
    assert "--http-allow" in unserved[0] and "validations[0]" not in unserved[0]
    found = conditions(unserved)
    assert found[LIBRARIES_SERVED][0] is False and found[READY] == (False, f"{LIBRARIES_SERVED} is False")
    # With an allowlist, or without a call: nothing to say, and no such condition.
    assert unserved_libraries(CALLS_HTTP.expressions(), http_enabled=True) == []
    assert unserved_libraries(MENTIONS_HTTP.expressions(), http_enabled=False) == []
    assert LIBRARIES_SERVED not in conditions([]) and conditions([])[READY][0] is True


def test_every_kind_is_read_the_same_way() -> None:
    generating, _ = parse_generating_policy({
        "apiVersion": "policies.kyverno.io/v1", "kind": "GeneratingPolicy", "metadata": {"name": "g"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["namespaces"]}]},
                 "variables": [{"name": "answer", "expression": "http.Post('http://svc.local/x', {}).name"}],
                 "generate": [{"expression": "generator.Apply(object.metadata.name, [])"}]}})
    deleting, _ = parse_deleting_policy({
        "apiVersion": "policies.kyverno.io/v1", "kind": "DeletingPolicy", "metadata": {"name": "d"},
        "spec": {"schedule": "*/5 * * * *",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["*"], "resources": ["pods"]}]},
                 "conditions": [{"name": "c", "expression": "http.Get('http://svc.local/old').old"}]}})
    assert generating is not None and deleting is not None
    [g] = unserved_libraries(generating.expressions(), http_enabled=False)
    [d] = unserved_libraries(deleting.expressions(), http_enabled=False)
    assert "spec.variables[0].expression" in g and "spec.conditions[0].expression" in d

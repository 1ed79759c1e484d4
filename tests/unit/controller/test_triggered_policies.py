"""The policies of the paths that act on triggers (mutateExisting, generation): where a new watch of their triggers
starts, and which writes are their own."""

from __future__ import annotations

from typing import Any

from vpol.controller.triggers import OWN_WRITES_KEPT, TriggeredPolicies
from vpol.model.discovery import builtin
from vpol.policies.generating.model import GeneratingPolicy, parse_generating_policy

NAMESPACES = ("", "v1", "namespaces")
CONFIGMAPS = ("", "v1", "configmaps")


def _policy(version: str, expression: str = "generator.Apply(object.metadata.name, [])") -> GeneratingPolicy:
    policy, problems = parse_generating_policy({
        "apiVersion": "policies.kyverno.io/v1", "kind": "GeneratingPolicy",
        "metadata": {"name": "p", "resourceVersion": version},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["namespaces"]}]},
                 "generate": [{"expression": expression}]}})
    assert policy is not None, problems
    return policy


def test_a_watch_of_the_triggers_starts_where_the_policy_was_seen() -> None:
    discovery = builtin()
    for restart, after_change in ((True, "90"), (False, "50")):
        policies: TriggeredPolicies[Any] = TriggeredPolicies(restart_on_change=restart)
        assert policies.set("p", _policy("50")) is True
        assert policies.trigger_since(NAMESPACES, discovery) == "50"
        assert policies.trigger_since(CONFIGMAPS, discovery) == ""  # not a trigger of it
        assert policies.set("p", _policy("70")) is False  # the same spec (a status write): nothing changed
        changed = _policy("90", "generator.Apply(object.metadata.name, [{'kind': 'x'}])")
        assert policies.set("p", changed) is True
        assert policies.trigger_since(NAMESPACES, discovery) == after_change, restart
        assert policies.set("p", None) is changed
        assert policies.trigger_since(NAMESPACES, discovery) == "" and policies.get("p") is None


def test_own_writes_are_remembered_up_to_a_bound() -> None:
    policies: TriggeredPolicies[Any] = TriggeredPolicies(restart_on_change=True)
    policies.remember({"metadata": {"uid": "first", "resourceVersion": "1"}})
    policies.remember({"metadata": {"uid": "a", "resourceVersion": "2"}})
    policies.remember({"metadata": {"uid": "a", "resourceVersion": "3"}})
    assert policies.own("a") == "3" and policies.own("first") == "1" and policies.own("b") == ""
    for i in range(OWN_WRITES_KEPT):
        policies.remember({"metadata": {"uid": f"u{i}", "resourceVersion": "1"}})
    assert policies.own("first") == "" and policies.own(f"u{OWN_WRITES_KEPT - 1}") == "1"

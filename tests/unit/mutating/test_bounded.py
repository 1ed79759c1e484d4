"""Mutations run in the bounded evaluation workers, as validations do: a mutation building a huge value is an
error result, not a process that grows without limit, and the other policies still apply."""

from __future__ import annotations

import yaml

from vpol.engine.subjects import subject_for
from vpol.policies.mutating.model import parse_mutating_policy
from vpol.policies.sandbox import Limits, SandboxedEvaluator

POLICY = """
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: %s}
spec:
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
  autogen: {podControllers: {controllers: []}}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: '%s'}
"""
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
       "spec": {"containers": [{"name": "a", "image": "nginx"}]}}


def _policy(name: str, expression: str):
    policy, problems = parse_mutating_policy(yaml.safe_load(POLICY % (name, expression)))
    assert policy is not None, problems
    return policy


def test_a_runaway_mutation_is_an_error_and_the_others_still_apply() -> None:
    hog = _policy("hog", "lists.range(9000).map(x, lists.range(9000)).size() > 0 ? Object{} : Object{}")
    label = _policy("label", 'Object{metadata: Object.metadata{labels: {"a": "b"}}}')
    limits = Limits(seconds_per_subject=5.0, memory_bytes=512 * 1024**2)
    with SandboxedEvaluator([], [], limits=limits, mutating=[label, hog]) as ev:
        [(mutated, results, validated)] = ev.apply_many([subject_for(POD)])
        by_policy = {r.policy: r for r in results}
        assert by_policy["hog"].result == "error" and "memory" in by_policy["hog"].message
        assert by_policy["label"].result == "pass"
        assert mutated is not None and mutated["metadata"]["labels"] == {"a": "b"}
        assert validated == []
        outcome, error = ev.mutate_once(subject_for(POD), ["label"])
        assert error == "" and outcome is not None and outcome[0]["metadata"]["labels"] == {"a": "b"}

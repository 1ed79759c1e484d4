"""Policies that read globalContext: where they are enforced, and which ones Kyverno refuses."""

from __future__ import annotations

from tests.unit.policies import make_policy
from vpol.policies.validating.compile import compile_policy
from vpol.policies.validating.enforcement import route
from vpol.policies.validating.model import parse_policy
from vpol.policies.validating.vap import ineligibility

READS_GLOBAL_CONTEXT = [{"expression": "object.metadata.name in globalContext.Get('names', '')"}]


def test_a_policy_reading_global_context_is_enforced_by_the_webhook() -> None:
    policy = make_policy(validations=READS_GLOBAL_CONTEXT)
    assert compile_policy(policy).ok
    reason = ineligibility(policy)
    assert "globalContext" in reason and "Kyverno-only" in reason
    way = route(policy)
    assert way.webhook and not way.native and way.native_wanted


def test_the_same_in_a_variable_or_a_match_condition() -> None:
    for spec in ({"variables": [{"name": "n", "expression": "globalContext.Get('names', 'p')"}],
                  "validations": [{"expression": "variables.n != null"}]},
                 {"matchConditions": [{"name": "c", "expression": "globalContext.Get('x', '') == null"}],
                  "validations": [{"expression": "true"}]}):
        way = route(make_policy(**spec))
        assert way.webhook and not way.native


def namespaced(validations: list[dict[str, str]]) -> object:
    data = {"apiVersion": "policies.kyverno.io/v1", "kind": "NamespacedValidatingPolicy",
            "metadata": {"name": "n", "namespace": "team"},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE"], "resources": ["pods"]}]},
                     "validations": validations}}
    policy, problems = parse_policy(data)
    assert policy is not None, problems
    return policy


def test_kyverno_refuses_global_context_in_namespaced_policies() -> None:
    compiled = compile_policy(namespaced([{"expression": "true"}, {"expression": "1 < 2 &&\n  globalContext.Get('x', '') != null"}]))  # type: ignore[arg-type]
    [problem] = compiled.errors()
    assert problem.message == "globalContext.* is not allowed in namespaced policies"
    assert problem.path == "spec.validations[1].expression"
    assert problem.expression_position is not None and (problem.expression_position.line,
                                                        problem.expression_position.column) == (2, 3)


def test_a_namespaced_policy_merely_mentioning_the_word_is_fine() -> None:
    compiled = compile_policy(namespaced([{"expression": "'globalContext' != object.metadata.name",  # type: ignore[arg-type]
                                           "messageExpression": "'see globalContext docs'"},
                                          {"expression": "has(object.globalContext)"}]))
    assert compiled.ok, compiled.errors()


def test_only_policies_naming_global_context_get_its_data() -> None:
    from vpol.engine.global_context import reads_global_context

    assert reads_global_context([make_policy(validations=READS_GLOBAL_CONTEXT)])
    assert not reads_global_context([make_policy(validations=[{"expression": "object.metadata.name != 'x'"}]),
                                     make_policy(validations=[{"expression": "has(object.spec.globalContextX)"}])])


def test_a_mutating_policy_reading_global_context_is_applied_by_the_webhook() -> None:
    from vpol.policies.mutating.map import WEBHOOK, map_ineligibility, mutating_route
    from vpol.policies.mutating.model import parse_mutating_policy

    policy, problems = parse_mutating_policy({
        "apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": "m"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["configmaps"]}]},
                 "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                     "expression": "Object{metadata: Object.metadata{labels: "
                                   "{'team': string(globalContext.Get('teams', 'default'))}}}"}}]}})
    assert policy is not None, problems
    assert "globalContext" in map_ineligibility(policy)
    assert mutating_route(policy, generation="eligible", compiles=True) == WEBHOOK

"""Which objects a DeletingPolicy deletes (vpol.policies.deleting.engine.DeletingPolicyEngine): pass "resource matched"
(delete it), fail "resource did not match" (keep it), error (docs/internals/generating-and-deleting.md: "DeletingPolicy" in the
CEL environment, "Deletion", "Exceptions" and the CLI's deleting policies)."""

from __future__ import annotations

from typing import Any

import pytest

from vpol.engine.evaluate import Result
from vpol.engine.subjects import subject_for
from vpol.policies.deleting.engine import DELETE, KEEP, DeletingPolicyEngine

from tests.unit.lifecycle.builders import configmap, dpol, exception, pod, rules

NAMESPACES = {"team": {"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": "team", "labels": {"env": "test"}}},
              "prod": {"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": "prod", "labels": {"env": "production"}}}}


def evaluate(spec: dict[str, Any], obj: dict[str, Any] | None = None, *, namespace: str | None = None,
             exceptions: tuple[Any, ...] = (), confined: bool = True, operation: str = "CREATE") -> Result | None:
    engine = DeletingPolicyEngine(dpol(spec, namespace=namespace), exceptions, confined=confined)
    assert engine.ok, engine.compiled.problems
    return engine.evaluate(subject_for(obj or pod(), operation=operation, namespaces=NAMESPACES))


def verdict(result: Result | None) -> tuple[str, str] | None:
    return None if result is None else (result.result, result.message)


def test_the_messages() -> None:
    assert (DELETE, KEEP) == ("resource matched", "resource did not match")


def test_no_conditions_deletes_what_matches() -> None:
    result = evaluate({})
    assert verdict(result) == ("pass", DELETE)
    assert result is not None
    assert (result.policy, result.api_version, result.kind, result.namespace, result.name) == (
        "d", "v1", "Pod", "team", "p")


def test_every_condition_must_hold() -> None:
    labelled = pod(labels={"expired": "true"})
    spec = {"conditions": [{"name": "expired", "expression": "object.metadata.?labels.expired.orValue('') == 'true'"},
                           {"name": "test", "expression": "namespaceObject.metadata.labels.env == 'test'"}]}
    assert verdict(evaluate(spec, labelled)) == ("pass", DELETE)
    assert verdict(evaluate(spec, pod())) == ("fail", KEEP)  # not labelled
    assert verdict(evaluate(spec, pod(namespace="prod", labels={"expired": "true"}))) == ("fail", KEEP)


def test_conditions_see_the_variables() -> None:
    spec = {"variables": [{"name": "succeeded", "expression": "object.?status.?succeeded.orValue(0)"}],
            "conditions": [{"name": "done", "expression": "variables.succeeded > 0"}]}
    assert verdict(evaluate(spec, {**pod(), "status": {"succeeded": 1}})) == ("pass", DELETE)
    assert verdict(evaluate(spec, pod())) == ("fail", KEEP)


def test_a_failing_condition_is_an_error() -> None:
    result = evaluate({"conditions": [{"name": "c", "expression": "object.metadata.annotations.owner == ''"}]})
    assert result is not None
    assert result.result == "error"
    assert result.message == "no such key: annotations"


def test_a_false_condition_wins_over_a_failing_one() -> None:
    spec = {"conditions": [{"name": "err", "expression": "object.nope == 1"}, {"name": "no", "expression": "false"}]}
    assert verdict(evaluate(spec)) == ("fail", KEEP)


def test_a_policy_that_does_not_compile_deletes_nothing() -> None:
    engine = DeletingPolicyEngine(dpol({"conditions": [{"name": "c", "expression": "1"}]}))
    assert not engine.ok
    assert engine.evaluate(subject_for(pod())) is None


# --- matching -----------------------------------------------------------------------------------------------------


def test_an_object_outside_the_match_constraints_has_no_result() -> None:
    assert evaluate({}, configmap()) is None


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE", "CONNECT"])
def test_the_rules_operations_do_not_matter(operation: str) -> None:
    # Objects are listed, not requested: operations are forced to `*` (the rule below says DELETE only).
    spec = {"matchConstraints": rules("pods", ("DELETE",))}
    assert verdict(evaluate(spec)) == ("pass", DELETE)
    assert verdict(evaluate(spec, operation=operation)) == ("pass", DELETE)


def test_exclusions_apply_whatever_their_operations() -> None:
    spec = {"matchConstraints": rules("pods", ("CREATE",), excludeResourceRules=[
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"],
         "resourceNames": ["keep-me"]}])}
    assert evaluate(spec, pod("keep-me")) is None
    assert verdict(evaluate(spec, pod("other"))) == ("pass", DELETE)


def test_object_and_namespace_selectors() -> None:
    spec = {"matchConstraints": rules("pods", ("*",), objectSelector={"matchLabels": {"lifetime": "temporary"}},
                                      namespaceSelector={"matchLabels": {"env": "test"}})}
    assert verdict(evaluate(spec, pod(labels={"lifetime": "temporary"}))) == ("pass", DELETE)
    assert evaluate(spec, pod()) is None
    assert evaluate(spec, pod(namespace="prod", labels={"lifetime": "temporary"})) is None


def test_a_namespaced_policy_is_confined_to_its_namespace() -> None:
    assert verdict(evaluate({}, pod(namespace="team"), namespace="team")) == ("pass", DELETE)
    assert evaluate({}, pod(namespace="prod"), namespace="team") is None
    # A cluster-scoped object is never in its namespace.
    ns_spec = {"matchConstraints": rules("namespaces", ("*",))}
    assert evaluate(ns_spec, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}},
                    namespace="team") is None


def test_kyverno_cli_hands_a_namespaced_policy_every_resource() -> None:
    result = evaluate({}, pod(namespace="prod"), namespace="team", confined=False)
    assert verdict(result) == ("pass", DELETE)
    assert result is not None and result.policy == "team/d"


# --- exceptions ---------------------------------------------------------------------------------------------------


def keep(conditions: list[str], *, policy: str = "d", kind: str = "DeletingPolicy", name: str = "e1",
         **spec: Any) -> Any:
    return exception(name, conditions, policy=policy, kind=kind, **spec)


def test_an_exception_keeps_the_object() -> None:
    result = evaluate({}, exceptions=(keep(["object.metadata.name.startsWith('p')"]),))
    assert verdict(result) == ("fail", KEEP)
    assert result is not None and result.exception == "e1"
    assert verdict(evaluate({}, exceptions=(keep(["object.metadata.name == 'other'"]),))) == ("pass", DELETE)


def test_an_exception_keeps_the_object_whatever_its_report_result() -> None:
    assert verdict(evaluate({}, exceptions=(keep(["true"], reportResult="pass"),))) == ("fail", KEEP)


def test_an_exception_comes_before_the_conditions() -> None:
    spec = {"conditions": [{"name": "c", "expression": "object.nope == 1"}]}
    assert verdict(evaluate(spec, exceptions=(keep(["true"]),))) == ("fail", KEEP)


def test_an_exception_that_fails_is_an_error() -> None:
    result = evaluate({}, exceptions=(keep(["object.nope == 1"]),))
    assert result is not None and result.result == "error"
    assert "no such key: nope" in result.message


def test_exceptions_apply_to_the_policy_they_name() -> None:
    for other in (keep(["true"], policy="another"), keep(["true"], kind="GeneratingPolicy")):
        assert verdict(evaluate({}, exceptions=(other,))) == ("pass", DELETE), other
    assert verdict(evaluate({}, namespace="team", exceptions=(keep(["true"], kind="NamespacedDeletingPolicy"),))) \
        == ("fail", KEEP)


@pytest.mark.parametrize("extra", [{"allowedValues": ["x"]}, {"images": ["nginx"]}])
def test_an_exception_with_values_or_images_keeps_the_object_too(extra: dict[str, Any]) -> None:
    assert verdict(evaluate({}, exceptions=(keep(["true"], **extra),))) == ("fail", KEEP)


@pytest.mark.xfail(strict=True, reason="a DeletingPolicy's exceptions are evaluated after its variables are "
                                       "declared and may read them (docs, DeletingPolicy); vpol evaluates them "
                                       "without the policy's variables: `no such key: v` (an error)")
def test_exceptions_see_the_policy_variables() -> None:
    spec = {"variables": [{"name": "v", "expression": "object.metadata.name"}]}
    assert verdict(evaluate(spec, exceptions=(keep(["variables.v == 'p'"]),))) == ("fail", KEEP)
    assert verdict(evaluate(spec, exceptions=(keep(["variables.v == 'other'"]),))) == ("pass", DELETE)


# --- what is bound -----------------------------------------------------------------------------------------------


def test_namespace_object_is_the_objects_namespace() -> None:
    spec = {"conditions": [{"name": "c", "expression": "namespaceObject.metadata.name == object.metadata.namespace"}]}
    assert verdict(evaluate(spec)) == ("pass", DELETE)


@pytest.mark.parametrize("expression", ["oldObject == null", "request.operation != ''"])
def test_old_object_and_request_are_not_bound(expression: str) -> None:
    result = evaluate({"conditions": [{"name": "c", "expression": expression}]})
    assert result is not None and result.result == "error"

"""Parsing (Namespaced)GeneratingPolicy and (Namespaced)DeletingPolicy documents: defaults, and every refusal with
its field path (docs/internals/generating-and-deleting.md, "The API" and the policy validation webhook's messages)."""

from __future__ import annotations

from typing import Any

import pytest

from vpol.model.problems import Problem
from vpol.policies.deleting.model import (
    DELETING_KIND,
    NAMESPACED_DELETING_KIND,
    is_deleting_policy_document,
    parse_deleting_policy,
)
from vpol.policies.generating.model import (
    GENERATING_KIND,
    INTERPOLATE_CEL,
    INTERPOLATE_NONE,
    NAMESPACED_GENERATING_KIND,
    is_generating_policy_document,
    parse_generating_policy,
)

from tests.unit.lifecycle.builders import document, rules

GENERATE = [{"expression": "true"}]


def generating(spec: Any, *, kind: str = GENERATING_KIND, namespace: str | None = None,
               api_version: str = "policies.kyverno.io/v1") -> tuple[Any, list[Problem]]:
    return parse_generating_policy(document(kind, spec, namespace=namespace, api_version=api_version))


def deleting(spec: Any, *, kind: str = DELETING_KIND, namespace: str | None = None,
             api_version: str = "policies.kyverno.io/v1") -> tuple[Any, list[Problem]]:
    return parse_deleting_policy(document(kind, spec, namespace=namespace, api_version=api_version))


def errors(problems: list[Problem]) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in problems if p.severity == "error"]


# --- GeneratingPolicy --------------------------------------------------------------------------------------------


def test_generating_defaults() -> None:
    policy, problems = generating({"matchConstraints": rules(), "generate": GENERATE})
    assert problems == []
    s = policy.spec
    ev = s.evaluation
    assert (ev.admission_enabled, ev.generate_existing, ev.synchronize, ev.orphan_downstream_on_policy_delete,
            ev.skip_background_requests) == (True, False, False, False, True)
    assert s.use_server_side_apply is False
    assert s.webhook_timeout_seconds is None
    assert s.match_conditions == () and s.variables == () and s.audit_annotations == ()
    assert policy.kind == GENERATING_KIND and policy.namespace == "" and policy.key == "p"


def test_generating_fields_are_read() -> None:
    policy, problems = generating({
        "matchConstraints": rules(),
        "evaluation": {"admission": {"enabled": False}, "generateExisting": {"enabled": True},
                       "synchronize": {"enabled": True}, "orphanDownstreamOnPolicyDelete": {"enabled": True},
                       "skipBackgroundRequests": False},
        "useServerSideApply": True,
        "webhookConfiguration": {"timeoutSeconds": 7},
        "matchConditions": [{"name": "m", "expression": "true"}],
        "variables": [{"name": "v", "expression": "1"}],
        "auditAnnotations": [{"key": "k", "valueExpression": "'x'"}],
        "generate": [{"expression": "true"},
                     {"template": {"value": "kind: A\n"}},
                     {"template": {"value": "kind: B\n", "interpolate": "cel"}}],
    })
    assert problems == []
    s = policy.spec
    ev = s.evaluation
    assert (ev.admission_enabled, ev.generate_existing, ev.synchronize, ev.orphan_downstream_on_policy_delete,
            ev.skip_background_requests) == (False, True, True, True, False)
    assert s.use_server_side_apply is True and s.webhook_timeout_seconds == 7
    g = s.generate
    assert [(x.expression, x.template, x.interpolate, x.is_template) for x in g] == [
        ("true", "", INTERPOLATE_NONE, False), ("", "kind: A\n", INTERPOLATE_NONE, True),
        ("", "kind: B\n", INTERPOLATE_CEL, True)]
    assert [path for path, _src, _role in policy.expressions()] == [
        "spec.matchConditions[0].expression", "spec.variables[0].expression", "spec.generate[0].expression",
        "spec.auditAnnotations[0].valueExpression"]


@pytest.mark.parametrize(("spec", "expected"), [
    # generate[]: exactly one of expression or template
    ({"generate": [{"expression": "true", "template": {"value": "kind: A"}}]},
     [("spec.generate[0]", "only one of expression or template may be set")]),
    ({"generate": [{"expression": "", "template": {"value": "kind: A"}}]},  # `has()` of an empty string is true
     [("spec.generate[0]", "only one of expression or template may be set")]),
    ({"generate": [{"expression": "true"}, {}]},
     [("spec.generate[1]", "one of expression or template must be set")]),
    ({"generate": [{"template": {}}]}, [("spec.generate[0].template.value", "required field is missing")]),
    ({"generate": [{"template": {"value": "  \n"}}]}, [("spec.generate[0].template.value", "must not be empty")]),
    ({"generate": [{"template": {"value": "kind: A", "interpolate": "jinja"}}]},
     [("spec.generate[0].template.interpolate", 'unsupported value "jinja": must be one of none, cel')]),
    ({"generate": [{"expression": ""}]}, [("spec.generate[0].expression", "expression must not be empty")]),
    ({"generate": ["true"]}, [("spec.generate[0]", "must be an object, not a string")]),
    # generate is required (minItems 1)
    ({"generate": []}, [("spec.generate", "at least one generate item is required")]),
    ({}, [("spec.generate", "at least one generate item is required")]),
    # evaluation and other fields, typed
    ({"generate": GENERATE, "evaluation": {"synchronize": {"enabled": "yes"}}},
     [("spec.evaluation.synchronize.enabled", "must be a boolean, not a string")]),
    ({"generate": GENERATE, "evaluation": {"generateExisting": True}},
     [("spec.evaluation.generateExisting", "must be an object, not a boolean")]),
    ({"generate": GENERATE, "evaluation": {"skipBackgroundRequests": "no"}},
     [("spec.evaluation.skipBackgroundRequests", "must be a boolean, not a string")]),
    ({"generate": GENERATE, "useServerSideApply": "true"},
     [("spec.useServerSideApply", "must be a boolean, not a string")]),
    ({"generate": GENERATE, "webhookConfiguration": {"timeoutSeconds": 31}},
     [("spec.webhookConfiguration.timeoutSeconds", "must be between 1 and 30 seconds")]),
    ({"generate": GENERATE, "webhookConfiguration": {"timeoutSeconds": "5"}},
     [("spec.webhookConfiguration.timeoutSeconds", "must be an integer, not a string")]),
    # the frame shared with the admission policies
    ({"generate": GENERATE, "variables": [{"name": "a-b", "expression": "1"}]},
     [("spec.variables[0].name", '"a-b" is not a valid CEL identifier')]),
    ({"generate": GENERATE, "matchConditions": [{"name": "x", "expression": "true"},
                                                {"name": "x", "expression": "true"}]},
     [("spec.matchConditions[1].name", 'duplicate name "x" (first at spec.matchConditions[0])')]),
    ({"generate": GENERATE, "auditAnnotations": [{"key": "k"}]},
     [("spec.auditAnnotations[0].valueExpression", "required field is missing")]),
])
def test_generating_refusals(spec: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    policy, problems = generating({"matchConstraints": rules(), **spec})
    assert policy is None
    assert errors(problems) == expected


@pytest.mark.parametrize("constraints", [None, {}, {"resourceRules": []},
                                         {"excludeResourceRules": rules()["resourceRules"]}])
def test_generating_needs_a_resource_rule(constraints: Any) -> None:
    spec: dict[str, Any] = {"generate": GENERATE}
    if constraints is not None:
        spec["matchConstraints"] = constraints
    policy, problems = generating(spec)
    assert policy is None
    assert errors(problems) == [("spec.matchConstraints",
                                 "a matchConstraints with at least one resource rule is required")]


def test_generating_spec_is_required() -> None:
    doc = document(GENERATING_KIND, None)
    policy, problems = parse_generating_policy(doc)
    assert policy is None and errors(problems) == [("spec", "required field is missing")]


def test_generating_unknown_fields_are_warnings() -> None:
    policy, problems = generating({"matchConstraints": rules(), "generate": [{"expression": "true", "extra": 1}],
                                   "failurePolicy": "Fail"})
    assert policy is not None
    assert sorted((p.path, p.severity) for p in problems) == [("spec.failurePolicy", "warning"),
                                                              ("spec.generate[0].extra", "warning")]


def test_problems_carry_the_object() -> None:
    _policy, problems = generating({"matchConstraints": rules(), "generate": [{}]})
    assert [p.object for p in problems] == ["GeneratingPolicy/p"]


@pytest.mark.parametrize(("kind", "version", "served"), [
    (GENERATING_KIND, "v1", True), (GENERATING_KIND, "v1beta1", True), (GENERATING_KIND, "v1alpha1", True),
    (NAMESPACED_GENERATING_KIND, "v1", True), (NAMESPACED_GENERATING_KIND, "v1beta1", True),
    (NAMESPACED_GENERATING_KIND, "v1alpha1", False), (GENERATING_KIND, "v2", False),
])
def test_generating_served_versions(kind: str, version: str, served: bool) -> None:
    policy, problems = generating({"matchConstraints": rules(), "generate": GENERATE}, kind=kind,
                                  namespace="team" if kind == NAMESPACED_GENERATING_KIND else None,
                                  api_version=f"policies.kyverno.io/{version}")
    assert (policy is not None) is served
    if not served:
        assert [p.path for p in problems] == ["apiVersion"]
        assert f'unsupported apiVersion "policies.kyverno.io/{version}"' in problems[0].message


def test_namespaced_generating_policy_is_keyed_by_namespace() -> None:
    policy, problems = generating({"matchConstraints": rules(), "generate": GENERATE},
                                  kind=NAMESPACED_GENERATING_KIND, namespace="team")
    assert problems == []
    assert (policy.kind, policy.namespace, policy.name, policy.key) == (NAMESPACED_GENERATING_KIND, "team", "p",
                                                                        "team/p")


def test_generating_document_detection() -> None:
    assert is_generating_policy_document(document(GENERATING_KIND, {}))
    assert is_generating_policy_document(document(NAMESPACED_GENERATING_KIND, {}))
    assert not is_generating_policy_document(document(DELETING_KIND, {}))
    assert not is_generating_policy_document(document(GENERATING_KIND, {}, api_version="kyverno.io/v1"))
    assert not is_generating_policy_document([document(GENERATING_KIND, {})])


# --- DeletingPolicy ------------------------------------------------------------------------------------------------


def test_deleting_defaults() -> None:
    policy, problems = deleting({"schedule": "@daily", "matchConstraints": rules("pods", ("*",))})
    assert problems == []
    s = policy.spec
    assert s.schedule == "@daily"
    assert s.deletion_propagation_policy == ""  # unset: the API server's default
    assert s.conditions == () and s.variables == ()
    assert policy.expressions() == []


@pytest.mark.parametrize("propagation", ["Foreground", "Background", "Orphan"])
def test_deleting_propagation_policies(propagation: str) -> None:
    policy, problems = deleting({"schedule": "@daily", "matchConstraints": rules("pods"),
                                 "deletionPropagationPolicy": propagation})
    assert problems == [] and policy.spec.deletion_propagation_policy == propagation


def test_deleting_expressions_are_variables_then_conditions() -> None:
    policy, problems = deleting({"schedule": "@daily", "matchConstraints": rules("pods"),
                                 "conditions": [{"name": "c", "expression": "variables.v == 1"}],
                                 "variables": [{"name": "v", "expression": "1"}]})
    assert problems == []
    assert [(path, role) for path, _src, role in policy.expressions()] == [
        ("spec.variables[0].expression", "variable"), ("spec.conditions[0].expression", "matchCondition")]


@pytest.mark.parametrize(("spec", "expected"), [
    ({}, [("spec.schedule", "schedule is required")]),
    ({"schedule": ""}, [("spec.schedule", "schedule is required")]),
    ({"schedule": "   "}, [("spec.schedule", "schedule is required")]),
    ({"schedule": "* * * *"},
     [("spec.schedule", "schedule spec in the deletingPolicy is not in proper cron format: missing field(s)")]),
    ({"schedule": "@daily", "deletionPropagationPolicy": "Later"},
     [("spec.deletionPropagationPolicy", 'unsupported value "Later": must be one of Foreground, Background, '
                                         "Orphan")]),
    ({"schedule": "@daily", "conditions": [{"name": "a", "expression": "true"}, {"name": "a", "expression": "1"}]},
     [("spec.conditions[1].name", 'duplicate name "a" (first at spec.conditions[0])')]),
    ({"schedule": "@daily", "conditions": [{"name": "a", "expression": ""}]},
     [("spec.conditions[0].expression", "expression must not be empty")]),
    ({"schedule": "@daily", "conditions": [{"expression": "true"}]},
     [("spec.conditions[0].name", "required field is missing")]),
    ({"schedule": "@daily", "variables": [{"name": "1x", "expression": "1"}]},
     [("spec.variables[0].name", '"1x" is not a valid CEL identifier')]),
])
def test_deleting_refusals(spec: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    policy, problems = deleting({"matchConstraints": rules("pods"), **spec})
    assert policy is None
    assert errors(problems) == expected


@pytest.mark.parametrize("cron", ["60 * * * *", "@every 1h", "@reboot", "0 0 * * 8"])
def test_deleting_refuses_what_is_not_cron(cron: str) -> None:
    policy, problems = deleting({"schedule": cron, "matchConstraints": rules("pods")})
    assert policy is None
    [(path, message)] = errors(problems)
    assert path == "spec.schedule"
    assert message.startswith("schedule spec in the deletingPolicy is not in proper cron format: ")
    assert len(message) > len("schedule spec in the deletingPolicy is not in proper cron format: ")


def test_deleting_schedule_must_be_a_string() -> None:
    policy, problems = deleting({"schedule": 5, "matchConstraints": rules("pods")})
    assert policy is None
    assert ("spec.schedule", "must be a string, not an integer") in errors(problems)


@pytest.mark.parametrize("constraints", [None, {}, {"resourceRules": []}])
def test_deleting_needs_a_resource_rule(constraints: Any) -> None:
    spec: dict[str, Any] = {"schedule": "@daily"}
    if constraints is not None:
        spec["matchConstraints"] = constraints
    policy, problems = deleting(spec)
    assert policy is None
    assert errors(problems) == [("spec.matchConstraints",
                                 "a matchConstraints with at least one resource rule is required")]


def test_deleting_matchconditions_is_not_a_field() -> None:
    # DeletingPolicy calls them `conditions`; `matchConditions` is unknown (a warning, nothing read).
    policy, problems = deleting({"schedule": "@daily", "matchConstraints": rules("pods"),
                                 "matchConditions": [{"name": "a", "expression": "false"}]})
    assert policy is not None and policy.spec.conditions == ()
    assert [(p.path, p.severity) for p in problems] == [("spec.matchConditions", "warning")]


@pytest.mark.parametrize(("kind", "version", "served"), [
    (DELETING_KIND, "v1", True), (DELETING_KIND, "v1beta1", True), (DELETING_KIND, "v1alpha1", True),
    (NAMESPACED_DELETING_KIND, "v1", True), (NAMESPACED_DELETING_KIND, "v1beta1", True),
    (NAMESPACED_DELETING_KIND, "v1alpha1", False),
])
def test_deleting_served_versions(kind: str, version: str, served: bool) -> None:
    policy, problems = deleting({"schedule": "@daily", "matchConstraints": rules("pods")}, kind=kind,
                                namespace="team" if kind == NAMESPACED_DELETING_KIND else None,
                                api_version=f"policies.kyverno.io/{version}")
    assert (policy is not None) is served
    if not served:
        assert [p.path for p in problems] == ["apiVersion"]


def test_namespaced_deleting_policy_is_keyed_by_namespace() -> None:
    policy, problems = deleting({"schedule": "@daily", "matchConstraints": rules("pods")},
                                kind=NAMESPACED_DELETING_KIND, namespace="team")
    assert problems == []
    assert (policy.kind, policy.namespace, policy.key, policy.ref) == (
        NAMESPACED_DELETING_KIND, "team", "team/p", "NamespacedDeletingPolicy/team/p")


def test_deleting_spec_is_required() -> None:
    policy, problems = parse_deleting_policy(document(DELETING_KIND, None))
    assert policy is None and errors(problems) == [("spec", "required field is missing")]


def test_deleting_document_detection() -> None:
    assert is_deleting_policy_document(document(DELETING_KIND, {}))
    assert is_deleting_policy_document(document(NAMESPACED_DELETING_KIND, {}))
    assert not is_deleting_policy_document(document(GENERATING_KIND, {}))

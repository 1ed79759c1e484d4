"""The VAP builder: Kyverno's mapping, our additions, exceptions and eligibility."""

from __future__ import annotations

from tests.unit.policies import make_policy
from vpol.desired.vap import desired_objects, ineligibility
from vpol.model.policy import NamedExpression, PolicyException, PolicyRef


def test_mapping_names_labels_owner_and_actions():
    policy = make_policy(name="req", validations=[{"expression": "true", "message": "m"}],
                         validationActions=["Warn"], failurePolicy="Ignore",
                         autogen={"validatingAdmissionPolicy": {"enabled": True},
                                  "podControllers": {"controllers": []}})
    policy = type(policy)(**{**policy.__dict__, "uid": "u-1"})
    plan = desired_objects(policy)
    assert plan.names() == ["vpol-req", "vpol-req-binding"]
    vap, binding = plan.objects
    assert vap["spec"]["validations"] == [{"expression": "true", "message": "m"}]
    assert vap["spec"]["failurePolicy"] == "Ignore"
    assert vap["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "vpol"
    assert vap["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert vap["metadata"]["ownerReferences"][0]["controller"] is True
    assert binding["spec"] == {"policyName": "vpol-req", "validationActions": ["Warn"]}


def test_not_enabled_means_nothing_unless_forced():
    policy = make_policy(validations=[{"expression": "true"}])
    assert desired_objects(policy).objects == []
    assert desired_objects(policy, force=True).objects


def test_pod_policy_gets_autogen_vaps():
    policy = make_policy(name="pods", validations=[{"expression": "object.spec.hostPID != true"}],
                         autogen={"validatingAdmissionPolicy": {"enabled": True}})
    plan = desired_objects(policy)
    assert plan.names() == ["vpol-pods", "vpol-pods-binding", "vpol-pods-autogen-defaults",
                            "vpol-pods-autogen-defaults-binding", "vpol-pods-autogen-cronjobs",
                            "vpol-pods-autogen-cronjobs-binding"]
    cron = plan.objects[4]
    assert cron["spec"]["validations"][0]["expression"] == \
        "object.spec.jobTemplate.spec.template.spec.hostPID != true"
    assert cron["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["cronjobs"]


def test_exceptions_become_negated_match_conditions():
    policy = make_policy(name="p", validations=[{"expression": "true"}],
                         autogen={"validatingAdmissionPolicy": {"enabled": True},
                                  "podControllers": {"controllers": []}})
    exc = PolicyException(name="e", namespace="ns", policy_refs=(PolicyRef("p"),),
                          match_conditions=(NamedExpression("a", "object.metadata.name == 'x'"),
                                            NamedExpression("b", "true")))
    vap = desired_objects(policy, exceptions=[exc]).objects[0]
    assert vap["spec"]["matchConditions"] == [
        {"name": "exception-ns-e", "expression": "!((object.metadata.name == 'x') && (true))"}]


def test_kyverno_only_library_makes_policy_ineligible_with_a_reason():
    policy = make_policy(validations=[{"expression": "parseImageReference(object.spec.containers[0].image)"
                                                     ".registry() == 'ghcr.io'"}])
    why = ineligibility(policy)
    assert "spec.validations[0].expression" in why and "parseImageReference" in why
    assert ineligibility(make_policy(validations=[{"expression": "quantity('1Gi').isInteger()"}])) == ""


def test_or_value_read_as_kyverno_reads_it_keeps_the_policy_off_the_api_server():
    # Kyverno's orValue on a non-optional gives the value; the API server's cel-go rejects it at run time, so a
    # native VAP would deny (failurePolicy Fail) what vpol's scan and webhook allow: the webhook enforces it.
    policy = make_policy(validations=[{"expression": "object.metadata.labels.orValue({}).app == 'x'"}])
    why = ineligibility(policy)
    assert "spec.validations[0].expression" in why and "orValue" in why
    policy = make_policy(variables=[{"name": "d", "expression": "object.spec.?x.orValue(object.spec.y)"}],
                         validations=[{"expression": "variables.d == 1"}])
    assert "spec.variables[0].expression" in ineligibility(policy)
    # request.object exists in Kyverno's request, not in the API server's.
    policy = make_policy(validations=[{"expression": "request.object.metadata.name == object.metadata.name"}])
    assert "request.object" in ineligibility(policy)
    # An optional with a literal default decides alike in both.
    assert ineligibility(make_policy(validations=[{"expression": "object.metadata.?labels.orValue({}).size() > 0"}
                                                  ])) == ""


def test_a_policy_labelled_reports_disabled_labels_its_vaps_not_their_bindings():
    from dataclasses import replace

    from vpol.controller.scanner import background_scanned

    policy = make_policy(name="quiet", validations=[{"expression": "true"}])
    assert background_scanned(policy) and not policy.reports_disabled
    for value in ("", "true", "anything"):
        labelled = replace(policy, labels={"reports.kyverno.io/disabled": value})
        assert labelled.reports_disabled and not background_scanned(labelled)
        objects = desired_objects(labelled, force=True).objects
        vaps = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
        bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
        assert vaps and all(v["metadata"]["labels"]["reports.kyverno.io/disabled"] == "true" for v in vaps)
        assert bindings and not any("reports.kyverno.io/disabled" in b["metadata"]["labels"] for b in bindings)
    assert not any("reports.kyverno.io/disabled" in o["metadata"]["labels"]
                   for o in desired_objects(policy, force=True).objects)

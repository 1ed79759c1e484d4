"""The VAP builder: Kyverno's mapping, our additions, exceptions and eligibility."""

from __future__ import annotations

from tests.unit.policies import make_policy
from vpol.model.policy import NamedExpression, PolicyException, PolicyRef
from vpol.policies.validating.vap import desired_objects, ineligibility


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
    # Kyverno's label and ownerReference (the policy at v1beta1, as Kyverno's informers deliver it), plus vpol's
    # own label by which the operator finds the objects of a policy.
    for obj in (vap, binding):
        assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kyverno", "vpol.kyverno.io/policy": "req"}
        assert obj["metadata"]["ownerReferences"] == [
            {"apiVersion": "policies.kyverno.io/v1beta1", "kind": "ValidatingPolicy", "name": "req", "uid": "u-1"}]
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


def _opted_in(**spec):
    return make_policy(name="p", autogen={"validatingAdmissionPolicy": {"enabled": True},
                                          "podControllers": {"controllers": []}}, **spec)


def test_exceptions_become_negated_match_conditions_named_as_theirs_after_the_policys():
    policy = _opted_in(matchConditions=[{"name": "own", "expression": "true"}], validations=[{"expression": "true"}])
    first = PolicyException(name="e", namespace="ns", policy_refs=(PolicyRef("p"),),
                            match_conditions=(NamedExpression("a", "object.metadata.name == 'x'\n"),
                                              NamedExpression("b", "true")))
    second = PolicyException(name="d", namespace="ns", policy_refs=(PolicyRef("p"),),
                             match_conditions=(NamedExpression("c", "false"),))
    vap = desired_objects(policy, exceptions=[first, second]).objects[0]
    # As Kyverno's generator writes them: verbatim (a block's newline kept), one per condition, in exception order.
    assert vap["spec"]["matchConditions"] == [
        {"name": "own", "expression": "true"},
        {"name": "c", "expression": "!(false)"},
        {"name": "a", "expression": "!(object.metadata.name == 'x'\n)"},
        {"name": "b", "expression": "!(true)"}]


def test_fine_grained_exceptions_become_kyvernos_variables_after_the_policys():
    policy = _opted_in(variables=[{"name": "images", "expression": "object.spec.containers.map(c, c.image)"}],
                       validations=[{"expression": "variables.images.all(i, i in exceptions.allowedImages)"}])
    exc = PolicyException(name="e", namespace="ns", policy_refs=(PolicyRef("p"),),
                          allowed_images=("nginx:*", "ghcr.io/a/b:1"))
    vap = desired_objects(policy, exceptions=[exc]).objects[0]
    assert vap["spec"]["variables"] == [
        {"name": "images", "expression": "object.spec.containers.map(c, c.image)"},
        {"name": "allowedImages", "expression": "['nginx:*', 'ghcr.io/a/b:1']"}]
    assert vap["spec"]["validations"] == [{"expression": "variables.images.all(i, i in variables.allowedImages)"}]
    assert "matchConditions" not in vap["spec"]
    # Read but given by no exception: an empty list (Kyverno's object would name an undeclared variable).
    vap = desired_objects(policy).objects[0]
    assert vap["spec"]["variables"][1] == {"name": "allowedImages", "expression": "[]"}
    # Given but not read: still declared, as Kyverno declares it.
    plain = _opted_in(validations=[{"expression": "true"}])
    values = PolicyException(name="v", policy_refs=(PolicyRef("p"),), allowed_values=("it's", "b"))
    assert desired_objects(plain, exceptions=[values]).objects[0]["spec"]["variables"] == [
        {"name": "allowedValues", "expression": '["it\'s", \'b\']'}]


def test_a_policy_variable_reading_exceptions_comes_after_their_variables():
    policy = _opted_in(variables=[{"name": "ok", "expression": "'x' in exceptions.allowedValues"}],
                       validations=[{"expression": "variables.ok"}])
    exc = PolicyException(name="e", policy_refs=(PolicyRef("p"),), allowed_values=("x",))
    names = [v["name"] for v in desired_objects(policy, exceptions=[exc]).objects[0]["spec"]["variables"]]
    assert names == ["allowedValues", "ok"]


def test_exceptions_decide_natively_as_the_engine_decides():
    policy = _opted_in(validations=[{"expression": "object.spec.containers.all(c, c.image in exceptions.allowedImages)"}])
    # A fine-grained exception with conditions allows its images where they hold; it exempts nothing.
    gated = PolicyException(name="g", namespace="a", policy_refs=(PolicyRef("p"),), allowed_images=("x:1",),
                            match_conditions=(NamedExpression("ns", "object.metadata.namespace == 'a'"),))
    free = PolicyException(name="f", namespace="b", policy_refs=(PolicyRef("p"),), allowed_images=("y:1",))
    vap = desired_objects(policy, exceptions=[gated, free]).objects[0]
    assert "matchConditions" not in vap["spec"]
    assert vap["spec"]["variables"] == [{"name": "allowedImages", "expression":
                                         "(['y:1']) + ((object.metadata.namespace == 'a') ? ['x:1'] : [])"}]
    # An exception without conditions exempts every request.
    everything = PolicyException(name="all", policy_refs=(PolicyRef("p"),))
    vap = desired_objects(policy, exceptions=[everything]).objects[0]
    assert vap["spec"]["matchConditions"] == [{"name": "all", "expression": "false"}]
    # Another kind's exception of the same name is not this policy's (Kyverno's generator matches the name only).
    other = PolicyException(name="o", policy_refs=(PolicyRef("p", "MutatingPolicy"),),
                            match_conditions=(NamedExpression("c", "true"),))
    assert "matchConditions" not in desired_objects(policy, exceptions=[other]).objects[0]["spec"]


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
    for src in ("request[?'oldObject'].hasValue()", "request.?object.hasValue()", "request\n  .oldObject != null"):
        assert "request.object" in ineligibility(make_policy(validations=[{"expression": src}])), src
    # Named in a string or a comment, it is read by neither.
    assert ineligibility(make_policy(validations=[{"expression": "'request.object' != '' // request.object\n"}])) == ""
    # An optional with a literal default decides alike in both.
    assert ineligibility(make_policy(validations=[{"expression": "object.metadata.?labels.orValue({}).size() > 0"}
                                                  ])) == ""


def test_a_policy_labelled_reports_disabled_labels_its_vaps_not_their_bindings():
    from dataclasses import replace

    from vpol.controller.scan_startup import background_scanned

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

"""Pod-controller autogen: eligibility, targets and Kyverno's textual rewrite."""

from __future__ import annotations

from tests.unit.policies import POD_RULE, make_policy
from vpol.engine.autogen import rewrite_text
from vpol.policies.validating.autogen import autogen_configs, can_autogen, status_configs


def test_rewrite_defaults_and_cronjobs():
    src = "object.spec.containers.all(c, c.name != '') && oldObject.metadata.labels == object.metadata.labels"
    assert rewrite_text(src, "defaults") == (
        "object.spec.template.spec.containers.all(c, c.name != '') && "
        "oldObject.spec.template.metadata.labels == object.spec.template.metadata.labels")
    assert rewrite_text("object.spec.x", "cronjobs") == "object.spec.jobTemplate.spec.template.spec.x"


def test_metadata_namespace_is_kept():
    assert rewrite_text("object.metadata.namespace == 'a'", "defaults") == "object.metadata.namespace == 'a'"
    assert rewrite_text("namespaceObject.metadata.name", "defaults") == "namespaceObject.metadata.name"


def test_configs_targets_and_rewritten_spec():
    policy = make_policy(validations=[{"expression": "object.spec.hostNetwork != true",
                                       "message": "no host network"}])
    configs = autogen_configs(policy)
    assert [c.name for c in configs] == ["defaults", "cronjobs"]
    defaults = configs[0]
    assert [t.resource for t in defaults.targets] == ["daemonsets", "deployments", "replicasets",
                                                       "statefulsets", "jobs"]
    assert defaults.spec["validations"][0]["expression"] == "object.spec.template.spec.hostNetwork != true"
    rules = defaults.spec["matchConstraints"]["resourceRules"]
    assert {(tuple(r["apiGroups"]), tuple(r["resources"])) for r in rules} == {
        (("apps",), ("daemonsets", "deployments", "replicasets", "statefulsets")), (("batch",), ("jobs",))}
    assert all(r["operations"] == POD_RULE["operations"] for r in rules)
    status = status_configs(configs)
    assert status["cronjobs"]["targets"] == [{"group": "batch", "version": "v1", "resource": "cronjobs",
                                              "kind": "CronJob"}]


def test_controller_list_limits_configs():
    policy = make_policy(validations=[{"expression": "true"}], autogen={"podControllers": {"controllers":
                                                                                             ["Deployments"]}})
    [c] = autogen_configs(policy)
    assert [t.kind for t in c.targets] == ["Deployment"]
    assert autogen_configs(make_policy(validations=[{"expression": "true"}],
                                       autogen={"podControllers": {"controllers": []}})) == []


def test_only_exact_single_pod_rule_qualifies():
    assert can_autogen(make_policy(validations=[{"expression": "true"}]))
    two = make_policy(validations=[{"expression": "true"}], rules=[POD_RULE, {**POD_RULE, "resources": ["services"]}])
    assert not can_autogen(two)
    named = make_policy(validations=[{"expression": "true"}], rules=[{**POD_RULE, "resourceNames": ["a"]}])
    assert not can_autogen(named)
    selected = make_policy(validations=[{"expression": "true"}], matchConstraints={
        "resourceRules": [POD_RULE], "objectSelector": {"matchLabels": {"a": "b"}}})
    assert not can_autogen(selected)

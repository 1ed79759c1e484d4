"""The webhook configuration built from the policies vpol's webhook enforces."""

from __future__ import annotations

from tests.unit.policies import make_policy
from vpol.desired.webhook import desired_webhook_configuration, webhook_path
from vpol.policies.registry import policy_variants

CM_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
URL = {"url": "https://127.0.0.1:9443", "caBundle": "Q0E="}
CHECK = [{"expression": "true"}]


def build(policies, **kw):
    return desired_webhook_configuration(policies, variants=policy_variants,
                                         client_config=kw.pop("client_config", URL), **kw)


def hooks(config):
    return {w["name"]: w for w in config["webhooks"]}


def test_no_policy_no_configuration():
    assert build([]) is None


def test_one_webhook_per_failure_policy_with_exactly_their_rules():
    fail = make_policy(name="a", validations=CHECK, rules=[CM_RULE])
    ignore = make_policy(name="b", validations=CHECK, failurePolicy="Ignore",
                         rules=[{**CM_RULE, "resources": ["secrets"], "operations": ["UPDATE", "CREATE"]}])
    config = build([fail, ignore])
    assert config["kind"] == "ValidatingWebhookConfiguration"
    assert config["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "vpol"}
    h = hooks(config)
    assert set(h) == {"fail.validate.vpol.kyverno.io", "ignore.validate.vpol.kyverno.io"}
    f, i = h["fail.validate.vpol.kyverno.io"], h["ignore.validate.vpol.kyverno.io"]
    assert f["failurePolicy"] == "Fail" and i["failurePolicy"] == "Ignore"
    assert f["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["configmaps"], "scope": "*"}]
    assert i["rules"][0]["resources"] == ["secrets"] and i["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert f["clientConfig"] == {"url": "https://127.0.0.1:9443" + webhook_path("Fail"), "caBundle": "Q0E="}
    for w in (f, i):
        assert w["sideEffects"] == "None" and w["admissionReviewVersions"] == ["v1"]
        assert w["timeoutSeconds"] == 10 and w["matchPolicy"] == "Equivalent"


def test_pod_policies_cover_their_controllers_and_rules_are_deduplicated_and_sorted():
    a = make_policy(name="a", validations=CHECK)  # pods: autogen adds the pod controllers
    b = make_policy(name="b", validations=CHECK)
    (hook,) = build([b, a])["webhooks"]
    resources = [tuple(r["resources"]) for r in hook["rules"]]
    assert ("pods",) in resources and ("cronjobs",) in resources
    assert any("deployments" in r for r in resources)
    assert len(resources) == len(set(resources))
    assert build([a, b]) == build([b, a])


def test_service_client_config_gets_the_path():
    svc = {"service": {"namespace": "vpol-system", "name": "vpol-webhook", "port": 443}, "caBundle": "Q0E="}
    (hook,) = build([make_policy(validations=CHECK, rules=[CM_RULE])], client_config=svc)["webhooks"]
    assert hook["clientConfig"]["service"] == {**svc["service"], "path": "/validate/fail"}


def test_shared_selectors_pass_through_and_protected_namespaces_are_always_excluded():
    sel = {"matchLabels": {"team": "a"}}
    p1 = make_policy(name="p1", validations=CHECK, matchConstraints={"resourceRules": [CM_RULE],
                                                                       "namespaceSelector": sel,
                                                                       "objectSelector": {"matchLabels": {"x": "1"}}})
    p2 = make_policy(name="p2", validations=CHECK, matchConstraints={"resourceRules": [CM_RULE],
                                                                       "namespaceSelector": sel,
                                                                       "objectSelector": {"matchLabels": {"x": "1"}}})
    (hook,) = build([p1, p2], excluded_namespaces=("kube-system", "vpol-system"))["webhooks"]
    assert hook["namespaceSelector"]["matchLabels"] == {"team": "a"}
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "vpol-system"]}]
    assert hook["objectSelector"] == {"matchLabels": {"x": "1"}}
    p3 = make_policy(name="p3", validations=CHECK, rules=[CM_RULE])
    (hook,) = build([p1, p3], excluded_namespaces=("kube-system",))["webhooks"]
    assert "matchLabels" not in hook["namespaceSelector"] and hook["objectSelector"] == {}
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]


def test_namespaced_policies_are_scoped_to_their_namespace():
    p = make_policy(name="n", validations=CHECK, rules=[CM_RULE])
    p = type(p)(**{**p.__dict__, "namespace": "team", "kind": "NamespacedValidatingPolicy"})
    (hook,) = build([p])["webhooks"]
    assert all(r["scope"] == "Namespaced" for r in hook["rules"])
    assert hook["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "team"}


def test_policy_timeouts():
    p = make_policy(name="t", validations=CHECK, rules=[CM_RULE], webhookConfiguration={"timeoutSeconds": 25})
    q = make_policy(name="u", validations=CHECK, rules=[CM_RULE])
    (hook,) = build([p, q], timeout_seconds=10)["webhooks"]
    assert hook["timeoutSeconds"] == 25
    (hook,) = build([q], timeout_seconds=7)["webhooks"]
    assert hook["timeoutSeconds"] == 7


def test_an_owner_is_carried_so_uninstalling_collects_the_configuration():
    from vpol.desired.webhook import owner_reference

    policy = make_policy(name="a", validations=CHECK, rules=[CM_RULE])
    assert "ownerReferences" not in build([policy])["metadata"]
    owner = owner_reference("rbac.authorization.k8s.io/v1", "ClusterRole", "vpol-operator", "u-1")
    for mutating in (False, True):
        config = build([policy], owner=owner, mutating=mutating)
        assert config["metadata"]["ownerReferences"] == [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "vpol-operator",
             "uid": "u-1"}]

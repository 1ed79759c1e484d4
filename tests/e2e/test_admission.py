"""Every policy enforced at admission, on a real API server: natively where the API server can, else by vpol's webhook.

The operator runs as `vpol run` under the manifests' ServiceAccount with the
default --vap-generation=eligible; no policy here opts in to VAP generation.
The API server calls the webhook by URL (127.0.0.1). Policies are limited to
the test's namespace (namespaceSelector), so nothing else is affected.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from typing import Any

from kubernetes import client

from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_operator import CM_RULE, POD_RULE, create_cm, expect_denied, kubectl_denied, workloads
from tests.e2e.vpol_fixtures import (  # noqa: F401 - fixtures
    Policies,
    operator,
    policies,
    vpol_installed,
    wait_for,
)

WEBHOOK_CONFIGURATION = "vpol-validating"


def dry_cm(cluster: Any, namespace: str, name: str, data: dict[str, str]) -> Any:
    """A server-side dry-run create: admission runs, nothing is stored (so it can be retried)."""
    return client.CoreV1Api(cluster.api_client).create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data), dry_run="All")


def deny_cm(expression: str, message: str = "denied by test", **extra: Any) -> dict[str, Any]:
    return {"validationActions": ["Deny"], "matchConstraints": {"resourceRules": [CM_RULE]},
            "validations": [{"expression": expression, "message": message}], **extra}


def enforcement(policies: Policies, name: str, path: str) -> dict[str, Any]:
    cond = policies.wait_condition(name, "AdmissionEnforced", "True")
    assert cond["reason"] == path, cond
    assert policies.get(name)["status"]["enforcement"] == path
    policies.wait_condition(name, "Ready", "True")
    return cond


def webhook_configuration(policies: Policies) -> dict[str, Any] | None:
    try:
        return policies.cluster.api_client.sanitize_for_serialization(
            policies.admission.read_validating_webhook_configuration(WEBHOOK_CONFIGURATION))
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_plain_deny_policy_is_enforced_natively_without_opt_in(policies: Policies, cluster: Any,
                                                               namespace: str) -> None:
    name = policies.create("native", {
        "matchConstraints": {"resourceRules": [POD_RULE]},
        "validations": [{"expression": "!has(object.spec.hostNetwork) || object.spec.hostNetwork == false",
                         "message": "host network is not allowed"}],
    })
    cond = enforcement(policies, name, "NativeVAP")
    for suffix in ("", "-autogen-defaults", "-autogen-cronjobs"):
        assert policies.vap(f"vpol-{name}{suffix}"), suffix
        assert f"vpol-{name}{suffix}" in cond["message"]
    bad = {o["kind"]: o for o in workloads(namespace, True, "bad")}
    for kind in ("Pod", "Deployment", "CronJob"):
        kubectl_denied(cluster, bad[kind], "host network is not allowed")
    for obj in workloads(namespace, False, "good"):
        cluster.kubectl("create", "-f", "-", input=json.dumps(obj))


def test_resource_lookup_policy_is_enforced_by_the_webhook(policies: Policies, cluster: Any, namespace: str) -> None:
    create_cm(cluster, namespace, "target", {"k": "v"})
    name = policies.create("lookup", deny_cm(
        "!has(object.data) || !('ref' in object.data) || "
        "resource.List('v1', 'configmaps', object.metadata.namespace).items"
        ".exists(c, c.metadata.name == object.data.ref)",
        "ref must name an existing ConfigMap"))
    cond = enforcement(policies, name, "Webhook")
    assert "resource" in cond["message"]  # why not natively: the Kyverno-only library is named
    assert policies.vap(f"vpol-{name}") is None
    config = webhook_configuration(policies)
    assert config is not None and name in config["metadata"]["annotations"]["vpol.kyverno.io/policies"]
    expect_denied(lambda: dry_cm(cluster, namespace, "dangling", {"ref": "nothere"}),
                  "ref must name an existing ConfigMap")
    create_cm(cluster, namespace, "pointing", {"ref": "target"})


def test_kyverno_hash_and_image_policies_are_enforced_by_the_webhook(policies: Policies, cluster: Any,
                                                                     namespace: str) -> None:
    hashed = policies.create("hash", deny_cm("!has(object.data) || !('secret' in object.data) || "
                                             "sha256(object.data.secret) != "
                                             "'5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8'",
                                             "that password is banned"))
    images = policies.create("image", {
        "validationActions": ["Deny"], "matchConstraints": {"resourceRules": [POD_RULE]},
        "validations": [{"expression": "object.spec.containers.all(c, "
                                       "parseImageReference(c.image).registry() == 'registry.local')",
                         "message": "images must come from registry.local"}]})
    enforcement(policies, hashed, "Webhook")
    enforcement(policies, images, "Webhook")
    expect_denied(lambda: dry_cm(cluster, namespace, "pw", {"secret": "password"}), "that password is banned")
    create_cm(cluster, namespace, "pw-ok", {"secret": "correct horse"})
    bad = {o["kind"]: o for o in workloads(namespace, False, "elsewhere")}
    for kind in ("Pod", "Deployment", "CronJob"):  # pod-controller variants go through the webhook too
        obj = json.loads(json.dumps(bad[kind]).replace("registry.local/app:1", "docker.io/library/nginx:1"))
        kubectl_denied(cluster, obj, "images must come from registry.local")
    for obj in workloads(namespace, False, "local"):
        cluster.kubectl("create", "-f", "-", input=json.dumps(obj))


def test_json_mode_policy_is_not_applicable_to_admission(policies: Policies) -> None:
    name = policies.create("json", {"evaluation": {"mode": "JSON"},
                                    "validations": [{"expression": "has(object.kind)"}]})
    policies.wait_condition(name, "Ready", "True")
    status = policies.get(name)["status"]
    assert status["enforcement"] == "NotApplicable"
    assert not any(c["type"] == "AdmissionEnforced" for c in status["conditions"])


def _review(operator: OperatorProcess, path: str, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """Call the webhook directly, as the API server does (certificate not verified: we test the answer)."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "test-uid", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "namespace": namespace,
        "name": obj["metadata"]["name"], "operation": "CREATE", "object": obj,
        "userInfo": {"username": "tester"}}}
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(f"https://127.0.0.1:{operator.webhook_port}{path}", data=json.dumps(review).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=ctx, timeout=15) as r:
        return dict(json.loads(r.read())["response"])


def test_warn_and_audit_through_the_webhook(policies: Policies, cluster: Any, namespace: str,
                                            operator: OperatorProcess) -> None:
    expr = "!has(object.data) || !('forbidden' in object.data) || sha256('x') == ''"
    warn = policies.create("wwarn", {**deny_cm(expr, "forbidden key"), "validationActions": ["Warn"]})
    audit = policies.create("waudit", {**deny_cm(expr, "forbidden key"), "validationActions": ["Audit"],
                                       "auditAnnotations": [{"key": "who",
                                                             "valueExpression": "request.userInfo.username"}]})
    enforcement(policies, warn, "Webhook")
    enforcement(policies, audit, "Webhook")
    manifest = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "warned", "namespace": namespace}, "data": {"forbidden": "1"}})
    wait_for("the webhook's warning", lambda: f"Policy {warn} failed: forbidden key" in
             cluster.kubectl("apply", "-f", "-", input=manifest).stderr, 30, 1)
    assert client.CoreV1Api(cluster.api_client).read_namespaced_config_map("warned", namespace)
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": namespace},
           "data": {"forbidden": "1"}}
    answer = _review(operator, "/validate/fail", obj, namespace)
    assert answer["allowed"] is True and answer["uid"] == "test-uid"
    assert answer["auditAnnotations"][f"{audit}.validation_failure"] == "forbidden key"
    assert answer["auditAnnotations"][f"{audit}.who"] == "tester"
    assert f"Policy {warn} failed: forbidden key" in answer["warnings"]


def test_webhook_rules_follow_the_policies_and_drift_is_repaired(policies: Policies, cluster: Any,
                                                                  namespace: str) -> None:
    wait_for("no webhook configuration without webhook policies", lambda: webhook_configuration(policies) is None, 60)
    name = policies.create("rules", deny_cm("sha256(object.metadata.name) != ''"))
    enforcement(policies, name, "Webhook")
    config = webhook_configuration(policies)
    assert config is not None
    # One webhook for the policy's failurePolicy, and the enforcement probe's (vpol.desired.probe).
    (hook, probe) = config["webhooks"]
    assert probe["name"] == "probe.validate.vpol.kyverno.io" and probe["failurePolicy"] == "Ignore"
    assert probe["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "vpol-system"}}
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"] and hook["timeoutSeconds"] == 10
    assert [r["resources"] for r in hook["rules"]] == [["configmaps"]]
    excluded = [e for e in hook["namespaceSelector"]["matchExpressions"] if e["key"] == "kubernetes.io/metadata.name"]
    assert excluded and {"kube-system", "vpol-system"} <= set(excluded[0]["values"])
    # deleted: repaired
    policies.admission.delete_validating_webhook_configuration(WEBHOOK_CONFIGURATION)
    wait_for("the webhook configuration to come back", lambda: webhook_configuration(policies), 30)
    # the last webhook policy goes: so do the rules
    policies.api.delete_cluster_custom_object("policies.kyverno.io", "v1", "validatingpolicies", name)
    wait_for("the webhook configuration to be removed", lambda: webhook_configuration(policies) is None, 30)


def test_runaway_expression_is_answered_within_the_timeout(policies: Policies, cluster: Any,
                                                           namespace: str) -> None:
    slow = policies.create("runaway", {
        # seconds of CPU per element, little memory: a time runaway, not a memory one
        **deny_cm("sha256('x') != '' && lists.range(20).all(i, "
                  "sets.equivalent(lists.range(9999), lists.range(9999).reverse()))", "never"),
        "matchConditions": [{"name": "only-slow", "expression": "object.metadata.name.startsWith('slow')"}],
        "failurePolicy": "Fail"})
    quick = policies.create("quick", deny_cm("sha256(object.metadata.name) != '' && "
                                             "!object.metadata.name.startsWith('banned')", "banned name"))
    enforcement(policies, slow, "Webhook")
    enforcement(policies, quick, "Webhook")
    started = time.monotonic()
    body = expect_denied(lambda: dry_cm(cluster, namespace, "slow-1", {}), "vpol could not evaluate", 20)
    assert time.monotonic() - started < 10, "answered after the webhook timeout"
    assert "time limit" in body
    # other requests keep flowing, and decide correctly
    expect_denied(lambda: dry_cm(cluster, namespace, "banned-1", {}), "banned name")
    create_cm(cluster, namespace, "fine-1", {})


def test_namespaced_policy_is_enforced_by_the_webhook_only_in_its_namespace(policies: Policies, cluster: Any,
                                                                           namespace: str) -> None:
    custom = client.CustomObjectsApi(cluster.api_client)
    core = client.CoreV1Api(cluster.api_client)
    other = f"{namespace[:50]}-elsewhere"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    name = "no-bad-names"
    body = {"apiVersion": "policies.kyverno.io/v1", "kind": "NamespacedValidatingPolicy",
            "metadata": {"name": name, "namespace": namespace},
            # Native generation off: the webhook path (the native one is tests/e2e/test_namespaced_native.py).
            "spec": deny_cm("!object.metadata.name.startsWith('bad')", "bad names are not allowed here",
                            autogen={"validatingAdmissionPolicy": {"enabled": False}})}
    custom.create_namespaced_custom_object("policies.kyverno.io", "v1", namespace, "namespacedvalidatingpolicies",
                                           body)
    try:
        def condition() -> Any:
            obj = custom.get_namespaced_custom_object("policies.kyverno.io", "v1", namespace,
                                                      "namespacedvalidatingpolicies", name)
            found = [c for c in (obj.get("status") or {}).get("conditions") or []
                     if c["type"] == "AdmissionEnforced" and c["status"] == "True"]
            return (obj, found[0]) if found else None

        obj, cond = wait_for("the namespaced policy enforced", condition, 60)
        assert cond["reason"] == "Webhook" and obj["status"]["enforcement"] == "Webhook"
        assert obj["status"]["conditionStatus"]["ready"] is True
        assert not policies.admission.list_validating_admission_policy(
            label_selector=f"vpol.kyverno.io/policy={name}").items
        expect_denied(lambda: dry_cm(cluster, namespace, "bad-here", {}), "bad names are not allowed here")
        create_cm(cluster, other, "bad-there", {})  # another namespace: not its business
        create_cm(cluster, namespace, "good-here", {})
    finally:
        custom.delete_namespaced_custom_object("policies.kyverno.io", "v1", namespace,
                                               "namespacedvalidatingpolicies", name)
        core.delete_namespace(other)


def _evaluations(operator: OperatorProcess) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in operator.metrics().splitlines():
        if line.startswith("vpol_admission_evaluations_total{"):
            out[line.split('where="', 1)[1].split('"', 1)[0]] = float(line.rsplit(" ", 1)[1])
    return out


def test_bounded_requests_are_answered_by_the_serving_process_and_the_rest_by_a_worker(
        policies: Policies, cluster: Any, namespace: str, operator: OperatorProcess) -> None:
    """vpol.policies.inline: a webhook whose policies' work is bounded (vpol.cel.cost) is answered by the serving
    process, a webhook with a Kyverno library call (no bound) by a worker, and so is a request too large to be
    answered inline; the decisions are the policies' either way."""
    webhook_only = {"autogen": {"validatingAdmissionPolicy": {"enabled": False}}}
    bounded = policies.create("inline", {**deny_cm("!has(object.data) || !('inline-bad' in object.data)",
                                                   "inline-bad is forbidden"), **webhook_only})
    library = policies.create("worker", {**deny_cm("!has(object.data) || !('worker-bad' in object.data) || "
                                                   "sha256('x') == ''", "worker-bad is forbidden"),
                                         **webhook_only, "failurePolicy": "Ignore"})
    enforcement(policies, bounded, "Webhook")
    enforcement(policies, library, "Webhook")
    before = _evaluations(operator)
    expect_denied(lambda: dry_cm(cluster, namespace, "a", {"inline-bad": "1"}), "inline-bad is forbidden")
    after_inline = _evaluations(operator)
    assert after_inline.get("inline", 0) > before.get("inline", 0)
    expect_denied(lambda: dry_cm(cluster, namespace, "b", {"worker-bad": "1"}), "worker-bad is forbidden")
    after_worker = _evaluations(operator)
    assert after_worker.get("worker", 0) > after_inline.get("worker", 0)
    # a request larger than the inline limit (128 KiB) goes to a worker, with the same decision
    inline_before = after_worker.get("inline", 0)
    expect_denied(lambda: dry_cm(cluster, namespace, "c", {"inline-bad": "1", "big": "x" * 200_000}),
                  "inline-bad is forbidden")
    assert dry_cm(cluster, namespace, "d", {"fine": "1", "big": "x" * 200_000}).metadata.name == "d"
    last = _evaluations(operator)
    # the Ignore webhook's requests always go to a worker: two for c and d, two more for the Fail webhook's
    assert last["worker"] >= after_worker["worker"] + 4 and last.get("inline", 0) == inline_before

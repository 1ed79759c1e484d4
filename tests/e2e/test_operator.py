"""The operator end to end on a real API server: status, native VAPs (with pod controllers), drift repair.

The operator runs as `vpol run` under the manifests' ServiceAccount. Every
policy is limited to the test's namespace (namespaceSelector), so generated
VAPs never affect anything else on a shared cluster.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.operator_process import OperatorProcess
from tests.e2e.vpol_fixtures import (  # noqa: F401 - fixtures
    GROUP,
    PLURAL,
    VERSION,
    Policies,
    operator,
    operator_stopped,
    policies,
    vpol_installed,
    wait_for,
)


CM_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}
POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}


def cm_policy(actions: list[str]) -> dict[str, Any]:
    return {
        "validationActions": actions,
        "matchConstraints": {"resourceRules": [CM_RULE]},
        "autogen": {"validatingAdmissionPolicy": {"enabled": True}},
        "validations": [{
            "expression": "has(object.data) && 'owner' in object.data",
            "messageExpression": "'configmap ' + object.metadata.name + ' needs an owner key'",
        }],
    }


def create_cm(cluster: Any, namespace: str, name: str, data: dict[str, str], dry_run: bool = False) -> Any:
    core = client.CoreV1Api(cluster.api_client)
    return core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name), data=data), dry_run="All" if dry_run else None)


def expect_denied(fn: Callable[[], Any], fragment: str, timeout: float = 30) -> str:
    """Call fn until the API server denies it (VAP enforcement is eventually consistent)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fn()
        except ApiException as exc:
            assert exc.status in (400, 403, 422), exc
            assert fragment in exc.body, exc.body
            return str(exc.body)
        if time.monotonic() > deadline:
            raise AssertionError("request was admitted but should have been denied")
        time.sleep(0.5)


def test_deny_policy_generates_an_enforced_vap(policies: Policies, cluster: Any, namespace: str) -> None:
    name = policies.create("deny", cm_policy(["Deny"]))
    policies.wait_condition(name, "Ready", "True")
    cluster.kubectl("wait", "--for=condition=Ready", f"validatingpolicies.{GROUP}/{name}", "--timeout=30s")
    status = policies.get(name)["status"]
    assert status["conditionStatus"]["ready"] is True and status["generated"] is True
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types == {"Compiled": "True", "TypeChecked": "True", "RBACPermissionsGranted": "True",
                     "VAPGenerated": "True", "AdmissionEnforced": "True", "Ready": "True"}
    enforced = next(c for c in status["conditions"] if c["type"] == "AdmissionEnforced")
    assert enforced["reason"] == "NativeVAP" and f"vpol-{name}" in enforced["message"]
    assert status["enforcement"] == "NativeVAP"
    vap = policies.vap(f"vpol-{name}")
    binding = policies.binding(f"vpol-{name}-binding")
    assert vap and binding
    assert vap["spec"]["validations"][0]["expression"] == "has(object.data) && 'owner' in object.data"
    assert vap["metadata"]["ownerReferences"][0]["name"] == name
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["policyName"] == f"vpol-{name}"
    # A dry run: an attempt admitted before the VAP takes effect must not leave an object behind (the next
    # attempt would then fail with AlreadyExists instead of being denied).
    body = expect_denied(lambda: create_cm(cluster, namespace, "bad-" + name[-6:], {"x": "1"}, dry_run=True),
                         "needs an owner key")
    assert f"configmap bad-{name[-6:]} needs an owner key" in body
    create_cm(cluster, namespace, "good", {"owner": "me"})


def test_warn_and_audit_admit(policies: Policies, cluster: Any, namespace: str) -> None:
    warn = policies.create("warn", cm_policy(["Warn"]))
    audit = policies.create("audit", cm_policy(["Audit"]))
    for name in (warn, audit):
        policies.wait_condition(name, "VAPGenerated", "True")
    assert policies.binding(f"vpol-{warn}-binding")["spec"]["validationActions"] == ["Warn"]
    assert policies.binding(f"vpol-{audit}-binding")["spec"]["validationActions"] == ["Audit"]
    time.sleep(2)
    # kubectl prints admission warnings on stderr
    manifest = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "warned", "namespace": namespace},
                           "data": {"x": "1"}})

    def warned() -> bool:
        out = cluster.kubectl("apply", "-f", "-", input=manifest)
        return "needs an owner key" in out.stderr

    wait_for("a warning from the Warn policy", warned, 30, 1)
    assert client.CoreV1Api(cluster.api_client).read_namespaced_config_map("warned", namespace)


POD_SPEC = {"containers": [{"name": "c", "image": "registry.local/app:1"}]}


def workloads(namespace: str, host_network: bool, suffix: str) -> list[dict[str, Any]]:
    spec = {**POD_SPEC, "hostNetwork": host_network}
    template = {"metadata": {"labels": {"app": "x"}}, "spec": spec}
    job_template = {"metadata": {"labels": {"app": "x"}}, "spec": {**spec, "restartPolicy": "Never"}}
    md = lambda kind: {"name": f"{kind}-{suffix}", "namespace": namespace}  # noqa: E731
    return [
        {"apiVersion": "v1", "kind": "Pod", "metadata": md("pod"), "spec": spec},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": md("deploy"),
         "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": md("sts"),
         "spec": {"selector": {"matchLabels": {"app": "x"}}, "serviceName": "x", "template": template}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": md("job"), "spec": {"template": job_template}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": md("cron"),
         "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": job_template}}}},
    ]


def test_pod_policy_is_enforced_on_pod_controllers(policies: Policies, cluster: Any, namespace: str) -> None:
    name = policies.create("pods", {
        "matchConstraints": {"resourceRules": [POD_RULE]},
        "autogen": {"validatingAdmissionPolicy": {"enabled": True}},
        "validations": [{"expression": "!has(object.spec.hostNetwork) || object.spec.hostNetwork == false",
                         "message": "host network is not allowed"}],
    })
    policies.wait_condition(name, "Ready", "True")
    status = policies.get(name)["status"]
    assert set(status["autogen"]["configs"]) == {"defaults", "cronjobs"}
    for suffix in ("", "-autogen-defaults", "-autogen-cronjobs"):
        assert policies.vap(f"vpol-{name}{suffix}"), suffix
    for obj in workloads(namespace, True, "bad"):
        kubectl_denied(cluster, obj, "host network is not allowed")
    for obj in workloads(namespace, False, "good"):
        cluster.kubectl("create", "-f", "-", input=json.dumps(obj))


def kubectl_denied(cluster: Any, obj: dict[str, Any], fragment: str, timeout: float = 30) -> None:
    """`kubectl create` of obj must be denied with fragment in the message (retrying while VAPs propagate)."""
    deadline = time.monotonic() + timeout
    while True:
        proc = cluster.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
        if proc.returncode != 0:
            # The API server picks a rewritten webhook configuration up asynchronously: right after the
            # leader changed it, a call may still go to the previous (test) operator's URL. Retry that.
            if "failed calling webhook" in proc.stderr and time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            assert fragment in proc.stderr, proc.stderr
            return
        cluster.kubectl("delete", "--wait=true", "-f", "-", input=json.dumps(obj), check=False)
        if time.monotonic() > deadline:
            raise AssertionError(f"{obj['kind']} {obj['metadata']['name']} was admitted")
        time.sleep(0.5)


def test_syntax_error_is_reported_and_fixing_makes_ready(operator: OperatorProcess, policies: Policies) -> None:
    spec = cm_policy(["Deny"])
    spec["validations"][0]["expression"] = "object.data.owner =="
    with operator_stopped(operator):  # else vpol's policy validation refuses it (tests/e2e/test_policy_validation.py)
        name = policies.create("syntax", spec)
    compiled = policies.wait_condition(name, "Compiled", "False")
    assert "spec.validations[0].expression" in compiled["message"]
    assert "(1:" in compiled["message"]
    assert policies.condition(name, "Ready")["status"] == "False"
    assert policies.get(name)["status"]["conditionStatus"]["ready"] is False
    assert policies.vap(f"vpol-{name}") is None
    policies.replace_spec(name, cm_policy(["Deny"]))
    policies.wait_condition(name, "Ready", "True")
    assert policies.vap(f"vpol-{name}")


def test_drift_is_repaired_and_cleanup_follows_the_policy(policies: Policies, cluster: Any) -> None:
    name = policies.create("drift", cm_policy(["Deny"]))
    policies.wait_condition(name, "VAPGenerated", "True")
    vap_name = f"vpol-{name}"
    # deleted: restored
    policies.admission.delete_validating_admission_policy(vap_name)
    wait_for("the VAP to come back", lambda: policies.vap(vap_name), 20)
    # edited: restored
    vap = policies.vap(vap_name)
    patch = {"spec": {"validations": [{"expression": "true"}]}}
    policies.admission.patch_validating_admission_policy(vap_name, patch)
    wait_for("the VAP content to be restored", lambda: policies.vap(vap_name)["spec"]["validations"][0]["expression"]
             == vap["spec"]["validations"][0]["expression"], 20)
    binding_name = f"{vap_name}-binding"
    policies.admission.delete_validating_admission_policy_binding(binding_name)
    wait_for("the binding to come back", lambda: policies.binding(binding_name), 20)
    # generation turned off: removed
    spec = cm_policy(["Deny"])
    spec["autogen"] = {"validatingAdmissionPolicy": {"enabled": False}}
    policies.replace_spec(name, spec)
    wait_for("the VAP to be removed", lambda: policies.vap(vap_name) is None and policies.binding(binding_name) is None,
             20)
    status = policies.get(name)["status"]
    assert status["generated"] is False
    assert not any(c["type"] == "VAPGenerated" for c in status["conditions"])
    # policy deleted: everything it generated goes
    policies.replace_spec(name, cm_policy(["Deny"]))
    wait_for("the VAP again", lambda: policies.vap(vap_name), 20)
    policies.api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    wait_for("generated objects to be deleted",
             lambda: policies.vap(vap_name) is None and policies.binding(binding_name) is None, 30)


def test_kyverno_only_library_is_not_generated(policies: Policies) -> None:
    spec = cm_policy(["Deny"])
    spec["validations"] = [{"expression": "sha256(object.metadata.name) != ''"}]
    name = policies.create("ineligible", spec)
    cond = policies.wait_condition(name, "VAPGenerated", "False")
    assert cond["reason"] == "NotEligible"
    assert "sha256" in cond["message"] and "spec.validations[0].expression" in cond["message"]
    assert policies.vap(f"vpol-{name}") is None
    # not generated, but enforced all the same: by vpol's webhook
    enforced = policies.wait_condition(name, "AdmissionEnforced", "True")
    assert enforced["reason"] == "Webhook" and "sha256" in enforced["message"]
    assert policies.condition(name, "Ready")["status"] == "True"


def test_no_status_write_without_change(policies: Policies, operator: OperatorProcess) -> None:
    name = policies.create("quiet", cm_policy(["Audit"]))
    policies.wait_condition(name, "Ready", "True")
    time.sleep(3)
    rv = policies.get(name)["metadata"]["resourceVersion"]
    time.sleep(5)  # several reconciles happen (VAP status updates, resync), none may write
    assert policies.get(name)["metadata"]["resourceVersion"] == rv


def _generated(policies: Policies, selector: str) -> list[str]:
    items = policies.admission.list_validating_admission_policy(label_selector=selector).items
    return sorted(i.metadata.name for i in items)


def test_killed_mid_reconcile_converges_without_orphans(policies: Policies, operator: OperatorProcess) -> None:
    names = [policies.create(f"kill{i}", cm_policy(["Deny"])) for i in range(6)]
    time.sleep(0.3)
    operator.kill()  # SIGKILL while reconciles are in flight
    # delete one policy while the operator is down: its objects must not survive
    gone = names.pop()
    policies.api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, gone)
    operator.start()
    for name in names:
        policies.wait_condition(name, "Ready", "True")
    for name in names:
        assert _generated(policies, f"vpol.kyverno.io/policy={name}") == [f"vpol-{name}"]
        binding = policies.binding(f"vpol-{name}-binding")
        assert binding is not None
    wait_for("the deleted policy's objects to be gone (owner references)",
             lambda: _generated(policies, f"vpol.kyverno.io/policy={gone}") == [], 60)


def test_two_replicas_do_not_fight(policies: Policies, operator: OperatorProcess, vpol_installed: Any,
                                   tmp_path: Any) -> None:
    from tests.e2e.operator_process import sa_kubeconfig

    operator.stop()
    kubeconfig = sa_kubeconfig(vpol_installed, tmp_path / "kubeconfig")
    replicas = [OperatorProcess(kubeconfig, tmp_path / f"op{i}.log", peering="vpol", priority=10 + i).start()
                for i in range(2)]
    try:
        name = policies.create("replicas", cm_policy(["Deny"]))
        policies.wait_condition(name, "Ready", "True")
        time.sleep(3)
        policy_rv = policies.get(name)["metadata"]["resourceVersion"]
        vap_rv = policies.vap(f"vpol-{name}")["metadata"]["resourceVersion"]
        time.sleep(6)
        assert policies.get(name)["metadata"]["resourceVersion"] == policy_rv
        assert policies.vap(f"vpol-{name}")["metadata"]["resourceVersion"] == vap_rv
        # the lower-priority replica stands by (Kopf peering)
        assert "Pausing" in replicas[0].log() or "paused" in replicas[0].log().lower(), replicas[0].log()
    finally:
        for r in replicas:
            r.stop()
        operator.start()


def test_missing_read_access_is_reported(policies: Policies) -> None:
    # The manifests' scanned-kinds role deliberately leaves out secrets.
    spec = {"validationActions": ["Audit"],
            "matchConstraints": {"resourceRules": [{**CM_RULE, "resources": ["secrets"]}]},
            "validations": [{"expression": "true"}]}
    name = policies.create("rbac", spec)
    cond = policies.wait_condition(name, "RBACPermissionsGranted", "False")
    assert "list v1 secrets" in cond["message"] and "watch v1 secrets" in cond["message"]
    assert policies.condition(name, "Ready")["status"] == "False"
    # without background scans the operator needs no read access
    spec["evaluation"] = {"background": {"enabled": False}}
    policies.replace_spec(name, spec)
    cond = policies.wait_condition(name, "RBACPermissionsGranted", "True")
    assert "Background scanning disabled" in cond["message"]
    policies.wait_condition(name, "Ready", "True")


def test_type_warnings_reach_the_status(policies: Policies) -> None:
    spec = cm_policy(["Audit"])
    spec["validations"] = [{"expression": "object.metadata.name != ''"},
                           {"expression": "object.dta.size() > 0"}]  # typo: ConfigMaps have `data`
    name = policies.create("typo", spec)
    cond = policies.wait_condition(name, "TypeChecked", "False")
    assert "spec.validations[1].expression" in cond["message"]
    # Informational only: Ready once the API server enforces the policy, warnings or not.
    ready = policies.wait_condition(name, "Ready", "True")
    assert policies.condition(name, "TypeChecked")["status"] == "False" and ready["reason"] == "Ready"

    def warnings() -> Any:
        status = policies.get(name).get("status") or {}
        return (status.get("typeChecking") or {}).get("expressionWarnings")

    found = wait_for("expression warnings", warnings, 30)
    assert any(w["fieldRef"] == "spec.validations[1].expression" and "/v1, Kind=ConfigMap" in w["warning"]
               and "dta" in w["warning"] for w in found), found
    assert all(w["fieldRef"] != "spec.validations[0].expression" for w in found)

"""MutatingPolicies with mutateExisting on the real control plane (the operator runs as the manifests'
ServiceAccount: its RBAC is what background mutation may do).

Kyverno's semantics (docs/mutate-existing.md): existing targets are mutated when the policy is created, on each
trigger, and (background enabled) in each full scan; targetMatchConstraints choose targets other than the
trigger (resource rules, or an expression evaluated on the trigger); nothing is written when nothing changes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.operator_process import OperatorProcess, sa_kubeconfig
from tests.e2e.test_policy_validation import served_by
from tests.e2e.vpol_fixtures import Policies, mutating_policies, vpol_installed, wait_for  # noqa: F401
from vpol.desired.report import report_name

CM = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}
SERVICE = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["services"]}
#: Full scans every few seconds, so the background path can be seen acting (or not).
SCAN_INTERVAL = 8


@pytest.fixture(scope="module")
def operator(vpol_installed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    tmp = tmp_path_factory.mktemp("operator-mutate-existing")
    kubeconfig = sa_kubeconfig(vpol_installed, tmp / "kubeconfig")
    proc = OperatorProcess(kubeconfig, tmp / "operator.log", extra=("--scan-interval", str(SCAN_INTERVAL))).start()
    yield proc
    proc.stop()


def label(key: str, value: str) -> str:
    return f'Object{{metadata: Object.metadata{{labels: {{"{key}": {value}}}}}}}'


def spec(expression: str, operations: list[str], **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "evaluation": {"mutateExisting": {"enabled": True}},
        "matchConstraints": {"resourceRules": [{**CM, "operations": operations}]},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}],
    }
    out.update(extra)
    return out


def core(cluster: Any) -> Any:
    return client.CoreV1Api(cluster.api_client)


def make_cm(cluster: Any, namespace: str, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    body = {"metadata": {"name": name, "labels": labels or {}}, "data": {"k": "v"}}
    return cluster.api_client.sanitize_for_serialization(core(cluster).create_namespaced_config_map(namespace, body))


def labels_of(cluster: Any, namespace: str, name: str) -> dict[str, str]:
    return core(cluster).read_namespaced_config_map(name, namespace).metadata.labels or {}


def versions(cluster: Any, namespace: str) -> dict[str, str]:
    return {c.metadata.name: c.metadata.resource_version
            for c in core(cluster).list_namespaced_config_map(namespace).items}


def metric(operator: OperatorProcess, policy: str, result: str) -> float:
    needle = f'vpol_background_mutations_total{{policy="{policy}",result="{result}"}} '
    for line in operator.metrics().splitlines():
        if line.startswith(needle):
            return float(line.split()[-1])
    return 0.0


def report_result(cluster: Any, namespace: str, uid: str, policy: str) -> dict[str, Any] | None:
    api = client.CustomObjectsApi(cluster.api_client)
    try:
        report = api.get_namespaced_custom_object("wgpolicyk8s.io", "v1alpha2", namespace, "policyreports",
                                                  report_name(uid))
    except client.ApiException:
        return None
    return next((r for r in report.get("results") or [] if r.get("policy") == policy), None)


def test_existing_targets_are_mutated_on_creation_then_on_triggers_and_a_second_pass_writes_nothing(
        operator: OperatorProcess, mutating_policies: Policies, cluster: Any, namespace: str) -> None:
    existing = [make_cm(cluster, namespace, f"old-{i}") for i in range(3)]
    # CREATE only: removing the label later (an UPDATE) is no trigger, and the background scan is off.
    name = mutating_policies.create("existing", spec(label("team", '"platform"'), ["CREATE"],
                                         evaluation={"mutateExisting": {"enabled": True},
                                                     "background": {"enabled": False}}))
    cond = mutating_policies.wait_condition(name, "MutateExisting", "True")
    assert "ConfigMap" in cond["message"] and "on each trigger" in cond["message"], cond
    mutating_policies.wait_condition(name, "Ready", "True")
    for cm in existing:
        wait_for(f"{cm['metadata']['name']} mutated",
                 lambda cm=cm: labels_of(cluster, namespace, cm["metadata"]["name"]).get("team") == "platform", 60)
    # Reported on each target.
    result = wait_for("the pass result on the target's report",
                      lambda: report_result(cluster, namespace, existing[0]["metadata"]["uid"], name), 30)
    assert result["result"] == "pass" and result["message"] == "success", result
    assert metric(operator, name, "mutated") >= 3

    # Taken off by hand (an UPDATE, no trigger): stays off while no trigger comes, the background scan is off.
    core(cluster).patch_namespaced_config_map("old-0", namespace, {"metadata": {"labels": {"team": None}}})
    time.sleep(SCAN_INTERVAL + 4)
    assert "team" not in labels_of(cluster, namespace, "old-0")
    # A trigger: every target again (the one changed by hand is mutated, the others are left alone).
    before = versions(cluster, namespace)
    mutated_before = metric(operator, name, "mutated")
    make_cm(cluster, namespace, "trigger")
    wait_for("old-0 mutated by the trigger", lambda: labels_of(cluster, namespace, "old-0").get("team") == "platform",
             60)
    after = versions(cluster, namespace)
    assert after["old-1"] == before["old-1"] and after["old-2"] == before["old-2"], (before, after)
    # A second identical pass (another trigger) writes nothing.
    wait_for("the first trigger's writes", lambda: metric(operator, name, "mutated") >= mutated_before + 1, 30)
    time.sleep(2)
    settled = versions(cluster, namespace)
    unchanged = metric(operator, name, "unchanged")
    make_cm(cluster, namespace, "trigger-2")
    wait_for("the second pass", lambda: metric(operator, name, "unchanged") >= unchanged + 3, 60)
    final = versions(cluster, namespace)
    assert all(final[n] == settled[n] for n in settled), (settled, final)


def test_background_scans_restore_targets_when_background_is_enabled(
        operator: OperatorProcess, mutating_policies: Policies, cluster: Any, namespace: str) -> None:
    make_cm(cluster, namespace, "scanned")
    name = mutating_policies.create("background", spec(label("scanned", '"yes"'), ["CREATE"]))
    mutating_policies.wait_condition(name, "Ready", "True")
    wait_for("mutated at creation", lambda: labels_of(cluster, namespace, "scanned").get("scanned") == "yes", 60)
    core(cluster).patch_namespaced_config_map("scanned", namespace, {"metadata": {"labels": {"scanned": None}}})
    wait_for("restored by a full scan", lambda: labels_of(cluster, namespace, "scanned").get("scanned") == "yes",
             3 * SCAN_INTERVAL + 30)


def test_target_match_constraints_choose_other_targets(operator: OperatorProcess, mutating_policies: Policies, cluster: Any,
                                                       namespace: str, unique_name: Callable[..., str]) -> None:
    # Plain rules: a Service in the namespace triggers; ConfigMaps labelled target=yes are the targets.
    chosen = make_cm(cluster, namespace, "chosen", {"target": "yes"})
    make_cm(cluster, namespace, "ignored")
    ns_selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    name = mutating_policies.create("targets", {
        "evaluation": {"mutateExisting": {"enabled": True}, "background": {"enabled": False}},
        "matchConstraints": {"resourceRules": [{**SERVICE, "operations": ["CREATE", "DELETE"]}]},
        "targetMatchConstraints": {"resourceRules": [{**CM, "operations": ["*"]}], "namespaceSelector": ns_selector,
                                   "objectSelector": {"matchLabels": {"target": "yes"}}},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
            "expression": label("trigger", "request.operation + '-' + request.name")}}],
    })
    mutating_policies.wait_condition(name, "Ready", "True")
    # Created: the targets get the policy's synthetic request (an UPDATE of themselves).
    wait_for("the target mutated at creation",
             lambda: labels_of(cluster, namespace, "chosen").get("trigger") == "UPDATE-chosen", 60)
    svc = {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}
    core(cluster).create_namespaced_service(namespace, svc)
    wait_for("the target mutated with the trigger's request",
             lambda: labels_of(cluster, namespace, "chosen").get("trigger") == "CREATE-web", 60)
    core(cluster).delete_namespaced_service("web", namespace)
    wait_for("the target mutated by the deleted trigger",
             lambda: labels_of(cluster, namespace, "chosen").get("trigger") == "DELETE-web", 60)
    assert "trigger" not in labels_of(cluster, namespace, "ignored")
    assert chosen["metadata"]["uid"]

    # An expression: targets read from the trigger (resource.List), in another namespace than the trigger.
    other = unique_name("ns", "targets")
    core(cluster).create_namespace({"metadata": {"name": other}})
    try:
        make_cm(cluster, other, "remote-1")
        make_cm(cluster, other, "remote-2")
        expr = mutating_policies.create("expression", {
            "evaluation": {"mutateExisting": {"enabled": True}},
            "matchConstraints": {"resourceRules": [{**CM, "operations": ["CREATE"]}], "namespaceSelector": ns_selector},
            "targetMatchConstraints": {
                "expression": "has(object.data) && 'targets' in object.data ? "
                              "resource.List('v1', 'configmaps', object.data.targets) : {'items': []}"},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": label("from", "request.name")}}],
        })
        mutating_policies.wait_condition(expr, "Ready", "True")
        trigger = {"metadata": {"name": "pointer"}, "data": {"targets": other}}
        core(cluster).create_namespaced_config_map(namespace, trigger)
        for n in ("remote-1", "remote-2"):
            wait_for(f"{n} mutated", lambda n=n: labels_of(cluster, other, n).get("from") == "pointer", 60)
        # The trigger itself is not mutated (its policy chooses other targets).
        assert "from" not in labels_of(cluster, namespace, "pointer")
    finally:
        core(cluster).delete_namespace(other)


def test_a_policy_that_can_never_run_is_refused(operator: OperatorProcess, mutating_policies: Policies, cluster: Any,
                                                namespace: str) -> None:
    wait_for("the policy-validation webhook configuration", lambda: served_by(cluster, operator), 90)
    body = mutating_policies.body("never", spec(label("a", '"b"'), ["CREATE"],
                                    evaluation={"admission": {"enabled": False}, "background": {"enabled": False},
                                                "mutateExisting": {"enabled": False}}))
    proc = cluster.kubectl("create", "-f", "-", input=json.dumps(body), check=False)
    assert proc.returncode != 0, proc.stdout
    assert "spec.evaluation" in proc.stderr and \
        "disabling both admission and mutateExisting evaluation modes is not allowed" in proc.stderr, proc.stderr


def test_targets_the_operator_may_not_patch_are_named_in_status(operator: OperatorProcess, mutating_policies: Policies) -> None:
    # Secrets are in neither vpol-scanned-kinds nor vpol-mutated-kinds (least privilege).
    name = mutating_policies.create("secrets", {
        "evaluation": {"mutateExisting": {"enabled": True}},
        "matchConstraints": {"resourceRules": [{**CM, "operations": ["CREATE"]}]},
        "targetMatchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                      "operations": ["*"], "resources": ["secrets"]}]},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": label("a", '"b"')}}],
    })
    cond = mutating_policies.wait_condition(name, "RBACPermissionsGranted", "False")
    assert "list v1 secrets" in cond["message"] and "patch v1 secrets" in cond["message"], cond
    assert "configmaps" not in cond["message"], cond  # the triggers may be read
    mutating_policies.wait_condition(name, "Ready", "False")


def test_a_delete_that_waits_for_finalizers_triggers_when_it_is_requested(
        operator: OperatorProcess, mutating_policies: Policies, cluster: Any, namespace: str) -> None:
    # Kyverno's webhook sees the DELETE request, so its background controller mutates the targets then, with the
    # object being deleted as ``object`` and no oldObject; the object itself may stay until its finalizers go.
    make_cm(cluster, namespace, "target")
    name = mutating_policies.create("on-delete", {
        "evaluation": {"mutateExisting": {"enabled": True}, "background": {"enabled": False}},
        "matchConstraints": {"resourceRules": [{**CM, "operations": ["DELETE"]}],
                             "objectSelector": {"matchLabels": {"trigger": "yes"}}},
        "targetMatchConstraints": {"expression": "oldObject == null ? resource.Get('v1', 'configmaps', "
                                                 "object.metadata.namespace, 'target') : {}"},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
            "expression": label("deleted", "request.operation + '-' + request.name")}}],
    })
    mutating_policies.wait_condition(name, "Ready", "True")
    # A delete carried out at once triggers (once the scanner watches the triggers: waited for here).
    make_cm(cluster, namespace, "gone", {"trigger": "yes"})
    core(cluster).delete_namespaced_config_map("gone", namespace)
    wait_for("the target mutated by an immediate delete",
             lambda: labels_of(cluster, namespace, "target").get("deleted") == "DELETE-gone", 60)
    core(cluster).create_namespaced_config_map(namespace, {"metadata": {
        "name": "held", "labels": {"trigger": "yes"}, "finalizers": ["example.com/hold"]}})
    core(cluster).delete_namespaced_config_map("held", namespace)
    wait_for("the target mutated by the requested delete",
             lambda: labels_of(cluster, namespace, "target").get("deleted") == "DELETE-held", 60)
    held = core(cluster).read_namespaced_config_map("held", namespace)
    assert held.metadata.deletion_timestamp is not None  # still there, waiting for its finalizer
    runs = metric(operator, name, "mutated") + metric(operator, name, "unchanged")
    # Its removal, when the finalizer goes, is the same deletion: not a second trigger.
    core(cluster).patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
    wait_for("the trigger gone", lambda: not [c for c in core(cluster).list_namespaced_config_map(namespace).items
                                              if c.metadata.name == "held"], 30)
    time.sleep(4)
    assert metric(operator, name, "mutated") + metric(operator, name, "unchanged") == runs


def test_a_target_named_by_a_subresource_is_written_through_it(
        operator: OperatorProcess, mutating_policies: Policies, cluster: Any, namespace: str,
        unique_name: Callable[..., str]) -> None:
    # pods/resize: Pods are listed, evaluated as requests of that subresource and patched through it, as Kyverno's
    # background controller updates them. The operator needs patch on pods/resize (a user extends its RBAC so).
    rbac = client.RbacAuthorizationV1Api(cluster.api_client)
    role = unique_name("resize")
    rbac.create_cluster_role({"metadata": {"name": role}, "rules": [
        {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]}]})
    rbac.create_cluster_role_binding({"metadata": {"name": role}, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "vpol", "namespace": "vpol-system"}]})
    try:
        pod = {"metadata": {"name": "app"}, "spec": {"containers": [{
            "name": "c", "image": "registry.example/app:1",
            "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}}]}}
        core(cluster).create_namespaced_pod(namespace, pod)
        name = mutating_policies.create("resize", {
            "evaluation": {"admission": {"enabled": False}, "mutateExisting": {"enabled": True},
                           "background": {"enabled": True}},
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE", "UPDATE"], "resources": ["pods/resize"]}]},
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                '[JSONPatch{op: "replace", path: "/spec/containers/0/resources/requests/cpu", '
                'value: request.subResource == "resize" ? "200m" : "300m"}]')}}],
        })
        cond = mutating_policies.wait_condition(name, "RBACPermissionsGranted", "True")
        assert "patch" in cond["message"], cond

        def cpu() -> str:
            return core(cluster).read_namespaced_pod("app", namespace).spec.containers[0].resources.requests["cpu"]

        wait_for("the Pod resized through pods/resize", lambda: cpu() == "200m", 60)
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)

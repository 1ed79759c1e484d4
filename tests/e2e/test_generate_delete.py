"""GeneratingPolicies and DeletingPolicies on the real control plane, the operator running as the manifests'
ServiceAccount (its RBAC is what generation and deletion may do: the aggregated ClusterRoles vpol-generate and
vpol-delete).

Kyverno's semantics (docs/internals/generating-and-deleting.md): data and clone generation with and without synchronize,
generateExisting, a namespaced policy confined to its namespace, orphaning on policy deletion, a DeletingPolicy on
a cron schedule with conditions on ``object`` and ``namespaceObject``, nothing deleted without RBAC, schedules
and triggers surviving an operator killed at any moment, and invalid policies of each kind refused at apply time
with `vpol check`'s messages.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.operator_process import OperatorProcess, sa_kubeconfig
from tests.e2e.test_policy_validation import served_by, vpol_check
from tests.e2e.vpol_fixtures import operator_stopped, vpol_installed, wait_for  # noqa: F401

GROUP = "policies.kyverno.io"
#: Full scans every few seconds, so periodic passes can be seen acting (or not).
SCAN_INTERVAL = 8
NS_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces"]}
CM_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}


@pytest.fixture(scope="module")
def operator(vpol_installed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    tmp = tmp_path_factory.mktemp("operator-generate")
    kubeconfig = sa_kubeconfig(vpol_installed, tmp / "kubeconfig")
    proc = OperatorProcess(kubeconfig, tmp / "operator.log", extra=("--scan-interval", str(SCAN_INTERVAL))).start()
    yield proc
    proc.stop()


@pytest.fixture
def module_operator_stopped(operator: OperatorProcess) -> Iterator[None]:
    """For a test that runs an operator of its own: the module's is stopped meanwhile (else it would hold the scan
    Lease, and do the generating the test means to watch its own operator do)."""
    with operator_stopped(operator):
        yield


class Kube:
    """kubectl on the test cluster, as an admin (what users do by hand)."""

    def __init__(self, cluster: Any):
        self.cluster = cluster
        self.created: list[tuple[str, str, str]] = []

    def apply(self, *docs: dict[str, Any]) -> None:
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
        for d in docs:
            self.created.append((d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", "")))

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
        proc = self.cluster.kubectl(*args, check=False)
        if proc.returncode != 0:
            assert "NotFound" in proc.stderr, proc.stderr
            return None
        return dict(json.loads(proc.stdout))

    def names(self, kind: str, namespace: str, selector: str = "") -> list[str]:
        args = ["get", kind, "-n", namespace, "-o", "json"] + (["-l", selector] if selector else [])
        return sorted(i["metadata"]["name"] for i in json.loads(self.cluster.kubectl(*args).stdout)["items"])

    def delete(self, kind: str, name: str, namespace: str = "", *, wait: bool = True) -> None:
        args = ["delete", kind, name, "--ignore-not-found", f"--wait={str(wait).lower()}"]
        self.cluster.kubectl(*args + (["-n", namespace] if namespace else []))

    def namespace(self, name: str, labels: dict[str, str]) -> None:
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})

    def condition(self, kind: str, name: str, ctype: str, namespace: str = "") -> dict[str, Any] | None:
        obj = self.get(kind, name, namespace) or {}
        return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), None)

    def wait_ready(self, kind: str, name: str, namespace: str = "", timeout: float = 60) -> None:
        where = ["-n", namespace] if namespace else []
        self.cluster.kubectl("wait", f"--for=condition=Ready", f"--timeout={int(timeout)}s", f"{kind}/{name}", *where)

    def cleanup(self) -> None:
        for kind, name, namespace in reversed(self.created):
            self.delete(kind, name, namespace, wait=False)


@pytest.fixture
def kube(operator: OperatorProcess, cluster: Any) -> Iterator[Kube]:
    k = Kube(cluster)
    yield k
    k.cleanup()


@pytest.fixture(scope="module")
def secrets_generated(cluster: Any) -> Iterator[None]:
    """vpol may read and write Secrets (cloning them): granted as a cluster admin grants a kind the chart does not,
    by a ClusterRole carrying the aggregation label of vpol-generate."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "vpol-e2e-generate-secrets",
                         "labels": {"vpol.kyverno.io/aggregate-to-generate": "true"}},
            "rules": [{"apiGroups": [""], "resources": ["secrets"],
                       "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(role))
    yield
    cluster.kubectl("delete", "clusterrole", "vpol-e2e-generate-secrets", "--ignore-not-found")


def gpol(name: str, selector: dict[str, str], generate: list[dict[str, Any]], *, sync: bool,
         existing: bool = False, orphan: bool = False, rule: dict[str, Any] = NS_RULE,
         operations: tuple[str, ...] = ("CREATE", "UPDATE"), variables: list[dict[str, Any]] | None = None,
         namespace_selector: dict[str, Any] | None = None) -> dict[str, Any]:
    constraints: dict[str, Any] = {"resourceRules": [{**rule, "operations": list(operations)}],
                                   "objectSelector": {"matchLabels": selector}}
    if namespace_selector:
        constraints["namespaceSelector"] = namespace_selector
    return {"apiVersion": f"{GROUP}/v1", "kind": "GeneratingPolicy", "metadata": {"name": name},
            "spec": {"matchConstraints": constraints, "variables": variables or [], "generate": generate,
                     "evaluation": {"synchronize": {"enabled": sync}, "generateExisting": {"enabled": existing},
                                    "orphanDownstreamOnPolicyDelete": {"enabled": orphan}}}}


NETPOL = {"expression": 'generator.Apply(object.metadata.name, [{"apiVersion": "networking.k8s.io/v1", '
                        '"kind": "NetworkPolicy", "metadata": {"name": "default-deny"}, '
                        '"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}])'}
QUOTA = {"template": {"interpolate": "cel", "value": (
    "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: pods\n  namespace: (( object.metadata.name ))\n"
    "spec:\n  hard:\n    pods: \"(( string(10) ))\"\n")}}


def clone(source_namespace: str) -> dict[str, Any]:
    return {"expression": f'generator.Apply(object.metadata.name, '
                          f'[resource.Get("v1", "secrets", "{source_namespace}", "registry")])'}


def secret_value(kube: Kube, namespace: str) -> str | None:
    obj = kube.get("secret", "registry", namespace)
    return base64.b64decode(obj["data"]["token"]).decode() if obj else None


def policy_types(kube: Kube, namespace: str) -> list[str] | None:
    obj = kube.get("networkpolicy", "default-deny", namespace)
    return obj["spec"].get("policyTypes") if obj else None


def copies(kube: Kube, namespace: str) -> list[str]:
    return [n for n in kube.names("configmap", namespace) if n.startswith("copy-")]


def report_results(cluster: Any, kind: str, name: str, namespace: str = "") -> list[dict[str, Any]]:
    """vpol's report results about one object."""
    obj = Kube(cluster).get(kind, name, namespace)
    if obj is None:
        return []
    report = Kube(cluster).get("policyreport" if namespace else "clusterpolicyreport",
                               f"vpol-{obj['metadata']['uid']}", namespace)
    return list((report or {}).get("results") or [])


def test_data_and_clone_policies_keep_their_objects_in_sync(kube: Kube, cluster: Any, namespace: str,
                                                            unique_name: Callable[..., str],
                                                            secrets_generated: None) -> None:
    run = unique_name("gen", "sync")
    selector = {"vpol-e2e-gen": run}
    kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry", "namespace": namespace},
                "stringData": {"token": "one"}})
    before = f"{run}-before"
    kube.namespace(before, selector)
    time.sleep(1.1)  # creation times are in seconds: the policies come strictly later
    netpol, quota, cloned, copier = (f"{run}-netpol", f"{run}-quota", f"{run}-clone", f"{run}-copy")
    kube.apply(gpol(netpol, selector, [NETPOL], sync=True, existing=True, orphan=True),
               gpol(quota, selector, [QUOTA], sync=True),
               gpol(cloned, selector, [clone(namespace)], sync=True),
               gpol(copier, selector, [{"expression": f'generator.Apply("{namespace}", [{{"apiVersion": "v1", '
                                                      f'"kind": "ConfigMap", "metadata": {{"name": "copy-" + '
                                                      f'object.metadata.name}}, "data": object.data}}])'}],
                    sync=True, rule=CM_RULE, namespace_selector={"matchLabels": {
                        "kubernetes.io/metadata.name": namespace}}))
    for name in (netpol, quota, cloned, copier):
        kube.wait_ready("generatingpolicy", name)

    # generateExisting covers the Namespace that existed before the policy; the others leave it alone.
    wait_for("the NetworkPolicy of the existing namespace", lambda: policy_types(kube, before))
    assert kube.get("resourcequota", "pods", before) is None and secret_value(kube, before) is None

    after = f"{run}-after"
    kube.namespace(after, selector)
    wait_for("the NetworkPolicy, ResourceQuota and Secret of a new namespace",
             lambda: policy_types(kube, after) and kube.get("resourcequota", "pods", after) and
             secret_value(kube, after) == "one")
    netpol_obj = kube.get("networkpolicy", "default-deny", after)
    assert netpol_obj is not None
    labels = netpol_obj["metadata"]["labels"]
    trigger = kube.get("namespace", after)
    assert trigger is not None
    assert labels["app.kubernetes.io/managed-by"] == "kyverno" and labels["generate.kyverno.io/policy-name"] == netpol
    assert labels["generate.kyverno.io/trigger-uid"] == trigger["metadata"]["uid"]
    assert labels["generate.kyverno.io/trigger-kind"] == "Namespace"
    source = kube.get("secret", "registry", namespace)
    clone_obj = kube.get("secret", "registry", after)
    assert source is not None and clone_obj is not None
    assert clone_obj["metadata"]["labels"]["generate.kyverno.io/source-uid"] == source["metadata"]["uid"]
    results = {r["policy"]: r for r in report_results(cluster, "namespace", after)}
    assert results[netpol]["result"] == "pass", results
    assert "Kind=NetworkPolicy Name=default-deny" in results[netpol]["properties"]["generated-resources"]

    # A hand edit is reverted; a deleted downstream is recreated; a changed source reaches its clone.
    cluster.kubectl("patch", "networkpolicy", "default-deny", "-n", after, "--type=merge",
                    "-p", '{"spec":{"policyTypes":["Ingress","Egress"]}}')
    wait_for("the edit reverted", lambda: policy_types(kube, after) == ["Ingress"])
    kube.delete("resourcequota", "pods", after)
    wait_for("the ResourceQuota recreated", lambda: kube.get("resourcequota", "pods", after))
    cluster.kubectl("patch", "secret", "registry", "-n", namespace, "--type=merge", "-p",
                    '{"stringData":{"token":"two"}}')
    wait_for("the clone updated", lambda: secret_value(kube, after) == "two")

    # A trigger deleted takes its downstreams; a trigger no longer selected too.
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "t1", "namespace": namespace,
                                                                      "labels": selector}, "data": {"k": "v"}})
    wait_for("the copy of a ConfigMap", lambda: copies(kube, namespace) == ["copy-t1"])
    kube.delete("configmap", "t1", namespace)
    wait_for("the copy gone with its trigger", lambda: copies(kube, namespace) == [])
    cluster.kubectl("label", "namespace", before, "vpol-e2e-gen-")
    wait_for("the NetworkPolicy gone with its trigger's label", lambda: policy_types(kube, before) is None)

    # Policy deletion: data downstreams go (orphan: false), clones stay, orphaning keeps them.
    for name in (quota, cloned, netpol):
        kube.delete("generatingpolicy", name)
    wait_for("the ResourceQuota deleted with its policy", lambda: kube.get("resourcequota", "pods", after) is None)
    time.sleep(2 * SCAN_INTERVAL)
    assert secret_value(kube, after) == "two", "a clone was deleted with its policy"
    assert policy_types(kube, after) == ["Ingress"], "an orphaned NetworkPolicy was deleted with its policy"
    for ns in (before, after):
        kube.delete("namespace", ns, wait=False)


def test_without_synchronize_nothing_is_reconciled(kube: Kube, cluster: Any, namespace: str,
                                                   unique_name: Callable[..., str], secrets_generated: None) -> None:
    run = unique_name("gen", "nosync")
    selector = {"vpol-e2e-gen": run}
    kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry", "namespace": namespace},
                "stringData": {"token": "one"}})
    name = f"{run}-all"
    kube.apply(gpol(name, selector, [NETPOL, QUOTA, clone(namespace)], sync=False),
               gpol(f"{run}-copy", selector, [{"expression": f'generator.Apply("{namespace}", [{{"apiVersion": '
                                                             f'"v1", "kind": "ConfigMap", "metadata": {{"name": '
                                                             f'"copy-" + object.metadata.name}}}}])'}],
                    sync=False, rule=CM_RULE, namespace_selector={"matchLabels": {
                        "kubernetes.io/metadata.name": namespace}}))
    kube.wait_ready("generatingpolicy", name)
    kube.wait_ready("generatingpolicy", f"{run}-copy")
    target = f"{run}-ns"
    kube.namespace(target, selector)
    wait_for("the downstreams of a new namespace", lambda: policy_types(kube, target) and
             kube.get("resourcequota", "pods", target) and secret_value(kube, target) == "one")
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "t1", "namespace": namespace,
                                                                      "labels": selector}})
    wait_for("the copy of a ConfigMap", lambda: copies(kube, namespace) == ["copy-t1"])

    cluster.kubectl("patch", "networkpolicy", "default-deny", "-n", target, "--type=merge",
                    "-p", '{"spec":{"policyTypes":["Ingress","Egress"]}}')
    kube.delete("resourcequota", "pods", target)
    cluster.kubectl("patch", "secret", "registry", "-n", namespace, "--type=merge", "-p",
                    '{"stringData":{"token":"two"}}')
    kube.delete("configmap", "t1", namespace)
    # Two full scans (each a pass of every policy) and the events have come and gone.
    time.sleep(2 * SCAN_INTERVAL + 2)
    assert policy_types(kube, target) == ["Ingress", "Egress"], "a hand edit was reverted without synchronize"
    assert kube.get("resourcequota", "pods", target) is None, "a deleted downstream was recreated"
    assert secret_value(kube, target) == "one", "a clone followed its source without synchronize"
    assert copies(kube, namespace) == ["copy-t1"], "a deleted trigger took its downstream without synchronize"
    kube.delete("namespace", target, wait=False)


def test_a_namespaced_policy_acts_in_its_namespace_only(kube: Kube, cluster: Any, namespace: str,
                                                       unique_name: Callable[..., str],
                                                       secrets_generated: None) -> None:
    run = unique_name("gen", "ngpol")
    other = f"{run}-other"
    kube.namespace(other, {"vpol-e2e": "true"})
    ok = {"apiVersion": f"{GROUP}/v1", "kind": "NamespacedGeneratingPolicy",
          "metadata": {"name": f"{run}-ok", "namespace": namespace},
          "spec": {"matchConstraints": {"resourceRules": [{**CM_RULE, "operations": ["CREATE"]}]},
                   "generate": [{"expression": 'generator.Apply([{"apiVersion": "v1", "kind": "Secret", '
                                               '"metadata": {"name": object.metadata.name + "-token"}}])'}]}}
    escaping = {"apiVersion": f"{GROUP}/v1", "kind": "NamespacedGeneratingPolicy",
                "metadata": {"name": f"{run}-escape", "namespace": namespace},
                "spec": {"matchConstraints": {"resourceRules": [{**CM_RULE, "operations": ["CREATE"]}],
                                              "objectSelector": {"matchLabels": {"escape": "yes"}}},
                         "generate": [{"template": {"value": f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: "
                                                             f"escaped\n  namespace: {other}\n"}}]}}
    kube.apply(ok, escaping)
    kube.wait_ready("namespacedgeneratingpolicy", f"{run}-ok", namespace)
    kube.wait_ready("namespacedgeneratingpolicy", f"{run}-escape", namespace)
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "inside", "namespace": namespace}},
               {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "outside", "namespace": other}})
    wait_for("the Secret of a trigger in the policy's namespace", lambda: kube.get("secret", "inside-token", namespace))
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "escape", "namespace": namespace,
                                                                      "labels": {"escape": "yes"}}})
    failed = wait_for("the error in the policy's status", lambda: (c := kube.condition(
        "namespacedgeneratingpolicy", f"{run}-escape", "GenerationSucceeded", namespace)) and
        c["status"] == "False" and c)
    assert "cross-namespace generation denied" in failed["message"], failed
    results = {r["policy"]: r for r in report_results(cluster, "configmap", "escape", namespace)}
    assert results[f"{namespace}/{run}-escape"]["result"] == "error", results
    time.sleep(3)
    assert kube.get("secret", "outside-token", other) is None, "a trigger outside the namespace generated"
    assert kube.get("configmap", "escaped", other) is None, "a namespaced policy wrote into another namespace"
    kube.delete("namespace", other, wait=False)


def pod(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def last_execution(kube: Kube, name: str) -> str:
    return str(((kube.get("deletingpolicy", name) or {}).get("status") or {}).get("lastExecutionTime") or "")


def next_minute(after: float = 0) -> None:
    """Sleep until a few seconds past the next minute (a */1 schedule's next run)."""
    now = time.time() + after
    time.sleep(60 - now % 60 + after + 5)


def test_a_deleting_policy_runs_on_schedule_with_rbac_and_across_restarts(
        kube: Kube, cluster: Any, operator: OperatorProcess, namespace: str,
        unique_name: Callable[..., str]) -> None:
    run = unique_name("del", "pods")
    testing, production = f"{run}-test", f"{run}-prod"
    kube.namespace(testing, {"env": "test"})
    kube.namespace(production, {"env": "production"})
    expired = {"expired": "true", "run": run}
    kube.apply(pod("old", testing, expired), pod("fresh", testing, {"run": run}), pod("prod", production, expired))
    name = f"{run}-expired"
    kube.apply({"apiVersion": f"{GROUP}/v1", "kind": "DeletingPolicy", "metadata": {"name": name},
                "spec": {"schedule": "*/1 * * * *",
                         "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                                 "operations": ["*"], "resources": ["pods"]}],
                                              "objectSelector": {"matchLabels": {"run": run}}},
                         "conditions": [
                             {"name": "expired", "expression": 'object.metadata.?labels.expired.orValue("") == "true"'},
                             {"name": "testing", "expression": 'namespaceObject.metadata.labels.env == "test"'}]}})
    # Without the right to delete Pods: nothing is deleted, and the status says what is missing.
    rbac = wait_for("RBACPermissionsGranted=False", lambda: (c := kube.condition(
        "deletingpolicy", name, "RBACPermissionsGranted")) and c["status"] == "False" and c)
    assert "delete v1 pods" in rbac["message"], rbac
    next_minute()
    assert kube.get("pod", "old", testing) is not None, "deleted without RBAC"
    assert last_execution(kube, name) == "", "a run without RBAC counted as done"

    # Granted through the aggregated ClusterRole: the next run deletes the matching Pod and nothing else.
    role = f"{run}-delete-pods"
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": role, "labels": {"vpol.kyverno.io/aggregate-to-delete": "true"}},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]}]})
    kube.wait_ready("deletingpolicy", name, timeout=90)
    wait_for("the expired test Pod deleted", lambda: kube.get("pod", "old", testing) is None, timeout=90)
    assert kube.get("pod", "fresh", testing) is not None and kube.get("pod", "prod", production) is not None
    first = last_execution(kube, name)
    assert first, "no lastExecutionTime after a run"

    # After a restart the schedule goes on from status.lastExecutionTime.
    operator.stop()
    operator.start()
    kube.apply(pod("later", testing, expired))
    wait_for("a Pod expired after the restart deleted", lambda: kube.get("pod", "later", testing) is None,
             timeout=100)
    assert last_execution(kube, name) > first
    assert kube.get("pod", "fresh", testing) is not None and kube.get("pod", "prod", production) is not None
    for ns in (testing, production):
        kube.delete("namespace", ns, wait=False)


def test_an_operator_killed_during_generation_loses_no_trigger(
        vpol_installed: Any, cluster: Any, namespace: str, unique_name: Callable[..., str],
        tmp_path: Path, module_operator_stopped: None) -> None:
    kubeconfig = sa_kubeconfig(vpol_installed, tmp_path / "kubeconfig")
    # Slow writes, so the kill lands in the middle of the 200 generations.
    slow = OperatorProcess(kubeconfig, tmp_path / "operator.log",
                           extra=("--scan-interval", "3600", "--generation-writes-per-second", "10")).start()
    kube = Kube(cluster)
    run = unique_name("gen", "kill")
    selector = {"vpol-e2e-gen": run}
    try:
        policy = gpol(run, selector, [{"expression": 'generator.Apply(object.metadata.namespace, [{"apiVersion": '
                                                     '"v1", "kind": "ConfigMap", "metadata": {"name": "gen-" + '
                                                     'object.metadata.name}}])'}],
                      sync=False, rule=CM_RULE, operations=("CREATE",),
                      namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": namespace}})
        kube.apply(policy)
        kube.wait_ready("generatingpolicy", run)
        triggers = [{"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": f"t{i:03d}", "namespace": namespace, "labels": selector}}
                    for i in range(200)]
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(triggers))
        generated = lambda: [n for n in kube.names("configmap", namespace) if n.startswith("gen-")]  # noqa: E731
        wait_for("some downstreams", lambda: len(generated()) >= 20, timeout=60)
        slow.kill()
        assert len(generated()) < 200, "the kill came after the generation was over"
        slow.start()
        wait_for("every trigger's downstream", lambda: len(generated()) == 200, timeout=180)
        time.sleep(3)
        listed = json.loads(cluster.kubectl("get", "configmap", "-n", namespace, "-o", "json",
                                            "-l", f"generate.kyverno.io/policy-name={run}").stdout)["items"]
        by_trigger: dict[str, int] = {}
        for item in listed:
            uid = item["metadata"]["labels"]["generate.kyverno.io/trigger-uid"]
            by_trigger[uid] = by_trigger.get(uid, 0) + 1
        uids = {json.loads(cluster.kubectl("get", "configmap", f"t{i:03d}", "-n", namespace, "-o", "json").stdout)
                ["metadata"]["uid"] for i in range(0, 200, 40)}
        assert len(listed) == 200 and set(by_trigger.values()) == {1}, by_trigger
        assert uids <= set(by_trigger)
    finally:
        kube.delete("generatingpolicy", run)
        slow.stop()


def test_generation_has_the_deadline_of_every_evaluation(
        vpol_installed: Any, cluster: Any, namespace: str, unique_name: Callable[..., str],
        tmp_path: Path, module_operator_stopped: None) -> None:
    """A GeneratingPolicy evaluates in the bounded worker like every other kind: with ``--eval-timeout 0.3``, a
    matchCondition that takes about a second (cel-cpp's iteration budget; measured in tests/unit/engine) costs its
    trigger an error naming the time limit, and the other policy's trigger is generated for all the same."""
    kubeconfig = sa_kubeconfig(vpol_installed, tmp_path / "kubeconfig")
    bounded = OperatorProcess(kubeconfig, tmp_path / "operator.log",
                              extra=("--scan-interval", "3600", "--eval-timeout", "0.3")).start()
    kube = Kube(cluster)
    run = unique_name("gen", "deadline")
    slow_name, fine_name = f"{run}-slow", f"{run}-fine"
    copy = {"expression": 'generator.Apply(object.metadata.namespace, [{"apiVersion": "v1", "kind": "ConfigMap", '
                          '"metadata": {"name": "gen-" + object.metadata.name}}])'}
    in_namespace = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    try:
        slow = gpol(slow_name, {"vpol-e2e-gen": slow_name}, [copy], sync=False, rule=CM_RULE,
                    operations=("CREATE",), namespace_selector=in_namespace)
        slow["spec"]["matchConditions"] = [{"name": "slow", "expression": (
            "lists.range(9000).map(x, lists.range(9000).filter(y, y > x)).size() > 0 || true")}]
        fine = gpol(fine_name, {"vpol-e2e-gen": fine_name}, [copy], sync=False, rule=CM_RULE,
                    operations=("CREATE",), namespace_selector=in_namespace)
        kube.apply(slow, fine)
        kube.wait_ready("generatingpolicy", slow_name)
        kube.wait_ready("generatingpolicy", fine_name)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": name, "namespace": namespace, "labels": {"vpol-e2e-gen": name}}}
            for name in (slow_name, fine_name)]))
        wait_for("the other policy's downstream", lambda: kube.get("configmap", f"gen-{fine_name}", namespace),
                 timeout=60)
        result = wait_for("the slow trigger's result", lambda: next(
            (r for r in report_results(cluster, "configmap", slow_name, namespace) if r["policy"] == slow_name),
            None), timeout=60)
        assert result["result"] == "error" and "time limit of 0.3s" in result["message"], result
        assert kube.get("configmap", f"gen-{slow_name}", namespace) is None
    finally:
        kube.delete("generatingpolicy", slow_name)
        kube.delete("generatingpolicy", fine_name)
        bounded.stop()


def test_a_restart_with_nothing_changed_writes_nothing(
        vpol_installed: Any, cluster: Any, namespace: str, unique_name: Callable[..., str], tmp_path: Path,
        module_operator_stopped: None) -> None:
    """A restarted operator finds every downstream and every report as it left them: its start-up pass generates
    once for each trigger of a synchronized policy (what may have drifted while it was down) and writes neither a
    downstream nor a report."""
    kubeconfig = sa_kubeconfig(vpol_installed, tmp_path / "kubeconfig")
    proc = OperatorProcess(kubeconfig, tmp_path / "operator.log", extra=("--scan-interval", "3600")).start()
    kube = Kube(cluster)
    run = unique_name("gen", "rst")
    selector = {"vpol-e2e-gen": run}
    in_namespace = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    made = 'generator.Apply(object.metadata.namespace, [{"apiVersion": "v1", "kind": "ConfigMap", ' \
           '"metadata": {"name": "%s-" + object.metadata.name}, "data": {"from": object.metadata.name}}])'
    policies = [gpol(f"{run}-{i}", selector, [{"expression": made % f"g{i}"}], sync=sync, rule=CM_RULE,
                     namespace_selector=in_namespace) for i, sync in ((1, True), (2, False))]
    try:
        kube.apply(*policies)
        for p in policies:
            kube.wait_ready("generatingpolicy", p["metadata"]["name"])
        triggers = [{"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": f"t{i}", "namespace": namespace, "labels": selector}} for i in range(10)]
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(triggers))

        def versions() -> dict[str, str]:
            items = json.loads(cluster.kubectl("get", "configmap,policyreport", "-n", namespace, "-o",
                                               "json").stdout)["items"]
            return {f"{i['kind']}/{i['metadata']['name']}": i["metadata"]["resourceVersion"] for i in items}

        def settled() -> dict[str, str] | None:
            now = versions()
            reports = [k for k in now if k.startswith("PolicyReport/")]
            generated = [k for k in now if k.startswith(("ConfigMap/g1-", "ConfigMap/g2-"))]
            if len(generated) < 20 or len(reports) < 10:
                return None
            time.sleep(2)
            return now if versions() == now else None

        before = wait_for("20 downstreams and 10 reports, unchanged for 2 s", settled, timeout=90)
        proc.stop()
        proc.start()
        def generations() -> list[float]:
            return [proc.metric_value("vpol_generations_total", {"policy": p["metadata"]["name"]}) for p in policies]

        wait_for("the start-up pass over the 10 triggers of the synchronized policy", lambda: generations()[0] >= 10,
                 timeout=90)
        time.sleep(3)
        after = versions()
        assert {k: (v, after.get(k)) for k, v in before.items() if after.get(k) != v} == {}, \
            "written again by a restart with nothing changed"
        # One pass: each trigger once for the synchronized policy (the trigger watches replaying the triggers'
        # creations add nothing), none for the other (without synchronize a trigger is generated for once).
        assert generations() == [10, 0]
    finally:
        for p in policies:
            kube.delete("generatingpolicy", p["metadata"]["name"])
        proc.stop()


INVALID = [
    ("GeneratingPolicy", {"matchConstraints": {"resourceRules": [{**NS_RULE, "operations": ["CREATE"]}]},
                          "generate": [{"expression": "generator.Apply(object.metadata.name)"}]}),
    ("NamespacedGeneratingPolicy", {"matchConstraints": {"resourceRules": [{**CM_RULE, "operations": ["CREATE"]}]},
                                    "generate": [{"template": {"interpolate": "cel", "value":
                                                               "kind: ConfigMap\nmetadata:\n  name: (( nope ))\n"}}]}),
    ("DeletingPolicy", {"schedule": "every minute",
                        "matchConstraints": {"resourceRules": [{**CM_RULE, "operations": ["*"]}]}}),
    ("NamespacedDeletingPolicy", {"schedule": "* * * * *",
                                  "matchConstraints": {"resourceRules": [{**CM_RULE, "operations": ["*"]}]},
                                  "conditions": [{"name": "c", "expression": "'a string'"}]}),
]


@pytest.mark.parametrize("kind,spec", INVALID, ids=[k for k, _s in INVALID])
def test_invalid_policies_are_refused_with_vpol_checks_messages(
        kind: str, spec: dict[str, Any], operator: OperatorProcess, cluster: Any, namespace: str,
        unique_name: Callable[..., str], tmp_path: Path) -> None:
    wait_for("the policy validation webhook serving this operator", lambda: served_by(cluster, operator), 90)
    metadata = {"name": unique_name("bad", kind.lower())}
    if kind.startswith("Namespaced"):
        metadata["namespace"] = namespace
    doc = {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": metadata, "spec": spec}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    expected = vpol_check(path)
    assert any(line.startswith("error: ") for line in expected), f"vpol check finds nothing wrong with {doc}"
    proc = cluster.kubectl("apply", "-f", str(path), check=False)
    assert proc.returncode != 0, f"{kind} admitted:\n{proc.stdout}"
    for line in expected:  # every problem line, with its field path and position, and the caret excerpt
        assert line in proc.stderr, (line, proc.stderr)

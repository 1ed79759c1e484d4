"""vpol installed as users install it (issue 41): `helm install` of the chart, with its default values but the
image, into a control plane with a node, so the operator runs in its Pods, as the chart's ServiceAccount, under the
restricted Pod Security level; the API server reaches the webhook through the chart's Service (at its endpoints);
background scans write PolicyReports; a policy calling a Service over http.Get/http.Post decides at admission and in
scans (kube-proxy and the cluster DNS of the node);
Prometheus scrapes every replica at the metrics Service's endpoints (as a ServiceMonitor does);
`helm uninstall` leaves no webhook configuration.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.e2e.conftest import KubeCluster
from tests.e2e.prometheus import PrometheusServer, ScrapeJob
from tests.e2e.test_admission import dry_cm
from tests.e2e.test_helm import RELEASE, helm_on, policy, policy_status, ready_with, webhook_configurations
from tests.e2e.test_image import docker, image  # noqa: F401 - fixture
from tests.e2e.test_operator import expect_denied
from tests.e2e.vpol_fixtures import wait_for
from tests.helm.chart import CHART, NAMESPACE

pytestmark = pytest.mark.e2e


def pods(cluster: KubeCluster) -> list[dict[str, Any]]:
    return json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=vpol",
                                      "-o", "json").stdout)["items"]


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


#: The Service http.* policies call (the node's echo image), and what the release allows them to reach.
HTTP_NAMESPACE = "helm-node-http"
ANSWERS = f"http://answers.{HTTP_NAMESPACE}.svc.cluster.local"


@pytest.fixture(scope="module")
def release(node_cluster: KubeCluster, image: str, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
            ) -> Iterator[KubeCluster]:
    """The chart installed with its defaults (the image aside, and `operator.httpAllow` naming the one Service
    policies here may call) into a namespace that enforces the restricted level; its Deployment's replicas Ready.
    Uninstalled after the module."""
    cluster = node_cluster
    archive = tmp_path_factory.mktemp("image") / "vpol.tar"
    docker("save", "-o", str(archive), image, timeout=300)
    script = Path(__file__).resolve().parents[1] / "controlplane" / "cluster"
    subprocess.run([str(script), "import", str(cluster.state_dir), str(archive)], check=True, timeout=300)
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted")
    repository, _, tag = image.rpartition(":")
    helm_on(cluster, "install", RELEASE, str(CHART), "-n", NAMESPACE, "--set", f"image.repository={repository}",
            "--set", f"image.tag={tag}", "--set-json", f'operator.httpAllow=["{ANSWERS}/"]',
            "--wait", "--timeout", "180s")
    try:
        yield cluster
    finally:
        helm_on(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False)


def test_the_chart_runs_its_replicas_as_its_service_account_under_the_restricted_level(release: KubeCluster
                                                                                       ) -> None:
    deployment = json.loads(release.kubectl("get", "deployment", "vpol", "-n", NAMESPACE, "-o", "json").stdout)
    replicas = deployment["spec"]["replicas"]
    assert replicas == yaml.safe_load((CHART / "values.yaml").read_text())["replicas"] == 2
    running = wait_for("every replica Running and Ready",
                       lambda: [p for p in pods(release) if p["status"]["phase"] == "Running" and ready(p)]
                       if len([p for p in pods(release) if ready(p)]) == replicas else None, 120, 1)
    node = release.info["node"]
    for pod in running:
        spec = pod["spec"]
        assert spec["serviceAccountName"] == deployment["spec"]["template"]["spec"]["serviceAccountName"]
        assert spec["nodeName"] == node
        assert spec["securityContext"]["runAsNonRoot"] and spec["containers"][0]["securityContext"][
            "readOnlyRootFilesystem"]
    # The namespace enforces the restricted level: the API server admitted these Pods under it.
    labels = json.loads(release.kubectl("get", "namespace", NAMESPACE, "-o", "json").stdout)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


#: The namespace whose ConfigMaps the `enforced` policies decide.
ENFORCED = "helm-node-e2e"


@pytest.fixture(scope="module")
def enforced(release: KubeCluster) -> KubeCluster:
    """Two Deny policies on the ConfigMaps of ENFORCED (made here), both Ready: `node-native` (key
    native-forbidden) enforced by a VAP, `node-webhook` (key webhook-forbidden) through vpol's webhook. Made once,
    by the first test that asks, so that each test using them also runs alone."""
    release.kubectl("create", "namespace", ENFORCED)
    release.kubectl("apply", "-f", "-", input=json.dumps(policy("node-native", ENFORCED, "native-forbidden")))
    release.kubectl("apply", "-f", "-", input=json.dumps(
        policy("node-webhook", ENFORCED, "webhook-forbidden", "sha256(object.metadata.name) != '' && ")))
    wait_for("the native policy Ready and enforced by a VAP", lambda: ready_with(release, "node-native", "NativeVAP"),
             120, 1)
    wait_for("the webhook policy Ready and enforced by vpol's webhook",
             lambda: ready_with(release, "node-webhook", "Webhook"), 120, 1)
    return release


def test_policies_are_enforced_natively_and_through_the_webhook_service(enforced: KubeCluster) -> None:
    release, namespace = enforced, ENFORCED
    assert ready_with(release, "node-native", "NativeVAP") and ready_with(release, "node-webhook", "Webhook"), \
        (policy_status(release, "node-native"), policy_status(release, "node-webhook"))
    configuration = json.loads(release.kubectl("get", "validatingwebhookconfiguration", "vpol-validating",
                                               "-o", "json").stdout)
    # The API server calls the webhook through the chart's Service, not a URL.
    assert all(w["clientConfig"].get("service", {}).get("name") == "vpol-webhook" and "url" not in w["clientConfig"]
               for w in configuration["webhooks"]), configuration["webhooks"]
    expect_denied(lambda: dry_cm(release, namespace, "a", {"native-forbidden": "1"}), "native-forbidden is not allowed")
    expect_denied(lambda: dry_cm(release, namespace, "b", {"webhook-forbidden": "1"}),
                  "webhook-forbidden is not allowed")
    dry_cm(release, namespace, "c", {"fine": "1"})


def exec_policy(name: str, namespace: str, word: str, expression_prefix: str = "") -> dict[str, Any]:
    """Denies `kubectl exec` (CONNECT pods/exec, a PodExecOptions object) whose command has an argument holding
    `word`, in one namespace."""
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": name},
            "spec": {"validationActions": ["Deny"],
                     "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CONNECT"], "resources": ["pods/exec"]}],
                                          "namespaceSelector": {"matchLabels": {
                                              "kubernetes.io/metadata.name": namespace}}},
                     "validations": [{"expression": f"{expression_prefix}!object.command.exists(a, a.contains('{word}'))",
                                      "message": f"exec with {word} is not allowed"}]}}


@pytest.mark.parametrize(("enforcement", "prefix"), [("NativeVAP", ""),
                                                      ("Webhook", "sha256(object.kind) != '' && ")])
def test_exec_into_a_running_pod_is_decided_by_policy(release: KubeCluster, enforcement: str, prefix: str) -> None:
    namespace = f"helm-node-exec-{enforcement.lower()}"
    release.kubectl("create", "namespace", namespace)
    release.kubectl("run", "target", "-n", namespace, "--image=vpol.local/echo:1", "--image-pull-policy=Never")
    release.kubectl("wait", "--for=condition=Ready", "pod/target", "-n", namespace, "--timeout=60s")
    name = f"node-exec-{enforcement.lower()}"
    release.kubectl("apply", "-f", "-", input=json.dumps(exec_policy(name, namespace, "forbidden", prefix)))
    wait_for(f"the exec policy Ready and enforced ({enforcement})", lambda: ready_with(release, name, enforcement),
             120, 1)

    def run(path: str) -> subprocess.CompletedProcess[str]:
        return release.kubectl("exec", "target", "-n", namespace, "--", "/echo", "--fetch",
                               f"http://127.0.0.1:8080/{path}", check=False)

    try:
        denied = wait_for("the exec to be denied", lambda: (p := run("forbidden")).returncode != 0
                          and "exec with forbidden is not allowed" in p.stderr and p, 30, 1)
    except AssertionError:
        hooks = release.kubectl("get", "validatingwebhookconfiguration", "vpol-validating", "-o", "json").stdout
        logs = release.kubectl("logs", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=vpol", "--tail=40").stdout
        raise AssertionError(f"{run('forbidden')}\n{hooks}\n{logs}") from None
    assert "forbidden" not in denied.stdout
    allowed = run("allowed")
    assert allowed.returncode == 0 and json.loads(allowed.stdout.split("\n", 1)[1])["path"] == "/allowed", allowed


@pytest.mark.parametrize(("enforcement", "prefix"), [("NativeVAP", ""),
                                                      ("Webhook", "sha256(object.kind) != '' && ")])
def test_labels_on_the_real_node_are_decided_by_policy(release: KubeCluster, enforcement: str, prefix: str) -> None:
    """A cluster-scoped object that is really there: a label on the Node the kubelet registered is denied, natively
    and through the webhook, another label is admitted."""
    node = release.info["node"]
    word = f"forbidden-{enforcement.lower()}"
    name = f"node-labels-{enforcement.lower()}"
    release.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": name},
        # Admission only: the chart's rbac.scannedKinds has no nodes, so a background policy on them is not Ready
        # (RBACPermissionsGranted=False names the missing get/list/watch nodes).
        "spec": {"validationActions": ["Deny"], "evaluation": {"background": {"enabled": False}},
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["UPDATE"], "resources": ["nodes"]}]},
                 "validations": [{"expression": f"{prefix}!(has(object.metadata.labels) && "
                                                f"'example.com/{word}' in object.metadata.labels)",
                                  "message": f"{word} is not a Node label"}]}}))
    try:
        try:
            wait_for(f"the Node policy Ready and enforced ({enforcement})",
                     lambda: ready_with(release, name, enforcement), 120, 1)
        except AssertionError:
            logs = release.kubectl("logs", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=vpol", "--tail=60",
                                   "--prefix").stdout
            conditions = (policy_status(release, name).get("conditionStatus") or {}).get("conditions") or []
            raise AssertionError("\n".join(f"{c['type']}={c['status']} {c.get('reason')}: {c.get('message')}"
                                           for c in conditions) + f"\n{logs[-3000:]}") from None
        wait_for("the label to be denied", lambda: (p := release.kubectl("label", "node", node, f"example.com/{word}=1",
                                                                          check=False)).returncode != 0
                 and f"{word} is not a Node label" in p.stderr and p, 30, 1)
        release.kubectl("label", "node", node, f"example.com/fine-{enforcement.lower()}=1", "--overwrite")
        labels = json.loads(release.kubectl("get", "node", node, "-o", "json").stdout)["metadata"]["labels"]
        assert f"example.com/{word}" not in labels and labels[f"example.com/fine-{enforcement.lower()}"] == "1"
    finally:
        release.kubectl("delete", "validatingpolicy", name, "--ignore-not-found")
        release.kubectl("label", "node", node, f"example.com/fine-{enforcement.lower()}-", check=False)


def scan_results(cluster: KubeCluster, namespace: str, policy_name: str) -> dict[str, dict[str, Any]]:
    """The results of one policy in a namespace's PolicyReports, by the name of the object each is about."""
    reports = json.loads(cluster.kubectl("get", "policyreports.wgpolicyk8s.io", "-n", namespace, "-o", "json").stdout)
    return {(report.get("scope") or {}).get("name"): r for report in reports["items"]
            for r in report.get("results") or [] if r.get("policy") == policy_name}


def http_policy(name: str) -> dict[str, Any]:
    """Asks the echo Service about every ConfigMap of HTTP_NAMESPACE: a GET whose answer (the path it was asked)
    decides, and whose answering host is in the message; a POST whose answer must echo the name it was sent."""
    url = f"'{ANSWERS}/' + object.metadata.name"
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": name},
            "spec": {"validationActions": ["Deny"],
                     "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE", "UPDATE"],
                                                             "resources": ["configmaps"]}],
                                          "namespaceSelector": {"matchLabels": {
                                              "kubernetes.io/metadata.name": HTTP_NAMESPACE}}},
                     "validations": [
                         {"expression": f"!http.Get({url}).path.startsWith('/forbidden')",
                          "messageExpression": f"'forbidden, says ' + string(http.Get({url}).host)"},
                         {"expression": f"http.Post('{ANSWERS}/check', {{'name': object.metadata.name}})"
                                        ".received.name == object.metadata.name",
                          "message": "the answer does not echo the name"}]}}


def test_a_policy_calling_a_service_over_http_decides_at_admission_and_in_scans(release: KubeCluster) -> None:
    ns = HTTP_NAMESPACE
    release.kubectl("create", "namespace", ns)
    release.kubectl("run", "answers", "-n", ns, "--image=vpol.local/echo:1", "--image-pull-policy=Never")
    release.kubectl("expose", "pod", "answers", "-n", ns, "--port=80", "--target-port=8080")
    release.kubectl("wait", "--for=condition=Ready", "pod/answers", "-n", ns, "--timeout=60s")
    for name in ("forbidden-before", "fine-before"):
        release.kubectl("create", "configmap", name, "-n", ns)
    release.kubectl("apply", "-f", "-", input=json.dumps(http_policy("node-http")))
    wait_for("the http policy Ready and enforced by the webhook", lambda: ready_with(release, "node-http", "Webhook"),
             120, 1)
    # At admission, through the webhook in vpol's Pods: the Service's answer decides.
    expect_denied(lambda: dry_cm(release, ns, "forbidden-now", {}), "forbidden, says answers")
    dry_cm(release, ns, "fine-now", {})

    # In a scan of what was there before the policy.
    def results() -> dict[str, dict[str, Any]] | None:
        found = scan_results(release, ns, "node-http")
        return found if {"forbidden-before", "fine-before"} <= set(found) else None

    found = wait_for("the scan's results for both ConfigMaps", results, 120, 1)
    assert found["fine-before"]["result"] == "pass", found
    assert found["forbidden-before"]["result"] == "fail" and \
        "forbidden, says answers" in found["forbidden-before"]["message"], found


def test_scans_follow_pods_through_their_real_phases(release: KubeCluster) -> None:
    """Pods that really run: a policy on `status.phase` scans a Pod created after it as it goes from Pending to
    Running (its status changes, its spec does not), and one whose container exits with an error as Failed."""
    ns = "helm-node-phases"
    release.kubectl("create", "namespace", ns)
    running = policy("node-running", ns, "unused")
    running["spec"].update(validationActions=["Audit"], validations=[
        {"expression": "object.status.phase == 'Running'",
         "messageExpression": "'the Pod is ' + object.status.phase"}])
    running["spec"]["matchConstraints"]["resourceRules"] = [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE", "UPDATE"],
                                                             "resources": ["pods"]}]
    release.kubectl("apply", "-f", "-", input=json.dumps(running))
    wait_for("the phase policy Ready", lambda: ready_with(release, "node-running", "NativeVAP"), 120, 1)
    release.kubectl("run", "serves", "-n", ns, "--image=vpol.local/echo:1", "--image-pull-policy=Never")
    release.kubectl("run", "fails", "-n", ns, "--image=vpol.local/echo:1", "--image-pull-policy=Never",
                    "--restart=Never", "--", "--fetch", "http://127.0.0.1:1/")

    final = wait_for("the reports of a running and a failed Pod",
                     lambda: (r := scan_results(release, ns, "node-running"))
                     and (r.get("serves") or {}).get("result") == "pass"
                     and "Failed" in (r.get("fails") or {}).get("message", "") and r, 120, 1)
    assert final["fails"]["result"] == "fail" and final["fails"]["message"] == "the Pod is Failed", final
    phases = {p["metadata"]["name"]: p["status"]["phase"] for p in json.loads(release.kubectl(
        "get", "pods", "-n", ns, "-o", "json").stdout)["items"]}
    assert phases == {"serves": "Running", "fails": "Failed"}, phases


def audited_result(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    """A ConfigMap `audited` in a new namespace, then an Audit policy `name` it violates: its result in the
    ConfigMap's PolicyReport, written by the replica that scans."""
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("create", "configmap", "audited", "-n", namespace, "--from-literal=audited=1")
    audit = policy(name, namespace, "audited")
    audit["spec"]["validationActions"] = ["Audit"]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(audit))

    return dict(wait_for(f"{name}'s result in the ConfigMap's PolicyReport",
                         lambda: scan_results(cluster, namespace, name).get("audited"), 120, 1))


def test_background_scans_write_reports(release: KubeCluster) -> None:
    found = audited_result(release, "helm-node-reports", "node-audit")
    assert found["result"] == "fail" and "audited is not allowed" in found["message"], found


class ServiceJob(ScrapeJob):
    """A scrape job over the endpoints of a Service (its EndpointSlices, as the API server holds them), one
    target per ready endpoint labelled with its Pod: what the Prometheus Operator builds from a ServiceMonitor.
    (Debian's Prometheus has no Kubernetes service discovery, so the test reads the endpoints.)"""

    def __init__(self, name: str, cluster: KubeCluster, namespace: str, service: str, port: str) -> None:
        slices = json.loads(cluster.kubectl("get", "endpointslices", "-n", namespace, "-l",
                                            f"kubernetes.io/service-name={service}", "-o", "json").stdout)["items"]
        self.endpoints = [(address, p["port"], e["targetRef"]["name"]) for s in slices
                          for p in s.get("ports") or [] if p.get("name") == port
                          for e in s.get("endpoints") or [] if (e.get("conditions") or {}).get("ready")
                          for address in e["addresses"]]
        super().__init__(name=name, targets=[f"{a}:{p}" for a, p, _pod in self.endpoints])

    def config(self) -> dict[str, Any]:
        return {"job_name": self.name, "metrics_path": "/metrics",
                "static_configs": [{"targets": [f"{a}:{p}"], "labels": {"pod": pod}} for a, p, pod in self.endpoints]}


def test_prometheus_scrapes_every_replica_through_the_metrics_service(release: KubeCluster,
                                                                      tmp_path: Path) -> None:
    names = {p["metadata"]["name"] for p in pods(release) if ready(p)}
    job = ServiceJob("vpol", release, NAMESPACE, "vpol-metrics", "metrics")
    assert {pod for _a, _p, pod in job.endpoints} == names and len(names) == 2, job.endpoints
    prom = PrometheusServer(tmp_path / "prometheus", [job]).start()
    try:
        up = wait_for("both replicas scraped", lambda: (lambda r: r if {s["metric"]["pod"] for s in r} == names
                                                        else None)(prom.query('up{job="vpol"} == 1')), 90, 1)
        assert len(up) == 2
        # Each replica serves vpol's own metrics (not only the process collector's).
        series = prom.query('count by (pod) ({job="vpol", __name__=~"vpol_.+"})')
        assert {s["metric"]["pod"] for s in series} == names, series
    finally:
        prom.stop()


class Load:
    """Admission requests that need vpol's webhook, sent by a few threads until the block ends: server-side dry
    runs of ConfigMaps the webhook policy allows, and one in five that it denies (so every answer shows the
    webhook decided). A failure is any other answer: an error, a denial that is not the policy's (the webhook not
    reached: failurePolicy Fail), or a violation admitted."""

    def __init__(self, cluster: KubeCluster, namespace: str, threads: int = 4) -> None:
        self.api = client.CoreV1Api(cluster.api_client)
        self.namespace, self.threads = namespace, threads
        self.ok = self.denied = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []

    def _send(self, worker: int) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            violation = n % 5 == 0
            body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"load-{worker}-{n}"),
                                      data={"webhook-forbidden" if violation else "fine": "1"})
            try:
                self.api.create_namespaced_config_map(self.namespace, body, dry_run="All", _request_timeout=30)
            except Exception as exc:  # noqa: BLE001 - every failure is the finding
                text = str(getattr(exc, "body", exc))
                if violation and "webhook-forbidden is not allowed" in text:
                    self.denied += 1
                else:
                    self.failures.append(f"{time.strftime('%H:%M:%S')} {getattr(exc, 'status', '')} {text[:300]}")
                continue
            if violation:
                self.failures.append(f"{time.strftime('%H:%M:%S')} a violation was admitted")
            else:
                self.ok += 1

    def __enter__(self) -> "Load":
        self._workers = [threading.Thread(target=self._send, args=(i,), daemon=True) for i in range(self.threads)]
        for w in self._workers:
            w.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for w in self._workers:
            w.join(60)


class ReportWrites:
    """Every write of a PolicyReport in a namespace, counted per report from a watch (ADDED and MODIFIED events)
    opened before the block: what the API server stored, whichever replica wrote it."""

    def __init__(self, cluster: KubeCluster, namespace: str) -> None:
        self.api = client.CustomObjectsApi(cluster.api_client)
        self.namespace = namespace
        self.writes: dict[str, int] = {}
        self.scopes: dict[str, str] = {}
        self._opened = threading.Event()
        self.ended: Exception | None = None

    def _watch(self) -> None:
        from kubernetes import watch
        listed = self.api.list_namespaced_custom_object("wgpolicyk8s.io", "v1alpha2", self.namespace, "policyreports")
        assert not listed["items"], "the namespace has reports already"
        self._opened.set()
        try:
            for event in watch.Watch().stream(self.api.list_namespaced_custom_object, "wgpolicyk8s.io", "v1alpha2",
                                              self.namespace, "policyreports", timeout_seconds=900,
                                              resource_version=listed["metadata"]["resourceVersion"]):
                if event["type"] in ("ADDED", "MODIFIED"):
                    report = event["object"]
                    name = report["metadata"]["name"]
                    self.writes[name] = self.writes.get(name, 0) + 1
                    self.scopes[name] = (report.get("scope") or {}).get("name", "")
        except Exception as exc:  # noqa: BLE001 - the watch's end (the cluster stopped after the test) is recorded
            self.ended = exc

    def __enter__(self) -> "ReportWrites":
        threading.Thread(target=self._watch, daemon=True).start()
        assert self._opened.wait(30), "the report watch did not open"
        return self

    def __exit__(self, *exc: object) -> None:
        pass  # the watch ends with its timeout (a daemon thread)


def scanner_holder(cluster: KubeCluster) -> str:
    lease = json.loads(cluster.kubectl("get", "lease", "vpol-scanner", "-n", NAMESPACE, "-o", "json").stdout)
    return str(lease["spec"].get("holderIdentity") or "")


def test_helm_upgrade_under_load_fails_no_admission_request(enforced: KubeCluster) -> None:
    release = enforced
    # The same image under another tag: the Deployment's template changes, so its Pods are replaced one by one.
    socket = release.info["node_host"]["containerd"]
    deployment = json.loads(release.kubectl("get", "deployment", "vpol", "-n", NAMESPACE, "-o", "json").stdout)
    current = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    repository, _, _tag = current.rpartition(":")
    subprocess.run(["ctr", "--address", socket, "-n", "k8s.io", "images", "tag", "--force",
                    f"docker.io/library/{current}", f"docker.io/library/{repository}:upgraded"], check=True)
    before = {p["metadata"]["name"] for p in pods(release)}
    with Load(release, ENFORCED) as load:
        time.sleep(3)
        helm_on(release, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values",
                "--set", "image.tag=upgraded", "--wait", "--timeout", "180s")
        wait_for("the old Pods gone", lambda: not before & {p["metadata"]["name"] for p in pods(release)}, 120, 1)
        time.sleep(3)
    after = pods(release)
    assert len(after) == 2 and all(p["spec"]["containers"][0]["image"].endswith(":upgraded") for p in after)
    assert load.ok > 50 and load.denied > 10 and load.failures == [], (load.ok, load.denied, load.failures[:10])


#: ConfigMaps the scan interrupted by the leader's deletion reports on (one PolicyReport each): enough that the
#: deletion lands mid-scan on a fast day (500 were all written before it once, in CI beside the other worker).
SCANNED = 1500


def test_the_leader_deleted_under_load_fails_no_admission_request_and_the_other_replica_scans(
        enforced: KubeCluster, tmp_path: Path) -> None:
    """The replica that goes drains its webhook first (the chart's --webhook-drain: its log says so): without the
    drain, one request in a few thousand failed with EOF as the Pod was deleted (the API server writing it on a
    connection the stopping replica closed). Its scan, under way, ends at once and the scanner Lease is released only
    then: a report it wrote after the successor had read the reports back was written a second time by the
    successor (17 of 1,501 in one CI run)."""
    release = enforced
    leader = wait_for("a replica holding the scanner Lease", lambda: scanner_holder(release), 60, 1)
    (pod,) = [p["metadata"]["name"] for p in pods(release) if p["metadata"]["name"] in leader]
    scanned = "helm-node-failover-scan"
    release.kubectl("create", "namespace", scanned)
    release.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}", "namespace": scanned},
         "data": {"audited": "1"}} for i in range(SCANNED)]}))
    audit = policy("node-audit-failover", scanned, "audited")
    audit["spec"]["validationActions"] = ["Audit"]
    log = tmp_path / "leader.log"
    with log.open("w") as out:
        following = subprocess.Popen([release.kubectl_path, "logs", "-f", "--since=1s", pod, "-n", NAMESPACE],
                                     stdout=out, stderr=subprocess.STDOUT,
                                     env={**os.environ, "KUBECONFIG": str(release.kubeconfig)})
    core = client.CoreV1Api(release.api_client)
    stop_following = contextlib.ExitStack()
    stop_following.callback(following.kill)
    with stop_following, Load(release, ENFORCED) as load, ReportWrites(release, scanned) as writes:
        time.sleep(3)
        # A scan that the leader's deletion interrupts: the deletion (through the API: no kubectl to start) as
        # soon as its first report is written.
        release.kubectl("apply", "-f", "-", input=json.dumps(audit))
        wait_for("the scan's first report", lambda: writes.writes, 120, 0.05)
        core.delete_namespaced_pod(pod, NAMESPACE)
        at_deletion = len(writes.writes)
        print(f"the leader {pod} deleted with {at_deletion} of {SCANNED + 1} reports written")
        successor = wait_for("another replica holding the scanner Lease",
                             lambda: (h := scanner_holder(release)) and pod not in h and h, 120, 1)
        wait_for("the replacement Pod Ready", lambda: len([p for p in pods(release) if ready(p)
                                                          and p["metadata"]["name"] != pod]) == 2, 120, 1)
        following.wait(60)  # the container's log ends when it exits
        # The successor finishes the scan: a report for every ConfigMap, each written once (the reports the old
        # leader wrote are read back, not written again).
        # (The namespace's kube-root-ca.crt too: the policy matches every ConfigMap there.)
        expected = sorted([f"cm-{i}" for i in range(SCANNED)] + ["kube-root-ca.crt"])
        wait_for(f"{len(expected)} reports", lambda: len(writes.writes) >= len(expected), 300, 1)
        time.sleep(5)
    assert load.ok > 50 and load.denied > 10 and load.failures == [], (load.ok, load.denied, load.failures[:10])
    assert writes.ended is None, writes.ended  # counted throughout
    assert "admission webhook: draining for 5.0 s" in log.read_text(), log.read_text()[-2000:]
    # The old leader's scan, under way, ended at its SIGTERM: none of its reports is written after that (a report
    # written after the successor read the reports back is one the successor writes again: twice, below).
    assert "the pass under way ends here (stopping)" in log.read_text(), log.read_text()[-2000:]
    assert at_deletion < len(expected), f"the scan had ended ({at_deletion} reports) before the leader was deleted"
    assert sorted(writes.scopes.values()) == expected
    twice = {writes.scopes[n]: c for n, c in writes.writes.items() if c != 1}
    assert sum(writes.writes.values()) / len(expected) == 1.0 and not twice, (at_deletion, twice)
    reports = json.loads(release.kubectl("get", "policyreports.wgpolicyk8s.io", "-n", scanned, "-o", "json").stdout)
    results = [r for report in reports["items"] for r in report.get("results") or []]
    assert len(results) == len(expected) and {r["policy"] for r in results} == {"node-audit-failover"}
    assert sorted(r["result"] for r in results) == ["fail"] * SCANNED + ["pass"]
    # The new leader scans: a policy made now gets its results in the namespace's report.
    assert audited_result(release, "helm-node-failover", "node-audit-after")["result"] == "fail", successor


def test_evictions_take_one_replica_at_a_time(release: KubeCluster) -> None:
    """The chart's PodDisruptionBudget: of two evictions at once (a node drain), the second waits."""
    wait_for("both replicas Ready", lambda: len([p for p in pods(release) if ready(p)]) == 2, 120, 1)
    wait_for("the budget to allow one disruption", lambda: json.loads(release.kubectl(
        "get", "pdb", "vpol", "-n", NAMESPACE, "-o", "json").stdout).get("status", {}).get("disruptionsAllowed") == 1,
             60, 1)
    api = client.PolicyV1Api(release.api_client)
    first, second = sorted(p["metadata"]["name"] for p in pods(release))

    def evict(name: str) -> int:
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=NAMESPACE))
        try:
            client.CoreV1Api(release.api_client).create_namespaced_pod_eviction(name, NAMESPACE, body)
        except client.ApiException as exc:
            return int(exc.status)
        return 201

    assert evict(first) == 201
    assert evict(second) == 429  # TooManyRequests: the budget allows no second disruption
    assert api.read_namespaced_pod_disruption_budget("vpol", NAMESPACE).spec.max_unavailable == 1
    wait_for("the evicted replica replaced and Ready", lambda: len([p for p in pods(release) if ready(p)
                                                                   and p["metadata"]["name"] != first]) == 2, 120, 1)


def test_one_replica_handles_policy_events_and_a_policy_made_late_is_reconciled_at_once(release: KubeCluster
                                                                                        ) -> None:
    """Kopf peering: the live replica of the highest priority handles policy events, and replicas that share the
    highest are all paused for good. The chart's replicas, which get the same arguments, each draw their own: long
    after both run (they have seen each other in the peering object), a new policy is reconciled at once, not at
    the next resync (operator.resync, 10 minutes)."""
    wait_for("both replicas Ready", lambda: len([p for p in pods(release) if ready(p)]) == 2, 120, 1)
    peering = json.loads(release.kubectl("get", "clusterkopfpeering", "vpol", "-o", "json").stdout)

    def live() -> dict[str, Any]:
        status = json.loads(release.kubectl("get", "clusterkopfpeering", "vpol", "-o", "json").stdout).get("status")
        names = {p["metadata"]["name"] for p in pods(release)}
        found = {k: v for k, v in (status or {}).items() if k.split("@", 1)[-1].split("/", 1)[0] in names}
        return found if len(found) == 2 else {}

    peers = wait_for("both replicas in the peering object", live, 120, 1)
    priorities = [v["priority"] for v in peers.values()]
    assert len(set(priorities)) == 2, peering
    # Both have seen each other: the peering object has been written since both started, and a while ago.
    time.sleep(75)
    release.kubectl("create", "namespace", "helm-node-late")
    started = time.monotonic()
    release.kubectl("apply", "-f", "-", input=json.dumps(policy("node-late", "helm-node-late", "late")))
    wait_for("the late policy Ready", lambda: ready_with(release, "node-late", "NativeVAP"), 60, 1)
    assert time.monotonic() - started < 60
    expect_denied(lambda: dry_cm(release, "helm-node-late", "a", {"late": "1"}), "late is not allowed")


def test_uninstall_leaves_no_webhook_configuration(enforced: KubeCluster) -> None:
    release = enforced
    # Written by the leading replica for the webhook policy: waited for, not assumed to be there already.
    wait_for("vpol's webhook configuration",
             lambda: "validatingwebhookconfigurations/vpol-validating" in webhook_configurations(release), 60, 1)
    helm_on(release, "uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    wait_for("no webhook configuration left", lambda: webhook_configurations(release) == [], 60, 1)
    wait_for("the operator's Pods gone", lambda: pods(release) == [], 60, 1)
    dry_cm(release, ENFORCED, "d", {"webhook-forbidden": "1"})  # nothing calls a server that is gone

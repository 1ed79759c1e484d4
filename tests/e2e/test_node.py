"""The test control plane's node (issue 41): `cluster start DIR --node` runs kube-scheduler, a kubelet, containerd
and kube-proxy, so Pods are scheduled and really run here, reach the API server and Services by name, and are
reached. (What `cluster stop` leaves: test_node_teardown.py.)
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from typing import Any, Callable, TypeVar

import pytest

pytestmark = pytest.mark.e2e

T = TypeVar("T")
KubeCluster = Any
#: The workload image every node has (tests/controlplane/echo, imported at start; never pulled).
ECHO = "vpol.local/echo:1"


def wait_for(check: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.3)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def pod(name: str, *args: str, labels: dict[str, str] | None = None, restart: str = "Always") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": ECHO, "imagePullPolicy": "Never", "args": list(args)}
    if not args:
        container["readinessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                           "labels": labels or {}},
            "spec": {"restartPolicy": restart, "containers": [container]}}


def apply(cluster: KubeCluster, *docs: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))


def get(cluster: KubeCluster, *args: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def running_web_pod(cluster: KubeCluster, name: str) -> dict[str, Any]:
    apply(cluster, pod(name, labels={"app": name}))
    cluster.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=60s")
    return get(cluster, "pod", name)


def test_the_node_is_ready_and_a_pod_of_a_local_image_runs_and_serves(node_cluster: KubeCluster) -> None:
    node = get(node_cluster, "node", node_cluster.info["node"])
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    assert not node["spec"].get("taints"), node["spec"]  # the not-ready taint is gone: Pods are scheduled

    web = running_web_pod(node_cluster, "web")
    assert web["spec"]["nodeName"] == node_cluster.info["node"] and web["status"]["phase"] == "Running"
    with urllib.request.urlopen(f"http://{web['status']['podIP']}:8080/hello?x=1", timeout=10) as resp:
        answer = json.loads(resp.read())
    assert answer == {"host": "web", "path": "/hello", "query": {"x": ["1"]}}

    # A Service over it gets its endpoints (what the API server dials for a webhook behind a Service).
    apply(node_cluster, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
                         "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    addresses = wait_for(lambda: [a for s in get(node_cluster, "endpointslices", "-l",
                                                 "kubernetes.io/service-name=web")["items"]
                                  for e in s.get("endpoints") or [] for a in e["addresses"]],
                         30, "the Service's endpoints")
    assert addresses == [web["status"]["podIP"]]


def test_pods_reach_the_api_server_and_kubectl_reaches_pods(node_cluster: KubeCluster) -> None:
    # In a Pod, the API server is the `kubernetes` Service's address, as everywhere (10.0.0.1:443).
    apply(node_cluster, pod("probe", "--fetch", "https://10.0.0.1:443/version", restart="Never"))
    phase = wait_for(lambda: get(node_cluster, "pod", "probe")["status"].get("phase") in ("Succeeded", "Failed")
                     and get(node_cluster, "pod", "probe")["status"]["phase"], 60, "the probe Pod to end")
    logs = node_cluster.kubectl("logs", "probe").stdout
    assert phase == "Succeeded", logs
    assert logs.startswith("200 OK") and json.loads(logs.split("\n", 1)[1])["gitVersion"] == \
        node_cluster.info["version"]

    running_web_pod(node_cluster, "exec-target")
    out = node_cluster.kubectl("exec", "exec-target", "--", "/echo", "--fetch", "http://127.0.0.1:8080/inside").stdout
    assert json.loads(out.split("\n", 1)[1])["path"] == "/inside"


def fetch_from(cluster: KubeCluster, pod_name: str, url: str) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("exec", pod_name, "--", "/echo", "--fetch", url, check=False)


def test_pods_reach_services_by_name_through_the_cluster_dns_and_kube_proxy(node_cluster: KubeCluster) -> None:
    """A Service's name resolves in a Pod (the kubelet's search path, the cluster DNS on the bridge) to its
    cluster IP, which kube-proxy routes to an endpoint on another port; a headless Service's name resolves to its
    Pods; a name the cluster lacks does not resolve."""
    server = running_web_pod(node_cluster, "named")
    running_web_pod(node_cluster, "client")
    apply(node_cluster,
          {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "named", "namespace": "default"},
           "spec": {"selector": {"app": "named"}, "ports": [{"port": 80, "targetPort": 8080}]}},
          {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "named-direct", "namespace": "default"},
           "spec": {"clusterIP": "None", "selector": {"app": "named"}, "ports": [{"port": 8080}]}})
    cluster_ip = get(node_cluster, "service", "named")["spec"]["clusterIP"]
    assert cluster_ip.startswith("10.0.0."), cluster_ip

    def answer(url: str) -> dict[str, Any] | None:
        out = fetch_from(node_cluster, "client", url)
        return json.loads(out.stdout.split("\n", 1)[1]) if out.returncode == 0 else None

    # Endpoints reach kube-proxy a moment after the Service is made, as in any cluster.
    for url in ("http://named/a?q=1", "http://named.default.svc.cluster.local/a?q=1", "http://named.default/a?q=1",
                f"http://{cluster_ip}/a?q=1", "http://named-direct:8080/a?q=1"):
        got = wait_for(lambda: answer(url), 30, f"an answer at {url}")
        assert got == {"host": "named", "path": "/a", "query": {"q": ["1"]}}, (url, got)
    # The Pod itself through its own Service (hairpin): kube-proxy's masquerading brings the answer back. (Its
    # short name would be its own address: the kubelet writes the Pod's hostname into its /etc/hosts.)
    own = node_cluster.kubectl("exec", "named", "--", "/echo", "--fetch",
                               "http://named.default.svc.cluster.local/self").stdout
    assert json.loads(own.split("\n", 1)[1])["path"] == "/self"
    missing = fetch_from(node_cluster, "client", "http://absent.default.svc.cluster.local/")
    assert missing.returncode != 0 and "no such host" in missing.stdout, missing.stdout
    # The cluster DNS answers what the API server holds: the headless name is the Pod's address.
    assert server["status"]["podIP"] in node_cluster.kubectl(
        "exec", "client", "--", "/echo", "--resolve", "named-direct.default.svc.cluster.local").stdout

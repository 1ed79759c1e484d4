"""The test control plane's node (issue 41): `cluster start DIR --node` runs kube-scheduler, a kubelet and
containerd, so Pods are scheduled and really run here, reach the API server and are reached; `cluster stop` leaves
nothing of the node on the host, also after a supervisor that was killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
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


# --- nothing left on the host ------------------------------------------------------------------------------------


def host_traces(state: Path, host: dict[str, str], veths: list[str], existed: set[str]) -> dict[str, list[str]]:
    """What of the node of the cluster in `state` is on the host: processes (its state directory on their command
    line, or in its mount namespace), mounts, links, iptables rules, cgroups, sockets, paths that did not exist."""
    namespace = (state / "node" / "namespace").read_text().strip()
    processes, mounts = [], []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ns = os.readlink(entry / "ns" / "mnt")
        except OSError:
            continue
        if str(state) in cmdline or ns == namespace:
            processes.append(f"{entry.name}: {cmdline}")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        if str(state) in line:
            mounts.append(line)
    links = [line for line in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.splitlines()
             if host["bridge"] in line or any(f" {v}@" in line for v in veths)]
    rules = [line for line in subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True,
                                             text=True).stdout.splitlines()
             if host["network"] in line or host["bridge"] in line]
    cgroups = [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{host['cgroup'].strip('/')}")]
    sockets = [str(p) for p in Path("/run").glob(f"{host['network']}*")]
    # What the kubelet and CNI write at fixed host paths goes to DIR/node (mounted over them in the node's
    # namespace): the host sees at most the empty mount points made for them, and none once it stopped.
    paths = [p for p in NODE_PATHS if Path(p).exists() and p not in existed]
    written = [str(f) for p in paths for f in Path(p).rglob("*")]
    return {k: v for k, v in {"processes": processes, "mounts": mounts, "links": links, "iptables": rules,
                              "cgroups": cgroups, "sockets": sockets, "paths": paths, "written": written}.items()
            if v}


#: The kernel settings a kubelet changes when it starts (kernel.panic, ...): faked inside the node's namespace.
SYSCTLS = ("kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "vm/panic_on_oom",
           "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")


def sysctls() -> dict[str, str]:
    return {key: Path("/proc/sys", key).read_text().strip() for key in SYSCTLS}


#: Where a kubelet and libcni write whatever they are told (certificates, container log links, the CNI cache).
NODE_PATHS = ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni")


def host_veths(state: Path, network: str) -> list[str]:
    """The host ends of the Pods' veth pairs, from the CNI results of the node's network (libcni's cache, which
    the node keeps under its state directory)."""
    names = []
    for path in (state / "node" / "mnt" / "var-lib-cni" / "results").glob(f"{network}-*"):
        result = json.loads(path.read_text()).get("result") or {}
        names += [i["name"] for i in result.get("interfaces") or [] if i.get("name", "").startswith("veth")]
    return names


@pytest.mark.parametrize("supervisor", ["stopped", "killed"])
def test_stop_leaves_nothing_of_the_node_on_the_host(local_clusters: Any, tmp_path: Path, supervisor: str) -> None:
    state = tmp_path / "cluster"
    existed = {p for p in NODE_PATHS if Path(p).exists()}
    settings = sysctls()
    cluster = local_clusters.start(state, node=True)
    host = cluster.info["node_host"]
    running_web_pod(cluster, "web")
    veths = host_veths(state, host["network"])
    during = host_traces(state, host, veths, existed)
    # The checks see the node while it runs: every kind of trace is there to be found.
    assert veths and {"processes", "links", "iptables", "cgroups", "sockets"} <= set(during), during
    assert "written" not in during and sysctls() == settings, during
    if supervisor == "killed":
        # Its children die with it (Pdeathsig), containerd's shims do not: `cluster stop` removes the rest.
        os.kill(int((state / "controlplane.pid").read_text()), signal.SIGKILL)
        time.sleep(1)
    local_clusters.stop(state)
    assert host_traces(state, host, veths, existed) == {}

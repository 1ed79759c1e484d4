"""`cluster stop` leaves nothing of the node on the host (issue 41), also after a supervisor that was killed: no
process, mount, link, iptables rule or chain (the bridge plugin's, the API server's DNAT, kube-proxy's and the
kubelet's KUBE-* chains), cgroup, socket or path; the host's kernel settings never change. In a module of its own:
a host runs one node at a time, and the other node modules' cluster is stopped before this one starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_node import running_web_pod

pytestmark = pytest.mark.e2e


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
    # kube-proxy's and the kubelet's chains (fixed names: a host runs one node at a time), in either family.
    chains = [f"{binary} -t {table} {line}" for binary in ("iptables", "ip6tables") for table in ("filter", "nat", "mangle")
              for line in subprocess.run([binary, "-t", table, "-S"], capture_output=True, text=True).stdout.splitlines()
              if "KUBE-" in line]
    return {k: v for k, v in {"processes": processes, "mounts": mounts, "links": links, "iptables": rules,
                              "kube_chains": chains,
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
    assert veths and {"processes", "links", "iptables", "kube_chains", "cgroups", "sockets"} <= set(during), during
    assert "written" not in during and sysctls() == settings, during
    if supervisor == "killed":
        # Its children die with it (Pdeathsig), containerd's shims do not: `cluster stop` removes the rest.
        os.kill(int((state / "controlplane.pid").read_text()), signal.SIGKILL)
        time.sleep(1)
    local_clusters.stop(state)
    assert host_traces(state, host, veths, existed) == {}

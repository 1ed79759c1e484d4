#!/usr/bin/env python3
"""Benchmark (not a test) of vpol as users run it (issue 41): the chart's Pods on a node against the operator as a
host process, and the gaps a failover and an upgrade leave.

On a local control plane with a node (`tests/controlplane/cluster start --node`), the operator image of
tests/image/build is imported into the node and the chart installed (2 replicas, background scans off); the 18 Pod
Security policies of examples/pod-security are enforced by vpol's webhook (as bench/admission.py's webhook phase).
--clients concurrent clients send server-side dry-run creates of a compliant Pod:

  none      no policy (the baseline of each overhead)
  pod       the webhook in the chart's Pods, reached through its Service (the API server dials its endpoints)
  failover  the same load while the Pod holding the scanner Lease is deleted (the other replica answers)
  upgrade   the same load during `helm upgrade` to the image under another tag (the Pods replaced one by one)
  host      the chart uninstalled, `vpol run` as a host process as bench/admission.py runs it, called by URL

Reported per phase: latencies, overhead over `none` at p50/p99, errors (any answer but 201: during failover and
upgrade, a request the webhook did not answer, which its failurePolicy Fail turns into a denial); for failover and
upgrade the gap: the longest a request took (what the API server's retries to another endpoint cost), over the
`pod` phase's p99. Target: the in-Pod path no slower than the host path by more than the network hop (p50 within
a few ms); 0 errors in failover and upgrade.

Usage: python3 bench/node_admission.py [--clients 10] [--requests 2000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from admission import NAMESPACE, Clients, delete_policies, load_policies, pss_policies  # noqa: E402
from common import (REPO, BenchRun, ensure_namespaces, install_vpol, ms, percentile, start_operator,  # noqa: E402
                    table, wait_until)

from kubernetes import client  # noqa: E402

from tests.helm.chart import CHART, NAMESPACE as RELEASE_NAMESPACE, helm  # noqa: E402

RELEASE = "vpol"


def build_image() -> str:
    proc = subprocess.run([str(REPO / "tests" / "image" / "build")], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"tests/image/build failed:\n{proc.stderr[-3000:]}")
    return dict(line.split("=", 1) for line in proc.stdout.split() if "=" in line)["IMAGE"]


def measure(kube: Any, clients: int, requests: int, during: Any = None) -> tuple[list[float], dict[str, int], float]:
    """Warm-up, then ``requests`` requests (with ``during`` run in a thread once they started): latencies,
    errors, wall time."""
    async def go() -> tuple[list[float], dict[str, int], float]:
        async with Clients(kube.configuration, clients) as c:
            await c.run(min(100, requests))
            t = time.monotonic()
            event = None
            if during is not None:
                event = threading.Thread(target=during, daemon=True)
                event.start()
            latencies, errors = await c.run(requests)
            if event is not None:
                event.join(300)
            return latencies, errors, time.monotonic() - t

    return asyncio.run(go())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--quick", action="store_true", help="300 requests per phase")
    ap.add_argument("--workdir")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    requests = 300 if args.quick else args.requests
    image = build_image()
    run = BenchRun.begin(args.workdir, "vpol-bench-node-", None, None, node=True)
    kube = run.cluster.kube
    helm_env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig)}
    op = None
    results: dict[str, tuple[list[float], dict[str, int], float]] = {}
    try:
        archive = run.work / "vpol.tar"
        subprocess.run(["docker", "save", "-o", str(archive), image], check=True, timeout=600)
        subprocess.run([str(REPO / "tests" / "controlplane" / "cluster"), "import", str(run.cluster.state_dir),
                        str(archive)], check=True, timeout=600)
        ensure_namespaces(kube, [NAMESPACE])
        core = client.CoreV1Api(kube.api_client)
        custom = client.CustomObjectsApi(kube.api_client)
        results["none"] = measure(kube, args.clients, requests)

        repository, _, tag = image.rpartition(":")
        helm("install", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "--create-namespace",
             "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
             "--set", "operator.scanInterval=0", "--wait", "--timeout", "300s", env=helm_env, timeout=600)
        load_policies(custom, native=False)
        results["pod"] = measure(kube, args.clients, requests)

        def pods() -> list[Any]:
            return core.list_namespaced_pod(RELEASE_NAMESPACE, label_selector="app.kubernetes.io/name=vpol").items

        def ready_pods() -> int:
            return sum(1 for p in pods() if p.metadata.deletion_timestamp is None and any(
                c.type == "Ready" and c.status == "True" for c in p.status.conditions or []))

        def delete_leader() -> None:
            time.sleep(1)
            holder = client.CoordinationV1Api(kube.api_client).read_namespaced_lease(
                "vpol-scanner", RELEASE_NAMESPACE).spec.holder_identity or ""
            leader = next(p.metadata.name for p in pods() if p.metadata.name in holder)
            core.delete_namespaced_pod(leader, RELEASE_NAMESPACE)
            wait_until(lambda: ready_pods() == 2 and leader not in {p.metadata.name for p in pods()}, 300, 0.5)

        results["failover"] = measure(kube, args.clients, requests, delete_leader)

        subprocess.run(["ctr", "--address", kube_node_socket(run), "-n", "k8s.io", "images", "tag", "--force",
                        f"docker.io/library/{image}", f"docker.io/library/{repository}:bench-upgraded"], check=True)

        def upgrade() -> None:
            time.sleep(1)
            helm("upgrade", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "--reuse-values",
                 "--set", "image.tag=bench-upgraded", "--wait", "--timeout", "300s", env=helm_env, timeout=600)

        results["upgrade"] = measure(kube, args.clients, requests, upgrade)

        helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", env=helm_env, timeout=600)
        install_vpol(kube)  # the ServiceAccount and RBAC the host process runs as (the Deployment scaled to 0)
        kube.kubectl("scale", "deployment", "vpol", "-n", RELEASE_NAMESPACE, "--replicas=0")
        op = start_operator(kube, run.work, extra=["--scan-interval", "0"])
        load_policies(custom, native=False)
        results["host"] = measure(kube, args.clients, requests)
        delete_policies(custom)
        time.sleep(3)
        results["none again"] = measure(kube, args.clients, requests)
    finally:
        if op is not None:
            op.stop()
        run.cluster.stop()

    base = results["none"][0] + results["none again"][0]
    pod_p99 = percentile(results["pod"][0], 99)
    rows = []
    for phase, (latencies, errors, wall) in results.items():
        p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
        over = "-" if phase.startswith("none") else f"{ms(p50 - percentile(base, 50))} / {ms(p99 - percentile(base, 99))}"
        gap = ms(max(latencies) - pod_p99) if phase in ("failover", "upgrade") else "-"
        rows.append([phase, str(len(latencies)), ms(p50), ms(p99), ms(max(latencies)), over,
                     str(sum(errors.values())), gap, f"{len(latencies) / wall:.0f}/s"])
        for err, n in errors.items():
            print(f"  {phase}: {n} x {err}")
    print(f"\n{args.clients} concurrent clients, server-side dry-run Pod creates, {len(pss_policies(False))} Pod "
          f"Security policies through vpol's webhook:")
    print(table(rows, ["phase", "requests", "p50", "p99", "max", "overhead p50 / p99", "errors",
                       "gap (max over pod p99)", "throughput"]))
    print(run.end())
    return 0


def kube_node_socket(run: BenchRun) -> str:
    assert run.cluster.state_dir is not None
    return str(json.loads((run.cluster.state_dir / "ready.json").read_text())["node_host"]["containerd"])


if __name__ == "__main__":
    sys.exit(main())

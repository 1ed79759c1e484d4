#!/usr/bin/env python3
"""Benchmark (not a test) of admission overhead (issue 11): no policy vs native VAPs vs vpol's webhook.

On a local control plane (tests/controlplane) with vpol installed, the
operator runs as in the e2e tests (`vpol run` as its ServiceAccount, the API
server calling the webhook by URL, background scans off so only admission is
measured). The 16 Pod Security policies of examples/pod-security are loaded,
each limited to the bench namespace, with validationActions [Deny]. Three
phases in one run, the same load each time: --clients concurrent clients
(one aiohttp connection each) send server-side dry-run creates of a compliant
Pod (every policy evaluates all its validations and admits) until
--requests requests are done.

  none     no policy
  native   the 16 policies enforced by the API server (generated VAPs)
  webhook  the same 16 policies with native generation off: vpol's webhook

Latency is measured per request at the client; overhead is the phase's
percentile minus the same percentile with no policy. Errors are any answer
but 201. The operator's resident memory (and its worker processes') is
sampled during the load. CPU time per request is read from /proc for each
component (the local control plane's one process, the operator, its
evaluation workers, this load generator), with the connections the API
server opened to the webhook: on a machine this small every component's CPU
per request is a share of the same two cores.

Targets (issue 11): webhook p50 overhead <= 5 ms, p99 <= 25 ms over no
policy, 0 errors, operator RSS <= 200 MiB during the load.

Usage: python3 bench/admission.py [--clients 50] [--requests 3000] [--phases none,native,webhook]
       [--quick] [--operator-args '--webhook-workers 4'] [--kubeconfig FILE --kubectl PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    REPO,
    BenchRun,
    CpuMeter,
    MemorySampler,
    descendants,
    install_vpol,
    ms,
    percentile,
    pids_named,
    scrape,
    start_operator,
    table,
    wait_until,
)

import aiohttp  # noqa: E402
import yaml  # noqa: E402
from kubernetes import client  # noqa: E402

GROUP, VERSION, PLURAL = "policies.kyverno.io", "v1", "validatingpolicies"
NAMESPACE = "bench-admission"
#: The local control plane's process name (its binary's name as /proc/PID/comm keeps it: 15 characters).
CONTROL_PLANE_COMM = "vpol-controlplane"[:15]

POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"generateName": "bench-", "namespace": NAMESPACE, "labels": {"app": "bench"}},
    "spec": {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "app", "image": "registry.local/app:1.0",
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                "runAsNonRoot": True},
            "ports": [{"containerPort": 8080}],
        }],
    },
}


def pss_policies(native: bool) -> list[dict[str, Any]]:
    out = []
    for path in sorted((REPO / "examples" / "pod-security").glob("*/*/policy.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "ValidatingPolicy":
                continue
            body = copy.deepcopy(doc)
            name = f"bench-{body['metadata']['name']}"[:63]
            body["metadata"] = {"name": name, "labels": {"vpol-bench": "admission"}}
            spec = body["spec"]
            spec["validationActions"] = ["Deny"]
            spec.setdefault("evaluation", {})["background"] = {"enabled": False}
            spec.setdefault("autogen", {})["validatingAdmissionPolicy"] = {"enabled": native}
            spec["matchConstraints"]["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
            out.append(body)
    return out


def load_policies(custom: Any, native: bool) -> list[str]:
    names = []
    for body in pss_policies(native):
        name = body["metadata"]["name"]
        try:
            current = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            custom.replace_cluster_custom_object(GROUP, VERSION, PLURAL, name, body)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        names.append(name)
    path = "NativeVAP" if native else "Webhook"

    def enforced() -> bool:
        for n in names:
            obj = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, n)
            st = obj.get("status") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" and
                        c.get("observedGeneration") == obj["metadata"]["generation"] for c in st.get("conditions") or [])
            if st.get("enforcement") != path or not ready:
                return False
        return True

    wait_until(enforced, 300, 1)
    time.sleep(3)  # the API server refreshes admission policies on a 1 s tick; webhook servers reload
    return names


def delete_policies(custom: Any) -> None:
    custom.delete_collection_cluster_custom_object(GROUP, VERSION, PLURAL, label_selector="vpol-bench=admission")
    wait_until(lambda: not custom.list_cluster_custom_object(GROUP, VERSION, PLURAL,
                                                             label_selector="vpol-bench=admission")["items"], 120, 0.5)


def _ssl(cfg: client.Configuration) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def load(cfg: client.Configuration, clients: int, requests: int) -> tuple[list[float], dict[str, int]]:
    url = f"{cfg.host}/api/v1/namespaces/{NAMESPACE}/pods?dryRun=All"
    headers = {"Content-Type": "application/json"}
    auth = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    if auth:
        headers["Authorization"] = auth if " " in auth else f"Bearer {auth}"
    body = json.dumps(POD).encode()
    latencies: list[float] = []
    errors: dict[str, int] = {}
    remaining = [requests]
    ctx = _ssl(cfg)

    async def worker() -> None:
        conn = aiohttp.TCPConnector(ssl=ctx, limit=1)
        async with aiohttp.ClientSession(connector=conn) as session:
            while remaining[0] > 0:
                remaining[0] -= 1
                t = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as r:
                    text = await r.read()
                    took = time.perf_counter() - t
                    if r.status != 201:
                        key = f"{r.status} {text[:120]!r}"
                        errors[key] = errors.get(key, 0) + 1
                    else:
                        latencies.append(took)

    await asyncio.gather(*(worker() for _ in range(clients)))
    return latencies, errors


def run_phase(cfg: client.Configuration, clients: int, requests: int, meter: CpuMeter
              ) -> tuple[list[float], dict[str, int], float, dict[str, float]]:
    asyncio.run(load(cfg, clients, min(200, requests)))  # warm-up: connections, caches, workers
    meter.start()
    t = time.monotonic()
    latencies, errors = asyncio.run(load(cfg, clients, requests))
    wall = time.monotonic() - t
    return latencies, errors, wall, meter.stop()


def webhook_connections(port: int) -> int:
    """Connections to the webhook port open or closed within the last minute (TIME-WAIT): how many the API
    server has made, roughly; it keeps at most 25 idle ones per webhook host."""
    out = subprocess.run(["ss", "-Htan", f"( dport = :{port} )"], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if line.split()[:1] in (["ESTAB"], ["TIME-WAIT"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--phases", default="none,native,webhook")
    ap.add_argument("--quick", action="store_true", help="400 requests per phase")
    ap.add_argument("--operator-args", default="", help="more `vpol run` flags, e.g. '--webhook-workers 4'")
    ap.add_argument("--workdir")
    ap.add_argument("--kubeconfig")
    ap.add_argument("--kubectl")
    args = ap.parse_args()
    requests = 400 if args.quick else args.requests
    run = BenchRun.begin(args.workdir, "vpol-bench-admission-", args.kubeconfig, args.kubectl)
    cluster = run.cluster
    kube = cluster.kube
    op = None
    sampler = None
    try:
        install_vpol(kube)
        core = client.CoreV1Api(kube.api_client)
        try:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        custom = client.CustomObjectsApi(kube.api_client)
        op = start_operator(kube, run.work, extra=["--scan-interval", "0", *args.operator_args.split()])
        sampler = MemorySampler(op.proc.pid)
        sampler.start()
        rows = []
        cpu_rows = []
        base: list[float] = []
        pid = op.proc.pid
        # The local control plane is one process (etcd, kube-apiserver and kube-controller-manager in one
        # binary, tests/controlplane); a cluster given by kubeconfig is not measured.
        meter = CpuMeter({"control plane": lambda: pids_named(CONTROL_PLANE_COMM),
                          "operator": lambda: [pid], "its workers": lambda: descendants(pid),
                          "load generator": lambda: [os.getpid()]})
        for phase in args.phases.split(","):
            if phase == "none":
                delete_policies(custom)
                wait_until(lambda: not client.AdmissionregistrationV1Api(kube.api_client)
                           .list_validating_webhook_configuration(label_selector="app.kubernetes.io/managed-by=vpol")
                           .items, 60, 0.5)
            else:
                names = load_policies(custom, native=phase == "native")
                print(f"phase {phase}: {len(names)} policies enforced ({phase})")
            before = scrape(op) if phase == "webhook" else {}
            connections = webhook_connections(op.webhook_port)
            latencies, errors, wall, cpu = run_phase(kube.configuration, args.clients, requests, meter)
            done = len(latencies) + sum(errors.values())
            cpu_rows.append([phase, *(f"{cpu[k] / max(1, done) * 1000:.2f}" for k in meter.groups),
                             f"{sum(cpu.values()) / wall / (os.cpu_count() or 1) * 100:.0f}%",
                             str(webhook_connections(op.webhook_port) - connections) if phase == "webhook" else "-"])
            if phase == "webhook":
                server_side = _server_side(before, scrape(op))
            if phase == "none":
                base = latencies
            p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
            over = (f"{ms(p50 - percentile(base, 50))} / {ms(p99 - percentile(base, 99))}"
                    if base and phase != "none" else "-")
            rows.append([phase, str(len(latencies)), ms(p50), ms(percentile(latencies, 90)), ms(p99),
                         ms(max(latencies, default=0)), over, str(sum(errors.values())),
                         f"{len(latencies) / wall:.0f}/s"])
            for err, n in errors.items():
                print(f"  {phase}: {n} x {err}")
        peaks = sampler.stop()
        sampler = None
        print()
        print(f"{args.clients} concurrent clients, server-side dry-run Pod creates, 16 Pod Security policies:")
        print(table(rows, ["phase", "requests", "p50", "p90", "p99", "max", "overhead p50 / p99", "errors",
                           "throughput"]))
        print()
        print("CPU per request (ms) by component, their share of the machine's cores, and the connections the "
              "API server opened to the webhook during the phase (TIME-WAIT and open ones):")
        print(table(cpu_rows, ["phase", *meter.groups, "busy", "webhook connections"]))
        print()
        if "webhook" in args.phases.split(","):
            print(f"the webhook's own answer time (vpol_admission_duration_seconds, request read to answer): "
                  f"{server_side}")
        print(table([
            ["operator peak RSS (VmHWM)", f"{peaks.operator_hwm_kib / 1024:.0f} MiB"],
            ["operator RSS at the end", f"{peaks.operator_now_kib / 1024:.0f} MiB"],
            ["child processes (peak RSS)", peaks.children_summary()],
        ], ["memory", "value"]))
        print(run.end())
        return 0
    finally:
        if sampler is not None:
            sampler.stop()
        try:
            if op is not None:
                op.stop()
            if args.kubeconfig:
                delete_policies(client.CustomObjectsApi(kube.api_client))
        finally:
            cluster.stop()


def _server_side(before: dict[Any, float], after: dict[Any, float]) -> str:
    """Mean and bucket estimates of p50/p99 of the operator's answer time during a phase (from its histogram):
    what of the overhead the operator's webhook server itself accounts for."""
    name = "vpol_admission_duration_seconds"
    def delta(key: Any) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)
    count = sum(delta(k) for k in after if k[0] == name + "_count")
    total = sum(delta(k) for k in after if k[0] == name + "_sum")
    buckets: dict[float, float] = {}
    for key in after:
        if key[0] == name + "_bucket":
            le = float(dict(key[1])["le"])
            buckets[le] = buckets.get(le, 0.0) + delta(key)
    if not count:
        return "no request"
    def upper(q: float) -> str:
        for le in sorted(buckets):
            if buckets[le] >= q * count:
                return "+Inf" if le == float("inf") else f"<= {le * 1000:g} ms"
        return "?"
    return f"{count:.0f} requests, mean {total / count * 1000:.1f} ms, p50 {upper(0.5)}, p99 {upper(0.99)}"


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark (not a test) of admission overhead (issue 11): no policy vs native VAPs vs vpol's webhook.

On a local control plane (tests/controlplane) with vpol installed, the
operator runs as in the e2e tests (`vpol run` as its ServiceAccount, the API
server calling the webhook by URL, background scans off so only admission is
measured). The Pod Security policies of examples/pod-security (18) are loaded,
each limited to the bench namespace, with validationActions [Deny]. Three
phases in one run, the same load each time: --clients concurrent clients
(one aiohttp connection each) send server-side dry-run creates of a compliant
Pod (every policy evaluates all its validations and admits) until
--requests requests are done.

  none     no policy
  native   the policies enforced by the API server (generated VAPs)
  webhook  the same policies with native generation off: vpol's webhook

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

With --interleave N the phases run side by side instead, so that a host whose
speed drifts (a shared VM) affects them alike: both policy sets are loaded at
once, the native one limited to the namespace bench-admission-native, the
webhook's to bench-admission, and bench-admission-none has no policy; blocks
of N requests go to each namespace in turn until every phase has --requests.

Usage: python3 bench/admission.py [--clients 50] [--requests 3000] [--phases none,native,webhook]
       [--interleave N] [--quick] [--operator-args '--webhook-workers 4'] [--kubeconfig FILE --kubectl PATH]
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
from dataclasses import dataclass, field
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

POD: dict[str, Any] = {
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


def pss_policies(native: bool, namespace: str = NAMESPACE, prefix: str = "bench-") -> list[dict[str, Any]]:
    out = []
    for path in sorted((REPO / "examples" / "pod-security").glob("*/*/policy.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "ValidatingPolicy":
                continue
            body = copy.deepcopy(doc)
            name = f"{prefix}{body['metadata']['name']}"[:63]
            body["metadata"] = {"name": name, "labels": {"vpol-bench": "admission"}}
            spec = body["spec"]
            spec["validationActions"] = ["Deny"]
            spec.setdefault("evaluation", {})["background"] = {"enabled": False}
            spec.setdefault("autogen", {})["validatingAdmissionPolicy"] = {"enabled": native}
            spec["matchConstraints"]["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}}
            out.append(body)
    return out


def load_policies(custom: Any, native: bool, namespace: str = NAMESPACE, prefix: str = "bench-") -> list[str]:
    names = []
    for body in pss_policies(native, namespace, prefix):
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


class Clients:
    """``clients`` concurrent clients, one keep-alive connection each, kept across runs (an async context)."""

    def __init__(self, cfg: client.Configuration, clients: int):
        self.cfg = cfg
        self.headers = {"Content-Type": "application/json"}
        auth = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        if auth:
            self.headers["Authorization"] = auth if " " in auth else f"Bearer {auth}"
        self.ctx = _ssl(cfg)
        self.count = clients
        self.sessions: list[aiohttp.ClientSession] = []

    async def __aenter__(self) -> "Clients":
        self.sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ctx, limit=1))
                         for _ in range(self.count)]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.gather(*(session.close() for session in self.sessions))

    async def run(self, requests: int, namespace: str = NAMESPACE) -> tuple[list[float], dict[str, int]]:
        """``requests`` dry-run Pod creates in ``namespace``, shared out among the clients as they finish."""
        url = f"{self.cfg.host}/api/v1/namespaces/{namespace}/pods?dryRun=All"
        body = json.dumps({**POD, "metadata": {**POD["metadata"], "namespace": namespace}}).encode()
        latencies: list[float] = []
        errors: dict[str, int] = {}
        remaining = [requests]

        async def one_client(session: aiohttp.ClientSession) -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                t = time.perf_counter()
                async with session.post(url, data=body, headers=self.headers) as r:
                    text = await r.read()
                    took = time.perf_counter() - t
                    if r.status != 201:
                        key = f"{r.status} {text[:120]!r}"
                        errors[key] = errors.get(key, 0) + 1
                    else:
                        latencies.append(took)

        await asyncio.gather(*(one_client(session) for session in self.sessions))
        return latencies, errors


def run_phase(cfg: client.Configuration, clients: int, requests: int, meter: CpuMeter
              ) -> tuple[list[float], dict[str, int], float, dict[str, float]]:
    """Warm-up, then ``requests`` requests measured on the same connections: latencies, errors, wall time,
    CPU per component."""
    async def measure() -> tuple[list[float], dict[str, int], float, dict[str, float]]:
        async with Clients(cfg, clients) as c:
            await c.run(min(200, requests))  # warm-up: connections, caches, workers
            meter.start()
            t = time.monotonic()
            latencies, errors = await c.run(requests)
            return latencies, errors, time.monotonic() - t, meter.stop()

    return asyncio.run(measure())

@dataclass
class PhaseResult:
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    wall: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    #: Connections the API server opened to the webhook (webhook phase only).
    connections: int | None = None

    def add(self, latencies: list[float], errors: dict[str, int], wall: float, cpu: dict[str, float]) -> None:
        self.latencies += latencies
        for key, n in errors.items():
            self.errors[key] = self.errors.get(key, 0) + n
        self.wall += wall
        for key, t in cpu.items():
            self.cpu[key] = self.cpu.get(key, 0.0) + t


def _histogram_delta(before: dict[Any, float], after: dict[Any, float], into: dict[Any, float]) -> None:
    for key, value in after.items():
        if key[0].startswith("vpol_admission_duration_seconds"):
            into[key] = into.get(key, 0.0) + value - before.get(key, 0.0)


def run_sequential(kube: Any, custom: Any, op: Any, meter: CpuMeter, phases: list[str], clients: int,
                   requests: int) -> tuple[dict[str, PhaseResult], str]:
    """One phase after the other, in the bench namespace: no policy at all, then the policies natively, then
    through the webhook."""
    results: dict[str, PhaseResult] = {}
    server_side = ""
    for phase in phases:
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
        r = results[phase] = PhaseResult()
        r.add(*run_phase(kube.configuration, clients, requests, meter))
        if phase == "webhook":
            r.connections = webhook_connections(op.webhook_port) - connections
            server_side = _server_side(before, scrape(op))
    return results, server_side


#: Namespaces of the interleaved phases: the webhook's is the bench namespace, the others have their own.
PHASE_NAMESPACES = {"none": NAMESPACE + "-none", "native": NAMESPACE + "-native", "webhook": NAMESPACE}


def run_interleaved(kube: Any, custom: Any, op: Any, meter: CpuMeter, phases: list[str], clients: int,
                    requests: int, block: int) -> tuple[dict[str, PhaseResult], str]:
    """The phases side by side: the native policies limited to one namespace, the webhook's to another, a
    third namespace none applies to (the webhook configuration and the VAP bindings carry those namespace
    selectors, so the API server neither calls the webhook nor evaluates a VAP there); then blocks of
    ``block`` requests to each namespace in turn, the order rotating, until every phase has ``requests``."""
    if "native" in phases:
        print(f"phase native: {len(load_policies(custom, True, PHASE_NAMESPACES['native'], 'bench-native-'))} "
              "policies enforced natively")
    if "webhook" in phases:
        print(f"phase webhook: {len(load_policies(custom, False))} policies enforced by the webhook")
    results = {phase: PhaseResult() for phase in phases}
    histogram: dict[Any, float] = {}
    connections = webhook_connections(op.webhook_port)

    async def schedule() -> None:
        async with Clients(kube.configuration, clients) as c:
            for phase in phases:  # warm-up: connections, caches, workers
                await c.run(min(200, requests), PHASE_NAMESPACES[phase])
            turn = 0
            while any(len(r.latencies) + sum(r.errors.values()) < requests for r in results.values()):
                order = phases[turn % len(phases):] + phases[:turn % len(phases)]
                turn += 1
                for phase in order:
                    r = results[phase]
                    left = requests - len(r.latencies) - sum(r.errors.values())
                    if left <= 0:
                        continue
                    # between blocks nothing is in flight: the blocking reads below measure no request
                    before = scrape(op) if phase == "webhook" else {}
                    meter.start()
                    t = time.monotonic()
                    latencies, errors = await c.run(min(block, left), PHASE_NAMESPACES[phase])
                    r.add(latencies, errors, time.monotonic() - t, meter.stop())
                    if phase == "webhook":
                        _histogram_delta(before, scrape(op), histogram)

    asyncio.run(schedule())
    if "webhook" in results:
        results["webhook"].connections = webhook_connections(op.webhook_port) - connections
    return results, _server_side({}, histogram) if "webhook" in results else ""


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
    ap.add_argument("--interleave", type=int, default=0, metavar="N",
                    help="run the phases side by side in blocks of N requests, each in its own namespace "
                         "(both policy sets loaded at once), so that a host whose speed drifts affects all alike")
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
        for namespace in sorted(set(PHASE_NAMESPACES.values())):
            try:
                core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
        custom = client.CustomObjectsApi(kube.api_client)
        op = start_operator(kube, run.work, extra=["--scan-interval", "0", *args.operator_args.split()])
        sampler = MemorySampler(op.proc.pid)
        sampler.start()
        pid = op.proc.pid
        # The local control plane is one process (etcd, kube-apiserver and kube-controller-manager in one
        # binary, tests/controlplane); a cluster given by kubeconfig is not measured.
        meter = CpuMeter({"control plane": lambda: pids_named(CONTROL_PLANE_COMM),
                          "operator": lambda: [pid], "its workers": lambda: descendants(pid),
                          "load generator": lambda: [os.getpid()]})
        phases = args.phases.split(",")
        if args.interleave:
            results, server_side = run_interleaved(kube, custom, op, meter, phases, args.clients, requests,
                                                   args.interleave)
        else:
            results, server_side = run_sequential(kube, custom, op, meter, phases, args.clients, requests)
        rows, cpu_rows = [], []
        base = results["none"].latencies if "none" in results else []
        for phase, r in results.items():
            done = len(r.latencies) + sum(r.errors.values())
            cpu_rows.append([phase, *(f"{r.cpu.get(k, 0.0) / max(1, done) * 1000:.2f}" for k in meter.groups),
                             f"{sum(r.cpu.values()) / r.wall / (os.cpu_count() or 1) * 100:.0f}%",
                             "-" if r.connections is None else str(r.connections)])
            p50, p99 = percentile(r.latencies, 50), percentile(r.latencies, 99)
            over = (f"{ms(p50 - percentile(base, 50))} / {ms(p99 - percentile(base, 99))}"
                    if base and phase != "none" else "-")
            rows.append([phase, str(len(r.latencies)), ms(p50), ms(percentile(r.latencies, 90)), ms(p99),
                         ms(max(r.latencies, default=0)), over, str(sum(r.errors.values())),
                         f"{len(r.latencies) / r.wall:.0f}/s"])
            for err, n in r.errors.items():
                print(f"  {phase}: {n} x {err}")
        peaks = sampler.stop()
        sampler = None
        print()
        how = f"phases interleaved in blocks of {args.interleave}" if args.interleave else "one phase after the other"
        print(f"{args.clients} concurrent clients, server-side dry-run Pod creates, "
              f"{len(pss_policies(False))} Pod Security policies, "
              f"{how}:")
        print(table(rows, ["phase", "requests", "p50", "p90", "p99", "max", "overhead p50 / p99", "errors",
                           "throughput"]))
        print()
        print("CPU per request (ms) by component, their share of the machine's cores, and the connections the "
              "API server opened to the webhook during the phase (TIME-WAIT and open ones):")
        print(table(cpu_rows, ["phase", *meter.groups, "busy", "webhook connections"]))
        print()
        if server_side:
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

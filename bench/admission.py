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

Targets (issue 25, replacing issue 11's absolute ones): with --peer kyverno,
vpol's webhook overhead p50 and p99 <= Kyverno's at 1, 10 and 50 clients,
CPU per admission request <= Kyverno's, peak RSS <= Kyverno's, 0 errors.

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
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    REPO,
    BenchRun,
    CONTROL_PLANE_COMM,
    CpuMeter,
    MemorySampler,
    descendants,
    pss_kib,
    ensure_namespaces,
    install_vpol,
    ms,
    percentile,
    pids_named,
    scrape,
    start_operator,
    status_kib,
    table,
    tls_context,
    wait_until,
)

import aiohttp  # noqa: E402
import yaml  # noqa: E402
from kubernetes import client  # noqa: E402

GROUP, VERSION, PLURAL = "policies.kyverno.io", "v1", "validatingpolicies"
NAMESPACE = "bench-admission"

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


def namespace_selector(namespaces: str | Sequence[str]) -> dict[str, Any]:
    """The namespaces by the name label the API server sets (one: matchLabels, as before; several: In)."""
    if isinstance(namespaces, str):
        return {"matchLabels": {"kubernetes.io/metadata.name": namespaces}}
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                  "values": sorted(namespaces)}]}


#: The matchCondition the second scenario of --peer adds to each of its policies (true for the bench's Pods, so
#: every policy is evaluated; Kyverno gives a policy with matchConditions a webhook of its own).
EXEMPT_CONDITION = {"name": "not-exempt",
                    "expression": "!has(object.metadata.labels) || !('bench.vpol.io/exempt' in object.metadata.labels)"}


def pss_policies(native: bool, namespace: str | Sequence[str] = NAMESPACE, prefix: str = "bench-",
                 conditions: int = 0) -> list[dict[str, Any]]:
    """The Pod Security policies of examples/pod-security for the bench (Deny, background off, limited to
    ``namespace``); with ``conditions`` N, only the first N, each with EXEMPT_CONDITION among its matchConditions."""
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
            spec["matchConstraints"]["namespaceSelector"] = namespace_selector(namespace)
            if conditions:
                spec["matchConditions"] = [*(spec.get("matchConditions") or []), EXEMPT_CONDITION]
            out.append(body)
    return out[:conditions] if conditions else out


def load_policies(custom: Any, native: bool, namespace: str | Sequence[str] = NAMESPACE, prefix: str = "bench-",
                  conditions: int = 0) -> list[str]:
    names = []
    for body in pss_policies(native, namespace, prefix, conditions):
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


class Clients:
    """``clients`` concurrent clients, one keep-alive connection each, kept across runs (an async context)."""

    def __init__(self, cfg: client.Configuration, clients: int):
        self.cfg = cfg
        self.headers = {"Content-Type": "application/json"}
        auth = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        if auth:
            self.headers["Authorization"] = auth if " " in auth else f"Bearer {auth}"
        self.ctx = tls_context(cfg)
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
            return latencies, errors, time.monotonic() - t, meter.since_start()

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

    def answered(self) -> int:
        return len(self.latencies) + sum(self.errors.values())


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
            for phase, count in blocks_in_turn(phases, results, requests, block):
                # between blocks nothing is in flight: the blocking reads below measure no request
                before = scrape(op) if phase == "webhook" else {}
                meter.start()
                t = time.monotonic()
                latencies, errors = await c.run(count, PHASE_NAMESPACES[phase])
                results[phase].add(latencies, errors, time.monotonic() - t, meter.since_start())
                if phase == "webhook":
                    _histogram_delta(before, scrape(op), histogram)

    asyncio.run(schedule())
    if "webhook" in results:
        results["webhook"].connections = webhook_connections(op.webhook_port) - connections
    return results, _server_side({}, histogram) if "webhook" in results else ""


def blocks_in_turn(names: Sequence[str], results: dict[str, "PhaseResult"], requests: int, block: int
                   ) -> Iterator[tuple[str, int]]:
    """(phase, how many requests) for the next block, phases taking turns (the first one rotating) until each has
    ``requests`` answers in ``results`` (read again before every block: the caller adds each block's answers)."""
    turn = 0
    while any(results[n].answered() < requests for n in names):
        order = list(names[turn % len(names):]) + list(names[:turn % len(names)])
        turn += 1
        for phase in order:
            left = requests - results[phase].answered()
            if left > 0:
                yield phase, min(block, left)


def webhook_connections(port: int) -> int:
    """Connections to the webhook port open or closed within the last minute (TIME-WAIT): how many the API
    server has made, roughly; it keeps at most 25 idle ones per webhook host."""
    out = subprocess.run(["ss", "-Htan", f"( dport = :{port} )"], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if line.split()[:1] in (["ESTAB"], ["TIME-WAIT"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--requests", type=int, default=None,
                    help="requests per phase (default 3000; with --peer 2000 per phase and concurrency)")
    ap.add_argument("--phases", default="none,native,webhook")
    ap.add_argument("--quick", action="store_true", help="400 requests per phase")
    ap.add_argument("--operator-args", default="", help="more `vpol run` flags, e.g. '--webhook-workers 4'")
    ap.add_argument("--interleave", type=int, default=0, metavar="N",
                    help="run the phases side by side in blocks of N requests, each in its own namespace "
                         "(both policy sets loaded at once), so that a host whose speed drifts affects all alike")
    ap.add_argument("--peer", choices=["kyverno"],
                    help="side by side with Kyverno's admission controller (bench/kyverno): the same policies enforced "
                         "four ways in four namespaces (none, native VAPs, vpol's webhook, Kyverno's webhook), "
                         "interleaved, at each of --clients-list")
    ap.add_argument("--clients-list", default="1,10,50", help="with --peer: the concurrencies (default 1,10,50)")
    ap.add_argument("--scenarios", default="pss,conditions",
                    help="with --peer: pss (the 18 policies), conditions (10 with matchConditions); default both")
    ap.add_argument("--workdir")
    ap.add_argument("--kubeconfig")
    ap.add_argument("--kubectl")
    args = ap.parse_args()
    args.requests_given = args.requests is not None
    # A timeout or Ctrl-C stops the control plane, the operator and the peer too (the finally blocks run).
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    if args.peer:
        return run_peer(args)
    requests = 400 if args.quick else (args.requests or 3000)
    run = BenchRun.begin(args.workdir, "vpol-bench-admission-", args.kubeconfig, args.kubectl)
    cluster = run.cluster
    kube = cluster.kube
    op = None
    sampler = None
    try:
        install_vpol(kube)
        ensure_namespaces(kube, sorted(set(PHASE_NAMESPACES.values())))
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
            done = r.answered()
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


# -- --peer kyverno: vpol's webhook side by side with Kyverno's admission controller ----------------------------

#: Namespaces of --peer: the same policies enforced one way in each.
PEER_NAMESPACES = {"none": NAMESPACE + "-none", "native": NAMESPACE + "-native", "vpol": NAMESPACE,
                   "kyverno": NAMESPACE + "-kyverno"}
#: What the API server's denial names, per phase (checked before anything is measured).
DENIED_BY = {"native": "ValidatingAdmissionPolicy", "vpol": 'admission webhook "fail.validate.vpol.kyverno.io"',
             "kyverno": 'admission webhook "vpol.validate.kyverno.svc-'}
#: Scenarios of --peer: (how many policies with matchConditions; 0: all 18 as they are), what it is.
SCENARIOS = {"pss": (0, "the 18 Pod Security policies of examples/pod-security"),
             "conditions": (10, "10 of them, each with a matchCondition (Kyverno: a webhook per policy)")}


def violating_pod(namespace: str) -> dict[str, Any]:
    """The bench's Pod with a privileged container: every scenario's policies deny it."""
    pod = copy.deepcopy(POD)
    pod["metadata"]["namespace"] = namespace
    context = pod["spec"]["containers"][0]["securityContext"]
    context["privileged"] = True
    del context["allowPrivilegeEscalation"]  # the API server refuses privileged with allowPrivilegeEscalation false
    return pod


def check_enforcement(core: Any, timeout: float = 180) -> None:
    """Each namespace decided by its own enforcer and no other: a violating Pod (dry run) admitted where no policy
    applies, denied elsewhere by the native policies, vpol's webhook or Kyverno's (the API server names which)."""
    for phase, ns in PEER_NAMESPACES.items():
        deadline = time.monotonic() + timeout
        while True:
            try:
                core.create_namespaced_pod(ns, violating_pod(ns), dry_run="All")
                outcome = ""
            except client.ApiException as exc:
                try:
                    outcome = str(json.loads(exc.body).get("message") or exc.body)
                except ValueError:
                    outcome = str(exc.body)
            if phase == "none":
                if not outcome:
                    break
                raise SystemExit(f"namespace {ns} should have no policy, but: {outcome}")
            if DENIED_BY[phase] in outcome:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{phase}: not enforced in {ns} after {timeout:.0f}s: {outcome or 'admitted'}")
            time.sleep(1)


def webhook_summary(kube: Any) -> str:
    """How many webhooks each side registered for the policies, and that each keeps out of the other's namespace."""
    admission = client.AdmissionregistrationV1Api(kube.api_client)
    out = []
    for cfg in admission.list_validating_webhook_configuration().items:
        name = cfg.metadata.name
        hooks = [w for w in cfg.webhooks or [] if w.name.startswith(("vpol.validate.kyverno.svc", "fail.validate.vpol",
                                                                    "ignore.validate.vpol"))]
        if not hooks:
            continue
        selectors = [kube.api_client.sanitize_for_serialization(w.namespace_selector) or {} for w in hooks]
        kyverno_only = all({"key": "kubernetes.io/metadata.name", "operator": "In",
                            "values": [PEER_NAMESPACES["kyverno"]]} in (sel.get("matchExpressions") or [])
                           for sel in selectors)
        vpol_excludes = all(any(e.get("operator") == "NotIn" and PEER_NAMESPACES["kyverno"] in e.get("values", [])
                                for e in sel.get("matchExpressions") or []) for sel in selectors)
        if name.startswith("kyverno-") and not kyverno_only:
            raise SystemExit(f"{name}: a Kyverno webhook is not limited to {PEER_NAMESPACES['kyverno']}: {selectors}")
        if name.startswith("vpol-") and not vpol_excludes:
            raise SystemExit(f"{name}: a vpol webhook does not exclude {PEER_NAMESPACES['kyverno']}: {selectors}")
        out.append(f"{name}: {len(hooks)} webhook(s) for the policies")
    return "; ".join(out)


def interleave(cfg: client.Configuration, clients: int, phases: dict[str, str], requests: int, block: int,
               meter: CpuMeter) -> dict[str, PhaseResult]:
    """Warm-up, then blocks of ``block`` requests to each phase's namespace in turn (the order rotating), on the
    same ``clients`` connections, until every phase has ``requests``."""
    results = {phase: PhaseResult() for phase in phases}
    names = list(phases)

    async def schedule() -> None:
        async with Clients(cfg, clients) as c:
            for phase in names:  # warm-up: connections, caches, workers
                await c.run(min(200, requests), phases[phase])
            for phase, count in blocks_in_turn(names, results, requests, block):
                # This process's own garbage is collected between blocks, when nothing is in flight: a full
                # collection of the load generator took 90-110 ms, which lands on the requests of one phase.
                gc.collect()
                meter.start()
                t = time.monotonic()
                latencies, errors = await c.run(count, phases[phase])
                results[phase].add(latencies, errors, time.monotonic() - t, meter.since_start())

    gc.disable()
    try:
        asyncio.run(schedule())
    finally:
        gc.enable()
    return results


class PeerMemory(threading.Thread):
    """Peak resident memory of each admission process group (vpol: the serving process and its workers; Kyverno:
    its process) while requests are measured (``active``), sampled every 0.25 s: the sum of VmRSS and the sum of
    PSS (pages shared between processes counted once); and each process's lifetime peak (VmHWM)."""

    def __init__(self, groups: dict[str, Any]):
        super().__init__(daemon=True, name="peer-memory")
        self.groups = groups
        self.rss: dict[str, int] = {g: 0 for g in groups}
        self.pss: dict[str, int] = {g: 0 for g in groups}
        self.hwm: dict[str, dict[int, int]] = {g: {} for g in groups}
        self.active = threading.Event()
        self._halt = threading.Event()

    def sample(self) -> None:
        for group, pids in self.groups.items():
            now = list(pids())
            self.rss[group] = max(self.rss[group], sum(status_kib(p, "VmRSS") for p in now))
            self.pss[group] = max(self.pss[group], sum(pss_kib(p) for p in now))
            for p in now:
                self.hwm[group][p] = max(self.hwm[group].get(p, 0), status_kib(p, "VmHWM"))

    def run(self) -> None:
        while not self._halt.wait(0.25):
            if self.active.is_set():
                self.sample()

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def ratio(a: float, b: float) -> float:
    """a / b for "vpol / Kyverno" (0 when neither adds anything, infinite when only vpol does)."""
    if b > 0:
        return a / b
    return 0.0 if a <= 0 else float("inf")


def run_peer(args: argparse.Namespace) -> int:
    """--peer kyverno: the same policies enforced four ways (none, native VAPs by vpol, vpol's webhook, Kyverno's
    webhook) in four namespaces, interleaved, at each --clients-list concurrency, for each scenario."""
    from bench.kyverno.peer import KyvernoPeer, build, only_namespaces

    requests = args.requests if args.requests_given else (300 if args.quick else 2000)
    block = args.interleave or max(25, requests // (4 if args.quick else 8))
    levels = [int(x) for x in args.clients_list.split(",")]
    scenarios = args.scenarios.split(",")
    binary = build()  # before the cluster: a cold build takes minutes
    run = BenchRun.begin(args.workdir, "vpol-bench-admission-peer-", args.kubeconfig, args.kubectl)
    kube = run.cluster.kube
    op = peer = memory = None
    try:
        install_vpol(kube)
        ensure_namespaces(kube, sorted(PEER_NAMESPACES.values()))
        custom = client.CustomObjectsApi(kube.api_client)
        peer = KyvernoPeer(kube, run.work, binary=binary,
                           webhook_namespace_selector=only_namespaces([PEER_NAMESPACES["kyverno"]]))
        peer.install()
        # vpol as installed (the manifests' --resync 600, not the e2e runner's 30 s), background scans off as
        # Kyverno's background controller is not run, and kept out of Kyverno's namespace.
        op = start_operator(kube, run.work, extra=["--resync", "600", "--scan-interval", "0",
                                                   "--webhook-exclude-namespaces", PEER_NAMESPACES["kyverno"],
                                                   *args.operator_args.split()])
        peer.start()
        vpol_pid, kyverno_pid = op.proc.pid, peer.pid
        print(f"kyverno: {' '.join(peer.command())}\n  log {peer.log_path}")
        groups = {"vpol": lambda: [vpol_pid, *descendants(vpol_pid)], "kyverno": lambda: [kyverno_pid]}
        memory = PeerMemory(groups)
        memory.start()
        meter = CpuMeter({"vpol serving": lambda: [vpol_pid], "vpol workers": lambda: descendants(vpol_pid),
                          "kyverno": lambda: [kyverno_pid],
                          "control plane": lambda: pids_named(CONTROL_PLANE_COMM),
                          "load generator": lambda: [os.getpid()]})
        worst: dict[str, dict[str, float]] = {}
        for scenario in scenarios:
            conditions, what = SCENARIOS[scenario]
            delete_policies(custom)
            load_policies(custom, True, PEER_NAMESPACES["native"], "bench-native-", conditions)
            count = len(load_policies(custom, False, [PEER_NAMESPACES["vpol"], PEER_NAMESPACES["kyverno"]],
                                      "bench-", conditions))
            check_enforcement(client.CoreV1Api(kube.api_client))
            print(f"\n=== scenario {scenario}: {what} ({count} policies per way); {webhook_summary(kube)}")
            for clients in levels:
                load_before = os.getloadavg()[0]
                memory.active.set()
                results = interleave(kube.configuration, clients, PEER_NAMESPACES, requests, block, meter)
                memory.active.clear()
                print(f"\n{scenario}, {clients} client(s), {requests} requests per phase in blocks of {block} "
                      f"(load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}):")
                ratios = print_peer_table(results)
                for key, value in ratios.items():
                    worst.setdefault(scenario, {})[key] = max(worst.get(scenario, {}).get(key, 0.0), value)
        memory.stop()
        print()
        print(table([[group, f"{memory.rss[group] / 1024:.0f} MiB", f"{memory.pss[group] / 1024:.0f} MiB",
                      " + ".join(f"{v / 1024:.0f}" for v in memory.hwm[group].values()) + " MiB"]
                     for group in groups],
                    ["admission process", "peak RSS under load (sum)", "peak PSS under load (sum)",
                     "lifetime peak (VmHWM) of each process"]))
        print(f"peak RSS vpol/Kyverno {ratio(memory.rss['vpol'], memory.rss['kyverno']):.2f}, "
              f"peak PSS {ratio(memory.pss['vpol'], memory.pss['kyverno']):.2f}")
        print(run.end())

        def summary(scenario: str) -> str:
            w = worst.get(scenario, {})
            return (f"vs Kyverno: overhead p50 {w.get('p50', 0):.2f}, p99 {w.get('p99', 0):.2f}, "
                    f"CPU/request {w.get('cpu', 0):.2f} (vpol/Kyverno, worst over {'/'.join(map(str, levels))} clients)")

        for scenario in scenarios[1:]:
            print(f"[{scenario}] {summary(scenario)}")
        print(summary(scenarios[0]))
        return 0
    finally:
        if memory is not None and memory.is_alive():
            memory.stop()
        try:
            if op is not None:
                op.stop()
            if peer is not None:
                peer.stop()
            if args.kubeconfig:
                delete_policies(client.CustomObjectsApi(kube.api_client))
        finally:
            run.cluster.stop()


def print_peer_table(results: dict[str, PhaseResult]) -> dict[str, float]:
    """The phases of one interleaved run side by side; returns vpol/Kyverno ratios (overhead p50, p99, CPU)."""
    base = results["none"].latencies
    rows = []
    overhead: dict[str, dict[int, float]] = {}
    cpu: dict[str, float] = {}
    for phase, r in results.items():
        done = max(1, r.answered())
        qs = {q: percentile(r.latencies, q) for q in (50, 95, 99)}
        overhead[phase] = {q: qs[q] - percentile(base, q) for q in qs}
        if phase == "vpol":
            cpu[phase] = (r.cpu.get("vpol serving", 0.0) + r.cpu.get("vpol workers", 0.0)) / done
            own = (f"{cpu[phase] * 1000:.2f} ({r.cpu.get('vpol serving', 0.0) / done * 1000:.2f} serving + "
                   f"{r.cpu.get('vpol workers', 0.0) / done * 1000:.2f} workers)")
        elif phase == "kyverno":
            cpu[phase] = r.cpu.get("kyverno", 0.0) / done
            own = f"{cpu[phase] * 1000:.2f}"
        else:
            own = "-"
        rows.append([phase, str(len(r.latencies)), *(ms(qs[q]) for q in (50, 95, 99)),
                     "-" if phase == "none" else " / ".join(ms(overhead[phase][q]) for q in (50, 95, 99)),
                     str(sum(r.errors.values())), f"{len(r.latencies) / max(r.wall, 1e-9):.0f}/s", own,
                     f"{r.cpu.get('control plane', 0.0) / done * 1000:.2f}"])
        for err, n in r.errors.items():
            print(f"  {phase}: {n} x {err}")
    print(table(rows, ["phase", "requests", "p50", "p95", "p99", "overhead p50 / p95 / p99", "errors", "throughput",
                       "admission process CPU ms/request", "control plane CPU ms/request"]))
    idle = []
    for group, phase in (("vpol", "vpol"), ("kyverno", "kyverno")):
        keys = ["vpol serving", "vpol workers"] if group == "vpol" else ["kyverno"]
        others = [r for p, r in results.items() if p != phase]
        seconds = sum(r.wall for r in others)
        used = sum(r.cpu.get(k, 0.0) for r in others for k in keys)
        idle.append(f"{group} {used / max(seconds, 1e-9) * 1000:.0f} ms/s")
    print(f"CPU of each admission process while the others' phases ran (its idle cost): {', '.join(idle)}")
    return {"p50": ratio(overhead["vpol"][50], overhead["kyverno"][50]),
            "p99": ratio(overhead["vpol"][99], overhead["kyverno"][99]),
            "cpu": ratio(cpu["vpol"], cpu["kyverno"])}


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

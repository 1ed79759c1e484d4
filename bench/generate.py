#!/usr/bin/env python3
"""Benchmark (not a test): generation by GeneratingPolicies, three downstreams per Namespace.

On a local control plane (or --kubeconfig), the operator running as in the e2e tests with
--generation-writes-per-second raised far above what it reaches (so its rate limit does not bind), three
GeneratingPolicies with synchronize on select the Namespaces labelled ``bench.vpol/generate=vpol``: two data
policies (a NetworkPolicy ``default-deny``, from an expression; a ResourceQuota ``pods``, from a template) and one
clone policy (the Secret ``registry`` of ``bench-gen-source`` cloned into each). Measured:

1. floor: the time the same API server takes to accept 3 x N such objects (into N other Namespaces, created
   beforehand) from a bare writer: vpol's own request helpers (vpol.kube.dynamic.create_object), --writer-threads
   connections (1 by default: the operator generates on one thread, its scanner's) and no rate limit;
2. converge: the first of N labelled Namespaces created (--threads clients) -> every one of the 3 x N downstreams
   exists (seen by watches of the three kinds), against the floor (target <= 1.5x); writes per downstream (the API
   server's apiserver_request_total, POST/PUT/PATCH/APPLY/DELETE of the three kinds; and the operator's
   vpol_generated_objects_total), target 1; its reads (GETs) per downstream and its report writes alongside;
3. rescan: the operator restarted with nothing changed (its start-up pass of every policy over every Namespace)
   -> vpol_generations_total reached 3 x N and no more came for --quiet seconds; its writes (target 0);
4. the operator's peak RSS (and its children's), the CPU of the operator and of the control plane per phase;
5. with ``--peer kyverno``: Kyverno's admission controller (which queues an UpdateRequest per trigger at
   admission) and background controller (which processes them; bench/kyverno/peer.py, built by
   ``bench/kyverno/build``), no vpol operator running, the same three policies (named ``bench-gen-kyverno-*``,
   selecting ``bench.vpol/generate=kyverno``) on N more Namespaces: converge time and API server writes; vpol's
   converge over Kyverno's (target <= 0.5x).

Usage: python3 bench/generate.py [--namespaces 1000] [--quick] [--peer kyverno]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    REPO,
    BenchRun,
    MemorySampler,
    apiserver_requests,
    cluster_arguments,
    control_plane_cpu,
    cpu_seconds,
    ensure_namespaces,
    install_vpol,
    metric_sum,
    pooled_client,
    print_results,
    scrape,
    start_operator,
    table,
)

from vpol.kube.dynamic import Watcher, create_object, delete_object  # noqa: E402

GROUP = "policies.kyverno.io"
LABEL = "bench.vpol/generate"
SOURCE_NS = "bench-gen-source"
SECRET: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry", "namespace": SOURCE_NS},
          "type": "Opaque", "data": {"token": "b25l", "config": "eyJhdXRocyI6IHt9fQ=="}}
#: The three kinds generated: (group, version, resource, kind, name of the object in each Namespace).
KINDS = (("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", "default-deny"),
         ("", "v1", "resourcequotas", "ResourceQuota", "pods"),
         ("", "v1", "secrets", "Secret", "registry"))
NETPOL = {"expression": 'generator.Apply(object.metadata.name, [{"apiVersion": "networking.k8s.io/v1", '
                        '"kind": "NetworkPolicy", "metadata": {"name": "default-deny"}, '
                        '"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}])'}
QUOTA = {"template": {"interpolate": "cel", "value": (
    "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: pods\n  namespace: (( object.metadata.name ))\n"
    "spec:\n  hard:\n    pods: \"(( string(10) ))\"\n")}}
CLONE = {"expression": f'generator.Apply(object.metadata.name, [resource.Get("v1", "secrets", "{SOURCE_NS}", '
                       f'"registry")])'}
#: What a write is, in apiserver_request_total's verbs.
WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE")
#: vpol may read and write Secrets (not in the chart's default kinds): a ClusterRole aggregated into vpol-generate.
SECRETS_ROLE: dict[str, Any] = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "vpol-bench-generate-secrets",
                             "labels": {"vpol.kyverno.io/aggregate-to-generate": "true"}},
                "rules": [{"apiGroups": [""], "resources": ["secrets"],
                           "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]}


def policies(prefix: str, value: str) -> list[dict[str, Any]]:
    """The three GeneratingPolicies, selecting the Namespaces labelled ``LABEL=value``."""
    def gpol(name: str, generate: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": f"{GROUP}/v1", "kind": "GeneratingPolicy", "metadata": {"name": f"{prefix}-{name}"},
                "spec": {"matchConstraints": {
                    "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                                       "resources": ["namespaces"]}],
                    "objectSelector": {"matchLabels": {LABEL: value}}},
                    "generate": [generate],
                    "evaluation": {"synchronize": {"enabled": True}}}}
    return [gpol("netpol", NETPOL), gpol("quota", QUOTA), gpol("clone", CLONE)]


def downstreams(namespace: str) -> list[tuple[tuple[str, str, str], dict[str, Any]]]:
    """What the policies generate in ``namespace``, as a bare writer writes it: the same objects, with labels
    like Kyverno's (so the bodies are about the same size)."""
    labels = {"app.kubernetes.io/managed-by": "bench", "generate.kyverno.io/policy-name": "bench-floor",
              "generate.kyverno.io/trigger-name": namespace, "generate.kyverno.io/trigger-namespace": "",
              "generate.kyverno.io/trigger-uid": "00000000-0000-0000-0000-000000000000",
              "generate.kyverno.io/trigger-kind": "Namespace", "generate.kyverno.io/trigger-group": "",
              "generate.kyverno.io/trigger-version": "v1"}
    md = lambda name: {"name": name, "namespace": namespace, "labels": labels}  # noqa: E731
    return [
        (KINDS[0][:3], {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": md("default-deny"),
                        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}),
        (KINDS[1][:3], {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": md("pods"),
                        "spec": {"hard": {"pods": "10"}}}),
        (KINDS[2][:3], {"apiVersion": "v1", "kind": "Secret", "metadata": md("registry"), "type": "Opaque",
                        "data": dict(SECRET["data"])}),
    ]


def create_namespaces(kube: Any, names: list[str], labels: dict[str, str], threads: int) -> float:
    """Create the Namespaces (``threads`` clients); the seconds it took."""
    api = pooled_client(kube, threads)
    t = time.monotonic()
    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda n: create_object(api, "", "v1", "namespaces", "",
                                                  {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": n, "labels": labels}}), names))
    finally:
        api.close()
    return time.monotonic() - t


def write_floor(kube: Any, names: list[str], threads: int) -> float:
    """The bare writer: every downstream of ``names`` created, ``threads`` connections; the seconds it took."""
    api = pooled_client(kube, threads)
    work = [item for ns in names for item in downstreams(ns)]

    def create(item: tuple[tuple[str, str, str], dict[str, Any]]) -> None:
        (group, version, resource), body = item
        create_object(api, group, version, resource, body["metadata"]["namespace"], body)

    t = time.monotonic()
    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(create, work))
    finally:
        api.close()
    return time.monotonic() - t


class Downstreams:
    """Watches of the three generated kinds: when the downstreams in Namespaces named ``prefix*`` are all there."""

    def __init__(self, kube: Any):
        self.lock = threading.Lock()
        self.seen: dict[str, set[tuple[str, str]]] = {}
        self.complete_at: dict[str, float] = {}
        self.expected: dict[str, int] = {}
        self.watchers = [Watcher(kube.api_client, g, v, r, self._event, kind=k) for g, v, r, k, _n in KINDS]
        for w in self.watchers:
            w.start()
        for w in self.watchers:
            w.synced.wait(60)

    def expect(self, prefix: str, count: int) -> None:
        with self.lock:
            self.expected[prefix] = count
            self.seen.setdefault(prefix, set())

    def _event(self, etype: str, obj: dict[str, Any]) -> None:
        md = obj.get("metadata") or {}
        if (md.get("labels") or {}).get("app.kubernetes.io/managed-by") != "kyverno":
            return
        namespace, kind = str(md.get("namespace") or ""), str(obj.get("kind") or "")
        now = time.monotonic()
        with self.lock:
            for prefix, seen in self.seen.items():
                if namespace.startswith(prefix):
                    if etype == "DELETED":
                        seen.discard((kind, namespace))
                    elif etype in ("ADDED", "MODIFIED"):
                        seen.add((kind, namespace))
                    if len(seen) >= self.expected[prefix] and prefix not in self.complete_at:
                        self.complete_at[prefix] = now

    def count(self, prefix: str) -> int:
        with self.lock:
            return len(self.seen.get(prefix, ()))

    def completed(self, prefix: str) -> float | None:
        with self.lock:
            return self.complete_at.get(prefix)

    def stop(self) -> None:
        for w in self.watchers:
            w.stop()


def writes_of(requests: Counter[tuple[str, str, str]], resources: tuple[str, ...], verbs: tuple[str, ...] = WRITE_VERBS,
              subresources: bool = False) -> Counter[tuple[str, str]]:
    """(verb, resource) -> requests, of the objects themselves (unless ``subresources``: the ResourceQuota
    controller writes the quotas' status, which is nobody's generation)."""
    out: Counter[tuple[str, str]] = Counter()
    for (verb, resource, sub), n in requests.items():
        if resource in resources and verb in verbs and (subresources or not sub) and n > 0:
            out[(verb, f"{resource}/{sub}" if sub else resource)] += n
    return out


def top(requests: Counter[tuple[str, str, str]], n: int = 8) -> str:
    """The ``n`` most frequent (verb, resource[/subresource]) of a requests diff (WATCH excluded: long-running)."""
    counts: Counter[tuple[str, str]] = Counter()
    for (verb, resource, sub), k in requests.items():
        if k > 0 and verb != "WATCH":
            counts[(verb, f"{resource}/{sub}" if sub else resource)] += k
    return ", ".join(f"{v} {r} {k}" for (v, r), k in counts.most_common(n))


def text(counts: Counter[tuple[str, str]]) -> str:
    return ", ".join(f"{v} {r} {n}" for (v, r), n in sorted(counts.items())) or "none"


def requests_since(kube: Any, before: Counter[tuple[str, str, str]]) -> Counter[tuple[str, str, str]]:
    now = apiserver_requests(kube.api_client)
    now.subtract(before)
    return now


def follow(ds: Downstreams, prefix: str, expected: int, t0: float, timeout: float, label: str,
           alive: Any = None, stall: float = 0.0) -> float | None:
    """Wait until the ``expected`` downstreams of ``prefix`` exist; the seconds from ``t0`` (None: timed out, or no
    new downstream for ``stall`` seconds when it is set)."""
    next_print = 0.0
    last, changed = -1, time.monotonic()
    while True:
        done = ds.completed(prefix)
        now = time.monotonic() - t0
        if done is not None:
            return done - t0
        count = ds.count(prefix)
        if count != last:
            last, changed = count, time.monotonic()
        if now >= next_print:
            print(f"  [{label}] t={now:6.1f}s downstreams {count}/{expected}", flush=True)
            next_print = now + 10
        if now > timeout:
            print(f"  [{label}] not converged within {timeout:.0f}s: {count}/{expected}")
            return None
        if stall and time.monotonic() - changed > stall:
            print(f"  [{label}] stalled: no new downstream for {stall:.0f}s, {count}/{expected}")
            return None
        if alive is not None and not alive():
            raise RuntimeError(f"{label}: the process under test exited")
        time.sleep(0.2)


def generations(op: Any) -> float:
    return metric_sum(scrape(op, ["vpol_generations_total"]), "vpol_generations_total")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="--namespaces 200")
    parser.add_argument("--threads", type=int, default=8, help="clients creating the trigger Namespaces")
    parser.add_argument("--writer-threads", type=int, default=1,
                        help="the bare writer's connections (the operator generates on one thread)")
    parser.add_argument("--writes-per-second", type=float, default=100_000,
                        help="the operator's --generation-writes-per-second (high: not the limit measured)")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--quiet", type=float, default=5.0, help="the rescan ends after this long with no generation")
    parser.add_argument("--peer", choices=["kyverno"], help="also measure Kyverno's background controller")
    parser.add_argument("--peer-timeout", type=float, default=600, help="limit of the kyverno phase (s)")
    parser.add_argument("--peer-stall", type=float, default=120,
                        help="the kyverno phase ends after this long without a new downstream (s)")
    parser.add_argument("--kyverno-qps", type=float, default=10_000,
                        help="Kyverno's --clientRateLimitQPS and --clientRateLimitBurst (its default: 100 and 200)")
    cluster_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.namespaces = 200
    n = args.namespaces
    expected = 3 * n
    run = BenchRun.begin(args.workdir, "vpol-bench-generate-", args.kubeconfig, args.kubectl)
    op = sampler = ds = None
    rows: list[list[str]] = []
    targets: list[list[str]] = []
    failed = False
    try:
        kube = run.cluster.kube
        install_vpol(kube)
        kube.kubectl("apply", "--server-side", "--field-manager=vpol-bench", "-f", "-",
                     input=json.dumps(SECRETS_ROLE))
        ensure_namespaces(kube, [SOURCE_NS])
        create_object(kube.api_client, "", "v1", "secrets", SOURCE_NS, SECRET)

        # 1. the floor
        floor_names = [f"bench-gen-floor-{i:05d}" for i in range(n)]
        create_namespaces(kube, floor_names, {"bench.vpol/floor": "yes"}, args.threads)
        time.sleep(3)  # the controller manager's work for new Namespaces (ServiceAccount, root CA ConfigMap)
        before = apiserver_requests(kube.api_client)
        plane0 = control_plane_cpu()
        floor = write_floor(kube, floor_names, args.writer_threads)
        floor_plane = control_plane_cpu() - plane0
        floor_writes = writes_of(requests_since(kube, before), tuple(k[2] for k in KINDS))
        print(f"bare writer: {expected} objects in {floor:.1f}s ({args.writer_threads} connection(s); "
              f"{text(floor_writes)})", flush=True)
        time.sleep(5)  # the ResourceQuota controller's status writes for the floor's quotas

        # 2. converge
        ds = Downstreams(kube)
        op = start_operator(kube, run.work, ["--generation-writes-per-second", str(args.writes_per_second),
                                             *args.operator_arg])
        assert op.proc is not None
        sampler = MemorySampler(op.proc.pid)
        sampler.start()
        for doc in policies("bench-gen", "vpol"):
            create_object(kube.api_client, GROUP, "v1", "generatingpolicies", "", doc)
        for doc in policies("bench-gen", "vpol"):
            kube.kubectl("wait", "--for=condition=Ready", "--timeout=120s",
                         f"generatingpolicy/{doc['metadata']['name']}")
        time.sleep(2)
        prefix = "bench-gen-vpol-"
        names = [f"{prefix}{i:05d}" for i in range(n)]
        ds.expect(prefix, expected)
        before = apiserver_requests(kube.api_client)
        op_cpu0, plane0 = cpu_seconds(op.proc.pid), control_plane_cpu()
        t0 = time.monotonic()
        created = create_namespaces(kube, names, {LABEL: "vpol"}, args.threads)
        print(f"created {n} Namespaces in {created:.1f}s ({args.threads} clients)", flush=True)
        converge = follow(ds, prefix, expected, t0, args.timeout, "vpol", lambda: op.proc.poll() is None)
        op_cpu, plane_cpu = cpu_seconds(op.proc.pid) - op_cpu0, control_plane_cpu() - plane0
        time.sleep(3)
        requests = requests_since(kube, before)
        resources = tuple(k[2] for k in KINDS)
        writes = writes_of(requests, resources)
        reads = writes_of(requests, resources, ("GET", "LIST"))
        report_writes = writes_of(requests, ("clusterpolicyreports", "policyreports"))
        metrics = scrape(op)
        generated = {a: metric_sum(metrics, "vpol_generated_objects_total", action=a)
                     for a in ("created", "updated", "deleted")}
        gens = metric_sum(metrics, "vpol_generations_total")
        peaks = sampler.stop()
        sampler = None
        total_writes = sum(writes.values())
        rows += [
            ["Namespaces (triggers) x policies", f"{n} x 3 = {expected} downstreams"],
            ["bare writer: the API server accepting them", f"{floor:.1f} s ({args.writer_threads} connection(s), "
                                                           f"{expected / floor:.0f} objects/s; control plane CPU "
                                                           f"{floor_plane:.1f} s)"],
            ["Namespaces created by the bench", f"{created:.1f} s ({args.threads} clients)"],
            ["vpol: first Namespace created -> every downstream exists",
             f"{converge:.1f} s ({converge / floor:.2f}x the bare writer)" if converge else "not reached"],
            ["vpol: writes of the three kinds (API server)", f"{total_writes} ({total_writes / expected:.2f} per "
                                                             f"downstream: {text(writes)})"],
            ["vpol_generated_objects_total", ", ".join(f"{a} {v:.0f}" for a, v in generated.items())],
            ["vpol_generations_total", f"{gens:.0f}"],
            ["vpol: reads of the three kinds (API server)", f"{sum(reads.values())} ({text(reads)})"],
            ["vpol: report writes", f"{sum(report_writes.values())} ({text(report_writes)})"],
            ["API server requests while converging, all clients (the most frequent)",
             f"{sum(n for n in requests.values() if n > 0)} ({top(requests)})"],
            ["CPU while converging: operator / control plane", f"{op_cpu:.1f} s / {plane_cpu:.1f} s"],
            ["operator peak RSS (VmHWM)", f"{peaks.operator_hwm_kib / 1024:.0f} MiB"],
            ["child processes (peak RSS)", peaks.children_summary()],
        ]
        if converge:
            targets.append(["converge <= 1.5x the bare writer", f"{converge / floor:.2f}x",
                            "PASS" if converge / floor <= 1.5 else "FAIL"])
        targets.append(["writes per downstream = 1", f"{total_writes / expected:.2f}",
                        "PASS" if total_writes == expected else "FAIL"])
        failed |= total_writes != expected

        # 3. rescan: restarted with nothing changed
        print("rescan: the operator restarted, nothing changed...", flush=True)
        op.stop()
        time.sleep(2)
        before = apiserver_requests(kube.api_client)
        plane0 = control_plane_cpu()
        t0 = time.monotonic()
        op = start_operator(kube, run.work, ["--generation-writes-per-second", str(args.writes_per_second),
                                             *args.operator_arg], log_name="operator-restart.log")
        assert op.proc is not None
        sampler = MemorySampler(op.proc.pid)
        sampler.start()
        live = time.monotonic() - t0
        passed = None
        last, last_change = 0.0, time.monotonic()
        while True:
            count = generations(op)
            now = time.monotonic()
            if count != last:
                last, last_change = count, now
            if passed is None and count >= expected:
                passed = now - t0
            if passed is not None and now - last_change >= args.quiet:
                break
            if now - t0 > args.timeout:
                print(f"  rescan not done within {args.timeout:.0f}s: {count:.0f} generations")
                break
            time.sleep(0.25)
        rescan_cpu = cpu_seconds(op.proc.pid)
        plane_cpu = control_plane_cpu() - plane0
        requests = requests_since(kube, before)
        rewrites = writes_of(requests, resources)
        rereads = writes_of(requests, resources, ("GET", "LIST"))
        report_rewrites = writes_of(requests, ("clusterpolicyreports", "policyreports"))
        peaks2 = sampler.stop()
        sampler = None
        rows += [
            ["rescan: operator started -> live", f"{live:.1f} s"],
            ["rescan: operator started -> vpol_generations_total reached 3 x N",
             f"{passed:.1f} s" if passed is not None else "not reached"],
            ["rescan: generations in all (3 x N = one pass)", f"{last:.0f}"],
            ["rescan: writes of the three kinds (target 0)", f"{sum(rewrites.values())} ({text(rewrites)})"],
            ["rescan: reads of the three kinds", f"{sum(rereads.values())} ({text(rereads)})"],
            ["rescan: report writes", f"{sum(report_rewrites.values())} ({text(report_rewrites)})"],
            ["rescan: CPU operator (whole life) / control plane", f"{rescan_cpu:.1f} s / {plane_cpu:.1f} s"],
            ["rescan: operator peak RSS (VmHWM)", f"{peaks2.operator_hwm_kib / 1024:.0f} MiB"],
        ]
        targets.append(["rescan, nothing changed: downstream writes = 0", str(sum(rewrites.values())),
                        "PASS" if not rewrites else "FAIL"])
        # Not this bench's target, but bench/scan.py's for a restart: no report written when nothing changed.
        targets.append(["rescan, nothing changed: report writes = 0", str(sum(report_rewrites.values())),
                        "PASS" if not report_rewrites else "FAIL"])
        failed |= bool(rewrites)
        op.stop()
        op = None

        print()
        print(table(rows, ["measure", "value"]), flush=True)
        print()

        # 4. the peer
        if args.peer == "kyverno":
            print("phase kyverno: Kyverno's admission and background controllers, the same policies...", flush=True)
            try:
                peer_rows, peer_time = kyverno_phase(kube, run.work, ds, args)
            except Exception as exc:  # noqa: BLE001 - vpol's figures stand; say why the peer's are missing
                peer_rows, peer_time = [["Kyverno (admission + background controllers)", f"failed: {exc}"[:2000]]], None
            print()
            print(table(peer_rows, ["measure", "value"]))
            print()
            if peer_time and converge:
                targets.append(["vpol's converge <= 0.5x Kyverno's", f"{converge / peer_time:.2f}x",
                                "PASS" if converge / peer_time <= 0.5 else "FAIL"])
        print_results(None, targets, run)
        return 1 if failed else 0
    finally:
        if sampler is not None:
            sampler.stop()
        if ds is not None:
            ds.stop()
        try:
            if op is not None:
                op.stop()
        finally:
            if run.cluster.state_dir is None:
                cleanup(run.cluster.kube, n)
            run.cluster.stop()


def cleanup(kube: Any, n: int) -> None:
    """Remove the bench's objects from a cluster given by --kubeconfig."""
    for doc in policies("bench-gen", "vpol") + policies("bench-gen-kyverno", "kyverno"):
        kube.kubectl("delete", "generatingpolicy", doc["metadata"]["name"], "--ignore-not-found", "--wait=false",
                     check=False)
    for prefix in ("bench-gen-floor-", "bench-gen-vpol-", "bench-gen-kyverno-"):
        for i in range(n):
            try:
                delete_object(kube.api_client, "", "v1", "namespaces", "", f"{prefix}{i:05d}")
            except Exception:  # noqa: BLE001 - best effort
                pass
    kube.kubectl("delete", "namespace", SOURCE_NS, "--ignore-not-found", "--wait=false", check=False)
    kube.kubectl("delete", "clusterrole", SECRETS_ROLE["metadata"]["name"], "--ignore-not-found", check=False)


def kyverno_phase(kube: Any, work: Path, ds: Downstreams, args: argparse.Namespace) -> tuple[list[list[str]],
                                                                                              float | None]:
    """Kyverno's admission controller and background controller with the same policies (named bench-gen-kyverno-*)
    on N more Namespaces; no vpol operator runs. vpol's policies are deleted first (with no operator running: their
    downstreams stay, and Kyverno does not act on them)."""
    sys.path.insert(0, str(REPO))
    from bench.kyverno.peer import KyvernoBackgroundPeer, KyvernoPeer, build

    n = args.namespaces
    expected = 3 * n
    for doc in policies("bench-gen", "vpol"):
        kube.kubectl("delete", "generatingpolicy", doc["metadata"]["name"], "--wait=false")
    selector = {"matchLabels": {LABEL: "kyverno"}}
    # Kyverno's client-side rate limit (100 requests/s, bursts of 200, shared by all its clients) raised as vpol's
    # write limit is: not what is measured. At its default, 1,000 Namespaces created at once starved the admission
    # controller's leader lease renewal of the limiter (3 UpdateRequests per Namespace go through it): it lost the
    # lease and exited (2026-11-28).
    limits = [f"--clientRateLimitQPS={args.kyverno_qps:g}", f"--clientRateLimitBurst={int(args.kyverno_qps)}"]
    admission = KyvernoPeer(kube, work, binary=build("kyverno"), webhook_namespace_selector=selector,
                            log_name="kyverno-admission.log", extra_args=limits)
    background = KyvernoBackgroundPeer(kube, work, binary=build("background-controller"),
                                       webhook_namespace_selector=selector, extra_args=limits)
    rows: list[list[str]] = []
    try:
        admission.install()
        background.install()
        for doc in policies("bench-gen-kyverno", "kyverno"):
            kube.kubectl("apply", "--server-side", "--field-manager=vpol-bench", "-f", "-",
                         input=json.dumps(doc))
        admission.start()
        background.start()
        # The admission controller registers the policies' webhook once it has read them.
        deadline = time.monotonic() + 120
        while not any(str(w.get("name", "")).startswith("gpol.") for w in admission.webhooks()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kyverno registered no webhook for its GeneratingPolicies:\n{admission.log()}")
            time.sleep(1)
        if not background.wait_leading(120):
            raise RuntimeError(f"Kyverno's background controller did not start leading:\n{background.log()}")
        time.sleep(3)
        prefix = "bench-gen-kyverno-"
        names = [f"{prefix}{i:05d}" for i in range(n)]
        ds.expect(prefix, expected)
        sampler = MemorySampler(background.pid)
        sampler.start()
        before = apiserver_requests(kube.api_client)
        cpu0 = (cpu_seconds(admission.pid), cpu_seconds(background.pid))
        plane0 = control_plane_cpu()
        t0 = time.monotonic()
        created = create_namespaces(kube, names, {LABEL: "kyverno"}, args.threads)
        print(f"created {n} Namespaces in {created:.1f}s ({args.threads} clients)", flush=True)
        restarts: Counter[str] = Counter()

        def alive() -> bool:
            """Restart a controller that exited, as its Deployment would (Kyverno exits when it loses its leader
            lease); give up after 20 restarts."""
            for name, peer in (("admission", admission), ("background", background)):
                if not peer.running():
                    restarts[name] += 1
                    print(f"  [kyverno] the {name} controller exited; restarting it ({restarts[name]})", flush=True)
                    peer.relaunch()
            return sum(restarts.values()) <= 20

        converge = follow(ds, prefix, expected, t0, args.peer_timeout, "kyverno", alive, args.peer_stall)
        stalled = converge is None and time.monotonic() - t0 < args.peer_timeout
        reached = ds.count(prefix)
        # (The CPU of a process that exited is not counted: it is gone from /proc.)
        cpu = (cpu_seconds(admission.pid) - (0.0 if restarts["admission"] else cpu0[0]),
               cpu_seconds(background.pid) - (0.0 if restarts["background"] else cpu0[1]))
        plane_cpu = control_plane_cpu() - plane0
        time.sleep(3)
        requests = requests_since(kube, before)
        peaks = sampler.stop()
        resources = tuple(k[2] for k in KINDS)
        writes = writes_of(requests, resources)
        urs = writes_of(requests, ("updaterequests",), subresources=True)
        report_writes = writes_of(requests, ("ephemeralreports", "clusterephemeralreports", "policyreports",
                                             "clusterpolicyreports"))
        total = sum(writes.values())
        skipped = admission.log_path.read_text(errors="replace").count("UpdateRequest creation skipped")
        rows += [
            ["Kyverno v1.19.1 (admission + background controllers): first Namespace created -> every downstream "
             "exists", f"{converge:.1f} s" if converge else
             (f"not reached: stalled at {reached}/{expected} downstreams (none new for {args.peer_stall:.0f} s)"
              if stalled else f"not reached in {args.peer_timeout:.0f} s: {reached}/{expected} downstreams")],
            ["  Kyverno: Namespaces created by the bench (through its webhook)", f"{created:.1f} s"],
            ["  Kyverno: controllers restarted after exiting (lost leader lease)",
             ", ".join(f"{k} {v}" for k, v in sorted(restarts.items())) or "none"],
            ["  Kyverno: UpdateRequests not created (over updateRequestThreshold, 1000 by default; admission log)",
             str(skipped)],
            ["  Kyverno: writes of the three kinds (API server)",
             f"{total} ({total / expected:.2f} per downstream: {text(writes)})"],
            ["  Kyverno: UpdateRequest requests", f"{sum(urs.values())} ({text(urs)})"],
            ["  Kyverno: report writes", f"{sum(report_writes.values())} ({text(report_writes)})"],
            ["  Kyverno: CPU admission / background (since its last start) / control plane", f"{cpu[0]:.1f} s / {cpu[1]:.1f} s / "
                                                                      f"{plane_cpu:.1f} s"],
            ["  Kyverno: background controller peak RSS (VmHWM)", f"{peaks.operator_hwm_kib / 1024:.0f} MiB"],
        ]
        return rows, converge
    finally:
        background.stop()
        admission.stop()


if __name__ == "__main__":
    sys.exit(main())

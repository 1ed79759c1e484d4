#!/usr/bin/env python3
"""Benchmark (not a test) of the operator's policy readiness (issue 4).

On a local control plane (tests/controlplane) with vpol's CRDs and RBAC
installed, the operator runs as in the e2e tests (`vpol run` as the
vpol-system/vpol ServiceAccount with a token). The benchmark then creates
ConfigMap ValidatingPolicies with native VAP generation enabled, each limited
by namespaceSelector to one bench namespace and forbidding its own data key,
and measures for each policy, from the create call returning:

  (a) Ready: a watch on the policies sees condition Ready=True whose
      observedGeneration equals metadata.generation;
  (b) enforced: a server-side dry-run create of a ConfigMap holding the
      policy's forbidden key is denied by the API server with that policy's
      message (polled every --poll seconds).

Two phases: ``seq`` (one policy at a time, each waited for) and ``burst``
(all created back to back, then waited for). Status writes are counted from
the same watch (MODIFIED events whose .status differs from the previous one)
and from the operator's vpol_status_writes_total, over the whole run
including at least one periodic resync (the e2e runner uses --resync 30).
Finally the cluster is filled up to --scale policies and the operator's
resident memory (and its evaluation worker's) is reported.

Targets (issue 4): p50 time to Ready with the VAP enforced <= 500 ms; one
status write per real change.

Usage: python3 bench/operator_ready.py [--policies 100] [--scale 500] [--phases seq,burst] [--quick]
       [--kubeconfig FILE --kubectl PATH]  (use an existing cluster instead of starting one)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BenchRun,
    MemorySampler,
    ensure_namespaces,
    install_vpol,
    metric_sum,
    ms,
    percentile,
    scrape,
    start_operator,
    table,
    wait_until,
)
from kubernetes import client  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from vpol.kube.dynamic import Watcher  # noqa: E402

GROUP, VERSION, PLURAL = "policies.kyverno.io", "v1", "validatingpolicies"
NAMESPACE = "bench-ready"


def policy_body(name: str, namespace: str, background: bool) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ValidatingPolicy",
        "metadata": {"name": name, "labels": {"vpol-bench": "ready"}},
        "spec": {
            "validationActions": ["Deny"],
            "autogen": {"validatingAdmissionPolicy": {"enabled": True}},
            "evaluation": {"background": {"enabled": background}},
            "matchConstraints": {
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                                   "resources": ["configmaps"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            },
            "validations": [{"expression": f"!has(object.data) || !('bad-{name}' in object.data)",
                             "message": message(name)}],
        },
    }


def message(name: str) -> str:
    return f"bench policy {name}: key bad-{name} is not allowed"


def delete_bench_policies(custom: Any) -> None:
    """Remove the policies of an earlier run (only matters on a reused cluster)."""
    custom.delete_collection_cluster_custom_object(GROUP, VERSION, PLURAL, label_selector="vpol-bench=ready")
    wait_until(lambda: not custom.list_cluster_custom_object(GROUP, VERSION, PLURAL,
                                                             label_selector="vpol-bench=ready")["items"], 120, 0.5)


class PolicyWatch:
    """Watches every ValidatingPolicy: first Ready time, status-changing MODIFIED events per policy."""

    def __init__(self, api: client.ApiClient):
        self.lock = threading.Lock()
        self.ready_at: dict[str, float] = {}
        self.status_changes: dict[str, int] = defaultdict(int)
        self.modified: dict[str, int] = defaultdict(int)
        self._last_status: dict[str, str] = {}
        self.watcher = Watcher(api, GROUP, VERSION, PLURAL, self._on_event, kind="ValidatingPolicy")

    def start(self) -> None:
        self.watcher.start()
        self.watcher.synced.wait(30)

    def stop(self) -> None:
        self.watcher.stop()

    def _on_event(self, etype: str, obj: dict[str, Any]) -> None:
        now = time.monotonic()
        md = obj.get("metadata") or {}
        name = md.get("name")
        if not name or etype not in ("ADDED", "MODIFIED"):
            return
        status = obj.get("status") or {}
        encoded = json.dumps(status, sort_keys=True)
        with self.lock:
            if etype == "MODIFIED":
                self.modified[name] += 1
                if encoded != self._last_status.get(name, json.dumps({})):
                    self.status_changes[name] += 1
            self._last_status[name] = encoded
            if name not in self.ready_at:
                for c in status.get("conditions") or []:
                    if c.get("type") == "Ready" and c.get("status") == "True" and \
                            c.get("observedGeneration") == md.get("generation"):
                        self.ready_at[name] = now

    def ready(self, name: str) -> float | None:
        with self.lock:
            return self.ready_at.get(name)

    def status(self, name: str) -> dict[str, Any]:
        with self.lock:
            return json.loads(self._last_status.get(name, "{}"))


class Bench:
    def __init__(self, kube: Any, args: argparse.Namespace):
        self.kube = kube
        self.args = args
        self.custom = client.CustomObjectsApi(kube.api_client)
        self.core: Any = client.CoreV1Api(kube.api_client)
        self.watch = PolicyWatch(kube.api_client)
        self.created_at: dict[str, float] = {}
        self.enforced_at: dict[str, float] = {}

    def create(self, name: str) -> None:
        self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL,
                                                 policy_body(name, NAMESPACE, self.args.background))
        self.created_at[name] = time.monotonic()

    def enforced(self, name: str) -> bool:
        """True when a violating ConfigMap is denied with this policy's message (server-side dry run)."""
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "probe-"},
              "data": {f"bad-{name}": "x"}}
        try:
            self.core.create_namespaced_config_map(NAMESPACE, cm, dry_run="All")
        except ApiException as exc:
            if exc.status in (400, 403, 422) and message(name) in (exc.body or ""):
                self.enforced_at.setdefault(name, time.monotonic())
                return True
            if exc.status not in (400, 403, 422):
                raise
        return False

    def sequential(self, names: list[str]) -> None:
        rng = random.Random(4)
        for name in names:
            # The API server recompiles its admission policies on a 1 s tick; waiting for each
            # policy to be enforced would otherwise lock every create to just after a tick.
            time.sleep(rng.uniform(0, self.args.jitter))
            self.create(name)
            deadline = time.monotonic() + 60
            while not self.enforced(name) and time.monotonic() < deadline:
                time.sleep(self.args.poll)
            wait_until(lambda: self.watch.ready(name), 60, 0.02)

    def burst(self, names: list[str], threads: int = 4) -> None:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(self.create, names))
        pending = list(names)
        deadline = time.monotonic() + 180
        with ThreadPoolExecutor(threads) as pool:
            while pending and time.monotonic() < deadline:
                done = list(pool.map(self.enforced, pending))
                pending = [n for n, ok in zip(pending, done) if not ok]
                if pending:
                    time.sleep(self.args.poll)
        wait_until(lambda: all(self.watch.ready(n) for n in names), 120, 0.1)

    def latencies(self, names: list[str]) -> tuple[list[float], list[float], int]:
        ready, enforced, missing = [], [], 0
        for n in names:
            r, e = self.watch.ready(n), self.enforced_at.get(n)
            if r is None or e is None:
                missing += 1
            if r is not None:
                ready.append(max(0.0, r - self.created_at[n]))
            if e is not None:
                enforced.append(e - self.created_at[n])
        return ready, enforced, missing


def cpu_seconds(pid: int) -> float:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        fields = raw[raw.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return 0.0


def queue_idle(op: Any) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{op.liveness_port}/healthz", timeout=5) as r:
            data = json.loads(r.read() or b"{}")
        return bool((data.get("queue") or {}).get("idle"))
    except (OSError, ValueError):
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", type=int, default=100, help="policies measured per phase (default 100)")
    parser.add_argument("--scale", type=int, default=500, help="total policies for the memory figure (default 500)")
    parser.add_argument("--phases", default="seq,burst", help="comma-separated: seq, burst (default both)")
    parser.add_argument("--poll", type=float, default=0.02, help="enforcement poll interval, seconds")
    parser.add_argument("--jitter", type=float, default=1.0,
                        help="seq phase: random pause (0..JITTER s) before each create, so creates do not "
                             "phase-lock to the API server's 1 s policy refresh (default 1.0)")
    parser.add_argument("--settle", type=float, default=40.0,
                        help="seconds to keep counting status writes after the phases (covers a --resync 30 pass)")
    parser.add_argument("--no-background", dest="background", action="store_false",
                        help="set evaluation.background.enabled=false on the bench policies")
    parser.add_argument("--quick", action="store_true", help="--policies 20 --scale 100 --settle 35")
    parser.add_argument("--kubeconfig", help="use this cluster instead of starting a local control plane")
    parser.add_argument("--kubectl", help="kubectl for --kubeconfig (default: PATH)")
    parser.add_argument("--workdir", help="state and logs (default: a temporary directory)")
    parser.add_argument("--operator-arg", action="append", default=[], help="extra `vpol run` flag (repeatable)")
    args = parser.parse_args()
    if args.quick:
        args.policies, args.scale, args.settle = 20, 100, 35.0
    # Our policy watch reconnects quietly; its warning when the cluster stops at the end is noise.
    logging.getLogger("vpol.kube.dynamic").setLevel(logging.ERROR)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]

    run = BenchRun.begin(args.workdir, "vpol-bench-ready-", args.kubeconfig, args.kubectl)
    work, cluster = run.work, run.cluster
    op = None
    sampler = None
    try:
        kube = cluster.kube
        install_vpol(kube)
        ensure_namespaces(kube, [NAMESPACE])
        delete_bench_policies(client.CustomObjectsApi(kube.api_client))
        t = time.monotonic()
        op = start_operator(kube, work, args.operator_arg)
        assert op.proc is not None
        print(f"operator live in {time.monotonic() - t:.1f}s (pid {op.proc.pid}, log {op.log_path})")
        sampler = MemorySampler(op.proc.pid)
        sampler.start()
        bench = Bench(kube, args)
        bench.watch.start()
        writes0 = metric_sum(scrape(op), "vpol_status_writes_total")
        cpu0 = cpu_seconds(op.proc.pid)

        rows = []
        measured: list[str] = []
        for phase in phases:
            names = [f"{phase}-{i}" for i in range(args.policies)]
            t = time.monotonic()
            if phase == "seq":
                bench.sequential(names)
            elif phase == "burst":
                bench.burst(names)
            else:
                raise SystemExit(f"unknown phase {phase}")
            wall = time.monotonic() - t
            measured += names
            ready, enforced, missing = bench.latencies(names)
            rows.append([phase, str(len(names)),
                         ms(percentile(ready, 50)), ms(percentile(ready, 95)), ms(max(ready, default=0)),
                         ms(percentile(enforced, 50)), ms(percentile(enforced, 95)), ms(max(enforced, default=0)),
                         str(missing), f"{wall:.1f} s"])
            print(f"phase {phase}: {len(names)} policies in {wall:.1f}s")

        print(f"counting status writes for {args.settle:.0f}s more (periodic resync included)...")
        time.sleep(args.settle)
        writes = metric_sum(scrape(op), "vpol_status_writes_total") - writes0
        per_policy = [bench.watch.status_changes.get(n, 0) for n in measured]
        modified = [bench.watch.modified.get(n, 0) for n in measured]
        cpu_phases = cpu_seconds(op.proc.pid) - cpu0
        reconciles = metric_sum(scrape(op), "vpol_reconciles_total")

        print()
        print("Time from the create call returning (Ready = watch sees Ready=True at the current generation; "
              "enforced = a dry-run violating ConfigMap is denied with the policy's message):")
        print(table(rows, ["phase", "policies", "Ready p50", "Ready p95", "Ready max", "enforced p50",
                           "enforced p95", "enforced max", "missing", "phase wall"]))
        print()
        hist: dict[int, int] = defaultdict(int)
        for c in per_policy:
            hist[c] += 1
        example = bench.watch.status(measured[0]) if measured else {}
        print(table([
            ["status writes (vpol_status_writes_total)", f"{writes:.0f} for {len(measured)} policies "
             f"({writes / max(1, len(measured)):.2f} per policy)"],
            ["status-changing MODIFIED events per policy (watch)",
             ", ".join(f"{k}: {v} policies" for k, v in sorted(hist.items()))],
            ["all MODIFIED events per policy (watch)", f"min {min(modified, default=0)}, max {max(modified, default=0)}"],
            ["reconciles (vpol_reconciles_total)", f"{reconciles:.0f}"],
            ["operator CPU during the phases + settle", f"{cpu_phases:.1f} s"],
            ["Ready condition of one policy", json.dumps(next((c for c in example.get('conditions') or []
                                                              if c.get('type') == 'Ready'), {}))],
        ], ["status writes", "value"]))

        # -- scale up to --scale policies, then memory
        extra = [f"scale-{i}" for i in range(max(0, args.scale - len(measured)))]
        if extra:
            print(f"\nscaling to {args.scale} policies ({len(extra)} more, created back to back)...")
            t = time.monotonic()
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(bench.create, extra))
            created = time.monotonic() - t
            all_names = measured + extra
            wait_until(lambda: all(bench.watch.ready(n) for n in all_names), 600, 0.5)
            to_ready = time.monotonic() - t
            ready_count = sum(1 for n in all_names if bench.watch.ready(n))
            wait_until(lambda: queue_idle(op), 120, 0.5)
            print(f"created {len(extra)} in {created:.1f}s; {ready_count}/{len(all_names)} Ready after "
                  f"{to_ready:.1f}s ({len(extra) / to_ready:.1f} policies/s)")
            vaps = client.AdmissionregistrationV1Api(kube.api_client).list_validating_admission_policy(
                label_selector="vpol.kyverno.io/policy")
            print(f"generated VAPs: {len(vaps.items)}")
            print(f"steady state with {len(all_names)} policies for {args.settle:.0f}s (a resync pass included)...")
            w0 = metric_sum(scrape(op), "vpol_status_writes_total")
            c0 = cpu_seconds(op.proc.pid)
            time.sleep(args.settle)
            print(f"  status writes during it: {metric_sum(scrape(op), 'vpol_status_writes_total') - w0:.0f}; "
                  f"operator CPU {cpu_seconds(op.proc.pid) - c0:.1f}s")
        peaks = sampler.stop()
        sampler = None
        print()
        print(table([
            ["policies", str(len(measured) + len(extra))],
            ["operator RSS now", f"{peaks.operator_now_kib / 1024:.0f} MiB"],
            ["operator peak RSS (VmHWM)", f"{peaks.operator_hwm_kib / 1024:.0f} MiB"],
            ["child processes (peak RSS)", peaks.children_summary()],
        ], ["memory", "value"]))
        print(run.end())
        bench.watch.stop()
        return 0
    finally:
        if sampler is not None:
            sampler.stop()
        try:
            if op is not None:
                op.stop()
            if args.kubeconfig:
                delete_bench_policies(client.CustomObjectsApi(cluster.kube.api_client))
        finally:
            cluster.stop()

if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark (not a test) of background scans and PolicyReports (issue 5).

On a local control plane (tests/controlplane; no scheduler or kubelet, so
Pods stay Pending, which does not matter for scanning) with vpol installed
and the operator running as in the e2e tests (`vpol run` as the
vpol-system/vpol ServiceAccount):

0. ("enforce", before any Pod exists) applies the policies of phase 2 to a
   running operator and measures what enforcing them costs: the time until
   every policy is Ready and the CPU each process used until then (the API
   server writing and compiling the VAPs and bindings, the controller
   manager type-checking them, the operator reconciling and proving them);
   the policies are deleted afterwards, and their VAPs with them;
1. creates --namespaces namespaces and --pods Pods spread over them (parallel
   requests), a share of them violating one Pod Security Standard check each;
2. ("apply") applies --policies of the Pod Security Standard policies in
   examples/pod-security/ (restricted first, then baseline, alphabetically;
   all Audit with background scanning) to the running operator (once its
   start-up is over: its first, empty, full scan done) and measures
   the full-scan wall time: from the first policy being applied until every
   Pod's results are in reports (the operator's vpol_report_results gauge
   reaches pods x policies) and report writes stop; evaluations per second
   (vpol_policy_results_total), report writes (vpol_report_writes_total),
   the operator's peak RSS and, separately, its evaluation worker's; then
   checks the reports themselves (one PolicyReport per Pod with every result);
   this phase is cut off after --apply-timeout and its end extrapolated
   when it is slow;
3. ("add", after the report floor below, whose reports are then in place)
   starts an operator, and once its start-up is over applies one more policy
   (a copy of the first under another name): every report is updated once;
   measures the time until every result is written, the writes per Pod and
   the control plane's CPU per write (against the report floor's creates);
   the copy is deleted afterwards, and the reports too;
4. ("cold") starts a fresh operator with the policies present and no reports,
   and measures the same figures from the operator's start;
5. ("restart") restarts the operator with nothing changed and measures the
   time to its first full scan and its report writes (targets: zero writes,
   <= 10 s); with --rescan-interval S also one periodic full rescan;
6. ("kyverno", only when asked for) the peer: Kyverno's reports controller
   (bench/kyverno/peer.py, built from Kyverno's module) started with the
   policies and Pods in place and no report of its own, no vpol operator
   running, followed through a watch of its PolicyReports until every Pod has
   one with every result and they stop changing: its time, its writes of
   reports and ephemeral reports (from the API server's request counts), the
   CPU of each process, its peak RSS, and vpol's cold phase over its time.
   Kyverno 1.19 does not scan a ValidatingPolicy whose status says its VAP
   was generated (kyverno/kyverno#16153), so the phase first sets the
   policies' status.generated to false;
7. ("kyverno-restart", after kyverno) Kyverno's reports controller started
   again with nothing changed, followed through watches of its reports and
   ephemeral reports until they stop changing (its writes counted from the
   API server's requests), beside vpol's restart phase.

Also, in the same run, `vpol apply` of the same Pods (listed back from the
cluster) and policies: the offline engine's evaluations per second are the
ceiling the scan's evaluation rate is compared with; and, after the apply phase,
the report floor: the reports that phase wrote, read back, deleted and created
again through vpol's write path (as many parallel creates as the scanner has writers),
timed, with the control plane's CPU per report and per Pod (from /proc, local
control plane only). It is how fast this API server accepts exactly the scan's
writes with nothing else running; the scans' times are also given over it.

Targets (issue 23), as ratios within one run, so they hold on any machine: the
write floor is the time the same API server took to accept the bench's Pods
(created with --threads parallel requests over kept-alive connections, through
the same write path as the report floor, just before the phases). A 16-result
report costs the API server about 3 x a Pod, so the report floor is about 3 x
the write floor: the apply and cold targets below are not reachable by any
scanner writing these reports (bench/results/scan.md, 2026-11-27 09:45 UTC); the
ratios to the report floor are given beside them.

* report writes per Pod = 1.00 in the apply and cold phases;
* apply: policies applied -> every result written <= 1.2 x the write floor;
* cold: operator start -> every result written <= 1.5 x the write floor;
* restart, nothing changed: operator start -> first full scan <= 0.2 x the write
  floor, with 0 writes;
* evaluations per second of evaluation time during a scan (the
  evaluations over the time the scanner waited on its evaluation worker) >= 0.5 x
  `vpol apply`'s on the same Pods and policies (its results over its wall time);
* operator peak RSS <= 150 MiB (stated for 10,000 Pods).

The run ends with a table of these ratios, each marked PASS or FAIL. Each phase also leaves
``requests-<phase>.txt`` in the work directory: the CPU seconds each process used (kube-apiserver,
kube-controller-manager, etcd with the supervisor, the operator, its worker, this bench) and the API
server's requests by verb and resource (apiserver_request_total, read outside the timed window), to tell
where a phase's time went. The operator's metrics are polled twice a second for the few samples read
(``name[]``); the per-policy, per-namespace families only when the results can have become complete (see
follow()), so the polling costs neither process much.

With ``--reports-server`` the reports are kept in PostgreSQL instead of etcd: after vpol's install, the bench
starts a PostgreSQL of its own and Kyverno's reports-server in front of it (tests/reportsserver/stack.py, shared with
tests/e2e/test_reports_server.py; the control plane gets ``--enable-aggregator-routing=true``), and stops both at
the end. Everything else is unchanged: the report floor and every phase then go through the aggregated API (where
lists ignore ``limit``: vpol's read-back of its reports at start-up gets them all in one answer). Each phase's CPU
also counts reports-server and PostgreSQL (with the control plane's in the "control plane alone" ratio), the report
floor gives their CPU per report, and the end adds their memory and ``pg_database_size('reportsdb')``.

With ``--profile DIR`` each operator phase is recorded with py-spy (when it is installed), and the API server
with its own CPU profiler (the control plane is started with ``--profiling=true``) over the write floor's Pod
creates, the report floor's creates, each operator phase and Kyverno's two: ``DIR/<phase>.apiserver.pprof``
for ``go tool pprof``, its top functions beside it, and a last table of the API server's CPU by activity
(garbage collection, admission, CRD schema coercion, validation, managed fields, decoding, ...) per write:
what a Pod and a report cost it, side by side.

Usage: python3 bench/scan.py [--pods 10000] [--namespaces 50] [--policies 16] [--quick]
       [--phases enforce,apply,add,cold,restart[,kyverno[,kyverno-restart]]] [--apply-timeout 90]
       [--rescan-interval 60] [--profile DIR (py-spy of vpol, pprof of the API server)]
       [--reports-server (the reports in PostgreSQL)] [--kubeconfig FILE --kubectl PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml  # noqa: E402
from common import (  # noqa: E402
    API_SERVER_ACTIVITIES,
    ApiServerProfile,
    BenchRun,
    CONTROL_PLANE_PARTS,
    REPO,
    MemoryPeaks,
    MemorySampler,
    CpuMeter,
    api_server_activities,
    apiserver_requests,
    control_plane_cpu,
    control_plane_memory,
    control_plane_parts,
    cpu_seconds,
    descendants,
    pss_kib,
    install_vpol,
    metric_sum,
    pooled_client,
    scrape,
    status_kib,
    start_operator,
    table,
    wait_until,
)
import urllib3  # noqa: E402
from kubernetes import client  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from vpol.controller.report_store import WRITERS  # noqa: E402
from vpol.kube.dynamic import METADATA_ANSWER, collection_path, encoded, list_pages, send_encoded  # noqa: E402
from vpol.kube.reports import Reports  # noqa: E402

from tests.reportsserver import stack as reports_server  # noqa: E402

NS_PREFIX = "bench-scan-"
POLICY_GROUP, POLICY_VERSION, POLICY_PLURAL = "policies.kyverno.io", "v1", "validatingpolicies"
REPORTS = ("wgpolicyk8s.io", "v1alpha2", "policyreports")


# -- workload ---------------------------------------------------------------------------------

def policy_files(count: int) -> list[Path]:
    root = REPO / "examples" / "pod-security"
    files = sorted((root / "restricted").glob("*/policy.yaml")) + sorted((root / "baseline").glob("*/policy.yaml"))
    if count > len(files):
        raise SystemExit(f"only {len(files)} Pod Security Standard policies in {root}")
    return files[:count]


def _container(name: str) -> dict[str, Any]:
    return {
        "name": name, "image": "registry.example/app:1.0",
        "ports": [{"containerPort": 8080}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "runAsNonRoot": True, "runAsUser": 1000,
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }


#: One Pod Security Standard violation each (applied to an otherwise restricted-compliant Pod).
VIOLATIONS: dict[str, Any] = {
    "privileged": lambda p: p["spec"]["containers"][0]["securityContext"].update(
        privileged=True, allowPrivilegeEscalation=True),
    "host-network": lambda p: p["spec"].update(hostNetwork=True),
    "host-path": lambda p: (p["spec"].update(volumes=[{"name": "h", "hostPath": {"path": "/var/log"}}]),
                            p["spec"]["containers"][0].update(volumeMounts=[{"name": "h", "mountPath": "/h"}])),
    "add-sys-admin": lambda p: p["spec"]["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
    "run-as-root": lambda p: p["spec"]["containers"][0]["securityContext"].update(runAsNonRoot=False, runAsUser=0),
    "seccomp-unconfined": lambda p: p["spec"]["containers"][0]["securityContext"].update(
        seccompProfile={"type": "Unconfined"}),
    "host-port": lambda p: p["spec"]["containers"][0]["ports"][0].update(hostPort=8080),
    "privilege-escalation": lambda p: p["spec"]["containers"][0]["securityContext"].update(
        allowPrivilegeEscalation=True),
}


def pod(name: str, index: int, violating_share: float) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench", "vpol-bench": "scan"}},
        "spec": {"containers": [_container("app")], "automountServiceAccountToken": False,
                 "securityContext": {"runAsNonRoot": True}},
    }
    # Deterministic mix: of every 100 Pods, the first share*100 violate one check each (round robin).
    if index % 100 < violating_share * 100:
        kinds = list(VIOLATIONS)
        VIOLATIONS[kinds[index % len(kinds)]](body)
        body["metadata"]["labels"]["violation"] = kinds[index % len(kinds)]
    return body


def create_namespaces(kube: Any, namespaces: int) -> list[str]:
    """The bench's namespaces, once each has the default ServiceAccount Pods need."""
    core: Any = client.CoreV1Api(kube.api_client)
    names = [f"{NS_PREFIX}{i:02d}" for i in range(namespaces)]
    for name in names:
        try:
            core.create_namespace({"metadata": {"name": name, "labels": {"vpol-bench": "scan"}}})
        except ApiException as exc:
            if exc.status != 409:
                raise
    # The ServiceAccount admission plugin refuses Pods until the namespace's default ServiceAccount exists.
    wait_until(lambda: all(core.list_namespaced_service_account(n, field_selector="metadata.name=default").items
                           for n in names), 120, 0.5)
    return names


def create_pods(kube: Any, names: list[str], pods: int, violating_share: float, threads: int) -> float:
    """The bench's Pods, spread over the namespaces ``names``, ``threads`` requests at once: the seconds taken."""
    # Through the write path the report floor uses (vpol's: the body encoded once, the answer read, so its
    # connection goes back to the pool). Until 2026-11-27 this called the generated client with
    # _preload_content=False and never read the answer: no connection went back to the pool, so every Pod paid a
    # new TLS connection, and the "write floor" was about 3 x what the API server takes (bench/results/scan.md).
    api = pooled_client(kube, threads)

    def create(i: int) -> None:
        ns = names[i % len(names)]
        body = encoded(pod(f"pod-{i:05d}", i, violating_share))
        for attempt in range(5):
            try:
                send_encoded(api, "POST", collection_path("", "v1", "pods", ns), body,
                             content_type="application/json", accept=METADATA_ANSWER)
                return
            except ApiException as exc:
                if exc.status == 409:
                    return
                if exc.status in (429, 500, 503, 504) and attempt < 4:
                    time.sleep(0.5 * (attempt + 1))
                    continue
                raise

    started = time.monotonic()
    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(create, range(pods)))
        return time.monotonic() - started
    finally:
        api.close()


def count_pods(kube: Any) -> int:
    n = 0
    for items, _rv in list_pages(kube.api_client, "", "v1", "pods", label_selector="vpol-bench=scan"):
        n += len(items)
    return n


def apply_policies(kube: Any, files: list[Path]) -> list[str]:
    custom = client.CustomObjectsApi(kube.api_client)
    names = []
    for path in files:
        doc = yaml.safe_load(path.read_text())
        custom.patch_cluster_custom_object(POLICY_GROUP, POLICY_VERSION, POLICY_PLURAL, doc["metadata"]["name"], doc,
                                           field_manager="vpol-bench", force=True,
                                           _content_type="application/apply-patch+yaml")
        names.append(doc["metadata"]["name"])
    return names


def policy_reports(kube: Any) -> Iterator[dict[str, Any]]:
    """Every PolicyReport, read the way the operator reads its own back (vpol.kube.reports.Reports.existing): in
    pages, or namespace by namespace where reports-server serves them (its lists ignore ``limit``: at 100,000 Pods
    one answer would hold every report, some 700 MB of JSON)."""
    return (r for r in Reports(kube.api_client).existing("") if r.get("kind") == "PolicyReport")


def check_reports(kube: Any, policies: int) -> dict[str, int]:
    """Reads every PolicyReport once: how many Pods have a report, with every policy's result."""
    out = {"reports": 0, "pod reports": 0, "complete": 0, "fail results": 0, "pass results": 0, "other results": 0}
    for r in policy_reports(kube):
        out["reports"] += 1
        if (r.get("scope") or {}).get("kind") != "Pod":
            continue
        out["pod reports"] += 1
        results = r.get("results") or []
        if len({x.get("policy") for x in results}) >= policies:
            out["complete"] += 1
        for x in results:
            key = f"{x.get('result')} results"
            out[key if key in out else "other results"] += 1
    return out


# -- measuring --------------------------------------------------------------------------------

@dataclass
class Progress:
    t: float
    writes: float
    results_present: float
    evaluations: float
    resources_full: float
    resources_incr: float
    full_scans: float
    full_seconds: float
    #: Time the scanner spent waiting on its evaluation worker (vpol_evaluation_duration_seconds_sum).
    eval_seconds: float = 0.0
    #: CPU seconds each process group has used since the phase began (CpuMeter), read with the metrics.
    cpu: dict[str, float] = field(default_factory=dict)
    #: Resources evaluated (vpol_evaluation_duration_seconds_count): a one-series sign of evaluation going on.
    evaluated: float = 0.0
    #: Whether results_present and evaluations were read at this poll (False: carried from the last poll that
    #: read them; see follow()).
    full: bool = True


#: The samples progress() reads (the operator renders only these for it): a few series each.
PROGRESS_SAMPLES = ("vpol_report_writes_total", "vpol_scan_resources_total", "vpol_scan_duration_seconds_count",
                    "vpol_scan_duration_seconds_sum", "vpol_evaluation_duration_seconds_sum",
                    "vpol_evaluation_duration_seconds_count")
#: The per-policy, per-namespace families progress() reads as well, without a last poll (3,200 series each at
#: 10,000 Pods in 100 namespaces: rendering them twice a second was 15% of the operator's CPU time in a scan,
#: measured with py-spy --gil, and the floor the scan is compared with polls nothing).
RESULT_SAMPLES = ("vpol_report_results", "vpol_policy_results_total")


def progress(op: Any, t0: float, last: Progress | None = None) -> Progress:
    """The operator's progress; with a ``last`` poll, the results present and evaluations are carried from it
    instead of read (see with_results)."""
    full = last is None
    m = scrape(op, PROGRESS_SAMPLES + (RESULT_SAMPLES if full else ()))
    p = Progress(
        t=time.monotonic() - t0,
        writes=metric_sum(m, "vpol_report_writes_total"),
        results_present=last.results_present if last is not None else 0.0,
        evaluations=last.evaluations if last is not None else 0.0,
        resources_full=metric_sum(m, "vpol_scan_resources_total", scan="full"),
        resources_incr=metric_sum(m, "vpol_scan_resources_total", scan="incremental"),
        full_scans=metric_sum(m, "vpol_scan_duration_seconds_count", scan="full"),
        full_seconds=metric_sum(m, "vpol_scan_duration_seconds_sum", scan="full"),
        eval_seconds=metric_sum(m, "vpol_evaluation_duration_seconds_sum"),
        evaluated=metric_sum(m, "vpol_evaluation_duration_seconds_count"),
        full=False,
    )
    return _results_of(p, m) if full else p


def with_results(op: Any, p: Progress) -> Progress:
    """``p`` with the results present and evaluations read now (a poll of RESULT_SAMPLES alone)."""
    return _results_of(p, scrape(op, RESULT_SAMPLES))


def _results_of(p: Progress, m: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> Progress:
    p.results_present = metric_sum(m, "vpol_report_results")
    p.evaluations = metric_sum(m, "vpol_policy_results_total")
    p.full = True
    return p


def _moving(p: Progress, prev: Progress) -> bool:
    """Whether writes or evaluation went on between two polls (the few-series samples only)."""
    return (p.writes, p.evaluated, p.resources_full, p.resources_incr) != \
        (prev.writes, prev.evaluated, prev.resources_full, prev.resources_incr)


@dataclass
class ScanRun:
    wall_complete: float | None = None     # every result present
    wall_quiet: float | None = None        # last change of report writes / evaluations
    quiet_reached: bool = False            # False: still busy when --settle-limit ended the wait
    last: Progress | None = None
    first: Progress | None = None
    timeline: list[Progress] = field(default_factory=list)


def follow(op: Any, t0: float, expected: int, reports: int, timeout: float, quiet: float, label: str,
           settle_limit: float = 1e9, cpu: Callable[[], dict[str, float]] | None = None) -> ScanRun:
    """Polls the operator's metrics until all ``expected`` results are present, a full scan has finished
    and nothing changed for ``quiet`` s (or ``settle_limit`` s passed since both were true).

    The per-policy families (RESULT_SAMPLES) are read only where the results can have become complete: at the
    first poll, once the phase has written as many reports as it expects (``reports``), when nothing moved since
    the previous poll, and every 10 s; the polls in between carry the last values, below the true ones, so a phase
    is never found complete early. The floor the scan is compared with polls nothing."""
    done_at: float | None = None
    run = ScanRun()
    last_change = 0.0
    prev: Progress | None = None
    next_print = 0.0
    next_full = 0.0
    while True:
        p = progress(op, t0, prev)
        if prev is not None and run.first is not None and \
                (p.t >= next_full or not _moving(p, prev) or p.writes - run.first.writes >= reports):
            p = with_results(op, p)
        if p.full:
            next_full = p.t + 10
        if cpu is not None:
            p.cpu = cpu()
        if run.first is None:
            run.first = p
        run.timeline.append(p)
        if prev is None or _moving(p, prev):
            last_change = p.t
        if run.wall_complete is None and p.results_present >= expected:
            run.wall_complete = p.t
        prev = p
        if p.t >= next_print:
            print(f"  [{label}] t={p.t:6.1f}s results {p.results_present:.0f}/{expected} writes {p.writes:.0f} "
                  f"evaluations {p.evaluations:.0f}", flush=True)
            next_print = p.t + 15
        if run.wall_complete is not None and p.full_scans >= 1:
            done_at = p.t if done_at is None else done_at
            if p.t - last_change >= quiet:
                run.quiet_reached = True
                break
            if p.t - done_at >= settle_limit:
                print(f"  [{label}] still evaluating {settle_limit:.0f}s after the scan finished; not waiting longer",
                      flush=True)
                break
        if p.t > timeout:
            print(f"  [{label}] timed out after {timeout:.0f}s", flush=True)
            break
        time.sleep(0.5)
    if prev is not None and not prev.full:
        with_results(op, prev)  # the phase's last evaluations are counted from it
    run.wall_quiet = last_change
    run.last = prev
    return run


class Profiler:
    """py-spy on the operator (and its worker) while a phase runs, when --profile DIR is given."""

    def __init__(self, out: Path | None, pid: int, name: str):
        self.proc = None
        if out is not None and shutil.which("py-spy"):
            out.mkdir(parents=True, exist_ok=True)
            gil = ["--gil"] if os.environ.get("VPOL_BENCH_PROFILE_GIL") else []
            self.proc = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--subprocesses", "--rate", "50", *gil,
                                          "--format", "speedscope", "-o", str(out / f"{name}.speedscope.json")],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@dataclass
class Phase:
    """One measured operator lifetime: its scan progress and memory."""

    name: str
    run: ScanRun
    peaks: MemoryPeaks
    base: Progress
    live: float = 0.0
    first_full: float | None = None       # first full scan finished (s from t0)
    first_full_seconds: float = 0.0       # its vpol_scan_duration_seconds
    periodic_seconds: float | None = None
    periodic_writes: float = 0.0
    periodic_resources: float = 0.0
    #: Pods x policies: the results a complete scan reports.
    expected: int = 0
    #: The local control plane's CPU seconds from t0 until the phase went quiet (0 with --kubeconfig).
    control_plane_cpu: float = 0.0
    #: CPU seconds by process over the same time: the control plane's parts (kube-apiserver,
    #: kube-controller-manager, etcd with the supervisor), the operator, its worker, the bench itself.
    cpu_by_process: dict[str, float] = field(default_factory=dict)
    #: The API server's requests from t0 until the phase went quiet, by (verb, resource, subresource).
    requests: Counter[tuple[str, str, str]] = field(default_factory=Counter)

    @property
    def writes(self) -> float:
        assert self.run.last is not None
        return self.run.last.writes - self.base.writes

    @property
    def evaluations(self) -> float:
        assert self.run.last is not None
        return self.run.last.evaluations - self.base.evaluations

    @property
    def eval_seconds(self) -> float:
        assert self.run.last is not None
        return self.run.last.eval_seconds - self.base.eval_seconds

    def writes_per_resource(self, pods: int) -> float:
        """Report writes per resource reported: the Pods, and whatever else the policies match (vpol's own
        Deployment, through autogen), counted from the results present (policies each)."""
        assert self.run.last is not None
        policies = self.expected / max(1, pods)
        return self.writes / max(1.0, self.run.last.results_present / max(1.0, policies))

    @property
    def written(self) -> float | None:
        """When every result was present and the last report write of the phase was done (s from t0)."""
        done = self._written_at()
        return done.t if done is not None else None

    @property
    def cpu_until_written(self) -> dict[str, float]:
        """CPU seconds by process group from t0 until ``written`` (empty when it was not reached or not read)."""
        done = self._written_at()
        return dict(done.cpu) if done is not None else {}

    def _written_at(self) -> Progress | None:
        assert self.run.last is not None
        final = self.run.last.writes
        for p in self.run.timeline:
            if p.writes >= final and p.results_present >= self.expected:
                return p
        return None


def process_meter(groups: dict[str, Callable[[], list[int]]]) -> CpuMeter:
    """CPU by process over one phase: the control plane's parts, ``groups`` (each a callable giving its pids, none
    before it is started: a process the meter did not see at its start counts from zero), this bench. The control
    plane's processes stay the same through a phase: found once (reading /proc for them at every poll would cost
    the cores the phase is measured on)."""
    plane = control_plane_parts()
    return CpuMeter({**{part: (lambda pids=pids: pids) for part, pids in plane.items()}, **STORE_PARTS, **groups,
                     "bench (this process)": lambda: [os.getpid()]})


def phase_meter(operator: Callable[[], list[int]]) -> CpuMeter:
    """CPU by process over one operator's phase (process_meter): the operator (``operator()``: its pid) and its
    evaluation worker."""
    return process_meter({"vpol operator": operator,
                          "vpol worker": lambda: [child for pid in operator() for child in descendants(pid)]})


def cpu_text(cpu: dict[str, float]) -> str:
    """CPU seconds by process group, with their total."""
    return f"{sum(cpu.values()):.1f} s: " + ", ".join(f"{name} {seconds:.1f}" for name, seconds in cpu.items())


def wait_started(op: Any) -> None:
    """Until the operator's start-up is over (its first, empty, full scan done)."""
    wait_until(lambda: progress(op, time.monotonic()).full_scans >= 1, 120, 0.2)


def operator_phase(kube: Any, work: Path, name: str, args: argparse.Namespace, expected: int, timeout: float,
                   *, scan_interval: float = 3600, apply: list[Path] | None = None, periodic: bool = False
                   ) -> tuple[Phase, list[str]]:
    """Start an operator, optionally apply policies, follow the scans until done, stop it.

    t0 is the operator's start, or the first policy apply when ``apply`` is given.
    """
    requests0 = apiserver_requests(kube.api_client)  # not timed: the API server renders a lot
    # A fresh operator's phase is profiled from before its start; the apply phase from the policies' apply.
    api_profile = None if apply else apiserver_profile(kube, args, name)
    # Started before the operator, so that its start-up (interpreter, imports, Kopf) is in a fresh operator's
    # CPU: start_operator returns once the operator answers its liveness probe.
    started: list[int] = []
    parts = phase_meter(lambda: started)
    parts.start()
    t_start = time.monotonic()
    cpu0 = control_plane_cpu()
    op = start_operator(kube, work, ["--scan-interval", str(scan_interval), *args.operator_arg],
                        log_name=f"operator-{name}.log")
    assert op.proc is not None
    started.append(op.proc.pid)
    sampler = MemorySampler(op.proc.pid)
    sampler.start()
    profiler = Profiler(Path(args.profile) if args.profile else None, op.proc.pid, name)
    live = time.monotonic() - t_start
    names: list[str] = []
    try:
        base = progress(op, t_start)
        t0 = t_start
        if apply:
            # A running operator: past its start-up (its first, empty, full scan done), as an operator that has
            # been up for a while is when policies are applied to it; otherwise its own start-up work (Kopf,
            # the scanner's activation) is timed as part of the policies' scan.
            wait_started(op)
            requests0 = apiserver_requests(kube.api_client)  # not timed: the API server renders a lot
            api_profile = apiserver_profile(kube, args, name)
            t0 = time.monotonic()
            base = progress(op, t0)
            cpu0 = control_plane_cpu()
            parts.start()
            names = apply_policies(kube, apply)
            applied = time.monotonic() - t0
            print(f"  [{name}] {len(names)} policies applied in {applied:.2f}s (one request each, vpol's policy "
                  "validation webhook included)", flush=True)
        run = follow(op, t0, expected, args.pods, timeout, args.quiet, name, args.settle_limit, cpu=parts.since_start)
        # The quiet wait at the end of follow() adds only idle time to the control plane's CPU.
        cpu = control_plane_cpu() - cpu0
        cpu_parts = parts.since_start()
        end_profile(api_profile, name)  # before the metrics below, which are not the phase's
        api_profile = None
        requests = apiserver_requests(kube.api_client)  # after the CPU: rendering its metrics is not the phase's
        requests.subtract(requests0)
        full = [p for p in run.timeline if p.full_scans >= 1]
        phase = Phase(name, run, MemoryPeaks(), base, live=live,
                      first_full=full[0].t if full else None,
                      first_full_seconds=full[0].full_seconds if full else 0.0, expected=expected,
                      control_plane_cpu=cpu, cpu_by_process=cpu_parts,
                      requests=+requests)
        (work / f"requests-{name}.txt").write_text(
            requests_text(name, phase.control_plane_cpu, phase.cpu_by_process, phase.requests))
        if periodic and full:
            ok = wait_until(lambda: progress(op, t0).full_scans >= 2, scan_interval + timeout, 0.5)
            p2 = progress(op, t0)
            if ok:
                phase.periodic_seconds = p2.full_seconds - full[0].full_seconds
            phase.periodic_writes = p2.writes - full[0].writes
            phase.periodic_resources = p2.resources_full - full[0].resources_full
        phase.peaks = sampler.stop()
        return phase, names
    finally:
        profiler.stop()
        end_profile(api_profile, name)
        sampler.stop()
        op.stop()


def apiserver_profile(kube: Any, args: argparse.Namespace, name: str) -> ApiServerProfile | None:
    """With --profile DIR: the API server's CPU profile of a phase, recorded into DIR/<name>.apiserver.pprof
    until stopped (see ApiServerProfile)."""
    if not args.profile:
        return None
    recording = ApiServerProfile(kube, Path(args.profile) / f"{name}.apiserver")
    recording.start()
    API_PROFILES[name] = recording
    return recording


def end_profile(recording: ApiServerProfile | None, name: str) -> None:
    """Ends an API server profile (apiserver_profile), if one is recording, and says where it went."""
    if recording is not None:
        print(f"  [{name}] {recording.stop()}", flush=True)


#: The API server's profiles of this run, by phase (with --profile).
API_PROFILES: dict[str, ApiServerProfile] = {}


def activity_table(writes: dict[str, float]) -> str:
    """The API server's CPU by activity in each profiled phase, per write where the phase wrote (``writes``:
    phase -> its writes of Pods or reports), else in seconds: what a Pod and a report cost it, side by side."""
    columns = {name: api_server_activities(rec.merged) for name, rec in API_PROFILES.items() if rec.merged}
    columns = {name: cpu for name, cpu in columns.items() if cpu}
    if not columns:
        return ""
    header = ["API server CPU (Go profile), by activity"] + [
        f"{name}: ms per write" if writes.get(name) else f"{name}: s" for name in columns]
    rows = [[activity] + [f"{cpu[activity] / writes[name] * 1000:.2f}" if writes.get(name) else f"{cpu[activity]:.2f}"
                          for name, cpu in columns.items()]
            for activity in [a for a, _ in API_SERVER_ACTIVITIES] + ["other", "total"]]
    rows.append(["writes (Pods, or vpol's and Kyverno's reports)"] + [f"{writes.get(name, 0):.0f}" for name in columns])
    return table(rows, header)


@contextmanager
def apiserver_profiled(kube: Any, args: argparse.Namespace, name: str) -> Iterator[None]:
    """The API server's profile of what runs inside (--profile): the write floor's and the report floor's creates."""
    recording = apiserver_profile(kube, args, name)
    try:
        yield
    finally:
        end_profile(recording, name)


def requests_text(name: str, control_plane_cpu: float, cpu_by_process: dict[str, float],
                  requests: Counter[tuple[str, str, str]], top: int = 40) -> str:
    """Where the control plane's work went in a phase: CPU per part, and the API server's requests by verb and
    resource (most first)."""
    lines = [f"phase {name}: control-plane CPU {control_plane_cpu:.1f} s; CPU by process: "
             + ", ".join(f"{k} {v:.1f} s" for k, v in cpu_by_process.items()),
             f"API server requests: {sum(requests.values())}"]
    for (verb, resource, sub), n in requests.most_common(top):
        lines.append(f"  {n:7d} {verb:8s} {resource}{'/' + sub if sub else ''}")
    return "\n".join(lines) + "\n"


def offline_apply(kube: Any, files: list[Path], work: Path) -> tuple[float, int]:
    """`vpol apply -o json` of the bench's Pods, as the API server holds them, and the same policies:
    (wall seconds, results). The Pods are listed back into one multi-document file first (not timed)."""
    path = work / "pods.yaml"
    with path.open("w") as out:
        for items, _rv in list_pages(kube.api_client, "", "v1", "pods", label_selector="vpol-bench=scan"):
            for item in items:
                item.setdefault("apiVersion", "v1")
                item.setdefault("kind", "Pod")
                out.write("---\n" + json.dumps(item) + "\n")  # JSON is YAML: one document per Pod
    cmd = [sys.executable, "-m", "vpol.cli.main", "apply", "--no-progress", "-o", "json",
           "--max-input-mib", str(max(8, path.stat().st_size // 2**20 + 1)),
           "-p", *map(str, files), "-r", str(path)]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    took = time.monotonic() - started
    if proc.returncode not in (0, 1):  # 1: some result failed (half the Pods violate a policy)
        raise SystemExit(f"vpol apply failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return took, len(json.loads(proc.stdout))


def cleanup_workload(kube: Any) -> None:
    """On a reused cluster: remove the bench namespaces (and their Pods/reports) and policies of an earlier run."""
    core: Any = client.CoreV1Api(kube.api_client)
    custom: Any = client.CustomObjectsApi(kube.api_client)
    for f in policy_files(len(list((REPO / "examples" / "pod-security").glob("*/*/policy.yaml")))):
        try:
            custom.delete_cluster_custom_object(POLICY_GROUP, POLICY_VERSION, POLICY_PLURAL,
                                                yaml.safe_load(f.read_text())["metadata"]["name"])
        except ApiException as exc:
            if exc.status != 404:
                raise
    for ns in core.list_namespace(label_selector="vpol-bench=scan").items:
        core.delete_namespace(ns.metadata.name)
    wait_until(lambda: not core.list_namespace(label_selector="vpol-bench=scan").items, 600, 1)


# -- reports in PostgreSQL (--reports-server) ------------------------------------------------------

#: reports-server's and PostgreSQL's processes (--reports-server), by name: in every phase's CPU beside the control
#: plane's parts (PostgreSQL's backends are found anew at each reading; one that ended in between loses its CPU).
STORE_PARTS: dict[str, Callable[[], list[int]]] = {}


def reports_server_binary() -> Path:
    """reports-server, built once per machine by tests/reportsserver/build (minutes the first time)."""
    build = reports_server.BUILD
    proc = subprocess.run([str(build)], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{build.relative_to(REPO)} failed:\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def start_reports_store(kube: Any, binary: Path, work: Path, stack: ExitStack
                        ) -> tuple[reports_server.PostgreSQL, reports_server.ReportsServer]:
    """PostgreSQL and reports-server in front of it, serving wgpolicyk8s.io from here on (vpol's report CRDs are
    installed already); stopped when ``stack`` closes. (PostgreSQL, ReportsServer)."""
    started = time.monotonic()
    try:
        db, server = stack.enter_context(reports_server.reports_stack(
            kube, binary, work / "reports-server", manager="vpol-bench", prefix="vpol-bench-postgres-"))
    except reports_server.Unavailable as exc:
        raise SystemExit(f"--reports-server: {exc}") from None
    pid = server.proc.pid if server.proc is not None else 0
    STORE_PARTS["reports-server"] = lambda: [pid]
    STORE_PARTS["PostgreSQL"] = db.pids
    print(f"reports-server (pid {pid}, {server.address}:{server.port}) serves wgpolicyk8s.io from "
          f"PostgreSQL (port {db.port}) after {time.monotonic() - started:.1f}s")
    return db, server


def store_rows(db: reports_server.PostgreSQL, server: reports_server.ReportsServer) -> list[list[str]]:
    """reports-server's and PostgreSQL's memory now, and the reports database's size."""
    rows = []
    if server.proc is not None:
        pid = server.proc.pid
        rows.append(["  reports-server RSS / peak",
                     f"{status_kib(pid, 'VmRSS') / 1024:.0f} / {status_kib(pid, 'VmHWM') / 1024:.0f} MiB", ""])
    pids = db.pids()
    rss = sum(status_kib(pid, "VmRSS") for pid in pids) / 1024
    # Each backend's RSS counts the shared buffers it touched again; PSS shares them out.
    rows.append(["  PostgreSQL processes: RSS summed / PSS summed",
                 f"{rss:.0f} / {sum(pss_kib(pid) for pid in pids) / 1024:.0f} MiB ({len(pids)} processes)", ""])
    try:
        size = db.database_size()
        tables = db.psql("SELECT count(*), pg_total_relation_size('policyreports') FROM policyreports")[0]
    except RuntimeError as exc:
        rows.append(["  PostgreSQL database", f"not read: {str(exc)[:200]}", ""])
        return rows
    rows.append(["  PostgreSQL database reportsdb (pg_database_size) / table policyreports (with indexes, TOAST)",
                 f"{size / 2**20:.0f} / {int(tables[1]) / 2**20:.0f} MiB ({tables[0]} rows)", ""])
    return rows


# -- main -------------------------------------------------------------------------------------

def etcd_quota(pods: int) -> int:
    """etcd's size limit for a run with ``pods`` Pods: its default (2 GiB) up to 20,000 Pods; above, 8 GiB (etcd's
    largest recommended). 100,000 Pods and their 16-result reports are ~1.3 GB live, and the report floor deletes
    and creates every report again, whose old revisions stay until the API server compacts (every 5 minutes)."""
    return 0 if pods <= 20000 else 8 << 30


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--policies", type=int, default=16, help="how many PSS policies from examples/pod-security")
    parser.add_argument("--violating-share", type=float, default=0.5, help="share of Pods with one violation")
    parser.add_argument("--threads", type=int, default=16, help="parallel requests when creating Pods")
    parser.add_argument("--apply-timeout", type=float, default=90,
                        help="phase 1 (policies applied to a running operator) is cut off after this (s); the "
                             "rest is extrapolated from its rate")
    parser.add_argument("--timeout", type=float, default=300, help="limit of the other phases (s)")
    parser.add_argument("--peer-timeout", type=float, default=3600,
                        help="limit of the kyverno phase (s): Kyverno's reports controller took 84 s for 200 Pods "
                             "with 16 policies on 2 cores")
    parser.add_argument("--quiet", type=float, default=5, help="no change for this long means a scan is over (s)")
    parser.add_argument("--settle-limit", type=float, default=30,
                        help="after every result is in and a full scan finished, wait at most this long for the "
                             "operator to go quiet (s)")
    parser.add_argument("--rescan-interval", type=float, default=0,
                        help="--scan-interval of the restarted operator, to also time one periodic full rescan "
                             "(it starts once the restart's work is done; e.g. 60); default 0: not measured")
    parser.add_argument("--phases", default="enforce,apply,add,cold,restart",
                        help="comma-separated: enforce (the policies applied to a running operator before any "
                             "Pod exists: the CPU of enforcing them), apply (policies applied to a running "
                             "operator), add (one more policy applied to a running operator whose reports exist; "
                             "needs apply), cold (fresh operator, policies present, no reports), restart (nothing "
                             "changed; after cold, which it adds when missing), kyverno (Kyverno's reports "
                             "controller started with the policies present: the same scan by Kyverno, on the same "
                             "API server; not in the default), "
                             "kyverno-restart (after kyverno: Kyverno's reports controller started again, nothing "
                             "changed)")
    parser.add_argument("--quick", action="store_true", help="--pods 1000 --namespaces 10 --rescan-interval 20 "
                                                             "--apply-timeout 60")
    parser.add_argument("--profile", metavar="DIR", help="record each phase in DIR: vpol's processes with py-spy "
                        "(speedscope files), the API server with its own profiler (Go pprof, with the top functions "
                        "as text), also while the write floor, the report floor and Kyverno's phases run")
    parser.add_argument("--kubeconfig", help="use this cluster instead of starting a local control plane")
    parser.add_argument("--kubectl", help="kubectl for --kubeconfig (default: PATH)")
    parser.add_argument("--workdir", help="state and logs (default: a temporary directory)")
    parser.add_argument("--operator-arg", action="append", default=[], help="extra `vpol run` flag (repeatable)")
    parser.add_argument("--reports-server", action="store_true",
                        help="the reports in PostgreSQL: Kyverno's reports-server (tests/reportsserver/build) in "
                             "front of a PostgreSQL of the bench's, started after vpol's install; local control "
                             "plane only")
    args = parser.parse_args()
    if args.reports_server and args.kubeconfig:
        parser.error("--reports-server starts reports-server and PostgreSQL beside the bench's own control plane: "
                     "not with --kubeconfig")
    if args.quick:
        args.pods, args.namespaces, args.rescan_interval, args.apply_timeout = 1000, 10, 20.0, 60.0
    phases = phases_to_run(args.phases)

    # The API server answers profile requests only with --profiling=true (tests/controlplane turns it off).
    # With --reports-server the API server must dial the aggregated API's endpoint (tests/reportsserver/stack.py).
    binary = reports_server_binary() if args.reports_server else None
    run = BenchRun.begin(args.workdir, "vpol-bench-scan-", args.kubeconfig, args.kubectl,
                         apiserver_args=[*(["--profiling=true"] if args.profile else []),
                                         *(reports_server.APISERVER_ARGS if args.reports_server else [])],
                         etcd_quota_bytes=etcd_quota(args.pods))
    work, cluster = run.work, run.cluster
    store = ExitStack()
    try:
        kube = cluster.kube
        install_vpol(kube)
        reports_store = start_reports_store(kube, binary, work, store) if binary is not None else None
        if args.kubeconfig:
            cleanup_workload(kube)
        files = policy_files(args.policies)
        print(f"policies: {', '.join(f.parent.name for f in files)}")
        enforce, enforce_cpu = enforce_phase(kube, work, args, files) if "enforce" in phases else ([], 0.0)
        names = create_namespaces(kube, args.namespaces)
        cpu0, bench0 = control_plane_cpu(), cpu_seconds(os.getpid())
        with apiserver_profiled(kube, args, "write-floor"):
            took = create_pods(kube, names, args.pods, args.violating_share, args.threads)
        pod_cpu = control_plane_cpu() - cpu0
        floor_cpu = Budget(took, pod_cpu, cpu_seconds(os.getpid()) - bench0, enforce=enforce_cpu)
        pods = count_pods(kube)
        print(f"created {pods} Pods in {args.namespaces} namespaces in {took:.1f}s ({pods / took:.0f}/s)")
        expected = pods * len(files)
        apply_seconds, apply_results = offline_apply(kube, files, work)
        print(f"vpol apply of the same Pods and policies: {apply_results} results in {apply_seconds:.1f}s "
              f"({apply_results / apply_seconds:.0f}/s)")
        rows: list[list[str]] = [
            ["Pods / namespaces / policies", f"{pods} / {args.namespaces} / {len(files)}", ""],
            ["write floor: the API server accepting the bench's Pods", f"{took:.1f} s ({pods / took:.0f}/s, "
             f"{args.threads} parallel requests)", ""],
            ["  CPU it took: the control plane's, the bench's client's", floor_cpu.floor_text(), ""],
            ["`vpol apply` of the same Pods and policies (offline engine)",
             f"{apply_seconds:.1f} s, {apply_results} results ({apply_results / apply_seconds:.0f}/s)", ""],
            *enforce,
        ]
        results: dict[str, Phase] = {}
        floor: ReportFloor | None = None
        peer_scan: PeerScan | None = None
        peer_restart: PeerRestart | None = None

        if "apply" in phases:
            print(f"phase apply: policies applied to a running operator; waiting for {expected} results...")
            ph, names = operator_phase(kube, work, "apply", args, expected, args.apply_timeout, apply=files)
            results["apply"] = ph
            rows += scan_rows(ph, expected, pods, "policies applied to a running operator", args.apply_timeout)
            ready = sum(1 for n in names if _ready(kube, n))
            rows.append(["  policies Ready", f"{ready}/{len(names)}", ""])
            if ph.run.wall_complete is not None:
                rows += report_rows(kube, len(files), pods)
            floor = report_floor(kube, args)
            rows.append(["report floor: the API server accepting the reports the scan wrote, created again as "
                         f"the scanner creates them ({WRITERS} parallel, vpol's write path)",
                         f"{floor.seconds:.1f} s ({floor.reports / max(0.001, floor.seconds):.0f}/s); control-plane "
                         f"CPU {floor.cpu_per_report * 1000:.1f} ms per report, "
                         f"{pod_cpu / max(1, pods) * 1000:.1f} ms per Pod"
                         + (f"; reports-server and PostgreSQL {floor.store_cpu_per_report * 1000:.1f} ms per report"
                            if STORE_PARTS else ""), ""])
            rows.append(["  apply: policies applied -> every result written, / report floor",
                         f"{ph.written / floor.seconds:.2f}" if ph.written is not None and floor.seconds else "", ""])
            rows.append(["  apply: control-plane CPU per report write (the policies' enforcement included)",
                         f"{ph.control_plane_cpu / max(1, ph.writes) * 1000:.1f} ms (report floor's creates: "
                         f"{floor.cpu_per_report * 1000:.1f} ms)", ""])
            rows += floor_cpu.phase_rows(ph, floor.seconds)
            if "add" in phases:
                rows += add_phase(kube, work, args, files, pods, floor)
            clear_reports(kube, args.namespaces)
        else:
            apply_policies(kube, files)

        if "cold" in phases:
            print("phase cold: no reports; operator started with the policies present...")
            ph, _ = operator_phase(kube, work, "cold", args, expected, args.timeout)
            results["cold"] = ph
            rows += scan_rows(ph, expected, pods, "fresh operator (policies present, no reports), from its start",
                              args.timeout)
            if floor is not None and floor.seconds and ph.written is not None:
                rows.append(["  cold: operator start -> every result written, / report floor",
                             f"{ph.written / floor.seconds:.2f}", ""])
                rows.append(["  cold: control-plane CPU per report write (the operator's start-up included)",
                             f"{ph.control_plane_cpu / max(1, ph.writes) * 1000:.1f} ms (report floor's creates: "
                             f"{floor.cpu_per_report * 1000:.1f} ms)", ""])
            rows += floor_cpu.phase_rows(ph)
            rows += report_rows(kube, len(files), pods)

        if "restart" in phases:
            print("phase restart: operator restarted, nothing changed...")
            ph, _ = operator_phase(kube, work, "restart", args, expected, args.timeout,
                                   scan_interval=args.rescan_interval or 3600, periodic=args.rescan_interval > 0)
            results["restart"] = ph
            assert ph.run.last is not None
            rows += [
                ["restart, nothing changed: operator start -> first full scan done",
                 f"{ph.first_full:.1f} s (the scan itself {ph.first_full_seconds:.1f} s)"
                 if ph.first_full is not None else "not finished", "<= 10 s"],
                ["  ... -> evaluations and writes stop", quiet_text(ph.run), ""],
                ["  report writes", f"{ph.writes:.0f}", "0"],
                ["  evaluations", f"{ph.evaluations:.0f} ({ph.evaluations / max(1, expected):.2f} per Pod x policy)",
                 ""],
            ]
            if args.rescan_interval > 0:
                rows += [
                    [f"periodic full rescan (--scan-interval {args.rescan_interval:g}), nothing changed",
                     f"{ph.periodic_seconds:.1f} s ({ph.periodic_resources:.0f} resources)"
                     if ph.periodic_seconds is not None else "not finished", "<= 10 s"],
                    ["  report writes", f"{ph.periodic_writes:.0f}", "0"],
                ]
            rows.append(["  operator / worker peak RSS", f"{ph.peaks.operator_hwm_kib / 1024:.0f} MiB / "
                         f"{ph.peaks.worker_peak_kib / 1024:.0f} MiB", "<= 150 MiB"])

        if "kyverno" in phases:
            print("phase kyverno: Kyverno's reports controller started with the policies present...")
            peer = kyverno_peer(kube, work)
            peer_scan = kyverno_phase(kube, peer, work, args, pods, len(files))
            rows += kyverno_rows(peer_scan, pods, results.get("cold"))
            if "kyverno-restart" in phases:
                print("phase kyverno-restart: Kyverno's reports controller started again, nothing changed...")
                peer_restart = kyverno_restart_phase(kube, peer, work, args)
                rows += kyverno_restart_rows(peer_restart, pods, results.get("restart"))

        if cp_memory := control_plane_memory(cluster.state_dir):
            rows += [["control plane at the end", "", ""], *cp_memory]
        if reports_store is not None:
            rows += [["reports-server and PostgreSQL at the end", "", ""], *store_rows(*reports_store)]
        print()
        print(table(rows, ["measure", "value", "target"]))
        checks = target_rows(results, pods, took, apply_results / apply_seconds)
        print()
        print(table(checks, ["target (ratios within this run)", "measured", "limit", ""]))
        print(f"\n{sum(r[3] == 'PASS' for r in checks)} of {len(checks)} targets met")
        if API_PROFILES:
            print("\n" + activity_table({"write-floor": pods, **({"report-floor": floor.reports} if floor else {}),
                                         **{name: ph.writes for name, ph in results.items()},
                                         **({"kyverno": sum(peer_scan.writes.values())} if peer_scan else {}),
                                         **({"kyverno-restart": sum(peer_restart.writes.values())}
                                            if peer_restart else {})}))
        print(run.end())
        (work / "timeline.json").write_text(json.dumps(
            {name: {"timeline": [p.__dict__ for p in ph.run.timeline], "rss": ph.peaks.samples}
             for name, ph in results.items()}))
        return 0
    finally:
        try:
            store.close()  # reports-server and PostgreSQL stopped (--reports-server)
            if args.kubeconfig:
                cleanup_workload(cluster.kube)
        finally:
            cluster.stop()


@dataclass
class PeerScan:
    """Kyverno's reports controller scanning the same Pods with the same policies (the ``kyverno`` phase)."""

    #: Seconds from its start until every bench Pod had a report with every result (None: not reached).
    complete: float | None
    #: Seconds from its start until its last report change (the watch's last event).
    quiet: float
    #: Bench Pods with a report of Kyverno's, and the results per report (count -> reports).
    reports: int
    results: Counter[int]
    #: The API server's writes of Kyverno's reports and ephemeral reports, by (verb, resource).
    writes: Counter[tuple[str, str]]
    cpu: dict[str, float]
    control_plane_cpu: float
    peak_rss_kib: int


#: What Kyverno's reports controller writes: its PolicyReports and the EphemeralReports it aggregates them from.
PEER_REPORT_RESOURCES = ("policyreports", "ephemeralreports", "clusterpolicyreports", "clusterephemeralreports")
WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION")


def report_writes(requests: Counter[tuple[str, str, str]]) -> Counter[tuple[str, str]]:
    """The writes of reports and ephemeral reports among API server request counts, by (verb, resource)."""
    out: Counter[tuple[str, str]] = Counter()
    for (verb, resource, sub), n in requests.items():
        if resource in PEER_REPORT_RESOURCES and verb in WRITE_VERBS and not sub and n > 0:
            out[(verb, resource)] += n
    return out


def peer_timed_out(peer: Any, now: float, limit: float, label: str) -> bool:
    """Whether a Kyverno phase is over its time ``limit`` (said so); an exited process is an error."""
    if not peer.running():
        raise RuntimeError(f"Kyverno's reports controller exited:\n{peer.log()}")
    if now > limit:
        print(f"  [{label}] timed out after {limit:.0f}s", flush=True)
        return True
    return False


def kyverno_peer(kube: Any, work: Path) -> Any:
    """Kyverno's reports controller (bench/kyverno/peer.py), built and installed, not started; the policies made
    scannable by it."""
    sys.path.insert(0, str(REPO))
    from bench.kyverno.peer import KyvernoReportsPeer, build

    peer = KyvernoReportsPeer(kube, work, binary=build("reports-controller"))
    peer.install()
    # Kyverno 1.19's background scan skips a ValidatingPolicy whose status says its VAP was generated, and reports
    # the generated VAP only when it is labelled for reporting, which Kyverno's own generated VAPs are not
    # (kyverno/kyverno#16153): it would report nothing about these policies. For this phase (no vpol operator
    # runs) their status says not generated, so that Kyverno scans them with its ValidatingPolicy engine.
    custom: Any = client.CustomObjectsApi(kube.api_client)
    for item in custom.list_cluster_custom_object(POLICY_GROUP, POLICY_VERSION, POLICY_PLURAL)["items"]:
        if (item.get("status") or {}).get("generated"):
            custom.patch_cluster_custom_object_status(POLICY_GROUP, POLICY_VERSION, POLICY_PLURAL,
                                                      item["metadata"]["name"], {"status": {"generated": False}})
    return peer


@dataclass
class PeerWindow:
    """What the kyverno phases measure from the peer's start: the API server's requests (read before the start and
    at the end), its profile (--profile), the peer's CPU and the control plane's."""

    kube: Any
    label: str
    requests0: Counter[tuple[str, str, str]]
    profile: ApiServerProfile | None
    meter: CpuMeter
    control_plane_cpu0: float
    t0: float

    @classmethod
    def start(cls, kube: Any, args: argparse.Namespace, peer: Any, label: str) -> "PeerWindow":
        """Reads the request counts, starts the profile and the meters, then the peer."""
        requests0 = apiserver_requests(kube.api_client)
        profile = apiserver_profile(kube, args, label)
        started: list[int] = []
        meter = process_meter({"Kyverno's reports controller": lambda: started})
        meter.start()
        window = cls(kube, label, requests0, profile, meter, control_plane_cpu(), time.monotonic())
        peer.start()
        started.append(peer.pid)
        return window

    def stop_profile(self) -> None:
        end_profile(self.profile, self.label)
        self.profile = None

    def requests(self) -> Counter[tuple[str, str, str]]:
        """The API server's requests since the start; the profile ends first (rendering the metrics is not the
        phase's work)."""
        self.stop_profile()
        requests = apiserver_requests(self.kube.api_client)
        requests.subtract(self.requests0)
        return requests


def kyverno_phase(kube: Any, peer: Any, work: Path, args: argparse.Namespace, pods: int, policies: int) -> PeerScan:
    """Kyverno's reports controller (``peer``: kyverno_peer) started with the policies and Pods in place and no
    report of its own, as the cold phase starts vpol's operator; no vpol operator runs meanwhile. Followed
    through a watch of its PolicyReports until every bench Pod has one with ``policies`` results and nothing
    changed for --quiet seconds."""
    from vpol.kube.dynamic import Watcher

    counts: dict[str, int] = {}
    #: Reports with every result (names).
    full: set[str] = set()
    last_event = [time.monotonic()]
    #: When the event that gave the last bench Pod every result arrived.
    completed: list[float] = []
    lock = threading.Lock()

    def on_event(kind: str, obj: dict[str, Any]) -> None:
        md = obj.get("metadata") or {}
        if (not str(md.get("namespace", "")).startswith(NS_PREFIX)
                or (md.get("labels") or {}).get("app.kubernetes.io/managed-by") != "kyverno"):
            return
        name = str(md.get("name"))
        with lock:
            if kind == "DELETED":
                counts.pop(name, None)
            elif kind in ("ADDED", "MODIFIED"):
                counts[name] = len(obj.get("results") or [])
            if counts.get(name, 0) >= policies:
                full.add(name)
            else:
                full.discard(name)
            last_event[0] = time.monotonic()
            if not completed and len(full) >= pods:
                completed.append(last_event[0])

    # vpol's reports come once, in the watch's first list (no vpol operator runs in this phase).
    watcher = Watcher(kube.api_client, *REPORTS, on_event, kind="PolicyReport")
    watcher.start()
    watcher.synced.wait(60)
    window = PeerWindow.start(kube, args, peer, "kyverno")
    t0 = window.t0
    sampler = MemorySampler(peer.pid)
    sampler.start()
    next_print = 0.0
    try:
        while True:
            now = time.monotonic() - t0
            with lock:
                done = len(full)
                quiet_for = time.monotonic() - last_event[0]
                complete = completed[0] - t0 if completed else None
            if now >= next_print:
                print(f"  [kyverno] t={now:6.1f}s Pods with every result in Kyverno's reports {done}/{pods}",
                      flush=True)
                next_print = now + 15
            if complete is not None and quiet_for >= args.quiet:
                break
            if peer_timed_out(peer, now, args.peer_timeout, "kyverno"):
                break
            time.sleep(0.5)
        cpu = window.meter.since_start()
        plane_cpu = control_plane_cpu() - window.control_plane_cpu0
        requests = window.requests()
        peaks = sampler.stop()
    finally:
        window.stop_profile()
        sampler.stop()
        watcher.stop()
        peer.stop()
    with lock:
        quiet_at = last_event[0] - t0
        results = Counter(counts.values())
        reports = len(counts)
    writes = report_writes(requests)
    (work / "requests-kyverno.txt").write_text(requests_text("kyverno", plane_cpu, cpu, +requests))
    return PeerScan(complete, quiet_at, reports, results, writes, cpu, plane_cpu, peaks.operator_hwm_kib)


@dataclass
class PeerRestart:
    """Kyverno's reports controller started again with its reports in place and nothing changed."""

    #: Seconds from its start to its last change of a report or ephemeral report (None: it changed none).
    last_write: float | None
    #: Seconds it was followed.
    followed: float
    writes: Counter[tuple[str, str]]
    cpu: dict[str, float]


#: The kyverno-restart phase ends this long after the controller's last change to a report (its scan's writes come
#: in bursts a few seconds apart), or after PEER_IDLE_LIMIT seconds without any.
PEER_QUIET = 20.0
PEER_IDLE_LIMIT = 180.0


def kyverno_restart_phase(kube: Any, peer: Any, work: Path, args: argparse.Namespace) -> PeerRestart:
    """Kyverno's reports controller (``peer``, stopped after the kyverno phase) started again, nothing changed:
    followed through watches of its EphemeralReports and PolicyReports (changes only) until neither changed for
    PEER_QUIET s; its writes counted from the API server's requests over the phase."""
    from vpol.kube.dynamic import Watcher

    peer.log_path = work / "kyverno-reports-restart.log"
    last_change: list[float] = []

    def on_report(kind: str, obj: dict[str, Any]) -> None:
        if kind in ("ADDED", "MODIFIED", "DELETED") and \
                ((obj.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/managed-by") == "kyverno":
            last_change.append(time.monotonic())

    def on_ephemeral(kind: str, _obj: dict[str, Any]) -> None:  # only Kyverno writes them
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            last_change.append(time.monotonic())

    # Reading the API server's request counts while it runs cost this process ~0.35 s of CPU a read (its
    # /metrics is large): read once before and once after; the watches follow it at the cost of its changes.
    watchers = [Watcher(kube.api_client, *REPORTS, on_report, kind="PolicyReport", emit_initial=False),
                Watcher(kube.api_client, "reports.kyverno.io", "v1", "ephemeralreports", on_ephemeral,
                        kind="EphemeralReport", emit_initial=False)]
    for w in watchers:
        w.start()
    for w in watchers:
        w.synced.wait(60)
    window = PeerWindow.start(kube, args, peer, "kyverno-restart")
    t0 = window.t0
    next_print = 0.0
    try:
        while True:
            time.sleep(0.5)
            now = time.monotonic() - t0
            changes = len(last_change)
            last = last_change[-1] - t0 if last_change else None
            if now >= next_print:
                print(f"  [kyverno-restart] t={now:6.1f}s changes to its reports and ephemeral reports {changes}",
                      flush=True)
                next_print = now + 15
            if last is not None and now - last >= PEER_QUIET:
                break
            if last is None and now >= PEER_IDLE_LIMIT:
                break
            if peer_timed_out(peer, now, args.peer_timeout, "kyverno-restart"):
                break
        followed = time.monotonic() - t0
        cpu = window.meter.since_start()
    finally:
        window.stop_profile()
        peer.stop()
        for w in watchers:
            w.stop()
    requests = window.requests()
    return PeerRestart(last_change[-1] - t0 if last_change else None, followed, report_writes(requests), cpu)


def writes_text(writes: Counter[tuple[str, str]], pods: int) -> str:
    """Writes by (verb, resource): their total, per Pod, and each (most first)."""
    total = sum(writes.values())
    each = ", ".join(f"{n} {verb} {res}" for (verb, res), n in writes.most_common())
    return f"{total} ({total / max(1, pods):.2f} per Pod)" + (f": {each}" if each else "")


def kyverno_restart_rows(peer: PeerRestart, pods: int, restart: "Phase | None") -> list[list[str]]:
    rows = [
        ["Kyverno's reports controller started again, nothing changed -> its last report write",
         f"{peer.last_write:.1f} s" if peer.last_write is not None else f"no write in {peer.followed:.0f} s", ""],
        ["  its writes of reports and ephemeral reports", writes_text(peer.writes, pods), ""],
        ["  CPU by process over it", cpu_text(peer.cpu), ""],
    ]
    if restart is not None and restart.first_full is not None:
        rows.append(["  vpol's restart, nothing changed: first full scan, report writes",
                     f"{restart.first_full:.1f} s, {restart.writes:.0f}", ""])
    return rows


def kyverno_rows(peer: PeerScan, pods: int, cold: "Phase | None") -> list[list[str]]:
    """The kyverno phase's rows, with vpol's cold phase (the same start: policies and Pods present, no report)
    beside it."""
    rows = [
        ["Kyverno's reports controller (v1.19.1; the Helm chart's scan settings), started with the policies "
         "present and no report of its own -> every Pod's results in its reports",
         f"{peer.complete:.1f} s" if peer.complete is not None else "not reached", ""],
        ["  ... -> its reports stop changing", f"{peer.quiet:.1f} s", ""],
        ["  its reports about the bench's Pods, by results in each",
         f"{peer.reports}: " + ", ".join(f"{n} results: {c}" for n, c in sorted(peer.results.items())), ""],
        ["  writes of reports and ephemeral reports (API server requests)", writes_text(peer.writes, pods), ""],
        ["  CPU by process until it went quiet", cpu_text(peer.cpu), ""],
        ["  its peak RSS (VmHWM)", f"{peer.peak_rss_kib / 1024:.0f} MiB", ""],
    ]
    if cold is not None and cold.written is not None and peer.complete:
        rows.append(["  vpol's cold phase (operator start -> every result written) / Kyverno's",
                     f"{cold.written / peer.complete:.2f} ({cold.written:.1f} s / {peer.complete:.1f} s)", ""])
    return rows


def enforce_phase(kube: Any, work: Path, args: argparse.Namespace, files: list[Path]
                  ) -> tuple[list[list[str]], float]:
    """The policies applied to a running operator while no Pod exists: what enforcing them costs, apart from any
    scan (the apply phase pays it too, on the same cores as its report writes). Rows, and the CPU seconds every
    process used until every policy was Ready (0 when that was not reached)."""
    print("phase enforce: the policies applied to a running operator, no Pods yet...")
    op = start_operator(kube, work, ["--scan-interval", "3600", *args.operator_arg], log_name="operator-enforce.log")
    assert op.proc is not None
    admission = client.AdmissionregistrationV1Api(kube.api_client)
    names: list[str] = []
    vaps: set[str] = set()
    try:
        wait_started(op)
        vaps0 = _vap_names(admission)
        pid = op.proc.pid
        meter = phase_meter(lambda: [pid])
        meter.start()
        t0 = time.monotonic()
        names = apply_policies(kube, files)
        ready = wait_until(lambda: all(_ready(kube, n) for n in names), 120, 0.5)
        took = time.monotonic() - t0
        used = meter.since_start()
        time.sleep(5)  # what follows Ready (type-checking statuses, the scanner's worker) is counted here
        settled = meter.since_start()
        vaps = _vap_names(admission) - vaps0
    finally:
        op.stop()
    custom: Any = client.CustomObjectsApi(kube.api_client)
    for name in names:
        custom.delete_cluster_custom_object(POLICY_GROUP, POLICY_VERSION, POLICY_PLURAL, name)
    # The garbage collector removes their VAPs and bindings; the Pods' write floor is measured after that. A
    # report its scan wrote (about vpol's own Deployment, which the policies match through autogen) goes too.
    if not wait_until(lambda: not vaps & _vap_names(admission), 120, 0.5):
        print(f"  [enforce] generated ValidatingAdmissionPolicies left 120 s after their policies were deleted: "
              f"{sorted(vaps & _vap_names(admission))}")
    clear_reports(kube, args.namespaces)

    return [
        [f"enforce: {len(names)} policies applied to a running operator, no Pods -> every policy Ready",
         f"{took:.1f} s ({len(vaps)} ValidatingAdmissionPolicies generated)" if ready else "not reached", ""],
        ["  CPU until then (s)", cpu_text(used), ""],
        ["  CPU until 5 s later (s)", cpu_text(settled), ""],
    ], sum(used.values()) if ready else 0.0


def add_phase(kube: Any, work: Path, args: argparse.Namespace, files: list[Path], pods: int,
              floor: ReportFloor) -> list[list[str]]:
    """One more policy applied to a running operator whose reports all exist (those of the report floor): every
    report gains a result, so the scan updates each once. Timed and costed against the report floor's creates."""
    doc = yaml.safe_load(files[0].read_text())
    doc["metadata"]["name"] = f"{doc['metadata']['name']}-again"
    extra = work / "add-policy.yaml"
    extra.write_text(yaml.safe_dump(doc))
    expected = pods * (len(files) + 1)
    print(f"phase add: one more policy ({doc['metadata']['name']}) applied to a running operator whose reports "
          f"exist; waiting for {expected} results...")
    ph, _ = operator_phase(kube, work, "add", args, expected, args.timeout, apply=[extra])
    client.CustomObjectsApi(kube.api_client).delete_cluster_custom_object(
        POLICY_GROUP, POLICY_VERSION, POLICY_PLURAL, doc["metadata"]["name"])
    written = ph.written
    return [
        ["add: one more policy applied to a running operator whose reports exist -> every report updated",
         f"{written:.1f} s" if written is not None else "not reached", ""],
        ["  report writes (vpol_report_writes_total)",
         f"{ph.writes:.0f} ({ph.writes_per_resource(pods):.2f} per Pod reported)", "1 per Pod"],
        ["  control-plane CPU per report write (while the policy's scan ran, its enforcement included)",
         f"{ph.control_plane_cpu / max(1, ph.writes) * 1000:.1f} ms (report floor's creates: "
         f"{floor.cpu_per_report * 1000:.1f} ms)", ""],
        ["  add: policy applied -> every report updated, / report floor",
         f"{written / floor.seconds:.2f}" if written is not None and floor.seconds else "", ""],
    ]


def phases_to_run(asked: str) -> list[str]:
    """The phases of ``--phases`` (comma-separated), with the cold phase added before a restart asked for without
    it: a restart "with nothing changed" needs every Pod's report written by vpol for the policies in place, and
    only the cold phase leaves them (the apply and add phases' reports are deleted after the report floor and the
    added policy, so a restart after them alone would time a cold scan)."""
    phases = [p.strip() for p in asked.split(",") if p.strip()]
    if "restart" in phases and "cold" not in phases:
        print("the restart phase needs the reports of the cold phase: it runs first")
        phases.insert(phases.index("restart"), "cold")
    return phases


def target_rows(results: dict[str, Phase], pods: int, floor: float, apply_rate: float) -> list[list[str]]:
    """The issue's targets as ratios measured in this run, each PASS or FAIL."""
    rows: list[list[str]] = []

    def check(what: str, value: float | None, limit: float, text: str, ok: bool) -> None:
        rows.append([what, text if value is not None else "not reached", limit_text(limit, what),
                     "PASS" if value is not None and ok else "FAIL"])

    def limit_text(limit: float, what: str) -> str:
        return f"= {limit:.2f}" if "writes per Pod" in what else (f">= {limit:g}" if "evaluations" in what
                                                                    else f"<= {limit:g}")

    for name, scan_limit in (("apply", 1.2), ("cold", 1.5)):
        ph = results.get(name)
        if ph is None:
            continue
        # Per resource reported, so that vpol's own Deployment (which the Pod policies match) does not count as
        # a second write at a small scale.
        per_pod = ph.writes_per_resource(pods)
        check(f"{name}: report writes per Pod", per_pod, 1.0, f"{per_pod:.2f}", round(per_pod, 2) == 1.0)
        written = ph.written
        ratio = written / floor if written is not None else None
        since = "policies applied" if name == "apply" else "operator start"
        check(f"{name}: {since} -> every result written, / write floor", ratio, scan_limit,
              f"{ratio:.2f} ({written:.1f} s / {floor:.1f} s)" if ratio is not None else "", (ratio or 0) <= scan_limit)
        rate = ph.evaluations / ph.eval_seconds if ph.eval_seconds > 0 else None
        check(f"{name}: evaluations per second of evaluation time, / `vpol apply`'s",
              rate, 0.5, f"{(rate or 0) / apply_rate:.2f} ({rate or 0:.0f}/s / {apply_rate:.0f}/s)",
              (rate or 0) / apply_rate >= 0.5)
    ph = results.get("restart")
    if ph is not None:
        ratio = ph.first_full / floor if ph.first_full is not None else None
        check("restart, nothing changed: operator start -> first full scan, / write floor", ratio, 0.2,
              f"{ratio:.2f} ({ph.first_full:.1f} s / {floor:.1f} s)" if ratio is not None else "",
              (ratio or 1) <= 0.2)
        check("restart, nothing changed: report writes", ph.writes, 0, f"{ph.writes:.0f}", ph.writes == 0)
    for name, ph in results.items():
        mib = ph.peaks.operator_hwm_kib / 1024
        check(f"{name}: operator peak RSS (MiB; the target is stated at 10,000 Pods)", mib, 150, f"{mib:.0f}",
              mib <= 150)
    return rows


def scan_rows(ph: Phase, expected: int, pods: int, what: str, timeout: float) -> list[list[str]]:
    run = ph.run
    assert run.last is not None
    present = run.last.results_present
    if run.wall_complete is not None:
        done = f"{run.wall_complete:.1f} s"
        end = run.wall_complete
    else:
        rate = present / max(0.001, run.last.t)
        done = (f"not reached: {present:.0f}/{expected} results after {run.last.t:.0f} s "
                f"(at {rate:.0f} results/s, ~{expected / max(rate, 0.001):.0f} s projected)")
        end = run.last.t
    return [
        [f"full scan, {what} -> every result in reports", done, ""],
        ["  ... -> evaluations and writes stop", quiet_text(run) if run.wall_complete is not None else "", ""],
        ["  evaluations (vpol_policy_results_total)",
         f"{ph.evaluations:.0f} ({ph.evaluations / max(1, expected):.2f} per Pod x policy), "
         f"{ph.evaluations / max(0.001, end):.0f}/s", ""],
        ["  report writes (vpol_report_writes_total)",
         f"{ph.writes:.0f} ({ph.writes_per_resource(pods):.2f} per Pod reported)",
         "1 per Pod"],
        ["  operator peak RSS (VmHWM)", f"{ph.peaks.operator_hwm_kib / 1024:.0f} MiB", "<= 150 MiB"],
        ["  evaluation worker peak RSS (separate process)",
         f"{ph.peaks.worker_peak_kib / 1024:.0f} MiB ({ph.peaks.workers_started} worker process(es) started)",
         ""],
    ]


def quiet_text(run: ScanRun) -> str:
    assert run.last is not None
    if run.quiet_reached:
        return f"{run.wall_quiet:.1f} s"
    return f"still evaluating at {run.last.t:.0f} s (last change {run.wall_quiet:.1f} s)"


def report_rows(kube: Any, policies: int, pods: int) -> list[list[str]]:
    r = check_reports(kube, policies)
    return [["  reports read back: Pod reports / with every result",
             f"{r['pod reports']} / {r['complete']} (fail {r['fail results']}, pass {r['pass results']}, "
             f"other {r['other results']})", f"{pods} / {pods}"]]


def clear_reports(kube: Any, namespaces: int) -> None:
    """Every PolicyReport goes, also those of objects outside the bench's namespaces (vpol's own Deployment,
    which the Pod policies match through autogen), so the next phase starts with none."""
    custom: Any = client.CustomObjectsApi(kube.api_client)
    per_namespace = Counter(str(r["metadata"].get("namespace", "")) for r in policy_reports(kube))
    spaces = sorted({f"{NS_PREFIX}{i:02d}" for i in range(namespaces)} | set(per_namespace))

    def clear(ns: str) -> None:
        # The API server deletes a collection's items one by one, within its 60 s request timeout: 1,000 reports
        # in each of 100 namespaces (100,000 Pods) do not fit, and it answers 504 having deleted some, or (its
        # memory at its limit) cuts the answer short. Asked again until one call finishes.
        for attempt in range(30):
            try:
                custom.delete_collection_namespaced_custom_object(*REPORTS[:2], ns, REPORTS[2])
                return
            except (ApiException, urllib3.exceptions.HTTPError) as exc:
                if getattr(exc, "status", 504) not in (500, 504) or attempt == 29:
                    raise

    # One deletecollection per namespace, several at once.
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(clear, spaces))
    wait_until(lambda: next(policy_reports(kube), None) is None, max(300.0, sum(per_namespace.values()) / 50), 1)


@dataclass
class Budget:
    """What the cores allow. On a host whose cores are all busy (the bench's 2-core machine), a phase cannot take
    less wall time than the CPU it used over the cores: its ratio to the write floor is bounded below by that, and
    by the control plane's CPU alone (the ratio the phase would reach if vpol's processes cost nothing). The
    control plane's share is the API server's work on the requests the phase made (the report writes; after
    applying policies, their native enforcement: the VAPs and bindings written, compiled, and type-checked by the
    controller manager) and is not vpol's CPU."""

    floor_seconds: float
    control_plane: float
    client: float
    #: CPU seconds of enforcing the policies with no Pods (the enforce phase; 0 when it did not run).
    enforce: float = 0.0
    cores: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))

    def floor_text(self) -> str:
        if not self.control_plane:
            return f"the bench's client {self.client:.1f} s (the control plane's is not measurable here)"
        used = self.control_plane + self.client
        return (f"{self.control_plane:.1f} s + {self.client:.1f} s = {used:.1f} s of CPU, "
                f"{used / max(0.001, self.cores * self.floor_seconds):.0%} of {self.cores} cores over it")

    def phase_rows(self, ph: "Phase", report_floor: float = 0.0) -> list[list[str]]:
        """The phase's CPU from t0 until every result was written (the time the ratio is of), over the cores;
        ``report_floor``: the report floor's seconds in this run (0: not measured)."""
        used = ph.cpu_until_written
        if not self.floor_seconds or not used:
            return []
        spread = self.cores * self.floor_seconds
        plane = sum(seconds for name, seconds in used.items() if name in CONTROL_PLANE_PARTS or name in STORE_PARTS)
        rows = [[f"  {ph.name}: CPU of every process until every result was written, / ({self.cores} cores x write "
                 "floor): the lowest ratio this CPU allows", f"{sum(used.values()) / spread:.2f} ({cpu_text(used)})",
                 ""]]
        if plane:  # 0 with --kubeconfig: another cluster's control plane is not measurable from here
            rows.append([f"  {ph.name}: the same of the control plane's CPU alone"
                         f"{' (reports-server and PostgreSQL included)' if STORE_PARTS else ''}: the lowest ratio "
                         "if vpol's processes cost nothing", f"{plane / spread:.2f}", ""])
        if self.enforce and report_floor and ph.name == "apply" and ph.written is not None:
            # Not a target: the apply phase's time against the time its work takes the API server alone, the
            # reports (the report floor) and the policies' enforcement (the enforce phase's CPU over the cores).
            floor = report_floor + self.enforce / self.cores
            rows.append(["  apply: policies applied -> every result written, / (report floor + the enforce "
                         "phase's CPU / cores)", f"{ph.written / floor:.2f} ({ph.written:.1f} s / {floor:.1f} s)",
                         ""])
        return rows


@dataclass
class ReportFloor:
    """The API server's own speed at the scan's writes, measured in this run."""
    reports: int = 0
    seconds: float = 0.0
    cpu_per_report: float = 0.0  # control-plane CPU seconds per report
    store_cpu_per_report: float = 0.0  # reports-server's and PostgreSQL's CPU seconds per report (--reports-server)


def report_floor(kube: Any, args: argparse.Namespace, threads: int = WRITERS) -> ReportFloor:
    """The reports the apply phase wrote, read back, deleted and created again the way the scanner creates them
    (vpol's write path, ``threads`` parallel creates): how fast this API server accepts exactly this work."""
    reports = []
    for r in policy_reports(kube):
        md = r["metadata"]
        r["metadata"] = {k: md[k] for k in ("name", "namespace", "labels", "annotations", "ownerReferences")
                         if k in md}
        reports.append(r)
    clear_reports(kube, args.namespaces)
    api = pooled_client(kube, threads)
    writer = Reports(api)
    with apiserver_profiled(kube, args, "report-floor"):
        store = process_meter({})
        store.start()
        cpu0, started = control_plane_cpu(), time.monotonic()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(writer.create, reports))
        took = time.monotonic() - started
        cpu = control_plane_cpu() - cpu0
        store_cpu = sum(seconds for name, seconds in store.since_start().items() if name in STORE_PARTS)
    api.close()
    return ReportFloor(len(reports), took, cpu / max(1, len(reports)), store_cpu / max(1, len(reports)))


def _vap_names(admission: Any) -> set[str]:
    """The ValidatingAdmissionPolicies generated from a policy (owned by one). Not the operator's enforcement probe
    (vpol.desired.probe), which it writes when its first policy arrives and which outlives every policy: counted
    among the generated ones, it was waited for after the policies were deleted until the wait's 120 s ran out."""
    return {v.metadata.name for v in admission.list_validating_admission_policy().items
            if v.metadata and any(ref.api_version.startswith(f"{POLICY_GROUP}/")
                                  for ref in v.metadata.owner_references or ())}


def _ready(kube: Any, name: str) -> bool:
    obj: Any = client.CustomObjectsApi(kube.api_client).get_cluster_custom_object(
        POLICY_GROUP, POLICY_VERSION, POLICY_PLURAL, name)
    return bool(((obj.get("status") or {}).get("conditionStatus") or {}).get("ready"))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark (not a test): a scheduled DeletingPolicy run over --pods Pods, half of them matching.

On a local control plane (or --kubeconfig; no scheduler runs on the local one: the Pods stay Pending, which is
all a deletion needs), the operator running as in the e2e tests with --deletions-per-second raised far above what it
reaches (its rate limit is not what is measured) and allowed to delete Pods (a ClusterRole aggregated into
vpol-delete). A DeletingPolicy on every Pod, schedule ``*/10 * * * * * *`` (Kyverno's seven-field dialect: every
10 seconds, seconds first), with one condition on a label that half of the Pods carry. Measured:

1. floor: the time the same API server takes to delete as many Pods (the matching half, created beforehand in other
   namespaces) from a bare client: vpol's own request helper (vpol.kube.dynamic.delete_object, each delete guarded
   by the Pod's uid as the operator's are), --writer-threads connections (1 by default: the operator deletes on one
   thread, its scanner's) and no rate limit;
2. the run: from the scheduled time (the first 10-second mark after the policy's creationTimestamp) to the last
   matching Pod deleted (a watch of the Pods) and to the operator's log line ``deleting policy <name>: N deleted, K
   kept, E errors``, against the floor (target <= 1.5x); its deletions (the API server's DELETE pods, the
   operator's vpol_deleted_objects_total; target: exactly the matching half) and what is left;
3. the next run, 10 seconds later, nothing left to delete: its duration (listing and evaluating the kept half);
4. the operator's peak RSS, and the CPU of the operator and of the control plane over the run.

Usage: python3 bench/delete.py [--pods 10000] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BenchRun,
    MemorySampler,
    apiserver_requests,
    cluster_arguments,
    control_plane_cpu,
    cpu_seconds,
    install_vpol,
    metric_sum,
    pooled_client,
    print_results,
    scrape,
    start_operator,
    wait_until,
)
from kubernetes.client.rest import ApiException  # noqa: E402

from vpol.kube.dynamic import (  # noqa: E402
    METADATA_ANSWER,
    Watcher,
    collection_path,
    create_object,
    delete_object,
    encoded,
    get_object,
    send_encoded,
)

GROUP = "policies.kyverno.io"
POLICY = "bench-delete-expired"
EXPIRE = "bench.vpol/expire"
NS_PREFIX = "bench-del-"
FLOOR_PREFIX = "bench-del-floor-"
SCHEDULE = "*/10 * * * * * *"
PERIOD = 10
DELETE_ROLE: dict[str, Any] = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "vpol-bench-delete-pods", "labels": {"vpol.kyverno.io/aggregate-to-delete": "true"}},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]}]}
#: The operator's line at the end of a run (vpol.controller.deletion.Deletion.run), with its logging time.
RUN_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO vpol\.controller\.deletion: deleting policy "
                      + re.escape(POLICY) + r": (\d+) deleted, (\d+) kept, (\d+) errors", re.M)


def policy() -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "DeletingPolicy", "metadata": {"name": POLICY},
            "spec": {"schedule": SCHEDULE,
                     "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["*"], "resources": ["pods"]}]},
                     "conditions": [{"name": "expired",
                                     "expression": f'object.metadata.?labels[?"{EXPIRE}"].orValue("") == "true"'}]}}


def pod(name: str, expired: bool) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "bench", EXPIRE: "true" if expired else "false"}},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0"}],
                     "automountServiceAccountToken": False}}


def namespaces(kube: Any, names: list[str]) -> None:
    """Create them, and wait for each one's default ServiceAccount (the ServiceAccount admission plugin refuses Pods
    until it exists)."""
    for name in names:
        try:
            create_object(kube.api_client, "", "v1", "namespaces", "", {"metadata": {"name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise
    wait_until(lambda: all(get_object(kube.api_client, "", "v1", "serviceaccounts", n, "default") for n in names),
               120, 0.5)


def create_pods(kube: Any, names: list[str], count: int, threads: int, expired: Any) -> tuple[float, dict[str, tuple[str, str]]]:
    """``count`` Pods spread over the namespaces ``names`` (``expired(i)``: whether Pod i carries the label), by
    ``threads`` clients; (seconds, name -> (namespace, uid) of the expired ones)."""
    api = pooled_client(kube, threads)
    uids: dict[str, tuple[str, str]] = {}
    lock = threading.Lock()

    def create(i: int) -> None:
        ns, name = names[i % len(names)], f"pod-{i:05d}"
        for attempt in range(5):
            try:
                answer = json.loads(send_encoded(api, "POST", collection_path("", "v1", "pods", ns),
                                                 encoded(pod(name, expired(i))), content_type="application/json",
                                                 accept=METADATA_ANSWER))
                if expired(i):
                    with lock:
                        uids[f"{ns}/{name}"] = (ns, answer["metadata"]["uid"])
                return
            except ApiException as exc:
                if exc.status in (429, 500, 503, 504) and attempt < 4:
                    time.sleep(0.5 * (attempt + 1))
                    continue
                raise

    t = time.monotonic()
    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(create, range(count)))
    finally:
        api.close()
    return time.monotonic() - t, uids


def delete_floor(kube: Any, pods: dict[str, tuple[str, str]], threads: int) -> float:
    """The bare client: every Pod of ``pods`` deleted (uid precondition), ``threads`` connections; the seconds."""
    api = pooled_client(kube, threads)
    t = time.monotonic()
    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda item: delete_object(api, "", "v1", "pods", item[1][0], item[0].split("/", 1)[1],
                                                     uid=item[1][1]), pods.items()))
    finally:
        api.close()
    return time.monotonic() - t


class PodDeletions:
    """A watch of the Pods: when each bench Pod was seen deleted (monotonic and wall clock)."""

    def __init__(self, kube: Any):
        self.lock = threading.Lock()
        self.deleted: list[tuple[float, float, bool]] = []  # (monotonic, wall, expired)
        self.watcher = Watcher(kube.api_client, "", "v1", "pods", self._event, kind="Pod", emit_initial=False)
        self.watcher.start()
        self.watcher.synced.wait(60)

    def _event(self, etype: str, obj: dict[str, Any]) -> None:
        md = obj.get("metadata") or {}
        if etype != "DELETED" or not str(md.get("namespace", "")).startswith(NS_PREFIX) or \
                str(md.get("namespace", "")).startswith(FLOOR_PREFIX):
            return
        with self.lock:
            self.deleted.append((time.monotonic(), time.time(), (md.get("labels") or {}).get(EXPIRE) == "true"))

    def snapshot(self) -> list[tuple[float, float, bool]]:
        with self.lock:
            return list(self.deleted)

    def stop(self) -> None:
        self.watcher.stop()


def runs(op: Any) -> float:
    return metric_sum(scrape(op, ["vpol_deleting_policy_runs_total"]), "vpol_deleting_policy_runs_total",
                      policy=POLICY)


def run_lines(op: Any) -> list[tuple[float, int, int, int]]:
    """The operator's end-of-run lines: (wall time, deleted, kept, errors)."""
    text = op.log_path.read_text(errors="replace")
    out = []
    for m in RUN_LINE.finditer(text):
        # The operator logs local time with milliseconds (logging's asctime).
        at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        out.append((at, int(m.group(2)), int(m.group(3)), int(m.group(4))))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="--pods 2000")
    parser.add_argument("--namespaces", type=int, default=10, help="namespaces the Pods are spread over")
    parser.add_argument("--threads", type=int, default=8, help="clients creating the Pods")
    parser.add_argument("--writer-threads", type=int, default=1,
                        help="the bare client's connections (the operator deletes on one thread)")
    parser.add_argument("--deletions-per-second", type=float, default=100_000,
                        help="the operator's --deletions-per-second (high: not the limit measured)")
    parser.add_argument("--timeout", type=float, default=1800)
    cluster_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.pods = 2000
    matching = (args.pods + 1) // 2
    run = BenchRun.begin(args.workdir, "vpol-bench-delete-", args.kubeconfig, args.kubectl)
    op = sampler = watch = None
    try:
        kube = run.cluster.kube
        install_vpol(kube)
        kube.kubectl("apply", "--server-side", "--field-manager=vpol-bench", "-f", "-", input=json.dumps(DELETE_ROLE))
        floor_ns = [f"{FLOOR_PREFIX}{i:02d}" for i in range(args.namespaces)]
        bench_ns = [f"{NS_PREFIX}{i:02d}" for i in range(args.namespaces)]
        namespaces(kube, floor_ns + bench_ns)

        # 1. the floor
        created, floor_pods = create_pods(kube, floor_ns, matching, args.threads, lambda i: True)
        print(f"created {matching} Pods to delete in {created:.1f}s ({args.threads} clients)", flush=True)
        time.sleep(2)
        before = apiserver_requests(kube.api_client)
        plane0 = control_plane_cpu()
        floor = delete_floor(kube, floor_pods, args.writer_threads)
        floor_plane = control_plane_cpu() - plane0
        floor_deletes = apiserver_requests(kube.api_client)[("DELETE", "pods", "")] - before[("DELETE", "pods", "")]
        print(f"bare client: {floor_deletes} Pods deleted in {floor:.1f}s ({args.writer_threads} connection(s))",
              flush=True)

        # 2. the workload, the operator, the policy
        created, expired_pods = create_pods(kube, bench_ns, args.pods, args.threads, lambda i: i % 2 == 0)
        print(f"created {args.pods} Pods ({len(expired_pods)} labelled {EXPIRE}=true) in {created:.1f}s "
              f"({args.threads} clients)", flush=True)
        watch = PodDeletions(kube)
        op = start_operator(kube, run.work, ["--deletions-per-second", str(args.deletions_per_second),
                                             *args.operator_arg])
        assert op.proc is not None
        sampler = MemorySampler(op.proc.pid)
        sampler.start()
        time.sleep(2)
        before = apiserver_requests(kube.api_client)
        op_cpu0, plane0 = cpu_seconds(op.proc.pid), control_plane_cpu()
        answer = create_object(kube.api_client, GROUP, "v1", "deletingpolicies", "", policy())
        created_at = datetime.datetime.fromisoformat(answer["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        due = (int(created_at.timestamp()) // PERIOD + 1) * PERIOD
        print(f"policy created; its first run is due at {datetime.datetime.fromtimestamp(due, datetime.timezone.utc):%H:%M:%S} UTC",
              flush=True)
        t0 = time.monotonic()
        next_print = 0.0
        while not run_lines(op):
            now = time.monotonic() - t0
            if now >= next_print:
                print(f"  t={now:6.1f}s Pods deleted {sum(1 for d in watch.snapshot() if d[2])}/{matching}",
                      flush=True)
                next_print = now + 10
            if now > args.timeout or op.proc.poll() is not None:
                raise SystemExit(f"no run within {args.timeout:.0f}s:\n{op.log()}")
            time.sleep(0.2)
        op_cpu, plane_cpu = cpu_seconds(op.proc.pid) - op_cpu0, control_plane_cpu() - plane0
        first_line = run_lines(op)[0]
        time.sleep(2)
        requests = apiserver_requests(kube.api_client)
        requests.subtract(before)
        deletions = watch.snapshot()
        deleted_expired = [d for d in deletions if d[2]]
        deleted_kept = [d for d in deletions if not d[2]]
        metrics = scrape(op)
        deleted_metric = metric_sum(metrics, "vpol_deleted_objects_total", policy=POLICY)
        events = ", ".join(f"{o} {metric_sum(metrics, 'vpol_events_total', outcome=o):.0f}"
                           for o in ("sent", "deduplicated", "dropped", "failed"))
        last_deleted = max((d[1] for d in deleted_expired), default=float("nan"))
        first_deleted = min((d[1] for d in deleted_expired), default=float("nan"))
        run_to_last = last_deleted - due
        run_to_line = first_line[0] - due

        # 3. the next run: nothing left to delete
        wait_until(lambda: len(run_lines(op)) >= 2 or op.proc.poll() is not None, 2 * PERIOD + args.timeout, 0.2)
        lines = run_lines(op)
        second = lines[1] if len(lines) >= 2 else None
        # The next run is due at the first 10-second mark after the first run started (its scheduled time), or at
        # once when the first run ended later than that.
        second_due = max(due + PERIOD, first_line[0])
        peaks = sampler.stop()
        sampler = None
        left = sum(1 for _ in _bench_pods(kube))
        rows = [
            ["Pods (matching the policy)", f"{args.pods} ({len(expired_pods)}) in {args.namespaces} namespaces"],
            ["bare client: the API server deleting them", f"{floor:.1f} s ({args.writer_threads} connection(s), "
                                                          f"{floor_deletes / floor:.0f} deletes/s; control plane "
                                                          f"CPU {floor_plane:.1f} s)"],
            ["run: scheduled time -> first matching Pod deleted", f"{first_deleted - due:.1f} s"],
            ["run: scheduled time -> last matching Pod deleted", f"{run_to_last:.1f} s ({run_to_last / floor:.2f}x "
                                                                 f"the bare client)"],
            ["run: scheduled time -> the operator's end-of-run line", f"{run_to_line:.1f} s "
                                                                       f"({run_to_line / floor:.2f}x the bare client)"],
            ["run: the operator's line", f"{first_line[1]} deleted, {first_line[2]} kept, {first_line[3]} errors"],
            ["run: deletions seen (matching / not matching)", f"{len(deleted_expired)} / {len(deleted_kept)}"],
            ["run: DELETE pods (API server) / vpol_deleted_objects_total",
             f"{requests[('DELETE', 'pods', '')]} / {deleted_metric:.0f}"],
            ["run: LIST pods (API server)", str(requests[("LIST", "pods", "")])],
            ["run: Events written (API server, POST events); vpol_events_total",
             f"{requests[('POST', 'events', '')]}; {events}"],
            ["run: CPU operator / control plane", f"{op_cpu:.1f} s / {plane_cpu:.1f} s"],
            ["next run, nothing to delete: its start -> its line",
             f"{second[0] - second_due:.1f} s ({second[1]} deleted, {second[2]} kept, {second[3]} errors)"
             if second else "not seen"],
            ["bench Pods left (target: the non-matching half)", f"{left} ({args.pods - len(expired_pods)})"],
            ["operator peak RSS (VmHWM)", f"{peaks.operator_hwm_kib / 1024:.0f} MiB"],
            ["child processes (peak RSS)", peaks.children_summary()],
        ]
        right = first_line[1] == len(expired_pods) and first_line[3] == 0 and \
            left == args.pods - len(expired_pods) and not deleted_kept
        targets = [
            ["run (scheduled time -> last Pod deleted) <= 1.5x the bare client", f"{run_to_last / floor:.2f}x",
             "PASS" if run_to_last / floor <= 1.5 else "FAIL"],
            ["exactly the matching Pods deleted, once each", f"{first_line[1]} deleted, "
                                                             f"{len(deleted_kept)} wrongly",
             "PASS" if right else "FAIL"],
        ]
        print_results(rows, targets, run)
        return 0 if right else 1
    finally:
        if sampler is not None:
            sampler.stop()
        if watch is not None:
            watch.stop()
        try:
            if op is not None:
                op.stop()
        finally:
            if run.cluster.state_dir is None:
                cleanup(run.cluster.kube, args.namespaces)
            run.cluster.stop()


def _bench_pods(kube: Any) -> Any:
    from vpol.kube.dynamic import list_pages

    for items, _rv in list_pages(kube.api_client, "", "v1", "pods"):
        for item in items:
            ns = str((item.get("metadata") or {}).get("namespace", ""))
            if ns.startswith(NS_PREFIX) and not ns.startswith(FLOOR_PREFIX):
                yield item


def cleanup(kube: Any, count: int) -> None:
    """Remove the bench's objects from a cluster given by --kubeconfig."""
    kube.kubectl("delete", "deletingpolicy", POLICY, "--ignore-not-found", check=False)
    for prefix in (NS_PREFIX, FLOOR_PREFIX):
        for i in range(count):
            kube.kubectl("delete", "namespace", f"{prefix}{i:02d}", "--ignore-not-found", "--wait=false", check=False)
    kube.kubectl("delete", "clusterrole", DELETE_ROLE["metadata"]["name"], "--ignore-not-found", check=False)


if __name__ == "__main__":
    sys.exit(main())

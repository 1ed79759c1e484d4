#!/usr/bin/env python3
"""Benchmark (not a test) of the ways to write a PolicyReport: what the API server accepts fastest.

Background scans write one PolicyReport per resource (Kyverno's shape, NOTES.md section 5), so the
number of writes cannot shrink below one per changed resource; what can change is how each is written.
On a local control plane (tests/controlplane) with the report CRDs installed, this writes reports of
``--results`` results each (the bench scan's 16 Pod Security policies by default) for ConfigMaps that
own them, ``--writes`` per round with ``--threads`` parallel clients, and measures per way of writing:
the round's wall time, the control plane's CPU seconds (kube-apiserver, etcd and the controller manager,
read from /proc: less sensitive than wall time to other work on a shared machine) and this client's CPU.

Ways, for a report that does not exist yet:

* ``create``: POST of the whole report;
* ``create, metadata answer``: the same POST, asking the API server to answer with the report's metadata
  only (``Accept: ...;as=PartialObjectMetadata``, what vpol's writes do) instead of the whole report;
* ``apply``: server-side apply of the whole report (field manager, force);
* ``create, vpol's writer``: the POST the operator sends (``vpol.kube.dynamic.send_encoded``: the body encoded
  once, a metadata answer read but not parsed) from ``--threads`` threads over urllib3, as its writer pool does;
* ``create, one event loop``: the same request from one thread, ``--threads`` at a time on one asyncio loop
  over aiohttp's client (its C HTTP parser; no thread per request in flight).

For an existing report gaining one result (a policy added to a running operator):

* ``apply``: server-side apply of the whole report;
* ``merge``: JSON merge patch of ``results`` (an atomic list in the CRD: sent whole), ``summary`` and the
  scan-key annotation;
* ``json-patch``: JSON patch adding the one new result at ``/results/-`` and replacing ``/summary`` and
  the annotation (only what changed travels);
* ``put``: update (PUT) of the whole object at the resourceVersion the client last saw.

Rounds run the ways alternately (``--rounds`` times each), each on objects of its own, so load from
elsewhere falls on every way alike.

Usage: python3 bench/report_writes.py [--writes 500] [--threads 8] [--rounds 3] [--results 16]
       [--ways 'new report/create;new report/create, metadata answer'] [--kubeconfig FILE --kubectl PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BenchRun, descendants, install_vpol, pooled_client, table, tls_context  # noqa: E402
from kubernetes import client  # noqa: E402

from vpol.desired.report import PolicyMeta, ReportEntry, ResourceRef, report_for, report_name  # noqa: E402
from vpol.kube.dynamic import METADATA_ANSWER, collection_path, encoded, send_encoded  # noqa: E402
from vpol.kube.objects import FIELD_MANAGER  # noqa: E402

GROUP, VERSION, PLURAL = "wgpolicyk8s.io", "v1alpha2", "policyreports"
NAMESPACE = "bench-report-writes"


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / os.sysconf("SC_CLK_TCK")


def control_plane_pids(run: BenchRun) -> list[int]:
    state = run.cluster.state_dir
    if state is None:
        return []
    pid = int((state / "controlplane.pid").read_text().split()[0])
    return [pid, *descendants(pid)]


def entries(n: int, now: int) -> dict[str, ReportEntry]:
    out = {}
    for i in range(n):
        failed = i % 8 == 0
        out[f"policy-{i:02d}"] = ReportEntry(
            f"policy-{i:02d}", "fail" if failed else "pass",
            "a container runs privileged (containers[0])" if failed else "",
            (("validation", "0"),) if failed else (), now)
    return out


META = {f"policy-{i:02d}": PolicyMeta("medium", "Pod Security Standards (Baseline)") for i in range(64)}


def owners(core: Any, prefix: str, count: int, threads: int) -> list[ResourceRef]:
    def make(i: int) -> ResourceRef:
        cm = core.create_namespaced_config_map(NAMESPACE, {"metadata": {"name": f"{prefix}-{i:05d}"}})
        return ResourceRef("v1", "ConfigMap", cm.metadata.name, NAMESPACE, cm.metadata.uid)
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(make, range(count)))


def timed(run: BenchRun, threads: int, items: list[Any], write: Callable[[Any], None],
          batch: Callable[[list[Any]], None] | None = None) -> tuple[float, float, float]:
    """(wall s, control plane CPU s, this process's CPU s) for writing every item: ``write`` on ``threads``
    threads, or ``batch`` given them all."""
    pids = control_plane_pids(run)
    cp0, me0, t0 = cpu_seconds(pids), time.process_time(), time.monotonic()
    if batch is not None:
        batch(items)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(write, items))
    return time.monotonic() - t0, cpu_seconds(pids) - cp0, time.process_time() - me0


class LoopWriter:
    """POSTs reports from one asyncio loop over aiohttp's client, ``limit`` at a time (the ``create, one event
    loop`` way), with the TLS material and credentials of ``configuration`` (a kubernetes client Configuration)."""

    def __init__(self, configuration: Any, limit: int) -> None:
        self.host = configuration.host.rstrip("/")
        self.limit = limit
        self.context = tls_context(configuration)
        self.headers = {"Accept": METADATA_ANSWER, "Content-Type": "application/json"}
        bearer = configuration.auth_settings().get("BearerToken")
        if bearer and bearer.get("value"):
            self.headers["Authorization"] = bearer["value"]

    def write(self, bodies: list[tuple[str, bytes]]) -> None:
        asyncio.run(self._write(bodies))

    async def _write(self, bodies: list[tuple[str, bytes]]) -> None:
        import aiohttp

        gate = asyncio.Semaphore(self.limit)
        connector = aiohttp.TCPConnector(ssl=self.context, limit=self.limit)
        async with aiohttp.ClientSession(connector=connector, headers=self.headers) as session:
            async def one(path: str, body: bytes) -> None:
                async with gate:
                    async with session.post(self.host + path, data=body,
                                            params={"fieldManager": FIELD_MANAGER}) as answer:
                        await answer.read()
                        if answer.status != 201:
                            raise RuntimeError(f"POST {path}: {answer.status}")
            await asyncio.gather(*(one(path, body) for path, body in bodies))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=500, help="reports written per round")
    parser.add_argument("--threads", type=int, default=8, help="parallel clients (the scanner has 16 writers)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each way")
    parser.add_argument("--results", type=int, default=16, help="results per report")
    parser.add_argument("--ways", help="only these ways, semicolon-separated 'report/written by' "
                        "(e.g. 'new report/create')")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--kubectl")
    parser.add_argument("--workdir")
    args = parser.parse_args()

    run = BenchRun.begin(args.workdir, "vpol-bench-writes-", args.kubeconfig, args.kubectl)
    try:
        kube = run.cluster.kube
        install_vpol(kube)
        api = pooled_client(kube, args.threads)
        core: Any = client.CoreV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        now = int(time.time())
        full = entries(args.results, now)
        grown = entries(args.results + 1, now)
        added = {"source": "vpol", **{k: v for k, v in report_for(
            ResourceRef("v1", "ConfigMap", "x", NAMESPACE, "x"), {"policy-new": grown[f"policy-{args.results:02d}"]},
            META)["results"][0].items() if k != "source"}}
        # Responses are read but not parsed (what the client spends parsing them is not the API server's cost);
        # a response left unread would leave its connection unusable and cost a new TLS connection.
        quiet = {"_preload_content": False}

        def new_report(ref: ResourceRef, results: dict[str, ReportEntry]) -> dict[str, Any]:
            return report_for(ref, results, META, f"{ref.uid}/1/abc")

        def create(ref: ResourceRef) -> None:
            custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, new_report(ref, full),
                                                   field_manager=FIELD_MANAGER, **quiet).read()

        metadata_only = {"_headers": {"Accept": METADATA_ANSWER}}

        def create_metadata_answer(ref: ResourceRef) -> None:
            custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, new_report(ref, full),
                                                   field_manager=FIELD_MANAGER, **quiet, **metadata_only).read()

        def apply_new(ref: ResourceRef) -> None:
            custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, report_name(ref.uid),
                                                  new_report(ref, full), field_manager=FIELD_MANAGER, force=True,
                                                  _content_type="application/apply-patch+yaml", **quiet).read()

        def apply_grown(ref: ResourceRef) -> None:
            custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, report_name(ref.uid),
                                                  new_report(ref, grown), field_manager=FIELD_MANAGER, force=True,
                                                  _content_type="application/apply-patch+yaml", **quiet).read()

        def merge_grown(ref: ResourceRef) -> None:
            body = new_report(ref, grown)
            patch = {"metadata": {"annotations": body["metadata"]["annotations"]}, "summary": body["summary"],
                     "results": body["results"]}
            custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, report_name(ref.uid), patch,
                                                  field_manager=FIELD_MANAGER,
                                                  _content_type="application/merge-patch+json", **quiet).read()

        def json_patch_grown(ref: ResourceRef) -> None:
            body = new_report(ref, grown)
            ops = [{"op": "add", "path": "/results/-", "value": added},
                   {"op": "replace", "path": "/summary", "value": body["summary"]},
                   {"op": "replace", "path": "/metadata/annotations/vpol.kyverno.io~1scan-key",
                    "value": body["metadata"]["annotations"]["vpol.kyverno.io/scan-key"]}]
            custom.patch_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, report_name(ref.uid), ops,
                                                  field_manager=FIELD_MANAGER,
                                                  _content_type="application/json-patch+json", **quiet).read()

        def create_vpol_writer(ref: ResourceRef) -> None:
            send_encoded(api, "POST", collection_path(GROUP, VERSION, PLURAL, NAMESPACE),
                         encoded(new_report(ref, full)), content_type="application/json", accept=METADATA_ANSWER,
                         query=[("fieldManager", FIELD_MANAGER)])

        loop_writer = LoopWriter(api.configuration, args.threads)

        def create_one_loop(refs: list[ResourceRef]) -> None:
            path = collection_path(GROUP, VERSION, PLURAL, NAMESPACE)
            # The bodies are built and encoded inside the timed batch, as the other ways build theirs while timed.
            loop_writer.write([(path, encoded(new_report(ref, full))) for ref in refs])

        versions: dict[str, str] = {}

        def put_grown(ref: ResourceRef) -> None:
            body = new_report(ref, grown)
            body["metadata"]["resourceVersion"] = versions[ref.uid]
            custom.replace_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, report_name(ref.uid), body,
                                                    field_manager=FIELD_MANAGER, **quiet).read()

        def create_remember(ref: ResourceRef) -> None:
            made = custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, new_report(ref, full),
                                                          field_manager=FIELD_MANAGER)
            versions[ref.uid] = made["metadata"]["resourceVersion"]

        batches: dict[str, Callable[[list[ResourceRef]], None]] = {"create, one event loop": create_one_loop}
        ways: list[tuple[str, str, Callable[[ResourceRef], None]]] = [
            ("new report", "create", create),
            ("new report", "create, metadata answer", create_metadata_answer),
            ("new report", "create, vpol's writer", create_vpol_writer),
            ("new report", "create, one event loop", lambda ref: None),
            ("new report", "apply", apply_new),
            ("one result added", "apply", apply_grown),
            ("one result added", "merge", merge_grown),
            ("one result added", "json-patch", json_patch_grown),
            ("one result added", "put", put_grown),
        ]
        if args.ways:
            wanted = set(args.ways.split(";"))
            ways = [w for w in ways if f"{w[0]}/{w[1]}" in wanted]
        measured: dict[tuple[str, str], list[tuple[float, float, float]]] = {(c, w): [] for c, w, _f in ways}
        for round_ in range(args.rounds):
            for i, (case, way, write) in enumerate(ways):
                refs = owners(core, f"r{round_}-{i}", args.writes, args.threads)
                if case == "one result added":
                    with ThreadPoolExecutor(args.threads) as pool:
                        list(pool.map(create_remember, refs))  # not timed: the reports as they were
                batch = batches.get(way) if case == "new report" else None
                wall, cp, me = timed(run, args.threads, refs, write, batch)
                measured[(case, way)].append((wall, cp, me))
                print(f"round {round_ + 1}: {case:>16} by {way:<10} {args.writes / wall:6.0f}/s, control plane "
                      f"{1000 * cp / args.writes:.2f} ms CPU per write, client {1000 * me / args.writes:.2f} ms",
                      flush=True)
        rows = []
        for (case, way), values in measured.items():
            walls, cps, mes = zip(*values)
            rows.append([case, way, f"{args.writes / statistics.median(walls):.0f}",
                         f"{1000 * statistics.median(cps) / args.writes:.2f}",
                         f"{1000 * statistics.median(mes) / args.writes:.2f}"])
        print()
        print(f"{args.writes} reports of {args.results} results per round, {args.threads} parallel clients, "
              f"median of {args.rounds} rounds:")
        print(table(rows, ["report", "written by", "writes/s", "control plane CPU ms per write",
                           "client CPU ms per write"]))
        print(run.end())
        (run.work / "report_writes.json").write_text(json.dumps({f"{c} / {w}": v for (c, w), v in measured.items()}))
        return 0
    finally:
        run.cluster.stop()


if __name__ == "__main__":
    sys.exit(main())

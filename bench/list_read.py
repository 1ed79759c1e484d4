"""Benchmark (not a test) of reading back one list answer of reports: parsed whole or one report at a time.

Kyverno's reports-server answers a list of PolicyReports whole, whatever its ``limit``: a restart of vpol behind it
reads one namespace per answer. This serves one such answer of --reports reports (built by vpol's own
``report_for``, 16 results each, with the metadata an API server adds) from a local HTTP server, in chunks of
--chunk bytes as a chunked answer comes, and reads it the two ways vpol has:

* whole: ``json.loads`` of the answer's bytes (``vpol.kube.dynamic.list_pages``, for servers that page);
* one report at a time: ``vpol.kube.list_answer.ListReader`` over urllib3's stream (``list_items``, behind
  reports-server).

For each: the peak of memory allocated while reading (tracemalloc, the answer's bytes included; one report at a
time, each report is dropped once read, as the restart's store keeps only its compact results), and the CPU and
wall time per answer (the server thread's included, the same for both), the best of --rounds.

    python3 bench/list_read.py [--reports 1000] [--chunk 4096] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from vpol.desired.report import PolicyMeta, ReportEntry, ResourceRef, report_for  # noqa: E402
from vpol.kube.list_answer import ListReader  # noqa: E402

POLICIES = 16


def answer(reports: int) -> bytes:
    """A PolicyReportList as reports-server sends it: typed (metadata before items), each report with the server's
    metadata (uid, resourceVersion, creationTimestamp, one managedFields entry)."""
    meta = {f"policy-{p:02d}": PolicyMeta.of("medium", "Pod Security Standards (Restricted)", True)
            for p in range(POLICIES)}
    items = []
    for i in range(reports):
        uid = f"{i:08d}-0000-4000-8000-000000000000"
        ref = ResourceRef.make("v1", "Pod", f"pod-{i}", "bench-0", uid)
        entries = {name: ReportEntry(name, "fail" if (i + p) % 11 == 0 else "pass", "", (), 1765000000 + i)
                   for p, name in enumerate(meta)}
        report = report_for(ref, entries, meta, scan_key=f"{i:040x}")
        report["metadata"].update({
            "uid": f"r{uid[1:]}", "resourceVersion": str(1000 + i), "creationTimestamp": "2026-12-07T10:00:00Z",
            "managedFields": [{"manager": "vpol", "operation": "Update", "apiVersion": "wgpolicyk8s.io/v1alpha2",
                               "time": "2026-12-07T10:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:results": {}, "f:scope": {}, "f:summary": {}}}],
        })
        items.append(report)
    return json.dumps({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReportList",
                       "metadata": {"resourceVersion": "1"}, "items": items}).encode()


def serve(body: bytes, chunk: int) -> str:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for at in range(0, len(body), chunk):
                piece = body[at:at + chunk]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}/"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", type=int, default=1000, help="reports in the answer (one namespace's)")
    parser.add_argument("--chunk", type=int, default=4096, help="bytes per chunk of the served answer")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    body = answer(args.reports)
    url = serve(body, args.chunk)
    pool = urllib3.PoolManager()

    def whole() -> int:
        resp = pool.request("GET", url, preload_content=False)
        items = json.loads(resp.data)["items"]
        resp.release_conn()
        return len(items)

    def one_at_a_time() -> int:
        resp = pool.request("GET", url, preload_content=False)
        count = sum(1 for _report in ListReader(resp.stream(64 * 1024)).items())
        resp.release_conn()
        return count

    ways: dict[str, Callable[[], int]] = {"whole (json.loads)": whole, "one report at a time (ListReader)": one_at_a_time}
    print(f"one answer: {args.reports} reports, {len(body) / 2**20:.2f} MiB of JSON, served in chunks of {args.chunk} "
          f"bytes; best of {args.rounds} rounds")
    print("| way | reports read | peak allocated while reading | CPU per answer | wall per answer |")
    print("|---|---|---|---|---|")
    for name, read in ways.items():
        best_cpu = best_wall = float("inf")
        for _round in range(args.rounds):
            cpu, wall = time.process_time(), time.perf_counter()
            count = read()
            best_cpu = min(best_cpu, time.process_time() - cpu)
            best_wall = min(best_wall, time.perf_counter() - wall)
        tracemalloc.start()
        read()
        _now, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"| {name} | {count} | {peak / 2**20:.2f} MiB | {best_cpu * 1000:.1f} ms | {best_wall * 1000:.1f} ms |")


if __name__ == "__main__":
    main()

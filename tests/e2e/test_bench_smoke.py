"""The benchmarks still run, at a tiny scale, each on a control plane of its own.

Benchmarks are run on demand and their figures are never asserted here (bench/README.md). What is checked is
that they work and that what they count, not time, is right: ``bench/report_writes.py`` broke unseen when
reports were renamed ``vpol-<uid>`` (the first of its ways that address a report by name was refused with 400,
ending the bench), and two benches counted writes per object wrongly at a small scale. Each bench is started
as a user starts it (``python3 bench/<name>.py``), on the control plane the e2e tests build.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.kyverno.peer import BUILD_SCRIPT
from tests.e2e.conftest import go_built

REPO = Path(__file__).resolve().parents[2]
#: Each bench starts a control plane and (the scan bench) four operators in turn.
BENCH_TIMEOUT = 900


def run_bench(script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(REPO / "bench" / script), *args], capture_output=True, text=True,
                          timeout=BENCH_TIMEOUT, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, f"{script} exited with {proc.returncode}:\n{proc.stdout[-4000:]}\n" \
                                 f"{proc.stderr[-4000:]}"
    return proc.stdout


def table_rows(output: str) -> list[tuple[str, list[str]]]:
    """Every markdown table row of a bench's output: (first cell, the other cells); a first cell may repeat (one
    row per phase)."""
    rows = []
    for line in output.splitlines():
        if line.startswith("|") and not set(line) <= {"|", "-", " "}:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.append((cells[0], cells[1:]))
    return rows


@pytest.mark.slow
def test_scan_bench_runs_every_phase_and_writes_one_report_per_pod(controlplane_binary: str,
                                                                   tmp_path: Path) -> None:
    pods = 24
    out = run_bench("scan.py", "--pods", str(pods), "--namespaces", "2", "--policies", "4",
                    "--phases", "enforce,apply,add,cold,restart", "--apply-timeout", "90", "--timeout", "90",
                    "--profile", str(tmp_path))
    rows = table_rows(out)
    first = dict(reversed(rows))  # the first row of each name
    assert "not reached" not in next(v for k, v in rows if k.startswith("enforce:"))[0], out
    assert "not reached" not in next(v for k, v in rows if k.startswith("add:"))[0], out
    assert first["policies Ready"][0] == "4/4"
    # One PolicyReport per Pod with every result, after the apply phase and after the cold one.
    read_back = [v for k, v in rows if k == "reports read back: Pod reports / with every result"]
    assert len(read_back) == 2 and all(v[0].startswith(f"{pods} / {pods} ") for v in read_back), read_back
    for target in ("apply: report writes per Pod", "cold: report writes per Pod",
                   "restart, nothing changed: report writes"):
        assert first[target][-1] == "PASS", (target, first[target])
    assert re.search(r"report floor: .*", out), "no report floor row"
    assert re.search(r"^\d+ of \d+ targets met$", out, re.M)
    # --profile: the API server profiled (Go pprof, merged) over the floors and every operator phase, and its CPU
    # by activity printed per write.
    for name in ("write-floor", "apply", "report-floor", "add", "cold", "restart"):
        assert (tmp_path / f"{name}.apiserver.pprof").stat().st_size > 0, name
        assert "flat%" in (tmp_path / f"{name}.apiserver.top.txt").read_text(), name
    columns = dict(rows)["API server CPU (Go profile), by activity"]
    totals = dict(zip(columns, first["total"]))
    assert float(totals["apply: ms per write"]) > 0 and "cold: ms per write" in totals, (columns, totals)


@pytest.mark.slow
def test_scan_bench_measures_kyvernos_reports_controller_on_the_same_pods(controlplane_binary: str,
                                                                          tmp_path: Path) -> None:
    """The kyverno phases: Kyverno's reports controller, built from its module, scans the bench's Pods with the
    same policies after vpol's cold and restart phases and writes a report with every result for each Pod; then it
    is started again with nothing changed and followed until its writes stop."""
    go_built(BUILD_SCRIPT, "Kyverno's reports controller (the scan bench's peer)", args=["reports-controller"])
    pods, policies = 12, 3
    out = run_bench("scan.py", "--pods", str(pods), "--namespaces", "2", "--policies", str(policies),
                    "--phases", "cold,restart,kyverno,kyverno-restart", "--timeout", "90", "--peer-timeout", "300",
                    "--profile", str(tmp_path))
    rows = dict(table_rows(out))
    peer = next(v for k, v in rows.items() if k.startswith("Kyverno's reports controller (v1.19.1"))
    assert peer[0].endswith(" s") and "not reached" not in peer[0], out
    # Every Pod has one report of Kyverno's, with a result for each policy.
    assert rows["its reports about the bench's Pods, by results in each"][0] == \
        f"{pods}: {policies} results: {pods}", out
    # Its writes were counted from the API server: at least a report per Pod.
    writes = rows["writes of reports and ephemeral reports (API server requests)"][0]
    assert int(writes.split()[0]) >= pods and "POST policyreports" in writes, writes
    assert re.match(r"\d+\.\d\d \(", rows["vpol's cold phase (operator start -> every result written) / Kyverno's"][0])
    # Started again with nothing changed, it is followed until its writes stop, beside vpol's restart (no write).
    again = rows["Kyverno's reports controller started again, nothing changed -> its last report write"][0]
    assert re.match(r"(\d+\.\d s$|no write in \d+ s$)", again), again
    assert re.match(r"\d+ \(\d+\.\d\d per Pod\)", rows["its writes of reports and ephemeral reports"][0])
    assert rows["vpol's restart, nothing changed: first full scan, report writes"][0].endswith(", 0")
    # --profile: the API server profiled over each of Kyverno's phases too, each profile ended and merged, and
    # Kyverno's first scan a column of the activity table, per write.
    for name in ("kyverno", "kyverno-restart"):
        assert (tmp_path / f"{name}.apiserver.pprof").stat().st_size > 0, name
    assert "kyverno: ms per write" in rows["API server CPU (Go profile), by activity"], out[-3000:]


@pytest.mark.slow
def test_generate_bench_measures_kyvernos_background_controller_on_the_same_policies(controlplane_binary: str
                                                                                     ) -> None:
    """The kyverno phase of the generation bench: Kyverno's admission controller (queueing an UpdateRequest per
    trigger and policy) and background controller (processing them), built from its module, generate the same
    downstreams, once each, for Namespaces created after the policies."""
    go_built(BUILD_SCRIPT, "Kyverno's admission controller (the generation bench's peer)", args=["kyverno"])
    go_built(BUILD_SCRIPT, "Kyverno's background controller (the generation bench's peer)",
             args=["background-controller"])
    namespaces = 6
    out = run_bench("generate.py", "--namespaces", str(namespaces), "--peer", "kyverno", "--peer-timeout", "300")
    rows = dict(table_rows(out))
    peer = next(v for k, v in rows.items() if k.startswith("Kyverno v1.19.1 (admission + background controllers)"))
    assert re.match(r"[\d.]+ s$", peer[0]), out[-4000:]
    assert rows["Kyverno: writes of the three kinds (API server)"][0].startswith(
        f"{3 * namespaces} (1.00 per downstream"), out[-4000:]
    assert f"POST updaterequests {3 * namespaces}" in rows["Kyverno: UpdateRequest requests"][0], out[-4000:]
    assert re.match(r"[\d.]+x$", rows["vpol's converge <= 0.5x Kyverno's"][0]), out[-4000:]


@pytest.mark.slow
def test_report_writes_bench_measures_every_way(controlplane_binary: str) -> None:
    out = run_bench("report_writes.py", "--writes", "10", "--rounds", "1", "--threads", "4")
    ways = [(k, v) for k, v in table_rows(out) if k in ("new report", "one result added")]
    assert {(k, v[0]) for k, v in ways} == {
        ("new report", "create"), ("new report", "create, metadata answer"), ("new report", "apply"),
        ("new report", "create, vpol's writer"), ("new report", "create, one event loop"),
        ("one result added", "apply"), ("one result added", "merge"), ("one result added", "json-patch"),
        ("one result added", "put")}, ways
    assert all(float(v[1]) > 0 for _k, v in ways), ways


#: The other benches, each at its smallest: (script, arguments, a line its output must have: what it measured).
OTHER_BENCHES = [
    ("mutate_existing.py", ("--configmaps", "20"), r"writes to converge \(mutated\)\s*\|\s*\d+ \(1\.00 per ConfigMap"),
    ("ready_enforced.py", ("--policies", "3"), r"requests admitted unenforced after Ready: \d+"),
    ("operator_ready.py", ("--policies", "3", "--scale", "6", "--settle", "5"),
     r"reconciles \(vpol_reconciles_total\)"),
    ("admission.py", ("--requests", "50"), r"the webhook's own answer time .*: \d+ requests"),
    ("global_context.py", ("--objects", "20", "--rounds", "1"), r"new worker \(first request\)\s+[\d.]+ ms"),
    ("apply_bulk.py", ("--pods", "100"), r"vpol apply -o json: [\d.]+ s wall, \d+ results"),
    ("cel_core.py", ("--quick",), r"ratio: vpol is [\d.]+x faster"),
    ("list_read.py", ("--reports", "50", "--rounds", "1"),
     r"\| one report at a time \(ListReader\) \| 50 \| [\d.]+ MiB \| [\d.]+ ms \|"),
    ("controlplane_start.py", ("--runs", "1"), r"run 1: start->ready [\d.]+s"),
    ("generate.py", ("--namespaces", "10"),
     r"vpol: writes of the three kinds \(API server\)\s*\|\s*30 \(1\.00 per downstream"),
    ("delete.py", ("--pods", "40", "--namespaces", "2"),
     r"exactly the matching Pods deleted, once each\s*\|\s*20 deleted, 0 wrongly\s*\|\s*PASS"),
]


@pytest.mark.slow
@pytest.mark.parametrize("script,args,measured", OTHER_BENCHES, ids=[b[0] for b in OTHER_BENCHES])
def test_other_benches_run(controlplane_binary: str, script: str, args: tuple[str, ...], measured: str) -> None:
    out = run_bench(script, *args)
    assert re.search(measured, out), out[-4000:]


@pytest.mark.slow
def test_images_bench_counts_registry_requests_for_vpol_and_kyverno(controlplane_binary: str) -> None:
    """bench/images.py --peer kyverno: every signed image admitted by both, vpol's registry requests what one
    verification per image (and one for all the replicas) costs, as the registry itself counts them."""
    go_built(BUILD_SCRIPT, "Kyverno's admission controller", timeout=3000)
    out = run_bench("images.py", "--quick", "--peer", "kyverno")
    rows = {name: cells for name, cells in table_rows(out)}
    assert rows["vpol"][:2] == ["50", "0"] and rows["kyverno"][:2] == ["50", "0"], out
    assert rows["vpol"][-2] == "4.0" and rows["vpol"][-1].startswith("4 for 10 in "), rows["vpol"]
    for target in ("one verification per image per cache lifetime", "a Deployment's replicas: one verification",
                   "0 refusals of signed images", "Kyverno refused no signed image"):
        assert rows[target][-1] == "PASS", (target, rows[target])

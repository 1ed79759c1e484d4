#!/usr/bin/env python3
"""Benchmark of the local test control plane (tests/controlplane); not a test.

Measures, with an already built (warm) binary:
  * wall time of `cluster start DIR` (fresh state, until /readyz is ok and the
    controller-manager runs) and of `cluster stop DIR`;
  * memory: peak resident set of each process (VmHWM) and the peak of the
    sampled sum over the whole process group, during start and a short
    workload (kubectl calls and 50 ConfigMaps) after it.

Usage: python3 bench/controlplane_start.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import status_kib  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "controlplane" / "cluster"


def machine() -> dict[str, str]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    go = subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip()
    return {
        "nproc": str(os.cpu_count()),
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "cpu": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "go": go,
    }


def group_members(pgid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = raw[raw.rindex(")") + 2:].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                out.append(int(entry))
    return out


def component(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    mode = argv[1].decode() if len(argv) > 1 else "?"
    return "supervisor+etcd" if mode == "up" else mode


class Sampler(threading.Thread):
    """Samples the summed RSS of the control plane's process group."""

    def __init__(self, state: Path) -> None:
        super().__init__(daemon=True)
        self.state = state
        self.peak_total_kib = 0
        self.hwm: dict[str, int] = {}
        self.stop_event = threading.Event()

    def run(self) -> None:
        pgid = None
        while not self.stop_event.is_set():
            if pgid is None:
                try:
                    pgid = int((self.state / "controlplane.pid").read_text())
                except (OSError, ValueError):
                    time.sleep(0.05)
                    continue
            total = 0
            for pid in group_members(pgid):
                total += status_kib(pid, "VmRSS")
                name = component(pid)
                self.hwm[name] = max(self.hwm.get(name, 0), status_kib(pid, "VmHWM"))
            self.peak_total_kib = max(self.peak_total_kib, total)
            time.sleep(0.1)


def run_once(binary: Path) -> dict[str, object]:
    state = Path(tempfile.mkdtemp(prefix="vpol-bench-"))
    sampler = Sampler(state)
    sampler.start()
    t0 = time.monotonic()
    proc = subprocess.run([str(SCRIPT), "start", str(state)], capture_output=True, text=True)
    ready = time.monotonic() - t0
    if proc.returncode != 0:
        sampler.stop_event.set()
        subprocess.run([str(SCRIPT), "stop", str(state)])
        raise SystemExit(f"start failed:\n{proc.stderr}")
    info = json.loads((state / "ready.json").read_text())
    kubectl = binary.parent / "kubectl"
    env = dict(os.environ, KUBECONFIG=str(state / "kubeconfig"))
    t1 = time.monotonic()
    subprocess.run([str(kubectl), "get", "ns"], env=env, check=True, capture_output=True)
    first_call = time.monotonic() - t1
    manifests = "\n---\n".join(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: bench-{i}, namespace: default}}\ndata: {{i: '{i}'}}"
        for i in range(50))
    subprocess.run([str(kubectl), "apply", "-f", "-"], input=manifests, text=True, env=env, check=True,
                   capture_output=True)
    subprocess.run([str(kubectl), "api-resources"], env=env, check=True, capture_output=True)
    time.sleep(3)
    sampler.stop_event.set()
    sampler.join()
    t2 = time.monotonic()
    subprocess.run([str(SCRIPT), "stop", str(state)], check=True, capture_output=True)
    stop = time.monotonic() - t2
    subprocess.run(["rm", "-rf", str(state)])
    return {
        "ready_s": ready,
        "supervisor_startup_s": info["startup_seconds"],
        "first_kubectl_s": first_call,
        "stop_s": stop,
        "peak_total_rss_mib": sampler.peak_total_kib / 1024,
        "peak_rss_mib_by_process": {k: v / 1024 for k, v in sorted(sampler.hwm.items())},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    print("machine:")
    for k, v in machine().items():
        print(f"  {k}: {v}")
    t = time.monotonic()
    binary = Path(subprocess.run([str(SCRIPT), "build"], check=True, capture_output=True, text=True)
                  .stdout.strip())
    print(f"binary: {binary} ({binary.stat().st_size / 1e6:.0f} MB; `cluster build` took "
          f"{time.monotonic() - t:.1f}s, i.e. cached)")
    version = subprocess.run([str(binary), "version"], capture_output=True, text=True).stdout.strip()
    print(f"kubernetes: {version}")

    results = []
    for i in range(args.runs):
        r = run_once(binary)
        results.append(r)
        by_process: dict[str, float] = r["peak_rss_mib_by_process"]  # type: ignore[assignment]
        by_proc = ", ".join(f"{k} {v:.0f}" for k, v in by_process.items())
        print(f"run {i + 1}: start->ready {r['ready_s']:.2f}s (supervisor {r['supervisor_startup_s']:.2f}s), "
              f"first kubectl {r['first_kubectl_s']:.2f}s, stop {r['stop_s']:.2f}s, "
              f"peak RSS total {r['peak_total_rss_mib']:.0f} MiB ({by_proc} MiB)")
    ready = [float(r["ready_s"]) for r in results]  # type: ignore[arg-type]
    peak = [float(r["peak_total_rss_mib"]) for r in results]  # type: ignore[arg-type]
    print(f"summary over {len(results)} runs: start->ready median {statistics.median(ready):.2f}s "
          f"(min {min(ready):.2f}s, max {max(ready):.2f}s); peak total RSS max {max(peak):.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Shared pieces of the cluster benchmarks (bench/operator_ready.py, bench/scan.py).

Holds: a description of the machine and of its load, starting and stopping
a local control plane (tests/controlplane) or using an existing kubeconfig,
installing vpol's CRDs and RBAC the way the e2e fixtures do, running the
operator as its ServiceAccount (tests/e2e/operator_process.py), sampling the
resident memory of the operator and of its child processes from /proc,
reading the operator's Prometheus metrics, percentiles and table printing.

Not a test module: nothing here asserts; the benchmarks print what they measure.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.e2e.conftest import KubeCluster, exported_env  # noqa: E402
from tests.e2e.operator_process import OperatorProcess, sa_kubeconfig  # noqa: E402

CLUSTER_SCRIPT = REPO / "tests" / "controlplane" / "cluster"


# -- the machine ------------------------------------------------------------------------------

def machine() -> dict[str, str]:
    """nproc, CPU model, memory, kernel, Python, and the load average right now."""
    model = "?"
    mem_kib = 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load average (1/5/15 min) at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


class LoadSampler(threading.Thread):
    """Samples the 1-minute load average and whole-machine CPU busy share while a benchmark runs."""

    def __init__(self, interval: float = 2.0):
        super().__init__(daemon=True, name="load-sampler")
        self.interval = interval
        self.loads: list[float] = []
        self.busy: list[float] = []
        self._halt = threading.Event()

    @staticmethod
    def _cpu() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    def run(self) -> None:
        total0, idle0 = self._cpu()
        while not self._halt.wait(self.interval):
            self.loads.append(os.getloadavg()[0])
            total1, idle1 = self._cpu()
            if total1 > total0:
                self.busy.append(1 - (idle1 - idle0) / (total1 - total0))
            total0, idle0 = total1, idle1

    def stop(self) -> str:
        self._halt.set()
        self.join(5)
        if not self.loads:
            return "n/a"
        return (f"load average (1 min) during the run: mean {statistics.mean(self.loads):.1f}, "
                f"max {max(self.loads):.1f}; CPU busy (all cores) mean {100 * statistics.mean(self.busy or [0]):.0f}%")


def other_load() -> str:
    """The busiest processes not started by this benchmark (to judge interference)."""
    me = os.getpid()
    out = subprocess.run(["ps", "-eo", "pid,ppid,pcpu,rss,comm", "--sort=-pcpu"], capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines()[1:] if ln.split()[0] != str(me)][:5]
    return "; ".join(" ".join(ln.split()[2:]) for ln in lines)


# -- a cluster --------------------------------------------------------------------------------

def _committed_script() -> Path:
    """tests/controlplane as committed (the working tree may be mid-edit by someone else)."""
    dest = Path(tempfile.mkdtemp(prefix="vpol-cpsrc-"))
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD", "tests/controlplane"],
                             capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest / "tests" / "controlplane" / "cluster"


@dataclass
class Cluster:
    """A cluster for a benchmark: started here (and stopped by ``stop()``) or given by a kubeconfig."""

    kube: KubeCluster
    state_dir: Path | None = None
    script: Path | None = None

    @classmethod
    def start(cls, state_dir: Path, apiserver_args: Sequence[str] = (), node: bool = False,
              etcd_quota_bytes: int = 0) -> "Cluster":
        extra = [f"--apiserver-arg={a}" for a in apiserver_args] + (["--node"] if node else [])
        extra += [f"--etcd-quota-bytes={etcd_quota_bytes}"] if etcd_quota_bytes else []
        proc = None
        for script in (CLUSTER_SCRIPT, None):
            path = script or _committed_script()
            shutil.rmtree(state_dir, ignore_errors=True)
            proc = subprocess.run([str(path), "start", str(state_dir), *extra], capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=600)
            if proc.returncode == 0:
                env = exported_env(proc.stdout)
                kubectl = Path(env["PATH"]) / "kubectl"
                OWN_PLANES.add(state_dir.resolve())
                return cls(KubeCluster(env["KUBECONFIG"], kubectl, state_dir=state_dir), state_dir, path)
            subprocess.run([str(path), "stop", str(state_dir)], capture_output=True, timeout=120)
            print(f"`{path} start` failed, trying the committed tests/controlplane:\n{proc.stderr[-2000:]}",
                  file=sys.stderr)
        raise SystemExit(f"could not start a control plane:\n{proc.stderr if proc else ''}")

    @classmethod
    def existing(cls, kubeconfig: str, kubectl: str | None) -> "Cluster":
        return cls(KubeCluster(kubeconfig, kubectl or shutil.which("kubectl") or "kubectl"))

    def stop(self) -> None:
        self.kube.close()
        if self.state_dir is not None:
            OWN_PLANES.discard(self.state_dir.resolve())
        if self.state_dir is not None and self.script is not None:
            subprocess.run([str(self.script), "stop", str(self.state_dir)], capture_output=True, timeout=180)
            shutil.rmtree(self.state_dir / "etcd", ignore_errors=True)


def tls_context(cfg: Any) -> ssl.SSLContext:
    """A client TLS context with what the kubernetes client Configuration ``cfg`` verifies and presents (its CA,
    client certificate, verify_ssl), for the benches' own aiohttp clients of the API server."""
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def pooled_client(kube: KubeCluster, threads: int) -> Any:
    """A client of ``kube`` keeping as many connections as ``threads`` send at once. The generated client's
    default pool is 5 per core, and a connection given back to a full pool is closed: the next request pays a
    new TLS connection, on both sides (bench/results/scan.md, 2026-11-27 09:45 UTC). Close it when done."""
    from kubernetes import client

    configuration = copy.copy(kube.configuration)
    configuration.connection_pool_maxsize = max(threads, configuration.connection_pool_maxsize or 0)
    return client.ApiClient(configuration)


@dataclass
class BenchRun:
    """What every cluster benchmark starts with: the machine printed, a load sampler, a work
    directory and a cluster (a local control plane, or ``--kubeconfig``'s)."""

    work: Path
    cluster: Cluster
    load: LoadSampler
    started: float

    @classmethod
    def begin(cls, workdir: str | None, prefix: str, kubeconfig: str | None, kubectl: str | None,
              apiserver_args: Sequence[str] = (), node: bool = False, etcd_quota_bytes: int = 0) -> "BenchRun":
        print("machine:\n" + "\n".join(f"  {k}: {v}" for k, v in machine().items()))
        print(f"  busiest processes at start (pcpu rss comm): {other_load()}")
        work = Path(workdir or tempfile.mkdtemp(prefix=prefix))
        work.mkdir(parents=True, exist_ok=True)
        load = LoadSampler()
        load.start()
        started = time.monotonic()
        cluster = (Cluster.existing(kubeconfig, kubectl) if kubeconfig
                   else Cluster.start(work / "cluster", apiserver_args, node, etcd_quota_bytes))
        return cls(work, cluster, load, started)

    def end(self) -> str:
        """The closing lines: load during the run, the busiest processes, the total time."""
        return (f"\n{self.load.stop()}\n"
                f"busiest processes at the end (pcpu rss comm): {other_load()}\n"
                f"total benchmark time {time.monotonic() - self.started:.0f}s; logs in {self.work}")


def cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every cluster benchmark takes (BenchRun.begin, start_operator)."""
    parser.add_argument("--kubeconfig", help="an existing cluster (default: a local control plane of the bench's)")
    parser.add_argument("--kubectl", help="the kubectl to use with --kubeconfig")
    parser.add_argument("--workdir", help="where logs and the control plane's state go (default: a new temp dir)")
    parser.add_argument("--operator-arg", action="append", default=[], help="one more `vpol run` flag (repeatable)")


def print_results(rows: Sequence[Sequence[str]] | None, targets: Sequence[Sequence[str]], run: BenchRun) -> None:
    """The measures (None: printed already), the targets with PASS/FAIL and how many were met, and the run's
    closing lines."""
    if rows is not None:
        print()
        print(table(rows, ["measure", "value"]))
        print()
    print(table(targets, ["target", "measured", ""]))
    print(f"{sum(t[2] == 'PASS' for t in targets)} of {len(targets)} targets met")
    print(run.end())


def install_vpol(kube: KubeCluster) -> None:
    """CRDs (server-side apply), report CRDs (create if absent) and manifests/operator, as the e2e fixture does."""
    import yaml

    for path in sorted((REPO / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                kube.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=vpol-bench",
                             "-f", "-", input=json.dumps(doc))
                _wait_established(kube, f"crd/{doc['metadata']['name']}")
    proc = kube.kubectl("create", "-f", str(REPO / "crds" / "reports"), check=False)
    if proc.returncode != 0 and "AlreadyExists" not in proc.stderr:
        raise RuntimeError(proc.stderr)
    _wait_established(kube, "crd/policyreports.wgpolicyk8s.io", "crd/clusterpolicyreports.wgpolicyk8s.io")
    kube.kubectl("apply", "--server-side", "--field-manager=vpol-bench", "-k", str(REPO / "manifests" / "operator"))


def ensure_namespaces(kube: KubeCluster, names: Iterable[str]) -> None:
    """Create each namespace unless it exists (a bench rerun against --kubeconfig finds them)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core: Any = client.CoreV1Api(kube.api_client)
    for name in names:
        try:
            core.create_namespace({"metadata": {"name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise


def _wait_established(kube: KubeCluster, *crds: str) -> None:
    """`kubectl wait` for Established; a CRD created a moment ago may have no conditions yet, which
    kubectl reports as an error ("conditions accessor error") instead of waiting: ask again."""
    for _ in range(20):
        proc = kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", *crds, check=False)
        if proc.returncode == 0:
            return
        if "accessor error" not in proc.stderr:
            break
        time.sleep(0.5)
    kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", *crds)


#: The ServiceAccount kubeconfigs start_operator wrote in this run, with the server each is for.
_SA_KUBECONFIGS: dict[Path, str] = {}


_COMPILED: set[Path] = set()


def compile_operator() -> None:
    """Byte-compile the vpol package the operator will import (once per run), as its image ships it
    (Dockerfile: compileall) and as pip installs it: an editable install on a host that sets
    PYTHONDONTWRITEBYTECODE (this project's machines do) would otherwise compile ~150 modules from source at
    every operator start, about 0.3 s of CPU that no installed operator spends. The bytecode goes to the
    package's own __pycache__ directories (ignored by git); Python checks it against each source's mtime."""
    import compileall

    import vpol

    package = Path(vpol.__file__).resolve().parent
    if package not in _COMPILED:
        compileall.compile_dir(str(package), quiet=1, workers=0)
        _COMPILED.add(package)


def start_operator(kube: KubeCluster, workdir: Path, extra: Sequence[str] = (), log_name: str = "operator.log"
                   ) -> OperatorProcess:
    """`vpol run` as the vpol-system/vpol ServiceAccount (token), like the e2e tests run it, from bytecode
    (compile_operator)."""
    compile_operator()
    kubeconfig = workdir / "sa-kubeconfig"
    if _SA_KUBECONFIGS.get(kubeconfig) != kube.configuration.host:
        # Written once per cluster of this run: a file left in a reused --workdir holds another cluster's
        # address and token.
        sa_kubeconfig(kube, kubeconfig)
        _SA_KUBECONFIGS[kubeconfig] = kube.configuration.host
    return OperatorProcess(kubeconfig, workdir / log_name, extra=tuple(extra)).start(timeout=120)


# -- memory -----------------------------------------------------------------------------------

def status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def pss_kib(pid: int) -> int:
    """A process's proportional set size (shared pages divided among the processes sharing them), from
    /proc/PID/smaps_rollup; 0 when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


@dataclass
class MemoryPeaks:
    operator_peak_kib: int = 0      # max sampled VmRSS of the operator process
    operator_hwm_kib: int = 0       # its VmHWM (kernel's peak) at the last sample
    operator_now_kib: int = 0
    children_peak_kib: dict[int, int] = field(default_factory=dict)   # pid -> max(VmRSS, VmHWM)
    children_cmd: dict[int, str] = field(default_factory=dict)
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (t, operator, children) KiB

    def _workers(self) -> dict[int, int]:
        """Peaks of the evaluation worker processes (multiprocessing "spawn" children)."""
        return {p: v for p, v in self.children_peak_kib.items() if "spawn_main" in self.children_cmd.get(p, "")}

    @property
    def worker_peak_kib(self) -> int:
        return max(self._workers().values(), default=0)

    @property
    def workers_started(self) -> int:
        return len(self._workers())

    def children_summary(self) -> str:
        """Evaluation workers (count, largest peak) and any other child process."""
        workers = self._workers()
        parts = []
        if workers:
            parts.append(f"{len(workers)} evaluation worker process(es) started, largest peak "
                         f"{max(workers.values()) / 1024:.0f} MiB")
        for pid, kib in sorted(self.children_peak_kib.items()):
            if pid not in workers:
                cmd = self.children_cmd.get(pid, "")
                what = "multiprocessing resource tracker" if "resource_tracker" in cmd else cmd[:60]
                parts.append(f"{what} {kib / 1024:.0f} MiB")
        return "; ".join(parts) or "none"



class MemorySampler(threading.Thread):
    """Samples VmRSS/VmHWM of a process and of every descendant (the evaluation worker) from /proc."""

    def __init__(self, pid: int, interval: float = 0.25):
        super().__init__(daemon=True, name="rss-sampler")
        self.pid = pid
        self.interval = interval
        self.peaks = MemoryPeaks()
        self._halt = threading.Event()
        self._t0 = time.monotonic()

    def sample(self) -> None:
        p = self.peaks
        rss = status_kib(self.pid, "VmRSS")
        if rss:
            p.operator_now_kib = rss
            p.operator_peak_kib = max(p.operator_peak_kib, rss)
            p.operator_hwm_kib = max(p.operator_hwm_kib, status_kib(self.pid, "VmHWM"))
        kids = 0
        for child in descendants(self.pid):
            value = max(status_kib(child, "VmRSS"), status_kib(child, "VmHWM"))
            kids += status_kib(child, "VmRSS")
            if "multiprocessing" not in p.children_cmd.get(child, ""):  # may be sampled before its exec
                p.children_cmd[child] = cmdline(child)[:120]
            p.children_peak_kib[child] = max(p.children_peak_kib.get(child, 0), value)
        p.samples.append((time.monotonic() - self._t0, rss, kids))

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def stop(self) -> MemoryPeaks:
        self._halt.set()
        self.join(5)
        self.sample()
        return self.peaks


# -- CPU ---------------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (0 when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: The local control plane's processes (tests/controlplane: one multi-call binary), by /proc/PID/comm.
CONTROL_PLANE_COMM = "vpol-controlplane"[:15]


#: The state directories of the local control planes this run started (Cluster.start): only their processes are
#: measured, not those of another bench or e2e test running beside it on the machine.
OWN_PLANES: set[Path] = set()


def control_plane_pids() -> list[int]:
    """The processes of the control planes this run started: each supervisor (``up --dir DIR`` with DIR in
    OWN_PLANES) and its descendants; every process named like the control plane when the run started none."""
    pids = pids_named(CONTROL_PLANE_COMM)
    if not OWN_PLANES:
        return pids
    parents: dict[int, int] = {}
    own: set[int] = set()
    for pid in pids:
        try:
            argv = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        parents[pid] = int(stat[stat.rindex(")") + 2:].split()[1])
        dirs = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--dir"]
        dirs += [a.removeprefix("--dir=") for a in argv if a.startswith("--dir=")]
        if any(Path(d).resolve() in OWN_PLANES for d in dirs):
            own.add(pid)
    grew = True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in own} - own
        own |= found
        grew = bool(found)
    return [pid for pid in pids if pid in own]


def control_plane_cpu() -> float:
    """CPU seconds the local control plane's processes (kube-apiserver, etcd, the controller manager) have used
    so far; 0 with --kubeconfig (not measurable from here)."""
    return sum(cpu_seconds(pid) for pid in control_plane_pids())


#: The parts control_plane_parts() tells apart.
CONTROL_PLANE_PARTS = ("kube-apiserver", "kube-controller-manager", "etcd (supervisor)")


def control_plane_parts() -> dict[str, list[int]]:
    """The local control plane's processes by part: kube-apiserver, kube-controller-manager, and the supervisor
    (etcd runs embedded in it), told apart by their command lines (one multi-call binary)."""
    parts: dict[str, list[int]] = {part: [] for part in CONTROL_PLANE_PARTS}
    for pid in control_plane_pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        mode = argv[1].decode() if len(argv) > 1 else ""
        parts[mode if mode in parts else "etcd (supervisor)"].append(pid)
    return parts


def control_plane_memory(state_dir: Path | None) -> list[list[str]]:
    """Rows of the local control plane's memory now: kube-apiserver's and the supervisor's (etcd runs embedded in
    it) resident and peak memory, and etcd's database size (allocated and in use, from its metrics). Empty with
    --kubeconfig."""
    if state_dir is None:
        return []
    rows = []
    for part, pids in control_plane_parts().items():
        if part == "kube-controller-manager" or not pids:
            continue
        rss = sum(status_kib(pid, "VmRSS") for pid in pids) / 1024
        hwm = sum(status_kib(pid, "VmHWM") for pid in pids) / 1024
        rows.append([f"  {part} RSS / peak", f"{rss:.0f} / {hwm:.0f} MiB", ""])
    try:
        port = json.loads((state_dir / "ready.json").read_text())["ports"]["etcd-client"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
    except (OSError, KeyError, ValueError):
        return rows
    size = {name: float(value) for name, value in re.findall(
        r"^(etcd_mvcc_db_total_size(?:_in_use)?_in_bytes) (\S+)$", metrics, re.MULTILINE)}
    if size:
        rows.append(["  etcd database: allocated / in use",
                     f"{size.get('etcd_mvcc_db_total_size_in_bytes', 0) / 2**20:.0f} / "
                     f"{size.get('etcd_mvcc_db_total_size_in_use_in_bytes', 0) / 2**20:.0f} MiB", ""])
    return rows


def pids_named(name: str) -> list[int]:
    """Processes whose command name (/proc/PID/comm) is ``name``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() == name:
                    out.append(int(entry))
            except OSError:
                continue
    return out


class CpuMeter:
    """CPU time per component (named groups of processes) over an interval: where the cores went."""

    def __init__(self, groups: dict[str, Any]):
        #: name -> a callable giving the group's pids now (processes come and go, e.g. restarted workers).
        self.groups = groups
        self._start: dict[str, dict[int, float]] = {}

    def _read(self) -> dict[str, dict[int, float]]:
        return {name: {pid: cpu_seconds(pid) for pid in pids()} for name, pids in self.groups.items()}

    def start(self) -> None:
        self._start = self._read()

    def since_start(self) -> dict[str, float]:
        """CPU seconds each group used since start() (read anew at every call)."""
        now = self._read()
        return {name: sum(t - self._start.get(name, {}).get(pid, 0.0) for pid, t in pids.items())
                for name, pids in now.items()}


def go_binary() -> str:
    """The go command that reads the API server's profiles (PATH's, else the usual install)."""
    return shutil.which("go") or "/usr/local/go/bin/go"


class ApiServerProfile(threading.Thread):
    """A Go CPU profile of the API server over a phase (with ``--profile`` in bench/scan.py).

    The API server profiles only for a duration fixed by the request (``/debug/pprof/profile?seconds=N``,
    served when it runs with ``--profiling=true``, which bench/scan.py asks of the control plane it starts),
    so this records consecutive ``piece``-second profiles until stopped and merges them with ``go tool pprof``
    into ``<out>.pprof``, with the functions by cumulative CPU in ``<out>.top.txt``. A refused request (a
    cluster given by kubeconfig without profiling) is reported once and ends the recording.
    """

    def __init__(self, kube: KubeCluster, out: Path, piece: int = 5):
        super().__init__(daemon=True)
        self.kube, self.out, self.piece = kube, out, piece
        self.pieces: list[Path] = []
        self.error = ""
        #: The merged profile, once stop() made it.
        self.merged: Path | None = None
        self._done = threading.Event()  # not _stop: Thread has a method of that name

    def run(self) -> None:
        from vpol.kube.dynamic import send_encoded

        self.out.parent.mkdir(parents=True, exist_ok=True)
        while not self._done.is_set():
            try:
                data = send_encoded(self.kube.api_client, "GET", "/debug/pprof/profile", None,
                                    query=[("seconds", self.piece)], timeout=(10.0, self.piece + 30.0), accept="*/*")
            except Exception as exc:  # noqa: BLE001 - a bench reports what it could not record and goes on
                self.error = f"the API server's profile was not recorded: {exc}"
                return
            piece = self.out.with_name(f"{self.out.name}.{len(self.pieces)}.pprof")
            piece.write_bytes(data)
            self.pieces.append(piece)

    def stop(self) -> str:
        """Ends the recording (the piece under way is finished first) and merges it; a line saying where it is."""
        self._done.set()
        self.join(self.piece + 60)
        go = go_binary()
        if self.error or not self.pieces:
            return self.error or "no API server profile recorded"
        merged, top_file = (self.out.with_name(f"{self.out.name}{ext}") for ext in (".pprof", ".top.txt"))
        try:
            proto = subprocess.run([go, "tool", "pprof", "-proto", *map(str, self.pieces)], capture_output=True,
                                   check=True, timeout=120).stdout
            merged.write_bytes(proto)
            top = subprocess.run([go, "tool", "pprof", "-top", "-cum", str(merged)], capture_output=True, text=True,
                                 check=True, timeout=120).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            return f"API server profile in {len(self.pieces)} pieces beside {merged} (not merged: {exc})"
        top_file.write_text(top)
        for piece in self.pieces:
            piece.unlink()
        self.merged = merged
        return f"API server profile: {merged} (top functions in {top_file})"


#: What the API server spends CPU on, as regular expressions over the functions of a Go CPU profile, in the
#: order they are counted: each sample goes to the first activity any frame of its stack matches, so the
#: activities do not overlap (e.g. decoding inside schema coercion counts as coercion; admission comes before
#: managed fields, whose admission wrapper holds the admission chain).
API_SERVER_ACTIVITIES: tuple[tuple[str, str], ...] = (
    ("Go garbage collection", r"runtime\.gcBgMarkWorker|runtime\.gcAssist|runtime\.bgsweep|runtime\.bgscavenge"),
    ("admission plugins and webhooks", r"k8s\.io/apiserver/pkg/admission\."),
    ("CRD schema coercion and pruning", r"unstructuredSchemaCoercer"),
    ("OpenAPI schema validation (CRDs)", r"validation\.ValidateCustomResource|RatchetingSchemaValidator"),
    ("other validation, defaulting", r"rest\.BeforeCreate|rest\.BeforeUpdate|rest\.ValidateCreate|"
     r"rest\.ValidateUpdate|defaulting\.|SetDefaults"),
    ("managed fields", r"fieldmanager"),
    ("decoding (JSON, protobuf)", r"\.Decode$|Unmarshal"),
    ("encoding (JSON, protobuf)", r"\.Encode$|Marshal"),
    ("authentication, authorization", r"AuthenticateRequest|AuthenticateToken|\.Authorize$"),
    ("etcd client", r"apiserver/pkg/storage/etcd3\.|go\.etcd\.io|google\.golang\.org/grpc"),
    ("network, TLS", r"crypto/tls|internal/poll|syscall\."),
)


def api_server_activities(profile: Path) -> dict[str, float]:
    """CPU seconds of a Go CPU profile by :data:`API_SERVER_ACTIVITIES` (``go tool pprof`` focused on each,
    ignoring the ones before), the rest as "other", the total as "total"; empty when go cannot read it."""
    go = go_binary()

    def seconds(*flags: str) -> tuple[float, float]:
        """(total samples, the first node's cumulative seconds) of ``pprof -top -cum`` with ``flags``."""
        out = subprocess.run([go, "tool", "pprof", "-top", "-cum", "-nodecount=1", *flags, str(profile)],
                             capture_output=True, text=True, timeout=120).stdout
        total = re.search(r"Total samples = ([0-9.]+)(m?s)", out)
        if total is None:
            return 0.0, 0.0
        node = 0.0
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 6 and f[1].endswith("%") and f[4].endswith("%"):
                node = float(f[3].rstrip("ms")) / (1000 if f[3].endswith("ms") else 1)
                break
        return float(total.group(1)) / (1000 if total.group(2) == "ms" else 1), node

    try:
        total, _ = seconds()
        if not total:
            return {}
        out: dict[str, float] = {}
        before: list[str] = []
        for name, pattern in API_SERVER_ACTIVITIES:
            _, out[name] = seconds("-focus", pattern, *(["-ignore", "|".join(before)] if before else []))
            before.append(pattern)
    except (OSError, subprocess.SubprocessError):
        return {}
    out["other"] = max(0.0, total - sum(out.values()))
    out["total"] = total
    return out


# -- metrics ----------------------------------------------------------------------------------

def scrape(op: OperatorProcess, names: Sequence[str] = ()) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The operator's /metrics as {(sample name, sorted labels): value}; only the samples ``names`` when given
    (benches poll a few of them often: rendering and parsing all of them costs both processes CPU)."""
    return parse_samples(op.metrics(names))


#: One label of a sample line: name="value" (the value with \\, \" and \n escaped).
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(value: str) -> str:
    return re.sub(r"\\.", lambda m: _UNESCAPE.get(m.group(0), m.group(0)), value)


def parse_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of a Prometheus text exposition, as scrape() returns them.

    Written here rather than taken from prometheus_client's parser, which builds and validates a metric family
    and a Sample per line: 107 ms against 24 ms for the 3,200 lines of per-policy, per-namespace series the scan
    bench reads at 10,000 Pods, twice a second, on the cores it measures (the same samples either way). Samples
    only (comments skipped), as the benches use them."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        if brace < 0:
            name, _, rest = line.partition(" ")
            labels: tuple[tuple[str, str], ...] = ()
        else:
            close = line.rindex("}")
            name, rest = line[:brace], line[close + 1:]
            labels = tuple(sorted((k, _unescape(v) if "\\" in v else v)
                                  for k, v in _LABEL.findall(line, brace + 1, close)))
        out[(name, labels)] = float(rest.split()[0])
    return out


def apiserver_requests(api_client: Any) -> Counter[tuple[str, str, str]]:
    """The API server's requests so far (apiserver_request_total) by (verb, resource, subresource); empty when
    /metrics cannot be read (another cluster's API server may not allow it)."""
    out: Counter[tuple[str, str, str]] = Counter()
    try:
        method, url, headers, _body, _post = api_client.param_serialize(
            method="GET", resource_path="/metrics", header_params={"Accept": "text/plain"},
            auth_settings=["BearerToken"])
        resp = api_client.call_api(method, url, header_params=headers)
        resp.read()
        text = resp.data.decode()
    except Exception:  # noqa: BLE001 - a diagnostic only: no figures rather than no bench
        return out
    for (name, labels), value in parse_samples(text).items():
        if name == "apiserver_request_total":
            d = dict(labels)
            out[(d.get("verb", ""), d.get("resource", ""), d.get("subresource", ""))] += int(value)
    return out


def metric_sum(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    total = 0.0
    for (sname, slabels), value in samples.items():
        if sname != name:
            continue
        d = dict(slabels)
        if all(d.get(k) == v for k, v in labels.items()):
            total += value
    return total


# -- numbers ----------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def table(rows: Iterable[Sequence[str]], header: Sequence[str]) -> str:
    """A Markdown table (also readable in a terminal)."""
    rows = [list(map(str, r)) for r in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) if rows else len(str(h)) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    out = [line([str(h) for h in header]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def wait_until(predicate: Any, timeout: float, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)

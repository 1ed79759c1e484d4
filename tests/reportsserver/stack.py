"""Kyverno's reports-server in front of a PostgreSQL of its own, on a local control plane: the pieces the
reports-server end-to-end test (tests/e2e/test_reports_server.py) and the scan benchmark's ``--reports-server``
(bench/scan.py) share.

reports-server (github.com/kyverno/reports-server, built from the shared source by tests/reportsserver/build) is
an aggregated API server: the APIService ``v1alpha2.wgpolicyk8s.io`` sends every request for PolicyReports and
ClusterPolicyReports to it, and it keeps them in PostgreSQL instead of etcd. Here it runs as a host process, as
its chart runs it in a Pod: the report CRDs stay installed, it registers the APIService itself (pointing at a
Service ``reports-server/reports-server``, which replaces the API server's own local APIService for the CRDs'
group-version), and it is reached through that Service's EndpointSlice at the host's address. The control plane
must be started with ``--enable-aggregator-routing=true`` (which ``cluster start`` sets only with ``--node``), so
the API server dials the endpoint, not the Service's cluster IP, which nothing routes here. Its database is a
PostgreSQL 15 (Debian's packages: ``initdb``, ``pg_ctl``, ``psql``) in a temporary directory, on its own port and
socket directory.

Not a test module: nothing here calls pytest. What is missing to run PostgreSQL is raised as
:class:`Unavailable` (the test turns it into a skip, or a failure under CI); anything else that goes wrong is a
RuntimeError (or the AssertionError of a wait that timed out).
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.e2e.conftest import KubeCluster
from tests.e2e.operator_process import REPO, end, free_port, log_tail

#: Builds reports-server once per machine and prints the binary's path.
BUILD = REPO / "tests" / "reportsserver" / "build"
#: Where reports-server's chart installs it, and the names its APIService points at (--servicename, --servicens).
NAMESPACE = SERVICE = "reports-server"
DATABASE, DB_USER = "reportsdb", "postgres"
APISERVICE = "v1alpha2.wgpolicyk8s.io"
#: The APIService reports-server registers (and its chart and config/samples/apiservices.yaml describe).
APISERVICE_SPEC = {"group": "wgpolicyk8s.io", "version": "v1alpha2", "groupPriorityMinimum": 100,
                   "versionPriority": 100, "insecureSkipTLSVerify": True,
                   "service": {"name": SERVICE, "namespace": NAMESPACE, "port": 443}}
AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"
#: The API server argument the control plane needs (see the module's docstring).
APISERVER_ARGS = ("--enable-aggregator-routing=true",)


class Unavailable(Exception):
    """Something this host lacks to run the stack (a PostgreSQL tool, an account to run it as)."""


def tool(name: str, why: str) -> str:
    """The path of a command the stack needs; :class:`Unavailable` when it is not installed."""
    path = shutil.which(name)
    if path is None:
        raise Unavailable(f"{name} is not installed: {why}")
    return path


# ------------------------------------------------------------------------------------------ PostgreSQL


class PostgreSQL:
    """A PostgreSQL server of its own: a fresh cluster directory (``initdb``) in a temporary directory,
    listening on 127.0.0.1 and a socket directory of its own, on a free port. PostgreSQL refuses to run as root:
    as root, it runs as the ``postgres`` account Debian's packages create."""

    def __init__(self, prefix: str = "vpol-e2e-postgres-") -> None:
        self.initdb = tool("initdb", "reports-server's database (PostgreSQL 15, Debian's packages)")
        self.pg_ctl = tool("pg_ctl", "reports-server's database (PostgreSQL 15, Debian's packages)")
        self.psql_bin = tool("psql", "reports-server's tables are read with it")
        self.account: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                self.account = pwd.getpwnam("postgres")
            except KeyError:
                raise Unavailable("PostgreSQL refuses to run as root, and there is no postgres account to run it "
                                  "as") from None
        # Not under pytest's temporary directory: the postgres account must be able to reach it.
        self.dir = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp" if self.account else None))
        self.data, self.socket_dir, self.log_path = self.dir / "data", self.dir / "socket", self.dir / "postgres.log"
        self.socket_dir.mkdir()
        self.port = free_port()
        self.password = secrets.token_hex(12)
        if self.account:
            for path in (self.dir, self.socket_dir):
                os.chown(path, self.account.pw_uid, self.account.pw_gid)

    def _as_owner(self, *cmd: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, Any] = {}
        if self.account:
            kwargs = {"user": self.account.pw_uid, "group": self.account.pw_gid, "extra_groups": []}
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.dir, env=env,
                              stdin=subprocess.DEVNULL, **kwargs)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}\n{self.log()}")
        return proc

    def start(self) -> "PostgreSQL":
        pwfile = self.dir / "password"
        pwfile.write_text(self.password + "\n")
        if self.account:
            os.chown(pwfile, self.account.pw_uid, self.account.pw_gid)
        # Password authentication over TCP (reports-server's connection, as in a cluster), trust on the socket
        # (psql here).
        self._as_owner(self.initdb, "-D", str(self.data), "-U", DB_USER, "--pwfile", str(pwfile),
                       "--auth-host=scram-sha-256", "--auth-local=trust", "--no-sync", "-E", "UTF8")
        pwfile.unlink()
        options = (f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off")
        self._as_owner(self.pg_ctl, "start", "-D", str(self.data), "-l", str(self.log_path), "-w", "-t", "60",
                       "-o", options)
        self.psql(f"CREATE DATABASE {DATABASE}", database="postgres")
        return self

    def psql(self, query: str, database: str = DATABASE) -> list[list[str]]:
        """The rows ``query`` returns, each a list of its columns as text."""
        proc = subprocess.run([self.psql_bin, "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1",
                               "-h", str(self.socket_dir), "-p", str(self.port), "-U", DB_USER, "-d", database,
                               "-c", query], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"psql failed: {proc.stderr}\n{self.log()}")
        return [line.split("\t") for line in proc.stdout.splitlines() if line]

    def database_size(self) -> int:
        """Bytes the reports database takes on disk (``pg_database_size``: tables, indexes, TOAST)."""
        return int(self.psql(f"SELECT pg_database_size('{DATABASE}')")[0][0])

    def pids(self) -> list[int]:
        """The server's processes now: the postmaster (first line of postmaster.pid) and its children (the
        background workers and one backend per connection); empty when it is not running."""
        try:
            postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        children = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                if int(stat[stat.rindex(")") + 2:].split()[1]) == postmaster:
                    children.append(int(entry))
        return [postmaster, *children]

    def log(self) -> str:
        return log_tail(self.log_path, 3000)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._as_owner(self.pg_ctl, "stop", "-D", str(self.data), "-m", "fast", "-w", "-t", "60")

    def remove(self, keep_log: Path) -> None:
        if self.log_path.exists():
            shutil.copy(self.log_path, keep_log)
        shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------------------- reports-server


def host_address() -> str:
    """An IPv4 address of this host that is not loopback: the API server dials it (an EndpointSlice may not
    name a loopback address)."""
    out = subprocess.run(["ip", "-j", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True,
                         check=True, timeout=10).stdout
    for link in json.loads(out):
        for addr in link.get("addr_info") or []:
            if addr.get("family") == "inet" and addr.get("local"):
                return str(addr["local"])
    raise RuntimeError(f"no global IPv4 address on this host: {out}")


class ReportsServer:
    """reports-server as a host process, serving HTTPS on the host's address with the certificates it makes
    itself (``--cert-dir``; the APIService skips verifying them, as its chart's does), connected to ``db``."""

    def __init__(self, binary: Path, cluster: KubeCluster, db: PostgreSQL, workdir: Path, address: str):
        self.binary, self.cluster, self.db, self.workdir, self.address = binary, cluster, db, workdir, address
        self.port = free_port()
        self.log_path = workdir / "reports-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "ReportsServer":
        kubeconfig = self.cluster.kubeconfig
        args = [str(self.binary), "--kubeconfig", kubeconfig,
                "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
                "--bind-address", self.address, "--secure-port", str(self.port),
                "--cert-dir", str(self.workdir / "certs"),
                # what the chart passes: the Service its APIServices point at; only wgpolicyk8s.io's reports here
                # (the chart's apiServicesManagement.installApiServices: Kyverno's ephemeral reports and
                # openreports.io are none of vpol's)
                "--servicename", SERVICE, "--servicens", NAMESPACE, "--clusterrolename=",
                "--storereports=true", "--storeephemeralreports=false", "--storeopenreports=false",
                "--dbsslmode=disable", "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"]
        # The database's address and credentials come from the environment only (as the chart sets them).
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env.update(DB_HOST="127.0.0.1", DB_PORT=str(self.db.port), DB_DATABASE=DATABASE, DB_USER=DB_USER,
                   DB_PASSWORD=self.db.password, POD_IP=self.address)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir)
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return log_tail(self.log_path, 5000)

    def stop(self) -> None:
        if self.proc is not None:
            end(self.proc)
            self._log.close()


def apiservice(cluster: KubeCluster) -> dict[str, Any]:
    return dict(json.loads(cluster.kubectl("get", "apiservice", APISERVICE, "-o", "json").stdout))


def available(cluster: KubeCluster) -> bool:
    conditions = apiservice(cluster).get("status", {}).get("conditions") or []
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


def wait_served(cluster: KubeCluster, server: ReportsServer) -> None:
    """Until the API server sends wgpolicyk8s.io to reports-server and reports-server answers."""
    def served() -> bool:
        assert server.running(), f"reports-server exited:\n{server.log()}"
        spec = apiservice(cluster)["spec"]
        return spec.get("service") is not None and available(cluster)
    if not _wait(served, 120, 1):
        raise AssertionError("timed out waiting for the APIService to be served by reports-server\n"
                             f"APIService: {apiservice(cluster)}\nreports-server:\n{server.log()}")


def _wait(predicate: Callable[[], bool], timeout: float, interval: float) -> bool:
    """Whether ``predicate`` held within ``timeout`` seconds, asked every ``interval``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def _apply(cluster: KubeCluster, obj: dict[str, Any], manager: str) -> None:
    cluster.kubectl("apply", "--server-side", f"--field-manager={manager}", "-f", "-", input=json.dumps(obj))


def serve_reports(cluster: KubeCluster, binary: Path, db: PostgreSQL, workdir: Path,
                  manager: str = "vpol-e2e") -> ReportsServer:
    """reports-server in front of the report CRDs (installed already, with vpol): its namespace, a Service
    without selector and the EndpointSlice naming the host process (``manager``: their field manager and the
    slice's managed-by), then the process, started and waited for until the API server sends it wgpolicyk8s.io;
    stopped again when that fails."""
    address = host_address()
    server = ReportsServer(binary, cluster, db, workdir, address)
    _apply(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, manager)
    _apply(cluster, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": NAMESPACE},
                     "spec": {"type": "ClusterIP", "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                                              "targetPort": server.port}]}}, manager)
    _apply(cluster, {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                     "metadata": {"name": f"{SERVICE}-host", "namespace": NAMESPACE,
                                  "labels": {"kubernetes.io/service-name": SERVICE,
                                             "endpointslice.kubernetes.io/managed-by": manager}},
                     "addressType": "IPv4",
                     "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
                     "ports": [{"name": "https", "port": server.port, "protocol": "TCP"}]}, manager)
    # Before reports-server: the API server serves the CRDs' group-version itself (a local APIService).
    before = apiservice(cluster)
    if before["spec"].get("service") is not None or not (before["metadata"].get("labels") or {}).get(AUTOMANAGED):
        raise RuntimeError(f"the APIService {APISERVICE} is not the API server's own before reports-server: {before}")
    server.start()
    try:
        wait_served(cluster, server)
    except BaseException:
        server.stop()
        raise
    return server


@contextmanager
def reports_stack(cluster: KubeCluster, binary: Path, workdir: Path, manager: str = "vpol-e2e",
                  prefix: str = "vpol-postgres-") -> Iterator[tuple[PostgreSQL, ReportsServer]]:
    """PostgreSQL, then reports-server in front of it (serve_reports), for the time of the ``with``; both stopped
    at its end, also on failure, PostgreSQL's directory removed and its log kept as ``workdir/postgres.log``."""
    workdir.mkdir(parents=True, exist_ok=True)
    db = PostgreSQL(prefix)
    try:
        db.start()
        server = serve_reports(cluster, binary, db, workdir, manager)
        try:
            yield db, server
        finally:
            server.stop()
    finally:
        try:
            db.stop()
        finally:
            db.remove(workdir / "postgres.log")

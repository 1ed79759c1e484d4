"""vpol's reports kept in PostgreSQL by Kyverno's reports-server (github.com/kyverno/reports-server, built from the
shared source by tests/reportsserver/build), on a control plane of the module's own.

reports-server is an aggregated API server: the APIService ``v1alpha2.wgpolicyk8s.io`` sends every request for
PolicyReports and ClusterPolicyReports to it, and it keeps them in a database instead of etcd. Here it runs as a
host process, as its chart runs it in a Pod: the report CRDs stay installed, it registers the APIService itself
(pointing at a Service ``reports-server/reports-server``, which replaces the API server's own local APIService for
the CRDs' group-version), and it is reached through that Service's EndpointSlice at the host's address: the
module's control plane is started with ``--enable-aggregator-routing=true`` (which ``cluster start`` sets only with
``--node``), so the API server dials the endpoint, not the Service's cluster IP, which nothing routes here. Its
database is a PostgreSQL 15 of the test's own (Debian's packages: ``initdb``, ``pg_ctl``, ``psql``) in a
temporary directory, on its own port and socket directory, stopped at the end.

vpol runs unchanged: it writes its reports through the API as always. The tests show that

* the reports a vpol scan writes are rows of reports-server's tables (read with ``psql``), exactly the reports
  the API lists (``kubectl get polr -A`` and the Python client), and that the API server's own storage does not
  hold them;
* they survive a restart of reports-server (stopped, the API server serves the CRDs' empty storage again; started,
  the same reports, same UIDs and resourceVersions, come back), and vpol, restarted after it, reads them back and
  rewrites none;
* Policy Reporter (tests/policyreporter/build) reads them through the aggregated API and counts every result;
* vpol's later writes take the same way: a changed resource's report changes in its row, a deleted resource's
  report leaves the table.
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
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.conftest import KubeCluster, LocalClusters, e2e_required, go_built, unique_name
from tests.e2e.operator_process import REPO, OperatorProcess, end, free_port, log_tail, sa_kubeconfig
from tests.e2e.test_policy_reporter import (
    NAMESPACES,
    PolicyReporter,
    Row,
    Scenario,
    apply,
    cm_policy,
    rows,
    settled,
    vpol_reports,
)
from tests.e2e.test_policy_reporter_ui import required_tool
from tests.e2e.vpol_fixtures import install_vpol, operator_stopped, wait_for

BUILD = REPO / "tests" / "reportsserver" / "build"
BUILD_POLICY_REPORTER = REPO / "tests" / "policyreporter" / "build"
SOURCE = "vpol"
#: Where reports-server's chart installs it, and the names its APIService points at (--servicename, --servicens).
NAMESPACE = SERVICE = "reports-server"
DATABASE, DB_USER = "reportsdb", "postgres"
APISERVICE = "v1alpha2.wgpolicyk8s.io"
#: The APIService reports-server registers (and its chart and config/samples/apiservices.yaml describe).
APISERVICE_SPEC = {"group": "wgpolicyk8s.io", "version": "v1alpha2", "groupPriorityMinimum": 100,
                   "versionPriority": 100, "insecureSkipTLSVerify": True,
                   "service": {"name": SERVICE, "namespace": NAMESPACE, "port": 443}}
AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"


# ------------------------------------------------------------------------------------------ PostgreSQL


class PostgreSQL:
    """A PostgreSQL server of the test's own: a fresh cluster directory (``initdb``) in a temporary directory,
    listening on 127.0.0.1 and a socket directory of its own, on a free port. PostgreSQL refuses to run as root:
    as root, it runs as the ``postgres`` account Debian's packages create."""

    def __init__(self) -> None:
        self.initdb = required_tool("initdb", "reports-server's database (PostgreSQL 15, Debian's packages)")
        self.pg_ctl = required_tool("pg_ctl", "reports-server's database (PostgreSQL 15, Debian's packages)")
        self.psql_bin = required_tool("psql", "the test reads reports-server's tables with it")
        self.account: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                self.account = pwd.getpwnam("postgres")
            except KeyError:
                message = "PostgreSQL refuses to run as root, and there is no postgres account to run it as"
                if e2e_required():
                    pytest.fail(message, pytrace=False)
                pytest.skip(message)
        # Not under pytest's temporary directory: the postgres account must be able to reach it.
        self.dir = Path(tempfile.mkdtemp(prefix="vpol-e2e-postgres-", dir="/tmp" if self.account else None))
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
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}\n{self.log()}"
        return proc

    def start(self) -> "PostgreSQL":
        pwfile = self.dir / "password"
        pwfile.write_text(self.password + "\n")
        if self.account:
            os.chown(pwfile, self.account.pw_uid, self.account.pw_gid)
        # Password authentication over TCP (reports-server's connection, as in a cluster), trust on the socket
        # (the test's psql).
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
        assert proc.returncode == 0, f"psql failed: {proc.stderr}\n{self.log()}"
        return [line.split("\t") for line in proc.stdout.splitlines() if line]

    def log(self) -> str:
        return log_tail(self.log_path, 3000)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._as_owner(self.pg_ctl, "stop", "-D", str(self.data), "-m", "fast", "-w", "-t", "60")

    def remove(self, keep_log: Path) -> None:
        if self.log_path.exists():
            shutil.copy(self.log_path, keep_log)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgreSQL]:
    db = PostgreSQL()
    try:
        yield db.start()
    finally:
        try:
            db.stop()
        finally:
            db.remove(tmp_path_factory.mktemp("postgres-log") / "postgres.log")


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
    raise AssertionError(f"no global IPv4 address on this host: {out}")


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
    try:
        wait_for("the APIService to be served by reports-server", served, 120, 1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nAPIService: {apiservice(cluster)}\nreports-server:\n{server.log()}") from None


@pytest.fixture(scope="module")
def reports_server_binary() -> Path:
    return Path(go_built(BUILD, "reports-server"))


@pytest.fixture(scope="module")
def routed_cluster(controlplane_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """A control plane of the module's own whose API server dials the endpoints of an APIService's Service
    (``--enable-aggregator-routing=true``, as ``cluster start --node`` sets it): nothing routes a Service's
    cluster IP to a host process here."""
    clusters = LocalClusters(controlplane_binary)
    try:
        cluster = clusters.start(tmp_path_factory.mktemp("rs-controlplane"),
                                 apiserver_args=["--enable-aggregator-routing=true"])
        yield cluster
        cluster.close()
    finally:
        clusters.stop_all()


@pytest.fixture(scope="module")
def reports_server(reports_server_binary: Path, routed_cluster: KubeCluster, postgres: PostgreSQL,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReportsServer]:
    """vpol installed (its CRDs and the report CRDs, as always), then reports-server in front of them: its
    namespace, a Service without selector and the EndpointSlice naming the host process, and the process."""
    cluster = routed_cluster
    install_vpol(cluster)
    address = host_address()
    server = ReportsServer(reports_server_binary, cluster, postgres, tmp_path_factory.mktemp("reports-server"),
                           address)
    apply(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    apply(cluster, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": NAMESPACE},
                    "spec": {"type": "ClusterIP", "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                                             "targetPort": server.port}]}})
    apply(cluster, {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": f"{SERVICE}-host", "namespace": NAMESPACE,
                                 "labels": {"kubernetes.io/service-name": SERVICE,
                                            "endpointslice.kubernetes.io/managed-by": "vpol-e2e"}},
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
                    "ports": [{"name": "https", "port": server.port, "protocol": "TCP"}]})
    # Before reports-server: the API server serves the CRDs' group-version itself (a local APIService).
    before = apiservice(cluster)
    assert before["spec"].get("service") is None and before["metadata"]["labels"].get(AUTOMANAGED), before
    server.start()
    try:
        wait_served(cluster, server)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def operator(reports_server: ReportsServer, routed_cluster: KubeCluster,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """vpol, started once reports-server serves the reports, as its ServiceAccount (its RBAC for the reports is
    checked by reports-server, through the API server)."""
    tmp = tmp_path_factory.mktemp("rs-operator")
    op = OperatorProcess(sa_kubeconfig(routed_cluster, tmp / "kubeconfig"), tmp / "operator.log",
                         extra=("--scan-interval", "20")).start()
    yield op
    op.stop()


@pytest.fixture(scope="module")
def scenario(routed_cluster: KubeCluster, operator: OperatorProcess) -> Scenario:
    """ConfigMaps in two namespaces and three Audit policies: two on ConfigMaps (PolicyReports, pass and fail),
    one on the namespaces (ClusterPolicyReports)."""
    cluster = routed_cluster
    token = unique_name("rs")
    label = {"rs-e2e": token}
    a, b = f"{token}-a", f"{token}-b"
    for ns in (a, b):
        apply(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": label}})
    for ns, name, data in ((a, "complete", {"owner": "x", "team": "y"}), (a, "bare", {}),
                           (b, "owner-only", {"owner": "x"}), (b, "team-only", {"team": "y"})):
        apply(cluster, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
                        "data": data})
    selector = {"matchLabels": label}
    policies = [
        cm_policy(f"{token}-owner", "owner", selector, {"policies.kyverno.io/severity": "high",
                                                         "policies.kyverno.io/category": "Best Practices"}),
        cm_policy(f"{token}-team", "team", selector, {"policies.kyverno.io/severity": "low"}),
        {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
         "metadata": {"name": f"{token}-namespace-team", "annotations": {
             "policies.kyverno.io/severity": "medium", "policies.kyverno.io/category": "Multi-Tenancy"}},
         "spec": {"validationActions": ["Audit"],
                  "matchConstraints": {"resourceRules": [NAMESPACES], "objectSelector": selector},
                  "validations": [{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
                                   "message": "namespaces need a team label"}]}},
    ]
    for pol in policies:
        apply(cluster, pol)
    names = [pol["metadata"]["name"] for pol in policies]
    for name in names:
        cluster.kubectl("wait", "--for=condition=Ready", f"validatingpolicies.policies.kyverno.io/{name}",
                        "--timeout=120s", timeout=150)
    scenario = Scenario([a, b], names)
    wait_for("vpol's reports and metrics to settle", lambda: settled(cluster, operator, scenario), 180, 3)
    return scenario


# ------------------------------------------------------------------------------------------------ reads


def kube_system_uid(cluster: KubeCluster) -> str:
    """reports-server keys its rows by the cluster's id: the UID of the kube-system namespace."""
    kube_system: Any = client.CoreV1Api(cluster.api_client).read_namespace("kube-system")
    return str(kube_system.metadata.uid)


def database_rows(db: PostgreSQL, cluster: KubeCluster) -> set[tuple[str, ...]]:
    """Every result of vpol's reports in reports-server's tables: (namespace, report, kind, name, policy, result)."""
    where = (f"cluster_id = '{kube_system_uid(cluster)}' "
             "AND report->'metadata'->'labels'->>'app.kubernetes.io/managed-by' = 'vpol'")
    found = db.psql(
        "SELECT namespace, name, report->'scope'->>'kind', report->'scope'->>'name', r->>'policy', r->>'result' "
        f"FROM policyreports, jsonb_array_elements(report->'results') r WHERE {where} "
        "UNION ALL "
        "SELECT '', name, report->'scope'->>'kind', report->'scope'->>'name', r->>'policy', r->>'result' "
        f"FROM clusterpolicyreports, jsonb_array_elements(report->'results') r WHERE {where}")
    out = {tuple(row) for row in found}
    assert len(out) == len(found), found  # one row per result
    return out


def as_database(found: set[Row]) -> set[tuple[str, ...]]:
    return {(r.namespace, r.report, r.kind, r.name, r.policy, r.status) for r in found}


def identities(reports: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(namespace, name) -> (uid, resourceVersion, results as JSON) of each report."""
    return {(r["metadata"].get("namespace", ""), r["metadata"]["name"]):
            (r["metadata"]["uid"], r["metadata"]["resourceVersion"], json.dumps(r.get("results"), sort_keys=True))
            for r in reports}


def scenario_rows(cluster: KubeCluster, scenario: Scenario) -> set[Row]:
    return {r for r in rows(vpol_reports(cluster)) if r.policy in scenario.policies}


# ------------------------------------------------------------------------------------------------ tests


def test_the_aggregated_api_is_reports_servers(routed_cluster: KubeCluster, reports_server: ReportsServer) -> None:
    """reports-server took over the report CRDs' group-version: its APIService (the chart's) replaced the API
    server's local one, and discovery names its resources; the CRDs are still installed."""
    svc = apiservice(routed_cluster)
    assert {k: svc["spec"].get(k) for k in APISERVICE_SPEC} == APISERVICE_SPEC
    assert AUTOMANAGED not in (svc["metadata"].get("labels") or {})
    assert available(routed_cluster)
    resources = json.loads(routed_cluster.kubectl("get", "--raw", "/apis/wgpolicyk8s.io/v1alpha2").stdout)
    assert {r["name"] for r in resources["resources"]} >= {"policyreports", "clusterpolicyreports"}
    for crd in ("policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io"):
        routed_cluster.kubectl("get", "crd", crd)


def test_vpols_reports_are_rows_of_postgresql(routed_cluster: KubeCluster, postgres: PostgreSQL,
                                              scenario: Scenario) -> None:
    """Every result of every report vpol wrote is a row of reports-server's tables, and the API lists exactly
    those reports (kubectl, the Python client)."""
    found = scenario_rows(routed_cluster, scenario)
    assert {r.policy for r in found} == set(scenario.policies)
    assert {r.status for r in found} == {"pass", "fail"}
    assert {r.namespace for r in found} == {"", *scenario.namespaces}  # PolicyReports and ClusterPolicyReports
    in_db = database_rows(postgres, routed_cluster)
    assert {x for x in in_db if x[4] in scenario.policies} == as_database(found)
    # all of vpol's reports the API lists are in the database, and nothing else of vpol's is there
    assert in_db == as_database(rows(vpol_reports(routed_cluster)))

    listed = routed_cluster.kubectl("get", "polr", "-A", "-l", "app.kubernetes.io/managed-by=vpol").stdout
    names = {(line.split()[0], line.split()[1]) for line in listed.splitlines()[1:]}
    assert names == {(r.namespace, r.report) for r in found if r.namespace}
    listed = routed_cluster.kubectl("get", "cpolr", "-l", "app.kubernetes.io/managed-by=vpol", "-o", "name").stdout
    assert {line.split("/", 1)[1] for line in listed.split()} >= {r.report for r in found if not r.namespace}


def test_reports_survive_a_restart_of_reports_server(routed_cluster: KubeCluster, postgres: PostgreSQL,
                                                     reports_server: ReportsServer, operator: OperatorProcess,
                                                     scenario: Scenario) -> None:
    """Stopped, reports-server hands the group-version back to the API server, whose own storage (etcd) holds
    none of vpol's reports; started again, it serves the same reports from PostgreSQL. vpol, restarted after it,
    reads them back and rewrites none."""
    cluster = routed_cluster
    before = identities(vpol_reports(cluster))
    rows_before = database_rows(postgres, cluster)
    assert before and rows_before
    with operator_stopped(operator):  # nothing writes reports while reports-server is away
        reports_server.stop()
        # the last replica of reports-server, on its way out, points the APIService back at the API server
        wait_for("the APIService to be local again", lambda: apiservice(cluster)["spec"].get("service") is None
                 and available(cluster), 60, 1)
        # the API server's own storage (etcd) never had them
        wait_for("the API server to list the CRDs' storage", lambda: vpol_reports(cluster) == [], 30, 1)
        assert database_rows(postgres, cluster) == rows_before

        reports_server.start()
        wait_served(cluster, reports_server)
        assert identities(vpol_reports(cluster)) == before
    # vpol again (a new process): it reads its reports back through reports-server, and they stay as they are
    wait_for("vpol's first scan after its restart", lambda: operator.metric_value(
        "vpol_scan_last_success_timestamp_seconds", {}) > 0, 120, 1)
    time.sleep(5)
    assert operator.metric_value("vpol_report_writes_total", {"action": "apply"}) == 0, operator.log()
    assert identities(vpol_reports(cluster)) == before
    assert database_rows(postgres, cluster) == rows_before


def test_policy_reporter_counts_them(routed_cluster: KubeCluster, scenario: Scenario,
                                     reports_server: ReportsServer, tmp_path: Path) -> None:
    """Policy Reporter, reading through the aggregated API, finds every result: per policy and status, per
    namespace, and the reports with their summaries."""
    binary = Path(go_built(BUILD_POLICY_REPORTER, "Policy Reporter"))
    found = scenario_rows(routed_cluster, scenario)
    pr = PolicyReporter(binary, routed_cluster, tmp_path / "policy-reporter", None)
    try:
        wait_for("Policy Reporter to be ready", pr.ready, 120, 1)

        def policy_counts() -> dict[str, dict[str, int]]:
            return {p["policy"]: {s: n for s, n in p["results"].items() if n}
                    for p in pr.get("/v2/policies", sources=SOURCE)}
        expected = {policy: dict(Counter(r.status for r in found if r.policy == policy))
                    for policy in scenario.policies}
        wait_for("Policy Reporter to count every result", lambda: policy_counts() == expected, 90, 2)

        namespaced = {r for r in found if r.namespace}
        by_namespace = pr.get(f"/v2/namespace-scoped/{SOURCE}/status-counts")
        for ns in scenario.namespaces:
            counts = Counter(r.status for r in namespaced if r.namespace == ns)
            assert {s: n for s, n in by_namespace[ns].items() if n} == dict(counts), (ns, by_namespace)
        cluster_counts = pr.get(f"/v2/cluster-scoped/{SOURCE}/status-counts")
        assert {s: n for s, n in cluster_counts.items() if n} == \
            dict(Counter(r.status for r in found if not r.namespace))

        reports = {r["metadata"]["name"]: r for r in vpol_reports(routed_cluster)}
        shown = pr.get("/v1/policy-reports", sources=SOURCE)["items"] + \
            pr.get("/v1/cluster-policy-reports", sources=SOURCE)["items"]
        assert {r["name"] for r in shown} >= {r.report for r in found}
        for r in shown:
            summary = reports[r["name"]]["summary"]
            assert {k: r[k] for k in summary} == summary, r["name"]
    except (AssertionError, ApiException):
        print(pr.log())
        raise
    finally:
        pr.stop()


def test_changes_and_deletions_reach_postgresql(routed_cluster: KubeCluster, postgres: PostgreSQL,
                                                scenario: Scenario, operator: OperatorProcess) -> None:
    """vpol's later writes go the same way: a changed resource's report is rewritten in its row, a deleted
    resource's report leaves the table."""
    cluster = routed_cluster
    a, b = scenario.namespaces
    owner_policy = scenario.policies[0]
    core = client.CoreV1Api(cluster.api_client)
    bare: Any = core.read_namespaced_config_map("bare", a)
    gone: Any = core.read_namespaced_config_map("owner-only", b)
    bare_report, gone_report = f"vpol-{bare.metadata.uid}", f"vpol-{gone.metadata.uid}"
    assert (a, bare_report, "ConfigMap", "bare", owner_policy, "fail") in database_rows(postgres, cluster)
    assert any(x[1] == gone_report for x in database_rows(postgres, cluster))

    core.patch_namespaced_config_map("bare", a, {"data": {"owner": "someone"}})
    core.delete_namespaced_config_map("owner-only", b)

    def changed() -> bool:
        found = database_rows(postgres, cluster)
        return ((a, bare_report, "ConfigMap", "bare", owner_policy, "pass") in found
                and not any(x[1] == gone_report for x in found))
    wait_for("the changed report in its row and the deleted one out of the table", changed, 90, 1)
    # and the API says the same
    assert database_rows(postgres, cluster) == as_database(rows(vpol_reports(cluster)))

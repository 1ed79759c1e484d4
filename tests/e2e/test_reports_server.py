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
These pieces (PostgreSQL, reports-server, the Service and EndpointSlice) are tests/reportsserver/stack.py's,
which bench/scan.py --reports-server shares.

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
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.conftest import KubeCluster, LocalClusters, e2e_required, go_built, unique_name
from tests.e2e.operator_process import REPO, OperatorProcess, sa_kubeconfig
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
from tests.e2e.vpol_fixtures import install_vpol, operator_stopped, wait_for
from tests.reportsserver.stack import (
    APISERVER_ARGS,
    APISERVICE_SPEC,
    AUTOMANAGED,
    PostgreSQL,
    ReportsServer,
    Unavailable,
    apiservice,
    available,
    serve_reports,
    wait_served,
)

BUILD = REPO / "tests" / "reportsserver" / "build"
BUILD_POLICY_REPORTER = REPO / "tests" / "policyreporter" / "build"
SOURCE = "vpol"


# ------------------------------------------------------------------------------------------ PostgreSQL


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgreSQL]:
    try:
        db = PostgreSQL()
    except Unavailable as exc:  # a local run without PostgreSQL skips, CI (CI=true, VPOL_REQUIRE_E2E=1) fails
        if e2e_required():
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))
    try:
        yield db.start()
    finally:
        try:
            db.stop()
        finally:
            db.remove(tmp_path_factory.mktemp("postgres-log") / "postgres.log")


# --------------------------------------------------------------------------------------- reports-server


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
                                 apiserver_args=list(APISERVER_ARGS))
        yield cluster
        cluster.close()
    finally:
        clusters.stop_all()


@pytest.fixture(scope="module")
def reports_server(reports_server_binary: Path, routed_cluster: KubeCluster, postgres: PostgreSQL,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReportsServer]:
    """vpol installed (its CRDs and the report CRDs, as always), then reports-server in front of them: its
    namespace, a Service without selector and the EndpointSlice naming the host process, and the process."""
    install_vpol(routed_cluster)
    server = serve_reports(routed_cluster, reports_server_binary, postgres,
                           tmp_path_factory.mktemp("reports-server"))
    try:
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
    # reports-server answers a list whole whatever its limit: vpol saw its APIService (its ClusterRole may get that
    # one) and read the reports back one namespace at a time, not all in one answer.
    assert "reading them back namespace by namespace" in operator.log_path.read_text(errors="replace"), operator.log()


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

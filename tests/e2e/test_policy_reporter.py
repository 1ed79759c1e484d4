"""Policy Reporter (github.com/kyverno/policy-reporter, built from the shared source by
tests/policyreporter/build) reading vpol's reports on a real control plane, compared with vpol's own
reports and metrics: its Prometheus metrics (one series per result, as for Kyverno's), and its REST API
(sources, policies with their severities and categories, per-namespace and cluster status and severity
counts, categories, reports with their summaries, results with their messages and properties).

Two Policy Reporters read the same cluster: one as it starts without configuration (it must show exactly
what vpol reports), and one with examples/policy-reporter/values.yaml, the configuration docs/operator.md
documents for showing vpol beside Kyverno (it leaves out results about Pods and ReplicaSets that a
controller owns, and shows a report Kyverno wrote about the same resource under Kyverno's source).

The scenario runs on a control plane of its own, so whole-cluster figures are exact.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.conftest import KubeCluster, go_built, unique_name
from tests.e2e.operator_process import REPO, OperatorProcess, end, free_port, sa_kubeconfig
from tests.e2e.vpol_fixtures import install_vpol, wait_for

BUILD = REPO / "tests" / "policyreporter" / "build"
CONFIG = REPO / "examples" / "policy-reporter" / "values.yaml"
SOURCE = "vpol"
#: What Policy Reporter shows for a result without a category (its Reconditioner's default).
NO_CATEGORY = "Other"
CM = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}
PODS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
NAMESPACES = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
              "resources": ["namespaces"]}


@pytest.fixture(scope="module")
def policy_reporter() -> Path:
    return Path(go_built(BUILD, "Policy Reporter"))


@pytest.fixture(scope="module")
def operator(own_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """vpol installed with the kustomize manifests, run as its ServiceAccount."""
    cluster = own_cluster
    install_vpol(cluster)
    tmp = tmp_path_factory.mktemp("pr-operator")
    op = OperatorProcess(sa_kubeconfig(cluster, tmp / "kubeconfig"), tmp / "operator.log",
                         extra=("--scan-interval", "20")).start()
    yield op
    op.stop()


# ------------------------------------------------------------------------------------------ scenario


@dataclass
class Scenario:
    namespaces: list[str]
    policies: list[str]
    #: (namespace, kind, name) of the resources a controller owns (created here as the controllers would).
    controlled: set[tuple[str, str, str]] = field(default_factory=set)
    #: The report Kyverno's reports controller would write about one ConfigMap.
    kyverno_report: dict[str, Any] = field(default_factory=dict)


def cm_policy(name: str, key: str, selector: dict[str, Any], annotations: dict[str, str],
              expression: str = "") -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"validationActions": ["Audit"],
                     "matchConstraints": {"resourceRules": [CM], "namespaceSelector": selector},
                     "validations": [{"expression": expression or f"has(object.data) && '{key}' in object.data",
                                      "message": f"the key {key} is required"}]}}


def apply(cluster: KubeCluster, obj: dict[str, Any]) -> dict[str, Any]:
    out = cluster.kubectl("apply", "--server-side", "--field-manager=vpol-e2e", "-o", "json", "-f", "-",
                          input=json.dumps(obj)).stdout
    return dict(json.loads(out))


def owner(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True}


POD_SPEC = {"containers": [{"name": "app", "image": "nginx:1.27"}]}


@pytest.fixture(scope="module")
def scenario(own_cluster: KubeCluster, operator: OperatorProcess) -> Scenario:
    cluster = own_cluster
    token = unique_name("pr")
    label = {"pr-e2e": token}
    a, b = f"{token}-a", f"{token}-b"
    for ns in (a, b):
        apply(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": label}})
    selector = {"matchLabels": label}
    for ns, name, data in ((a, "complete", {"owner": "x", "team": "y", "x": "1", "n": "3"}),
                           (a, "bare", {}), (a, "wrong-number", {"owner": "x", "n": "many"}),
                           (b, "team-only", {"team": "y", "n": "-1"}), (b, "owner-only", {"owner": "x"})):
        apply(cluster, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
                        "data": data})
    policies = [
        cm_policy(f"{token}-owner", "owner", selector, {"policies.kyverno.io/severity": "high",
                                                         "policies.kyverno.io/category": "Best Practices"}),
        # a severity outside Kyverno's five (and no category)
        cm_policy(f"{token}-team", "team", selector, {"policies.kyverno.io/severity": "High"}),
        # not scored: failures are warnings
        cm_policy(f"{token}-unscored", "x", selector, {"policies.kyverno.io/severity": "medium",
                                                        "policies.kyverno.io/scored": "false",
                                                        "policies.kyverno.io/category": "Other Checks"}),
        # an evaluation error on a value that is not a number
        cm_policy(f"{token}-number", "n", selector, {"policies.kyverno.io/severity": "info",
                                                      "policies.kyverno.io/category": "Validation"},
                  expression="!has(object.data) || !('n' in object.data) || int(object.data.n) > 0"),
        # cluster-scoped resources: ClusterPolicyReports
        {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
         "metadata": {"name": f"{token}-namespace-team", "annotations": {
             "policies.kyverno.io/severity": "low", "policies.kyverno.io/category": "Multi-Tenancy"}},
         "spec": {"validationActions": ["Audit"],
                  "matchConstraints": {"resourceRules": [NAMESPACES], "objectSelector": selector},
                  "validations": [{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
                                   "message": "namespaces need a team label"}]}},
        # a Pod policy: reported on Pods and, through autogen, on their controllers
        {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
         "metadata": {"name": f"{token}-non-root", "annotations": {
             "policies.kyverno.io/severity": "critical", "policies.kyverno.io/category": "Pod Security"}},
         "spec": {"validationActions": ["Audit"],
                  "matchConstraints": {"resourceRules": [PODS], "namespaceSelector": selector},
                  "validations": [{"expression": "object.spec.containers.all(c, has(c.securityContext) && "
                                                 "has(c.securityContext.runAsNonRoot) && "
                                                 "c.securityContext.runAsNonRoot)",
                                   "message": "containers must run as non-root"}]}},
        # a namespaced policy: named namespace/name in reports, as Kyverno names it
        {**cm_policy(f"{token}-local", "owner", {}, {"policies.kyverno.io/severity": "medium"}),
         "kind": "NamespacedValidatingPolicy", "metadata": {"name": f"{token}-local", "namespace": b}},
    ]
    names = []
    for pol in policies:
        apply(cluster, pol)
        names.append(f"{b}/{pol['metadata']['name']}" if pol["kind"] == "NamespacedValidatingPolicy"
                     else pol["metadata"]["name"])

    # Workloads as their controllers would make them (the test control plane runs none): a Deployment, its
    # ReplicaSet and Pod; and a Pod of its own. (Pods wait for their namespace's default ServiceAccount.)
    for ns in (a, b):
        wait_for(f"the default ServiceAccount of {ns}", lambda ns=ns: cluster.kubectl(
            "get", "serviceaccount", "default", "-n", ns, check=False).returncode == 0, 60, 0.5)
    controlled: set[tuple[str, str, str]] = set()
    deployment = apply(cluster, {"apiVersion": "apps/v1", "kind": "Deployment",
                                 "metadata": {"name": "web", "namespace": a},
                                 "spec": {"selector": {"matchLabels": {"app": "web"}},
                                          "template": {"metadata": {"labels": {"app": "web"}}, "spec": POD_SPEC}}})
    rs = apply(cluster, {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                         "metadata": {"name": "web-5d4f", "namespace": a, "ownerReferences": [owner(deployment)]},
                         "spec": {"selector": {"matchLabels": {"app": "web"}},
                                  "template": {"metadata": {"labels": {"app": "web"}}, "spec": POD_SPEC}}})
    apply(cluster, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "web-5d4f-x1", "namespace": a, "labels": {"app": "web"}, "ownerReferences": [owner(rs)]},
        "spec": POD_SPEC})
    controlled |= {(a, "ReplicaSet", "web-5d4f"), (a, "Pod", "web-5d4f-x1")}
    apply(cluster, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "standalone", "namespace": b},
                    "spec": {"containers": [{"name": "app", "image": "nginx:1.27",
                                             "securityContext": {"runAsNonRoot": True}}]}})

    for name in names:
        kind, _, short = ("namespacedvalidatingpolicies", b, name.split("/")[1]) if "/" in name else \
            ("validatingpolicies", "", name)
        args = ["wait", "--for=condition=Ready", f"{kind}.policies.kyverno.io/{short}", "--timeout=120s"]
        cluster.kubectl(*args, *(["-n", b] if "/" in name else []), timeout=150)

    scenario = Scenario([a, b], names, controlled)
    wait_for("vpol's reports and metrics to settle", lambda: settled(cluster, operator, scenario), 180, 3)

    # Kyverno's report about the same ConfigMap: named by its UID, source KyvernoValidatingPolicy
    # (Kyverno's pkg/utils/report for a ValidatingPolicy result).
    cm = client.CoreV1Api(cluster.api_client).read_namespaced_config_map("bare", a)
    kyverno = {
        "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
        "metadata": {"name": cm.metadata.uid, "namespace": a, "labels": {"app.kubernetes.io/managed-by": "kyverno"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "bare",
                                          "uid": cm.metadata.uid}]},
        "scope": {"apiVersion": "v1", "kind": "ConfigMap", "name": "bare", "namespace": a, "uid": cm.metadata.uid},
        "summary": {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0},
        "results": [{"source": "KyvernoValidatingPolicy", "policy": "require-owner", "result": "fail",
                     "message": "an owner is required", "scored": True, "severity": "medium",
                     "category": "Best Practices", "timestamp": {"seconds": int(time.time()), "nanos": 0},
                     "properties": {"process": "background scan", "cel.validationIndex": "0"}}],
    }
    client.CustomObjectsApi(cluster.api_client).create_namespaced_custom_object(
        "wgpolicyk8s.io", "v1alpha2", a, "policyreports", kyverno)
    scenario.kyverno_report = kyverno
    return scenario


# --------------------------------------------------------------------------- vpol's side of the story


@dataclass(frozen=True)
class Row:
    """One result of one of vpol's reports, as Policy Reporter should show it."""

    namespace: str
    policy: str
    report: str
    kind: str
    name: str
    status: str
    severity: str
    category: str
    message: str
    properties: tuple[tuple[str, str], ...]


def vpol_reports(cluster: KubeCluster) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(cluster.api_client)
    out = []
    for plural in ("policyreports", "clusterpolicyreports"):
        out += custom.list_cluster_custom_object("wgpolicyk8s.io", "v1alpha2", plural,
                                                 label_selector="app.kubernetes.io/managed-by=vpol")["items"]
    return out


def rows(reports: list[dict[str, Any]]) -> set[Row]:
    out = set()
    for report in reports:
        scope = report["scope"]
        for r in report.get("results") or []:
            out.add(Row(report["metadata"].get("namespace", ""), r["policy"], report["metadata"]["name"],
                        scope["kind"], scope["name"], r["result"], r.get("severity", ""),
                        r.get("category") or NO_CATEGORY, r.get("message", ""),
                        tuple(sorted((r.get("properties") or {}).items()))))
    return out


def vpol_gauge(op: OperatorProcess) -> Counter[tuple[str, str, str, str, str]]:
    """vpol_report_results as (namespace, policy, status, severity, category) -> count (category as Policy
    Reporter names an empty one)."""
    out: Counter[tuple[str, str, str, str, str]] = Counter()
    for line in op.metrics().splitlines():
        if line.startswith("vpol_report_results{"):
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', line[:line.rindex("}")]))
            value = int(float(line.rsplit(" ", 1)[1]))
            out[(labels["namespace"], labels["policy"], labels["result"], labels["severity"],
                 labels["category"] or NO_CATEGORY)] += value
    return +out


def counted(found: set[Row]) -> Counter[tuple[str, str, str, str, str]]:
    return Counter((r.namespace, r.policy, r.status, r.severity, r.category) for r in found)


def settled(cluster: KubeCluster, op: OperatorProcess, scenario: Scenario) -> bool:
    """Every policy reported, reports and metrics agreeing, and nothing changing for a few seconds."""
    first = rows(vpol_reports(cluster))
    if {r.policy for r in first} != set(scenario.policies) or counted(first) != vpol_gauge(op):
        return False
    time.sleep(3)
    return rows(vpol_reports(cluster)) == first and counted(first) == vpol_gauge(op)


# ------------------------------------------------------------------------------------ Policy Reporter


class PolicyReporter:
    def __init__(self, binary: Path, cluster: KubeCluster, workdir: Path, config: Path | None):
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "policy-reporter.log"
        args = [str(binary), "run", "--kubeconfig", cluster.kubeconfig, "--port", str(self.port),
                "--rest-enabled", "--metrics-enabled", "--dbfile", str(workdir / "db.sqlite"),
                "--template-dir", str(binary.parent / "templates")]
        if config is not None:
            args += ["--config", str(config)]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, cwd=workdir,
                                     env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"})

    def get(self, path: str, **query: Any) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = r.read().decode()
        return json.loads(body) if path != "/metrics" else body

    def ready(self) -> bool:
        assert self.proc.poll() is None, self.log()
        try:
            self.get("/ready")
            return True
        except OSError:
            return False

    def series(self) -> list[dict[str, str]]:
        """Every policy_report_result / cluster_policy_report_result series (value 1 per result)."""
        out = []
        for line in self.get("/metrics").splitlines():
            m = re.match(r"(cluster_policy_report_result|policy_report_result)\{(.*)\} (\S+)$", line)
            if m:
                labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
                assert float(m.group(3)) == 1, line
                out.append({"metric": m.group(1), **labels})
        return out

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        end(self.proc)
        self._log.close()


@pytest.fixture(scope="module")
def reporters(policy_reporter: Path, own_cluster: KubeCluster, scenario: Scenario,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, PolicyReporter]]:
    tmp = tmp_path_factory.mktemp("policy-reporter")
    started = {"plain": PolicyReporter(policy_reporter, own_cluster, tmp / "plain", None),
               "documented": PolicyReporter(policy_reporter, own_cluster, tmp / "documented", CONFIG)}
    try:
        for name, pr in started.items():
            wait_for(f"Policy Reporter ({name}) to be ready", pr.ready, 120, 1)
        yield started
    finally:
        for pr in started.values():
            pr.stop()


def expected_rows(cluster: KubeCluster, scenario: Scenario, filtered: bool) -> set[Row]:
    found = {r for r in rows(vpol_reports(cluster)) if r.policy in scenario.policies}
    if filtered:
        found = {r for r in found if (r.namespace, r.kind, r.name) not in scenario.controlled}
    return found


def metric_rows(pr: PolicyReporter, source: str = SOURCE) -> set[tuple[str, ...]]:
    return {(s.get("namespace", ""), s["policy"], s["report"], s["kind"], s["name"], s["status"], s["severity"],
             s["category"]) for s in pr.series() if s["source"] == source}


def as_metric(found: set[Row]) -> set[tuple[str, ...]]:
    return {(r.namespace, r.policy, r.report, r.kind, r.name, r.status, r.severity, r.category) for r in found}


# ------------------------------------------------------------------------------------------- tests


def test_the_scenario_has_every_kind_of_result(own_cluster: KubeCluster, scenario: Scenario) -> None:
    """The comparison below covers every status, severity and scope vpol reports, and the controlled resources
    the documented configuration leaves out."""
    found = expected_rows(own_cluster, scenario, filtered=False)
    assert {r.status for r in found} == {"pass", "fail", "warn", "error"}
    assert {r.severity for r in found} == {"", "info", "low", "medium", "high", "critical"}
    assert {r.namespace for r in found} == {"", *scenario.namespaces}
    assert {(r.namespace, r.kind, r.name) for r in found} >= scenario.controlled
    assert {r.kind for r in found} >= {"ConfigMap", "Namespace", "Pod", "ReplicaSet", "Deployment"}
    assert f"{scenario.namespaces[1]}/{scenario.policies[0].split('-owner')[0]}-local" in {r.policy for r in found}


def test_metrics_show_every_result_vpol_reports(own_cluster: KubeCluster, scenario: Scenario,
                                                reporters: dict[str, PolicyReporter],
                                                operator: OperatorProcess) -> None:
    plain, documented = reporters["plain"], reporters["documented"]
    everything = as_metric(expected_rows(own_cluster, scenario, filtered=False))
    wait_for("Policy Reporter's metrics to show vpol's results", lambda: metric_rows(plain) == everything, 90, 2)
    # one series per result, in the namespaced gauge or the cluster one by the report's scope
    for s in plain.series():
        assert (s["metric"] == "cluster_policy_report_result") == ("namespace" not in s), s
    # the same counts as vpol's own gauge, label for label
    counts = Counter((ns, policy, status, severity, category)
                     for ns, policy, _r, _k, _n, status, severity, category in metric_rows(plain))
    assert counts == vpol_gauge(operator)

    uncontrolled = as_metric(expected_rows(own_cluster, scenario, filtered=True))
    assert uncontrolled < everything
    wait_for("the documented configuration's metrics", lambda: metric_rows(documented) == uncontrolled, 90, 2)


def test_kyvernos_report_is_shown_beside_vpols(own_cluster: KubeCluster, scenario: Scenario,
                                               reporters: dict[str, PolicyReporter]) -> None:
    ns = scenario.namespaces[0]
    theirs = {(ns, "require-owner", scenario.kyverno_report["metadata"]["name"], "ConfigMap", "bare", "fail",
               "medium", "Best Practices")}
    for pr in reporters.values():
        wait_for("Kyverno's result", lambda pr=pr: metric_rows(pr, "KyvernoValidatingPolicy") == theirs, 90, 2)
        assert sorted(pr.get("/v2/sources")) == ["KyvernoValidatingPolicy", SOURCE]
        # vpol's results about the same ConfigMap are still there, under vpol's source
        assert {r[1] for r in metric_rows(pr) if r[4] == "bare"} >= set(scenario.policies[:2])  # owner, team


def by(found: set[Row], *fields: str) -> dict[Any, Counter[str]]:
    out: dict[Any, Counter[str]] = {}
    for r in found:
        k = tuple(getattr(r, f) for f in fields)
        out.setdefault(k[0] if len(k) == 1 else k, Counter())[r.status] += 1
    return out


def statuses(counts: Counter[str]) -> dict[str, int]:
    return {s: counts.get(s, 0) for s in ("pass", "fail", "warn", "error", "skip")}


@pytest.mark.parametrize("which", ["plain", "documented"])
def test_the_rest_api_shows_what_vpol_reports(own_cluster: KubeCluster, scenario: Scenario,
                                              reporters: dict[str, PolicyReporter], which: str) -> None:
    pr = reporters[which]
    found = expected_rows(own_cluster, scenario, filtered=which == "documented")
    wait_for("Policy Reporter's store to hold every result", lambda: pr.get(
        "/v2/namespace-scoped/results", sources=SOURCE)["count"] == len(
        [r for r in found if r.namespace]), 90, 2)

    # policies: source, category, severity and counts per status
    policies = {p["policy"]: p for p in pr.get("/v2/policies", sources=SOURCE)}
    assert set(policies) == set(scenario.policies)
    for policy, counts in by(found, "policy").items():
        [(severity, category)] = {(r.severity, r.category) for r in found if r.policy == policy}
        p = policies[policy]
        assert (p["source"], p.get("category"), p.get("severity", "")) == (SOURCE, category, severity), p
        assert p["results"] == {s: n for s, n in counts.items()}, (policy, p["results"], counts)

    # per-namespace status and severity counts, and the cluster's
    namespaced = {r for r in found if r.namespace}
    ns_counts = pr.get(f"/v2/namespace-scoped/{SOURCE}/status-counts")
    assert ns_counts == {ns: statuses(c) for ns, c in by(namespaced, "namespace").items()}
    severities = pr.get(f"/v2/namespace-scoped/{SOURCE}/severity-counts")
    for ns in scenario.namespaces:
        expected = Counter(r.severity or "unknown" for r in namespaced if r.namespace == ns)
        got = Counter({("unknown" if k == "" else k): v for k, v in severities[ns].items() if v})
        assert got == expected, (ns, severities[ns])
    cluster = {r for r in found if not r.namespace}
    assert pr.get(f"/v2/cluster-scoped/{SOURCE}/status-counts") == statuses(Counter(r.status for r in cluster))

    # categories of the source, with their status counts
    [details] = pr.get("/v2/sources/categories", sources=SOURCE)
    assert details["name"] == SOURCE
    cats = {c["name"]: {s: n for s, n in c["status"].items() if n} for c in details["categories"]}
    assert cats == {category: dict(c) for category, c in by(found, "category").items()}

    # reports and their summaries, as vpol wrote them
    reports = {r["metadata"]["name"]: r for r in vpol_reports(own_cluster)}
    shown = pr.get("/v1/policy-reports", sources=SOURCE)["items"] + \
        pr.get("/v1/cluster-policy-reports", sources=SOURCE)["items"]
    assert {r["name"] for r in shown} == {r.report for r in found}
    for r in shown:
        summary = reports[r["name"]]["summary"]
        assert {k: r[k] for k in summary} == summary, r["name"]
        assert r["labels"]["app.kubernetes.io/managed-by"] == "vpol"

    # every result with its resource, message and properties
    results = pr.get("/v2/namespace-scoped/results", sources=SOURCE)["items"] + \
        pr.get("/v2/cluster-scoped/results", sources=SOURCE)["items"]
    assert {(x.get("namespace", ""), x["policy"], x["kind"], x["name"], x["status"], x["message"],
             tuple(sorted((x.get("properties") or {}).items()))) for x in results} == \
        {(r.namespace, r.policy, r.kind, r.name, r.status, r.message, r.properties) for r in found}
    assert {x["rule"] for x in results} == {""}  # as Kyverno's ValidatingPolicy results

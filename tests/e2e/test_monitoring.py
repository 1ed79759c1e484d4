"""Monitoring end to end: a real Prometheus scrapes vpol, loads manifests/monitoring/rules.yaml, and runs
every PromQL expression of the dashboard and the alert rules.

Two sources of series:

- the real operator (`vpol run` under the manifests' ServiceAccount) with a
  seeded violation: a ConfigMap in the test namespace failing an Audit
  policy that only selects that namespace, plus policies that give a warn
  and an error result and one that is not Ready. Every dashboard expression
  must return data; VpolNewPolicyViolations and VpolPolicyNotReady must
  fire for the seeded objects, VpolScanStalled must stay silent once a full
  scan has finished (VpolReconcileErrors needs a failing API to fire, so it
  is only executed here);
- a synthetic exporter: a process that sets every series of
  vpol.controller.metrics to an unhealthy state (never a finished scan,
  failing reconciles) so that every alert expression must return data too.

Prometheus scrapes the operator the way the ServiceMonitor makes the
Prometheus Operator do it: target labels namespace/service/pod/endpoint and
the ServiceMonitor's own relabelings, which keep vpol's `namespace` label.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.e2e.operator_process import REPO, OperatorProcess, free_port
from tests.e2e.prometheus import PrometheusServer, ScrapeJob
from tests.e2e.vpol_fixtures import (  # noqa: F401 - fixtures
    GROUP,
    PLURAL,
    VERSION,
    Policies,
    operator,
    operator_stopped,
    policies,
    vpol_installed,
    wait_for,
)
from tests.unit.monitoring import artifacts
from tests.unit.monitoring.promql_refs import metric_names

JOB = "vpol-metrics"  # the Prometheus Operator names a ServiceMonitor's job after the Service
ALERT_NAMES = {"VpolNewPolicyViolations", "VpolScanStalled", "VpolPolicyNotReady", "VpolReconcileErrors",
               "VpolPolicyNotEnforced", "VpolWebhookErrors", "VpolWebhookSlow", "VpolGenerationErrors",
               "VpolDeletionFailing"}
CM_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}


def camel_to_snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def service_monitor_job(port: int) -> ScrapeJob:
    """A static scrape job equivalent to what the Prometheus Operator builds from servicemonitor.yaml."""
    (monitor,) = [d for d in yaml.safe_load_all(artifacts.SERVICE_MONITOR_FILE.read_text()) if d]
    (endpoint,) = monitor["spec"]["endpoints"]
    relabel = [{camel_to_snake(k): v for k, v in r.items()} for r in endpoint.get("relabelings", [])]
    return ScrapeJob(
        name=JOB, targets=[f"127.0.0.1:{port}"], metrics_path=endpoint.get("path", "/metrics"),
        labels={"namespace": monitor["metadata"]["namespace"], "service": JOB, "pod": "vpol-e2e",
                "container": "vpol", "endpoint": endpoint["port"]},
        relabel_configs=relabel)


def all_queries() -> list[artifacts.Query]:
    return artifacts.dashboard_queries() + artifacts.rule_queries()


def run_all(prom: PrometheusServer, queries: list[artifacts.Query], variables: dict[str, str]
            ) -> dict[str, list[dict[str, Any]] | Exception]:
    out: dict[str, list[dict[str, Any]] | Exception] = {}
    for q in queries:
        try:
            out[q.source] = prom.query(artifacts.substitute(q.expr, variables))
        except Exception as exc:  # noqa: BLE001 - reported per expression below
            out[q.source] = exc
    return out


def without_data(answers: dict[str, list[dict[str, Any]] | Exception]) -> dict[str, Any]:
    return {k: v for k, v in answers.items() if isinstance(v, Exception) or not v}


def wait_rules_evaluated(prom: PrometheusServer, timeout: float = 60) -> list[dict[str, Any]]:
    """Wait until every rule has been evaluated; return them (health and lastError included)."""
    deadline = time.monotonic() + timeout
    loaded: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        loaded = [r for g in prom.rule_groups() for r in g["rules"]]
        if loaded and all(r.get("health") in ("ok", "err") for r in loaded):
            return loaded
        time.sleep(0.5)
    raise AssertionError(f"rules not evaluated within {timeout}s: {loaded}")


def active_alerts(prom: PrometheusServer) -> list[dict[str, Any]]:
    return [a for a in prom.alerts() if a["state"] in ("pending", "firing")]


# ------------------------------------------------------------------ a synthetic operator

SYNTHETIC_EXPORTER = """
import sys, time
from vpol.controller import metrics as m

for result, n in (("fail", 3), ("warn", 1), ("error", 1), ("pass", 5)):
    m.REPORT_RESULTS.labels("require-owner", "team-a", result, "high", "Best Practices").set(n)
m.REPORT_RESULTS.labels("require-owner", "", "fail", "high", "Best Practices").set(1)
m.POLICIES.labels("true").set(1)
m.POLICIES.labels("false").set(1)
m.set_policy_info({"require-owner": (True, "Audit", True, False), "broken": (False, "Deny", True, False)})
m.set_enforcement({"require-owner": "Webhook", "broken": "None"})
# vpol_scan_last_success_timestamp_seconds stays 0: no full scan ever finished.
m.serve(int(sys.argv[1]))
while True:
    m.POLICY_RESULTS.labels("require-owner", "fail", "ConfigMap", "team-a").inc()
    m.POLICY_RESULTS.labels("require-owner", "pass", "ConfigMap", "team-a").inc()
    for scan in ("full", "incremental"):
        m.SCAN_DURATION.labels(scan).observe(0.3)
        m.SCAN_RESOURCES.labels(scan).inc(10)
    m.EVALUATION_DURATION.observe(0.002)
    m.RECONCILES.labels("ok").inc()
    m.RECONCILE_ERRORS.labels("scan").inc()
    m.STATUS_WRITES.inc()
    m.REPORT_WRITES.labels("apply").inc()
    m.ADMISSION_REQUESTS.labels("fail", "CREATE", "ConfigMap").inc()
    m.ADMISSION_DECISIONS.labels("require-owner", "deny").inc()
    m.ADMISSION_DECISIONS.labels("require-owner", "error").inc()
    m.ADMISSION_LATENCY.labels("fail").observe(2.5)  # slow: VpolWebhookSlow
    m.ADMISSION_POLICY_LATENCY.labels("require-owner").observe(0.002)
    m.GENERATIONS.labels("make-quota", "pass").inc()
    m.GENERATIONS.labels("make-quota", "error").inc()  # VpolGenerationErrors
    m.GENERATED_OBJECTS.labels("make-quota", "created").inc()
    m.DELETING_RUNS.labels("expire-pods", "succeeded").inc()
    m.DELETING_RUNS.labels("expire-pods", "forbidden").inc()  # VpolDeletionFailing
    m.DELETED_OBJECTS.labels("expire-pods", "pods").inc()
    time.sleep(0.5)
"""


@pytest.fixture(scope="module")
def synthetic_exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    port = free_port()
    log = tmp_path_factory.mktemp("synthetic") / "exporter.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", SYNTHETIC_EXPORTER, str(port)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        import urllib.request

        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"synthetic exporter exited:\n{log.read_text()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"synthetic exporter not serving:\n{log.read_text()}") from None
                time.sleep(0.2)
        yield port
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def synthetic_prometheus(synthetic_exporter: int, tmp_path_factory: pytest.TempPathFactory
                         ) -> Iterator[PrometheusServer]:
    prom = PrometheusServer(tmp_path_factory.mktemp("prometheus-synthetic"),
                            [service_monitor_job(synthetic_exporter)], [artifacts.RULES_FILE])
    with prom:
        yield prom


def test_every_expression_returns_data_for_unhealthy_series(synthetic_prometheus: PrometheusServer) -> None:
    prom = synthetic_prometheus
    # two scrapes at least, so that rate() and increase() have samples to work on
    prom.wait_for("two scrapes of the exporter", f'count_over_time(up{{job="{JOB}"}}[1m]) >= 3',
                  timeout=30)
    answers = run_all(prom, all_queries(), {"namespace": "team-a", "policy": ".*"})
    assert without_data(answers) == {}
    answers = run_all(prom, all_queries(), {"namespace": ".*", "policy": "require-owner"})
    assert without_data(answers) == {}

    # the reported namespace survives the ServiceMonitor's relabelings, the pod's namespace moves aside
    (sample,) = prom.query('vpol_report_results{result="fail", namespace="team-a"}')
    assert sample["metric"]["operator_namespace"] == "vpol-system"
    assert "exported_namespace" not in sample["metric"]
    cluster_scoped = prom.query('vpol_report_results{result="fail", namespace=""}')
    assert len(cluster_scoped) == 1 and "namespace" not in cluster_scoped[0]["metric"]

    # Prometheus itself evaluates the rules, and each alert goes pending
    loaded = wait_rules_evaluated(prom)
    assert {r["name"] for r in loaded} == ALERT_NAMES
    assert [r for r in loaded if r["health"] != "ok"] == []

    def all_pending() -> bool:
        return {a["labels"]["alertname"] for a in active_alerts(prom)} == ALERT_NAMES

    deadline = time.monotonic() + 30
    while not all_pending() and time.monotonic() < deadline:
        time.sleep(0.5)
    by_name: dict[str, list[dict[str, str]]] = {}
    for a in active_alerts(prom):
        by_name.setdefault(a["labels"]["alertname"], []).append(a["labels"])
    assert set(by_name) == ALERT_NAMES
    assert {(lb.get("namespace", ""), lb["policy"]) for lb in by_name["VpolNewPolicyViolations"]} == {
        ("team-a", "require-owner"), ("", "require-owner")}
    assert [lb["policy"] for lb in by_name["VpolPolicyNotReady"]] == ["broken"]
    assert [lb["kind"] for lb in by_name["VpolReconcileErrors"]] == ["scan"]
    assert [lb["policy"] for lb in by_name["VpolPolicyNotEnforced"]] == ["broken"]
    assert [lb["policy"] for lb in by_name["VpolWebhookErrors"]] == ["require-owner"]
    assert len(by_name["VpolWebhookSlow"]) == 1
    assert [lb["policy"] for lb in by_name["VpolGenerationErrors"]] == ["make-quota"]
    assert [(lb["policy"], lb["outcome"]) for lb in by_name["VpolDeletionFailing"]] == [("expire-pods", "forbidden")]
    assert all(lb["severity"] == ("critical" if name == "VpolPolicyNotEnforced" else "warning")
               for name, labels in by_name.items() for lb in labels)


# ------------------------------------------------------------------ the real operator


@pytest.fixture(scope="module")
def prometheus(operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    prom = PrometheusServer(tmp_path_factory.mktemp("prometheus"), [service_monitor_job(operator.metrics_port)],
                            [artifacts.RULES_FILE])
    with prom:
        yield prom


def test_prometheus_scrapes_the_operator_and_loads_the_rules(prometheus: PrometheusServer) -> None:
    prom = prometheus
    prom.wait_for("the operator target to be up", f'up{{job="{JOB}"}} == 1', timeout=60)
    (target,) = [t for t in prom.targets() if t["labels"].get("job") == JOB]
    assert target["health"] == "up", target
    assert target["labels"]["operator_namespace"] == "vpol-system" and "namespace" not in target["labels"]
    series = prom.wait_for("the operator's own series", "vpol_scan_last_success_timestamp_seconds", timeout=30)
    assert series[0]["metric"]["job"] == JOB
    loaded = wait_rules_evaluated(prom)
    assert {r["name"] for r in loaded} == ALERT_NAMES
    assert [(r["name"], r.get("lastError")) for r in loaded if r["health"] != "ok"] == []
    # each expression is a valid query for this Prometheus (data or not)
    answers = run_all(prom, all_queries(), {"namespace": ".*", "policy": ".*"})
    assert {k: v for k, v in answers.items() if isinstance(v, Exception)} == {}


def create_policy(policies: Policies, hint: str, spec: dict[str, Any], annotations: dict[str, str]) -> str:
    name = policies.unique("mon", hint)
    body = policies.body(name, spec)
    body["metadata"]["annotations"] = annotations
    policies.api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    policies.created.append(name)
    return name


SEED_LABEL = {"vpol-e2e/seed": "monitoring"}


def audit_policy(expression: str) -> dict[str, Any]:
    # Only the seeded ConfigMap (not e.g. the namespace's kube-root-ca.crt); the
    # namespaceSelector limiting it to the test namespace is added by Policies.
    return {
        "validationActions": ["Audit"],
        "evaluation": {"background": {"enabled": True}},
        "matchConstraints": {"resourceRules": [CM_RULE], "objectSelector": {"matchLabels": SEED_LABEL}},
        "validations": [{"expression": expression, "message": "an owner key is required"}],
    }


def has_results(*results: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda answer: {s["metric"].get("result") for s in answer} >= set(results)


def unexported(op: OperatorProcess, answers: dict[str, list[dict[str, Any]] | Exception]) -> str:
    """Explain empty answers whose series the operator does not export at all."""
    exposition = op.metrics()
    queries = {q.source: artifacts.substitute(q.expr, {"namespace": ".*", "policy": ".*"})
               for q in artifacts.dashboard_queries()}
    silent = sorted({name for source in without_data(answers) for name in metric_names(queries[source])
                     if not any(line.startswith((name + "{", name + " ")) for line in exposition.splitlines())})
    if not silent:
        return ""
    return (f"the operator exports no samples of {silent}: a counter or gauge with labels only appears once a "
            "label value is used, so create its known label values at startup (e.g. COUNTER.labels(kind))")


@pytest.fixture
def lifecycle(operator: OperatorProcess, policies: Policies, cluster: Any, namespace: str
              ) -> Iterator["LifecycleActivity"]:
    activity = LifecycleActivity(cluster, namespace, policies.unique("mon", "life"))
    activity.start()
    yield activity
    activity.stop()


def test_dashboard_and_alerts_on_a_seeded_violation(prometheus: PrometheusServer, policies: Policies, cluster: Any,
                                                    namespace: str, operator: OperatorProcess,
                                                    lifecycle: "LifecycleActivity") -> None:
    prom = prometheus
    # The resources exist before the policies (the background scan must find them): one violates
    # the owner policy, one passes it.
    core = client.CoreV1Api(cluster.api_client)
    for name, data in (("no-owner", {"x": "1"}), ("has-owner", {"owner": "me"})):
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name, labels=SEED_LABEL), data=data))
    meta = {"policies.kyverno.io/severity": "high", "policies.kyverno.io/category": "vpol e2e"}
    owner = "has(object.data) && 'owner' in object.data"
    failing = create_policy(policies, "fail", audit_policy(owner), meta)
    warning = create_policy(policies, "warn", audit_policy(owner), {**meta, "policies.kyverno.io/scored": "false"})
    erroring = create_policy(policies, "error", audit_policy("object.data['missing'] == 'x'"), meta)
    with operator_stopped(operator):  # else vpol's policy validation refuses it (tests/e2e/test_policy_validation.py)
        broken = create_policy(policies, "broken", audit_policy("object.data.("), {})
    # enforced by vpol's webhook (a Kyverno-only function): one that denies, one that errors
    hooked = {**audit_policy("sha256(object.metadata.name) != '' && !object.metadata.name.startsWith('deny')"),
              "validationActions": ["Deny"]}
    webhook_deny = create_policy(policies, "hook", hooked, {})
    webhook_error = create_policy(policies, "hookerr", {**hooked, "failurePolicy": "Ignore", "validations": [
        {"expression": "sha256(object.data['missing']) == ''"}]}, {})
    traffic = AdmissionTraffic(cluster, namespace)
    traffic.start()
    lifecycle.act()

    prom.wait_for(f"pass, fail, warn and error results in {namespace}",
                  f'sum by (result) (vpol_report_results{{namespace="{namespace}"}})',
                  has_results("fail", "warn", "error", "pass"), timeout=120)
    (fail,) = prom.query(f'vpol_report_results{{namespace="{namespace}", result="fail"}}')
    assert fail["metric"]["policy"] == failing and fail["value"][1] == "1"
    assert fail["metric"]["severity"] == "high" and fail["metric"]["category"] == "vpol e2e"
    assert prom.query(f'vpol_report_results{{namespace="{namespace}", result="warn", policy="{warning}"}}')
    assert prom.query(f'vpol_report_results{{namespace="{namespace}", result="error", policy="{erroring}"}}')
    prom.wait_for(f"{broken} not ready", f'vpol_policy_info{{policy="{broken}", ready="false"}}', timeout=60)
    prom.wait_for("a finished full scan", "vpol_scan_last_success_timestamp_seconds > 0", timeout=120)
    # counters need two samples for rate() and increase()
    prom.wait_for("evaluations of the seeded resource",
                  f'count_over_time(vpol_policy_results_total{{resource_namespace="{namespace}"}}[1m]) >= 2',
                  timeout=30)

    for series in (f'vpol_generations_total{{policy="{lifecycle.generating}"}}',
                   f'vpol_deleted_objects_total{{policy="{lifecycle.deleting}"}}'):
        try:
            prom.wait_for(f"two samples of {series}", f"count_over_time({series}[1m]) >= 2", timeout=120)
        except AssertionError:
            raise AssertionError(f"{series}: the operator exports {operator.metrics([series.split('{')[0]])!r};"
                                 f"\n{operator.log()}") from None
    prom.wait_for("webhook decisions of both webhook policies",
                  f'count(count_over_time(vpol_admission_decisions_total{{policy=~"{webhook_deny}|{webhook_error}"}}[1m])'
                  f' >= 2) >= 2', timeout=120)
    assert prom.query(f'vpol_admission_decisions_total{{policy="{webhook_deny}", decision="deny"}}')
    assert prom.query(f'vpol_admission_decisions_total{{policy="{webhook_error}", decision="error"}}')
    assert prom.query(f'vpol_policy_admission_enforced{{policy="{webhook_deny}", path="Webhook"}}')
    assert prom.query(f'vpol_policy_admission_enforced{{policy="{failing}", path="NativeVAP"}}')

    # Every expression returns data: for the test namespace alone, and for every namespace.
    for variables in ({"namespace": namespace, "policy": ".*"}, {"namespace": ".*", "policy": ".*"}):
        answers = run_all(prom, artifacts.dashboard_queries(), variables)
        assert without_data(answers) == {}, (variables, unexported(operator, answers))
    assert namespace in prom.label_values("namespace", "vpol_report_results")
    assert {failing, broken} <= set(prom.label_values("policy", "vpol_policy_info"))

    alerts = {q.source.removeprefix("rule "): q.expr for q in artifacts.rule_queries()}
    new = prom.query(alerts["VpolNewPolicyViolations"])
    assert {"namespace": namespace, "policy": failing} in [s["metric"] for s in new]
    not_ready = prom.query(alerts["VpolPolicyNotReady"])
    assert broken in {s["metric"]["policy"] for s in not_ready}
    assert failing not in {s["metric"]["policy"] for s in not_ready}
    # scans are healthy: a full scan finished, so the stalled-scan alert has nothing to say
    assert prom.query(alerts["VpolScanStalled"]) == []
    prom.query(alerts["VpolReconcileErrors"])  # must at least run

    # Prometheus's own rule evaluation sees the same: the alerts go pending for our objects.
    def ours() -> bool:
        labels = [a["labels"] for a in active_alerts(prom)]
        return (any(lb["alertname"] == "VpolNewPolicyViolations" and lb.get("policy") == failing
                    and lb.get("namespace") == namespace for lb in labels)
                and any(lb["alertname"] == "VpolPolicyNotReady" and lb.get("policy") == broken for lb in labels))

    wait_for("the seeded alerts to be pending or firing", ours, timeout=30)
    traffic.stop()


class LifecycleActivity:
    """A GeneratingPolicy that copies a trigger ConfigMap's data into a new one, and a DeletingPolicy that deletes
    expired ConfigMaps every five seconds (as the aggregated ClusterRole vpol-delete lets it), both confined to the
    test namespace, so the generation and deletion series exist and have rates."""

    def __init__(self, cluster: Any, namespace: str, hint: str):
        self.cluster, self.namespace = cluster, namespace
        self.generating, self.deleting, self.role = f"{hint}-gen", f"{hint}-del", f"{hint}-delete-configmaps"
        self.core = client.CoreV1Api(cluster.api_client)

    def start(self) -> None:
        in_namespace = {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}}
        rule = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": self.role, "labels": {"vpol.kyverno.io/aggregate-to-delete": "true"}},
             "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "delete"]}]},
            {"apiVersion": f"{GROUP}/v1", "kind": "GeneratingPolicy", "metadata": {"name": self.generating},
             "spec": {"matchConstraints": {"resourceRules": [{**rule, "operations": ["CREATE", "UPDATE"]}],
                                           "namespaceSelector": in_namespace,
                                           "objectSelector": {"matchLabels": {"vpol-e2e/trigger": "monitoring"}}},
                      "generate": [{"expression": 'generator.Apply(object.metadata.namespace, [{"apiVersion": "v1", '
                                                  '"kind": "ConfigMap", "metadata": {"name": "copy-" + '
                                                  'object.metadata.name}, "data": object.data}])'}]}},
            {"apiVersion": f"{GROUP}/v1", "kind": "DeletingPolicy", "metadata": {"name": self.deleting},
             "spec": {"schedule": "*/5 * * * * * *",  # seconds first: every five seconds
                      "matchConstraints": {"resourceRules": [{**rule, "operations": ["*"]}],
                                           "namespaceSelector": in_namespace,
                                           "objectSelector": {"matchLabels": {"vpol-e2e/expired": "true"}}},
                      "conditions": [{"name": "here",
                                      "expression": f'object.metadata.namespace == "{self.namespace}"'}]}},
        ]))

    def act(self) -> None:
        """A trigger to generate for and a ConfigMap to delete (made once the operator whose metrics are read runs:
        a restarted one starts its counters from zero, and has nothing left to do for what is done)."""
        self.core.create_namespaced_config_map(self.namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="trigger", labels={"vpol-e2e/trigger": "monitoring"}),
            data={"copied": "yes"}))
        self.core.create_namespaced_config_map(self.namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="expired", labels={"vpol-e2e/expired": "true"})))

    def stop(self) -> None:
        for kind, name in (("generatingpolicy", self.generating), ("deletingpolicy", self.deleting),
                           ("clusterrole", self.role)):
            self.cluster.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false")


class AdmissionTraffic(threading.Thread):
    """Dry-run ConfigMap creates every half second (some denied), so admission series have rates."""

    def __init__(self, cluster: Any, namespace: str):
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(cluster.api_client)
        self.namespace = namespace
        self.done = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.done.wait(0.5):
            n += 1
            for prefix in ("deny", "ok"):
                try:
                    self.core.create_namespaced_config_map(self.namespace, client.V1ConfigMap(
                        metadata=client.V1ObjectMeta(name=f"{prefix}-{n}", labels=SEED_LABEL)), dry_run="All")
                except client.ApiException:
                    pass

    def stop(self) -> None:
        self.done.set()
        self.join(10)

"""Offline checks of manifests/monitoring/: rules, dashboard, ServiceMonitor, Service and kustomization.

Every PromQL expression must pass Prometheus's own parser (``promtool check
rules``; skipped when promtool is missing, a failure under CI) and may only
use series and labels that vpol.controller.metrics defines.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.prometheus import promtool, tools_required

try:
    import promql_parser  # noqa: F401 - a test dependency (pyproject's `test` extra)
except ImportError:
    if tools_required():
        pytest.fail("promql-parser is not installed (pip install -e '.[test]')", pytrace=False)
    pytest.skip("promql-parser is not installed (pip install -e '.[test]')", allow_module_level=True)

from tests.unit.monitoring import artifacts  # noqa: E402
from tests.unit.monitoring.promql_refs import metric_names, problems, series_catalogue  # noqa: E402
from vpol.controller import metrics  # noqa: E402

CATALOGUE = series_catalogue(metrics)
DASHBOARD = artifacts.load_dashboard()
# Values for the dashboard's own variables when an expression is checked offline.
ALL = {"namespace": ".*", "policy": ".*", "datasource": "prometheus"}
QUERIES = artifacts.rule_queries() + artifacts.dashboard_queries(DASHBOARD)
ALERTS = {r["alert"]: r for r in artifacts.rules() if "alert" in r}


def normalized(expr: str) -> str:
    return "".join(expr.split())


# ------------------------------------------------------------------ parsing (promtool)


def test_rules_file_passes_promtool_check() -> None:
    proc = promtool("check", "rules", str(artifacts.RULES_FILE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(artifacts.rules())} rules found" in proc.stdout


def test_dashboard_expressions_pass_promtool(tmp_path: Path) -> None:
    # promtool parses expressions only inside rule files: wrap each dashboard
    # expression (variables substituted as Grafana would) in a recording rule.
    queries = artifacts.dashboard_queries(DASHBOARD)
    group = {"name": "dashboard", "rules": [
        {"record": f"vpol_dashboard_check_{i}", "expr": artifacts.substitute(q.expr, ALL)}
        for i, q in enumerate(queries)]}
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [group]}))
    proc = promtool("check", "rules", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(queries)} rules found" in proc.stdout


def test_promtool_check_rejects_a_broken_expression(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"alert": "Broken", "expr": "sum by (policy) (rate(vpol_report_results))"}]}]}))
    proc = promtool("check", "rules", str(path))
    assert proc.returncode != 0
    assert "rate" in proc.stdout + proc.stderr


# ------------------------------------------------------------------ series and labels


@pytest.mark.parametrize("query", QUERIES, ids=[q.source for q in QUERIES])
def test_expression_uses_only_defined_series_and_labels(query: artifacts.Query) -> None:
    expr = artifacts.substitute(query.expr, ALL)
    assert problems(expr, CATALOGUE) == []
    assert metric_names(expr), "every expression should read at least one vpol series"


def test_reference_check_reports_what_does_not_exist() -> None:
    found = problems('sum by (severity) (vpol_policies{policy="x"}) + on (kind) vpol_nope'
                     ' + sum by (scan) (rate(vpol_reconciles_total[5m]))', CATALOGUE)
    assert "unknown series vpol_nope" in found
    assert any("vpol_policies has no label 'policy'" in p for p in found)
    assert any("groups by 'severity'" in p for p in found)
    assert any("groups by 'scan'" in p for p in found)
    assert any("matching on 'kind'" in p for p in found)
    assert problems("sum(", CATALOGUE)[0].startswith("does not parse")


def test_catalogue_follows_the_exposition_format() -> None:
    # counters gain _total, histograms expose _bucket with `le`
    assert CATALOGUE["vpol_reconcile_errors_total"] == {"kind"}
    assert CATALOGUE["vpol_scan_duration_seconds_bucket"] == {"scan", "le"}
    assert CATALOGUE["vpol_report_results"] == {"policy", "namespace", "result", "severity", "category"}
    assert "vpol_scan_duration_seconds" not in CATALOGUE


# ------------------------------------------------------------------ dashboard


def test_substitute_interpolates_like_grafana() -> None:
    expr = 'x{a=~"$namespace", b=~"${policy}", c="[[namespace]]"}[$__rate_interval]'
    assert artifacts.substitute(expr, {"namespace": "ns", "policy": "p"}) == 'x{a=~"ns", b=~"p", c="ns"}[1m]'
    with pytest.raises(KeyError, match="undefined"):
        artifacts.substitute("x{a=~\"$undefined\"}", {})


def test_dashboard_variables_are_defined() -> None:
    defined = artifacts.defined_variables(DASHBOARD) | set(artifacts.BUILTIN_DEFAULTS)
    for query in artifacts.dashboard_queries(DASHBOARD):
        assert artifacts.variable_names(query.expr) <= defined, query.source
    for panel in artifacts.panels(DASHBOARD):
        if panel.get("type") != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]


def test_variable_queries_read_existing_labels() -> None:
    variables = artifacts.variable_queries(DASHBOARD)
    assert set(variables) == {"namespace", "policy"}
    for name, query in variables.items():
        selector, label = artifacts.parse_label_values(query)
        assert problems(selector, CATALOGUE) == [], name
        (metric,) = metric_names(selector)
        assert label in CATALOGUE[metric], f"${name}: {metric} has no label {label}"
    with pytest.raises(ValueError):
        artifacts.parse_label_values("query_result(up)")


def test_dashboard_layout_is_valid() -> None:
    all_panels = artifacts.panels(DASHBOARD)
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids))
    for p in all_panels:
        pos = p["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, p["title"]
    assert DASHBOARD["uid"] == "vpol-violations"
    refs = [t["refId"] for p in all_panels for t in p.get("targets", [])]
    assert all(refs)


def _panel_exprs() -> list[str]:
    return [normalized(q.expr) for q in artifacts.dashboard_queries(DASHBOARD)]


@pytest.mark.parametrize("needle", [
    'sumby(policy)(vpol_report_results{result="fail"',       # violations by policy
    'sumby(namespace)(vpol_report_results{result="fail"',    # by namespace
    'sumby(severity)(vpol_report_results{result="fail"',     # by severity
    "topk(10,sumby(namespace,policy,severity)(vpol_report_results{result=\"fail\"",  # top offenders
    "vpol_scan_duration_seconds_bucket",                     # scan duration
    "time()-max(vpol_scan_last_success_timestamp_seconds)",  # last success age
    "vpol_scan_resources_total",                             # resources scanned
    "vpol_policy_info",                                      # policy readiness (per policy)
    'vpol_policies{ready="false"}',                          # policy readiness (count)
    "vpol_admission_requests_total",                         # webhook requests
    "vpol_admission_decisions_total",                        # webhook decisions
    "vpol_admission_duration_seconds_bucket",                # webhook latency
    "vpol_policy_admission_enforced",                        # enforcement path per policy
])
def test_dashboard_has_the_required_panels(needle: str) -> None:
    assert any(needle in e for e in _panel_exprs()), needle


# ------------------------------------------------------------------ alerts


def test_alerts_cover_violations_scans_readiness_and_errors() -> None:
    assert set(ALERTS) == {"VpolNewPolicyViolations", "VpolScanStalled", "VpolPolicyNotReady",
                           "VpolReconcileErrors", "VpolPolicyNotEnforced", "VpolWebhookErrors", "VpolWebhookSlow",
                           "VpolGenerationErrors", "VpolDeletionFailing"}
    expected_series = {
        "VpolNewPolicyViolations": {"vpol_report_results"},
        "VpolScanStalled": {"vpol_scan_last_success_timestamp_seconds"},
        "VpolPolicyNotReady": {"vpol_policy_info"},
        "VpolReconcileErrors": {"vpol_reconcile_errors_total"},
        "VpolPolicyNotEnforced": {"vpol_policy_admission_enforced"},
        "VpolWebhookErrors": {"vpol_admission_decisions_total"},
        "VpolWebhookSlow": {"vpol_admission_duration_seconds_bucket"},
        "VpolGenerationErrors": {"vpol_generations_total"},
        "VpolDeletionFailing": {"vpol_deleting_policy_runs_total"},
    }
    for name, rule in ALERTS.items():
        assert metric_names(rule["expr"]) == expected_series[name], name
        assert rule.get("for"), f"{name} should wait before firing"
        assert rule["labels"]["severity"] in ("warning", "critical", "info")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    assert 'result="fail"' in normalized(ALERTS["VpolNewPolicyViolations"]["expr"])
    assert "offset" in ALERTS["VpolNewPolicyViolations"]["expr"]
    assert "absent(vpol_scan_last_success_timestamp_seconds)" in normalized(ALERTS["VpolScanStalled"]["expr"])
    assert 'ready="false"' in normalized(ALERTS["VpolPolicyNotReady"]["expr"])
    assert 'path="None"' in normalized(ALERTS["VpolPolicyNotEnforced"]["expr"])
    assert ">1" in normalized(ALERTS["VpolWebhookSlow"]["expr"])
    assert "histogram_quantile(0.99," in normalized(ALERTS["VpolWebhookSlow"]["expr"])
    assert 'outcome="error"' in normalized(ALERTS["VpolGenerationErrors"]["expr"])
    assert 'outcome=~"failed|forbidden"' in normalized(ALERTS["VpolDeletionFailing"]["expr"])


def test_alert_output_keeps_the_routing_severity() -> None:
    # An alert's expression must not output a `severity` label (the policy's
    # severity): the rule's own severity label would silently replace it.
    for name, rule in ALERTS.items():
        assert "severity" not in rule["expr"], name


# ------------------------------------------------------------------ manifests


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_prometheus_rule_matches_the_rules_file() -> None:
    assert artifacts.PROMETHEUS_RULE_FILE.read_text() == artifacts.render_prometheus_rule(), (
        "prometheusrule.yaml is stale: run `python -m tests.unit.monitoring.artifacts`")
    (rule,) = load_docs(artifacts.PROMETHEUS_RULE_FILE)
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == artifacts.load_rule_groups()


def test_kustomization_lists_every_manifest_and_the_dashboard() -> None:
    kustomization = yaml.safe_load((artifacts.MONITORING / "kustomization.yaml").read_text())
    assert kustomization["namespace"] == "vpol-system"
    for resource in kustomization["resources"]:
        assert (artifacts.MONITORING / resource).is_file(), resource
    kinds = {d["kind"] for r in kustomization["resources"] for d in load_docs(artifacts.MONITORING / r)}
    assert kinds == {"Service", "ServiceMonitor", "PrometheusRule"}
    (generator,) = kustomization["configMapGenerator"]
    assert generator["options"]["labels"]["grafana_dashboard"] == "1"
    (entry,) = generator["files"]
    key, _, source = entry.partition("=")
    assert key.endswith(".json") and source == artifacts.DASHBOARD_FILE.name


def test_service_and_servicemonitor_reach_the_operator_pods() -> None:
    (service,) = load_docs(artifacts.MONITORING / "service.yaml")
    (monitor,) = load_docs(artifacts.SERVICE_MONITOR_FILE)
    assert service["metadata"]["name"] == "vpol-metrics"
    (port,) = service["spec"]["ports"]
    assert port["name"] == "metrics" and port["port"] == 8080
    # the ServiceMonitor selects this Service and scrapes its named port
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    # the Service selects the operator's pods, and their container names the port
    deployment_path = artifacts.REPO / "manifests" / "operator" / "deployment.yaml"
    (deployment,) = [d for d in load_docs(deployment_path) if d["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    ports = {p.get("name"): p for c in template["spec"]["containers"] for p in c.get("ports", [])}
    assert port["targetPort"] in ports
    assert ports[port["targetPort"]]["containerPort"] == 8080
    assert "--metrics-port=8080" in template["spec"]["containers"][0].get("args", [])


def test_servicemonitor_keeps_the_reported_namespace_label() -> None:
    (monitor,) = load_docs(artifacts.SERVICE_MONITOR_FILE)
    (endpoint,) = monitor["spec"]["endpoints"]
    actions = [(r.get("action"), r.get("sourceLabels"), r.get("targetLabel"), r.get("regex"))
               for r in endpoint["relabelings"]]
    assert ("replace", ["namespace"], "operator_namespace", None) in actions
    assert ("labeldrop", None, None, "namespace") in actions
    assert "honorLabels" not in endpoint


def test_kustomize_renders_the_dashboard_configmap() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH (the e2e suite applies these manifests)")
    proc = subprocess.run([kubectl, "kustomize", str(artifacts.MONITORING)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"Service", "ServiceMonitor", "PrometheusRule", "ConfigMap"}
    assert {d["metadata"]["namespace"] for d in docs} == {"vpol-system"}
    cm = by_kind["ConfigMap"]
    assert cm["metadata"]["name"] == "vpol-dashboard"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    (content,) = cm["data"].values()
    assert json.loads(content) == DASHBOARD
    assert by_kind["PrometheusRule"]["spec"]["groups"] == artifacts.load_rule_groups()

"""vpol's Helm chart rendered by the real helm (built from its module): lint, the same objects as the
kustomize manifests for the default values, every documented value reaching the objects it configures
(operator flags through vpol's own argument parser), disabled parts absent, wrong values refused.

The cluster half (server-side dry run, Pod Security, install / upgrade / uninstall) is
tests/e2e/test_helm.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.chart import (
    CHANGED,
    CHART,
    NAMESPACE,
    REPO,
    VARIANTS,
    Doc,
    by_key,
    container,
    find,
    helm,
    kustomize,
    template,
    without_helm_labels,
)
from vpol.cli.main import build_parser

MONITORING_ON = ["metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
                 "grafanaDashboard.enabled=true"]


def documented_paths() -> set[str]:
    import sys

    sys.path.insert(0, str(REPO / "manifests" / "helm"))
    try:
        import generate  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    schema = json.loads((CHART / "values.schema.json").read_text())
    return {path for path, _ in generate.documented(schema)} - {"global"}


def set_paths(values: Any, schema: dict[str, Any], documented: set[str], path: str = "") -> set[str]:
    """The documented values a values file sets."""
    if path in documented:
        return {path}
    out: set[str] = set()
    for k, v in (values or {}).items():
        out |= set_paths(v, schema, documented, f"{path}.{k}" if path else k)
    return out


def run_args(docs: list[Doc]) -> Any:
    """The rendered container's args, parsed by `vpol run`'s own parser (an unknown flag fails here)."""
    return build_parser().parse_args(["run", *container(docs)["args"]])


# ------------------------------------------------------------------------------------ lint, kustomize


def test_helm_lint_passes_with_the_defaults_and_with_every_value_changed() -> None:
    helm("lint", "--strict", str(CHART))
    for files in ([CHANGED], *[[v] for v in VARIANTS.values()]):
        helm("lint", "--strict", str(CHART), *[a for f in files for a in ("-f", str(f))])


def test_default_values_render_the_kustomize_manifests() -> None:
    """One source of truth: the chart with its defaults is manifests/operator plus the metrics Service;
    with the monitoring objects turned on it is the whole of manifests/. The only object kustomize has and
    the chart leaves out is the Namespace (Helm installs into an existing or --create-namespace one)."""
    namespace = ("Namespace", "", NAMESPACE)
    operator = by_key(kustomize(REPO / "manifests" / "operator"))
    metrics_service = by_key([d for d in kustomize(REPO / "manifests" / "monitoring") if d["kind"] == "Service"])
    everything = by_key(kustomize(REPO / "manifests"))
    assert namespace in operator and namespace in everything
    del operator[namespace], everything[namespace]
    for rendered, expected in ((template(), {**operator, **metrics_service}),
                               (template(sets=MONITORING_ON), everything)):
        got = by_key([without_helm_labels(d) for d in rendered])
        assert sorted(got) == sorted(expected)
        for k in expected:
            assert got[k] == expected[k], f"{k} differs between the chart and kustomize"


def test_every_object_carries_helms_labels() -> None:
    for doc in template(sets=MONITORING_ON):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm" and labels["app.kubernetes.io/instance"] == "vpol"
        assert labels["helm.sh/chart"] == "vpol-0.1.0" and labels["app.kubernetes.io/name"] == "vpol", doc["kind"]


# ------------------------------------------------------------------------------ every value changed


def flags(docs: list[Doc]) -> dict[str, Any]:
    return vars(run_args(docs))


def pod(docs: list[Doc]) -> Doc:
    deployment = find(docs, "Deployment", "vpol")
    assert deployment is not None
    return dict(deployment["spec"]["template"])


def rules(docs: list[Doc], name: str) -> list[Doc]:
    role = find(docs, "ClusterRole", name)
    assert role is not None
    return list(role["rules"])


C = yaml.safe_load(CHANGED.read_text())


def _values(path: str) -> Any:
    node: Any = C
    for part in path.split("."):
        node = node[part]
    return node


def cert(docs: list[Doc], name: str) -> Doc:
    found = find(docs, "Certificate", name)
    assert found is not None, f"no Certificate {name}"
    return dict(found["spec"])


#: What each documented value changes, checked on the chart rendered with CHANGED (``c``) and, for the
#: values CHANGED cannot change with the others, with its variant (``v``, a dict by variant name).
Check = Callable[[list[Doc], dict[str, list[Doc]]], bool]
EFFECTS: dict[str, Check] = {
    "image.repository": lambda c, v: container(c)["image"] == "registry.example/platform/vpol:9.9.9",
    "image.tag": lambda c, v: container(c)["image"].endswith(":9.9.9"),
    "image.pullPolicy": lambda c, v: container(c)["imagePullPolicy"] == "Always",
    "imagePullSecrets": lambda c, v: pod(c)["spec"]["imagePullSecrets"] == [{"name": "regcred"}],
    "replicas": lambda c, v: find(c, "Deployment", "vpol")["spec"]["replicas"] == 3,  # type: ignore[index]
    "operator.vapGeneration": lambda c, v: flags(c)["vap_generation"] == "opt-in",
    "operator.scanInterval": lambda c, v: flags(c)["scan_interval"] == 7200,
    "operator.resync": lambda c, v: flags(c)["resync"] == 300,
    "operator.workers": lambda c, v: flags(c)["workers"] == 4,
    "operator.evalTimeout": lambda c, v: flags(c)["eval_timeout"] == 2.5,
    "operator.evalMemoryLimit": lambda c, v: flags(c)["eval_memory_limit"] == 2048,
    "operator.policyValidation": lambda c, v: flags(c)["policy_validation"] == "off",
    "operator.events": lambda c, v: flags(c)["events"] == "off",
    "operator.eventsPerSecond": lambda c, v: flags(c)["events_per_second"] == 2.5,
    "operator.httpAllow": lambda c, v: flags(c)["http_allow"] == ["https://api.example.com/",
                                                                   "http://policy-data.example/"],
    "operator.extraArgs": lambda c, v: flags(c)["priority"] == 5,
    "webhook.enabled": lambda c, v: (
        flags(v["webhook-off"])["webhook"] == "off" and flags(c)["webhook"] == "on"
        and find(v["webhook-off"], "Service", "vpol-webhook") is None
        and find(v["webhook-off"], "Role", "vpol-webhook-tls") is None
        and find(v["webhook-off"], "RoleBinding", "vpol-webhook-tls") is None
        and "webhook" not in {p["name"] for p in container(v["webhook-off"])["ports"]}),
    "webhook.timeoutSeconds": lambda c, v: flags(c)["webhook_timeout"] == 20,
    "webhook.workers": lambda c, v: flags(c)["webhook_workers"] == 3,
    "webhook.evalTimeout": lambda c, v: flags(c)["webhook_eval_timeout"] == 1.5,
    "webhook.drainSeconds": lambda c, v: flags(c)["webhook_drain"] == 12,
    "webhook.inline": lambda c, v: flags(c)["webhook_inline"] == "off",
    "webhook.excludeNamespaces": lambda c, v: flags(c)["webhook_exclude_namespaces"] == ["legacy-apps", "sandbox"],
    "webhook.url": lambda c, v: flags(c)["webhook_url"] == "https://127.0.0.1:19443",
    "webhook.certSecret": lambda c, v: (
        flags(v["cert-secret"])["webhook_cert_secret"] == "corp-webhook-tls"
        and not [d for d in v["cert-secret"] if d["apiVersion"].startswith("cert-manager.io/")]),
    "webhook.certManager.enabled": lambda c, v: (
        flags(c)["webhook_cert_secret"] == "vpol-webhook-cert"
        and cert(c, "vpol-webhook")["secretName"] == "vpol-webhook-cert"
        and cert(c, "vpol-webhook")["dnsNames"] == [f"vpol-webhook.{NAMESPACE}.svc",
                                                    f"vpol-webhook.{NAMESPACE}.svc.cluster.local"]),
    "webhook.certManager.issuerRef": lambda c, v: (
        cert(c, "vpol-webhook")["issuerRef"] == _values("webhook.certManager.issuerRef")
        and find(c, "Issuer", "vpol-selfsigned") is None and find(c, "Certificate", "vpol-webhook-ca") is None),
    "webhook.certManager.duration": lambda c, v: cert(c, "vpol-webhook")["duration"] == "720h",
    "webhook.certManager.renewBefore": lambda c, v: cert(c, "vpol-webhook")["renewBefore"] == "240h",
    "ports.metrics": lambda c, v: (flags(c)["metrics_port"] == 18080 and {"name": "metrics", "containerPort": 18080}
                                   in container(c)["ports"]),
    "ports.health": lambda c, v: (flags(c)["liveness_port"] == 18081 and {"name": "health", "containerPort": 18081}
                                  in container(c)["ports"]),
    "ports.webhook": lambda c, v: (flags(c)["webhook_port"] == 19443 and {"name": "webhook", "containerPort": 19443}
                                   in container(c)["ports"]),
    "resources": lambda c, v: container(c)["resources"] == _values("resources"),
    "podSecurityContext": lambda c, v: pod(c)["spec"]["securityContext"] == _values("podSecurityContext"),
    "securityContext": lambda c, v: container(c)["securityContext"] == _values("securityContext"),
    "livenessProbe": lambda c, v: container(c)["livenessProbe"] == _values("livenessProbe"),
    "readinessProbe": lambda c, v: container(c)["readinessProbe"] == _values("readinessProbe"),
    "tmpSizeLimit": lambda c, v: pod(c)["spec"]["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "128Mi"}}],
    "podAnnotations": lambda c, v: pod(c)["metadata"]["annotations"] == {"example.com/owner": "platform-team"},
    "podLabels": lambda c, v: pod(c)["metadata"]["labels"] == {
        "app.kubernetes.io/name": "vpol", "app.kubernetes.io/component": "operator", "team": "platform"},
    "nodeSelector": lambda c, v: pod(c)["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"},
    "tolerations": lambda c, v: pod(c)["spec"]["tolerations"] == _values("tolerations"),
    "affinity": lambda c, v: pod(c)["spec"]["affinity"] == _values("affinity"),
    "priorityClassName": lambda c, v: pod(c)["spec"]["priorityClassName"] == "vpol-critical",
    "podDisruptionBudget.enabled": lambda c, v: (
        find(c, "PodDisruptionBudget", "vpol") is not None
        and find(v["no-disruption-budget"], "PodDisruptionBudget", "vpol") is None),
    "podDisruptionBudget.maxUnavailable": lambda c, v: find(c, "PodDisruptionBudget", "vpol")[  # type: ignore[index]
        "spec"]["maxUnavailable"] == 2,
    "serviceAccount.annotations": lambda c, v: find(c, "ServiceAccount", "vpol")["metadata"][  # type: ignore[index]
        "annotations"] == {"example.com/role": "policy-operator"},
    "rbac.scannedKinds": lambda c, v: rules(c, "vpol-scanned-kinds") == _values("rbac.scannedKinds"),
    "rbac.mutatedKinds": lambda c, v: rules(c, "vpol-mutated-kinds") == _values("rbac.mutatedKinds"),
    "rbac.generatedKinds": lambda c, v: rules(c, "vpol-generated-kinds") == _values("rbac.generatedKinds"),
    "rbac.deletedKinds": lambda c, v: rules(c, "vpol-deleted-kinds") == _values("rbac.deletedKinds"),
    "rbac.registrySecrets": lambda c, v: find(c, "Role", "vpol-registry-secrets")["rules"] == [  # type: ignore[index]
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["ghcr-pull", "private-registry"],
         "verbs": ["get"]}],
    "metrics.service.enabled": lambda c, v: (
        find(v["no-metrics-service"], "Service", "vpol-metrics") is None
        and find(c, "Service", "vpol-metrics") is not None),
    "metrics.service.port": lambda c, v: find(c, "Service", "vpol-metrics")["spec"]["ports"][0][  # type: ignore[index]
        "port"] == 9090,
    "metrics.serviceMonitor.enabled": lambda c, v: find(c, "ServiceMonitor", "vpol") is not None,
    "metrics.serviceMonitor.additionalLabels": lambda c, v: find(c, "ServiceMonitor", "vpol")[  # type: ignore[index]
        "metadata"]["labels"]["release"] == "kube-prometheus-stack",
    "metrics.serviceMonitor.interval": lambda c, v: find(c, "ServiceMonitor", "vpol")[  # type: ignore[index]
        "spec"]["endpoints"][0]["interval"] == "15s",
    "metrics.prometheusRule.enabled": lambda c, v: find(c, "PrometheusRule", "vpol")[  # type: ignore[index]
        "spec"] == yaml.safe_load((REPO / "manifests" / "monitoring" / "rules.yaml").read_text()),
    "metrics.prometheusRule.additionalLabels": lambda c, v: find(c, "PrometheusRule", "vpol")[  # type: ignore[index]
        "metadata"]["labels"]["release"] == "kube-prometheus-stack",
    "grafanaDashboard.enabled": lambda c, v: json.loads(
        find(c, "ConfigMap", "vpol-dashboard")["data"]["vpol-violations.json"])  # type: ignore[index]
        == json.loads((REPO / "manifests" / "monitoring" / "dashboard.json").read_text()),
    "grafanaDashboard.namespace": lambda c, v: find(c, "ConfigMap", "vpol-dashboard")[  # type: ignore[index]
        "metadata"]["namespace"] == "monitoring",
    "grafanaDashboard.labels": lambda c, v: find(c, "ConfigMap", "vpol-dashboard")[  # type: ignore[index]
        "metadata"]["labels"]["grafana_dashboard"] == "vpol",
}


def test_the_changed_values_change_every_documented_value_and_each_is_checked() -> None:
    documented = documented_paths()
    schema = json.loads((CHART / "values.schema.json").read_text())
    changed = set_paths(C, schema, documented)
    for variant in VARIANTS.values():
        changed |= set_paths(yaml.safe_load(variant.read_text()), schema, documented)
    assert changed == documented
    assert set(EFFECTS) == documented
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    for path in documented:
        node, default = C, defaults
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
            default = default[part]
        assert node is None or node != default, f"{path} is set to its default in changed-values.yaml"


@pytest.fixture(scope="module")
def rendered() -> tuple[list[Doc], dict[str, list[Doc]]]:
    return template([CHANGED]), {name: template([CHANGED, path]) for name, path in VARIANTS.items()}


@pytest.mark.parametrize("path", sorted(EFFECTS))
def test_each_documented_value_reaches_what_it_configures(path: str, rendered: Any) -> None:
    changed, variants = rendered
    assert EFFECTS[path](changed, variants), f"{path} did not take effect"
    defaults = template()
    # ...and the check has teeth: it does not hold with the defaults
    assert not _holds(EFFECTS[path], defaults, {name: defaults for name in VARIANTS}), path


def _holds(check: Check, c: list[Doc], v: dict[str, list[Doc]]) -> bool:
    try:
        return bool(check(c, v))
    except (TypeError, KeyError, AssertionError):
        return False


def test_the_default_readiness_probe_is_the_webhooks_when_there_is_one() -> None:
    """A replica is Ready once its webhook has loaded every policy (a starting one joins the webhook Service's
    endpoints only then: HTTPS /readyz on the webhook port); without the webhook, once the operator runs."""
    assert container(template())["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "webhook",
                                                                   "scheme": "HTTPS"}
    off = container(template(sets=["webhook.enabled=false"]))["readinessProbe"]
    assert off["httpGet"] == {"path": "/healthz", "port": "health"}


def test_the_self_signed_ca_of_cert_manager_without_an_issuer() -> None:
    docs = template(sets=["webhook.certManager.enabled=true"])
    assert find(docs, "Issuer", "vpol-selfsigned")["spec"] == {"selfSigned": {}}  # type: ignore[index]
    ca = cert(docs, "vpol-webhook-ca")
    assert ca["isCA"] is True and ca["issuerRef"] == {"name": "vpol-selfsigned", "kind": "Issuer"}
    assert find(docs, "Issuer", "vpol-ca")["spec"] == {"ca": {"secretName": "vpol-webhook-ca"}}  # type: ignore[index]
    assert cert(docs, "vpol-webhook")["issuerRef"] == {"name": "vpol-ca", "kind": "Issuer"}
    assert run_args(docs).webhook_cert_secret == "vpol-webhook-cert"


def test_the_release_namespace_is_used_everywhere() -> None:
    docs = template(namespace="policy", sets=MONITORING_ON + ["webhook.certManager.enabled=true"])
    namespaced = [d for d in docs if "namespace" in d["metadata"]]
    assert namespaced and all(d["metadata"]["namespace"] == "policy" for d in namespaced)
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "vpol", "namespace": "policy"}]
    assert cert(docs, "vpol-webhook")["dnsNames"][0] == "vpol-webhook.policy.svc"


def test_large_numbers_reach_the_flags_as_numbers() -> None:
    """Helm reads numbers as floats; the chart prints them so `vpol run` parses them (86400, not 8.64e+04)."""
    docs = template(sets=["operator.scanInterval=86400", "operator.resync=1000000", "operator.evalMemoryLimit=1000000"])
    args = run_args(docs)
    assert (args.scan_interval, args.resync, args.eval_memory_limit) == (86400, 1000000, 1000000)


# ----------------------------------------------------------------------------------- wrong values


@pytest.mark.parametrize(("sets", "says"), [
    (["replicas=0"], "replicas"),
    (["replicas=two"], "replicas"),
    (["operator.vapGeneration=always"], "vapGeneration"),
    (["operator.scanInterval=-1"], "scanInterval"),
    (["operator.scanIntervall=60"], "scanIntervall"),
    (["webhook.timeoutSeconds=31"], "timeoutSeconds"),
    (["webhook.enabled=maybe"], "enabled"),
    (["webhook.url=http://127.0.0.1:9443"], "url"),
    (["webhook.certSecret=Not_A_Name"], "certSecret"),
    (["ports.webhook=70000"], "webhook"),
    (["image.pullPolicy=Sometimes"], "pullPolicy"),
    (["operator.httpAllow={ftp://x}"], "httpAllow"),
    (["tmpSizeLimit=lots"], "tmpSizeLimit"),
    (["metrics.serviceMonitor.interval=often"], "interval"),
    (["unknownTopLevel=1"], "unknownTopLevel"),
])
def test_wrong_values_fail_naming_the_value(sets: list[str], says: str) -> None:
    """Helm checks values.schema.json on template, install and upgrade alike (install: tests/e2e/test_helm.py)."""
    proc = helm("template", "vpol", str(CHART), "-n", NAMESPACE, *[a for s in sets for a in ("--set", s)],
                check=False)
    assert proc.returncode != 0, f"accepted {sets}"
    assert "values don't meet the specifications of the schema" in proc.stderr and says in proc.stderr, proc.stderr


@pytest.mark.parametrize(("sets", "says"), [
    (["webhook.certSecret=corp-tls", "webhook.certManager.enabled=true"], "exclude each other"),
    (["metrics.service.enabled=false", "metrics.serviceMonitor.enabled=true"], "needs metrics.service.enabled"),
])
def test_contradicting_values_fail_with_a_sentence(sets: list[str], says: str) -> None:
    proc = helm("template", "vpol", str(CHART), *[a for s in sets for a in ("--set", s)], check=False)
    assert proc.returncode != 0 and says in proc.stderr, proc.stderr


def test_the_packaged_chart_renders_what_the_directory_does(tmp_path: Path) -> None:
    """`helm package` keeps everything the templates read (files/, crds/)."""
    helm("package", str(CHART), "-d", str(tmp_path))
    [packaged] = list(tmp_path.glob("vpol-*.tgz"))
    proc = helm("template", "vpol", str(packaged), "-n", NAMESPACE, "--include-crds", *sum(
        (["--set", s] for s in MONITORING_ON), []))
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    direct = template(sets=MONITORING_ON)
    assert [d for d in docs if d["kind"] != "CustomResourceDefinition"] == direct
    crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert {"validatingpolicies.policies.kyverno.io", "policyreports.wgpolicyk8s.io",
            "clusterkopfpeerings.kopf.dev"} <= crds

"""vpol's PolicyReports side by side with Kyverno's: the same policies and resources scanned on one control plane by
vpol's operator and by Kyverno's own reports controller (bench/kyverno/peer.py: ``cmd/reports-controller`` of
Kyverno's module, built with Go and run out of cluster), and every report compared, resource by resource.

The reports must be the same except where vpol differs on purpose, as docs/kyverno-compatibility.md's "Where vpol differs from Kyverno"
says: the name (``vpol-<uid>``, Kyverno's is the bare UID), the managed-by label, vpol's scan-key annotation, the
``source`` of each result (``vpol``, Kyverno's ``KyvernoValidatingPolicy``), the ``autogen`` property of a result
about a pod controller, and the timestamps (each tool's own scan time). Everything else (which resources are
reported, the report kind, scope, owner, summary, and each result's policy, outcome, message, scored, severity,
category and properties) is compared as Kyverno wrote it, not with expected values written here.

The policies cover what a report result carries: messages and message expressions, the index of the failing
validation, audit annotations, variables, match conditions that leave a resource unreported, evaluation errors,
severity, category and scored from annotations, cluster-scoped resources (ClusterPolicyReports), a
NamespacedValidatingPolicy, pod controllers reported through autogen (all of them, or Deployments only),
PolicyExceptions (a skipped result and one reported as passed), matchConditions that cannot be evaluated (under
failurePolicy Fail and Ignore), and two policies neither reports: one labelled ``reports.kyverno.io/disabled``
and one with background evaluation off. Every policy opts out of VAP generation:
Kyverno 1.19 does not scan a policy whose status says its VAP was generated (kyverno/kyverno#16153).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from bench.kyverno.peer import BUILD_SCRIPT, KyvernoReportsPeer
from tests.e2e.conftest import KubeCluster, go_built
from tests.e2e.operator_process import OperatorProcess, sa_kubeconfig
from tests.e2e.vpol_fixtures import install_vpol, wait_for

A, B = "diff-a", "diff-b"
LABEL = {"reports-diff": "yes"}
SELECTED = {"matchLabels": LABEL}
PODS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
CONFIGMAPS = {**PODS, "resources": ["configmaps"]}
NAMESPACES = {**PODS, "resources": ["namespaces"]}
#: What vpol writes differently on purpose (docs/kyverno-compatibility.md).
OWN_PROPERTIES = ("autogen",)


def policy(name: str, rules: dict[str, Any], validations: list[dict[str, Any]], *, annotations: dict[str, str] | None
           = None, kind: str = "ValidatingPolicy", namespace: str = "", labels: dict[str, str] | None = None,
           **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "annotations": annotations or {}, "labels": labels or {}}
    if namespace:
        metadata["namespace"] = namespace
    constraints = {"resourceRules": [rules]}
    if rules is not NAMESPACES:
        constraints["namespaceSelector"] = SELECTED
    else:
        constraints["objectSelector"] = SELECTED
    return {"apiVersion": "policies.kyverno.io/v1", "kind": kind, "metadata": metadata,
            "spec": {"validationActions": ["Audit"], "matchConstraints": constraints, "validations": validations,
                     "autogen": {"validatingAdmissionPolicy": {"enabled": False}}, **spec}}


POLICIES = [
    policy("diff-privileged", PODS, [{"expression": "object.spec.containers.all(c, "
                                                    "!c.?securityContext.?privileged.orValue(false))",
                                      "message": "privileged containers are not allowed"}],
           annotations={"policies.kyverno.io/severity": "high", "policies.kyverno.io/category": "Pod Security"}),
    policy("diff-pinned", PODS, [{"expression": "object.spec.containers.all(c, c.image.contains('@'))",
                                  "messageExpression": "'image ' + object.spec.containers[0].image + "
                                                       "' is not pinned by digest'"}],
           annotations={"policies.kyverno.io/severity": "medium"}),
    policy("diff-two-checks", PODS, [
        {"expression": "has(object.metadata.labels)", "message": "labels are required"},
        {"expression": "object.metadata.?labels.?team.orValue('') != ''", "message": "a team label is required"}]),
    policy("diff-audit-annotations", PODS, [{"expression": "!object.spec.containers[0].image.endsWith(':latest')",
                                             "message": "the latest tag is not allowed"}],
           # Typed string for cel-go: Kyverno refuses an audit annotation whose value is dyn, as
           # object.spec.containers[0].image alone is (docs/kyverno-compatibility.md).
           # failMessage replaces the message of a failing result in Kyverno's reports.
           auditAnnotations=[{"key": "image", "valueExpression": "'image ' + object.spec.containers[0].image"},
                             {"key": "failMessage", "valueExpression": "'pin a tag other than latest, not ' + "
                                                                       "object.spec.containers[0].image"}]),
    policy("diff-match-conditions", PODS, [{"expression": "object.metadata.labels.app.size() <= 8",
                                            "message": "the app label is too long"}],
           matchConditions=[{"name": "has-app", "expression": "has(object.metadata.labels) && "
                                                              "'app' in object.metadata.labels"}]),
    policy("diff-variables", PODS, [{"expression": "variables.names.all(n, n.size() <= 8)",
                                     "message": "container names are at most 8 characters"}],
           variables=[{"name": "names", "expression": "object.spec.containers.map(c, c.name)"}],
           annotations={"policies.kyverno.io/category": "Naming"}),
    policy("diff-number", CONFIGMAPS, [{"expression": "int(object.data.n) > 0", "message": "n must be positive"}],
           annotations={"policies.kyverno.io/severity": "low", "policies.kyverno.io/category": "Validation"}),
    policy("diff-unscored", CONFIGMAPS, [{"expression": "has(object.data) && 'owner' in object.data",
                                          "message": "an owner is required"}],
           annotations={"policies.kyverno.io/scored": "false", "policies.kyverno.io/severity": "info"}),
    policy("diff-namespace-team", NAMESPACES, [{"expression": "'team' in object.metadata.labels",
                                                "message": "namespaces need a team label"}],
           annotations={"policies.kyverno.io/severity": "critical",
                        "policies.kyverno.io/category": "Multi-Tenancy"}),
    policy("diff-local", CONFIGMAPS, [{"expression": "object.metadata.name.startsWith('app-')",
                                       "message": "names start with app-"}],
           kind="NamespacedValidatingPolicy", namespace=B),
    # What a background scan's request says, and the namespace object it sees.
    policy("diff-request", CONFIGMAPS, [{
        "expression": "request.operation == 'CREATE' && oldObject == null && "
                      "namespaceObject.metadata.?labels.?team.orValue('') != ''",
        "messageExpression": "'operation ' + string(request.operation) + ', user \\'' + "
                             "string(request.userInfo.username) + '\\', namespace ' + namespaceObject.metadata.name"}]),
    # A matchCondition that cannot be evaluated on a ConfigMap without data: an error (rule "evaluation"); under
    # failurePolicy Ignore no result, as for a false condition.
    policy("diff-condition-error", CONFIGMAPS, [{"expression": "true"}],
           matchConditions=[{"name": "numbered", "expression": "object.data.n != ''"}]),
    policy("diff-condition-ignored", CONFIGMAPS, [{"expression": "true"}], failurePolicy="Ignore",
           matchConditions=[{"name": "numbered", "expression": "object.data.n != ''"}]),
    # Background evaluation off: neither reports it.
    policy("diff-admission-only", CONFIGMAPS, [{"expression": "false", "message": "admission only"}],
           evaluation={"background": {"enabled": False}}),
    # Autogen limited to Deployments: the CronJob gets no result from it.
    policy("diff-deployments-only", PODS, [{"expression": "object.spec.containers.size() == 1",
                                            "message": "one container"}],
           autogen={"validatingAdmissionPolicy": {"enabled": False},
                    "podControllers": {"controllers": ["deployments"]}}),
    # Left out of reports by its label (Kyverno's reports controller does not scan it).
    policy("diff-unreported", CONFIGMAPS, [{"expression": "false", "message": "never reported"}],
           labels={"reports.kyverno.io/disabled": "yes"}),
]
UNREPORTED = {"diff-unreported", "diff-admission-only"}
#: PolicyExceptions: one result skipped, one passed (reportResult), by Kyverno's CEL exceptions.
EXCEPTIONS = [
    {"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
     "metadata": {"name": "privileged-allowed", "namespace": A},
     "spec": {"policyRefs": [{"name": "diff-privileged", "kind": "ValidatingPolicy"}],
              "matchConditions": [{"name": "the-privileged-pod",
                                   "expression": "object.metadata.name == 'privileged'"}]}},
    {"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
     "metadata": {"name": "tags-accepted", "namespace": A},
     "spec": {"policyRefs": [{"name": "diff-pinned", "kind": "ValidatingPolicy"}], "reportResult": "pass",
              "matchConditions": [{"name": "unlabelled", "expression": "!has(object.metadata.labels)"}]}},
]


def pod(name: str, namespace: str, *, image: str = "registry.local/app:1.0", labels: dict[str, str] | None = None,
        container: str = "app", privileged: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": container, "image": image}
    if privileged:
        c["securityContext"] = {"privileged": True}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
                                                             **({"labels": labels} if labels else {})},
            "spec": {"containers": [c]}}


def template(labels: dict[str, str], restart: str) -> dict[str, Any]:
    return {"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "app", "image": "registry.local/app:latest"}], "restartPolicy": restart}}


RESOURCES = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": A, "labels": {**LABEL, "team": "a"}}},
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": B, "labels": LABEL}},
    pod("privileged", A, privileged=True, labels={"app": "web"}),
    pod("pinned", A, image="registry.local/app@sha256:" + "a" * 64, labels={"app": "web", "team": "a"}),
    pod("unlabelled", A, image="registry.local/app:latest"),
    pod("long-names", B, container="a-very-long-container-name", labels={"app": "a-long-app-name", "team": ""}),
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": A},
     "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
              "template": template({"app": "web"}, "Always")}},
    {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": B},
     "spec": {"schedule": "0 3 * * *", "suspend": True,
              "jobTemplate": {"spec": {"template": template({"team": "b"}, "OnFailure")}}}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-positive", "namespace": A},
     "data": {"n": "3", "owner": "me"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-a-number", "namespace": A},
     "data": {"n": "many"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-negative", "namespace": B},
     "data": {"n": "-1", "owner": "you"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "no-data", "namespace": B}},
]


def apply(cluster: KubeCluster, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "--server-side", "--field-manager=vpol-e2e", "-f", "-", input=json.dumps(obj))


@pytest.fixture(scope="module")
def scanned(own_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """vpol's operator and Kyverno's reports controller both running, on the policies and resources above."""
    cluster = own_cluster
    binary = Path(go_built(BUILD_SCRIPT, "Kyverno's reports controller", args=("reports-controller",)))
    install_vpol(cluster)
    for obj in RESOURCES[:2]:
        apply(cluster, obj)
    for ns in (A, B):
        wait_for(f"the default ServiceAccount of {ns}", lambda ns=ns: cluster.kubectl(
            "get", "serviceaccount", "default", "-n", ns, check=False).returncode == 0, 60, 0.5)
    for obj in RESOURCES[2:] + EXCEPTIONS + POLICIES:
        apply(cluster, obj)
    tmp = tmp_path_factory.mktemp("reports-differential")
    operator = OperatorProcess(sa_kubeconfig(cluster, tmp / "kubeconfig"), tmp / "operator.log").start()
    for pol in POLICIES:
        md = pol["metadata"]
        where = ["-n", md["namespace"]] if md.get("namespace") else []
        cluster.kubectl("wait", "--for=condition=Ready", f"{pol['kind'].lower()}.policies.kyverno.io/{md['name']}",
                        "--timeout=120s", *where, timeout=150)
    peer = KyvernoReportsPeer(cluster, tmp, binary=binary)
    peer.install()
    peer.start()
    try:
        yield cluster
    finally:
        peer.stop()
        operator.stop()


def reports(cluster: KubeCluster) -> list[dict[str, Any]]:
    custom: Any = client.CustomObjectsApi(cluster.api_client)
    items = custom.list_cluster_custom_object("wgpolicyk8s.io", "v1alpha2", "policyreports")["items"]
    items += custom.list_cluster_custom_object("wgpolicyk8s.io", "v1alpha2", "clusterpolicyreports")["items"]
    return list(items)


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """What both tools must write alike about one resource."""
    results = []
    for r in report.get("results") or []:
        item = {k: v for k, v in r.items() if k not in ("source", "timestamp")}
        props = {k: v for k, v in (r.get("properties") or {}).items() if k not in OWN_PROPERTIES}
        if props:
            item["properties"] = props
        else:
            item.pop("properties", None)
        results.append(item)
    owners = [{k: o.get(k) for k in ("apiVersion", "kind", "name", "uid")}
              for o in report["metadata"].get("ownerReferences") or []]
    return {"kind": report["kind"], "namespace": report["metadata"].get("namespace", ""),
            "scope": report.get("scope"), "owners": owners, "summary": report.get("summary"),
            "results": sorted(results, key=lambda r: str(r.get("policy")))}


def by_tool(cluster: KubeCluster) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Kyverno's, vpol's) reports about the test's resources, comparable, by the resource's kind/namespace/name."""
    kyverno: dict[str, Any] = {}
    vpol: dict[str, Any] = {}
    for report in reports(cluster):
        scope = report.get("scope") or {}
        if scope.get("namespace", "") not in ("", A, B) or (not scope.get("namespace") and scope.get("name")
                                                               not in (A, B)):
            continue
        key = f"{scope.get('kind')}/{scope.get('namespace', '')}/{scope.get('name')}"
        manager = (report["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by")
        if manager == "kyverno":
            assert report["metadata"]["name"] == scope.get("uid")
            assert all(r.get("source") == "KyvernoValidatingPolicy" for r in report.get("results") or [])
            kyverno[key] = comparable(report)
        elif manager == "vpol":
            assert report["metadata"]["name"] == f"vpol-{scope.get('uid')}"
            assert all(r.get("source") == "vpol" for r in report.get("results") or [])
            vpol[key] = comparable(report)
    return kyverno, vpol


def difference(ours: dict[str, Any], theirs: dict[str, Any]) -> str:
    """What differs between two comparable reports, field by field and result by result."""
    lines = [f"  {k}: vpol {ours.get(k)!r}, kyverno {theirs.get(k)!r}" for k in sorted(set(ours) | set(theirs))
             if k != "results" and ours.get(k) != theirs.get(k)]
    mine = {r.get("policy"): r for r in ours.get("results") or []}
    other = {r.get("policy"): r for r in theirs.get("results") or []}
    lines += [f"  result {p}: vpol {mine.get(p)!r}, kyverno {other.get(p)!r}" for p in sorted(set(mine) | set(other))
              if mine.get(p) != other.get(p)]
    return "\n".join(lines)


def test_vpols_reports_are_kyvernos(scanned: KubeCluster) -> None:
    # Both scan at start; each write is eventually complete, so they are compared once equal or after a while.
    def same() -> bool:
        kyverno, vpol = by_tool(scanned)
        return bool(kyverno) and kyverno == vpol
    try:
        wait_for("vpol's and Kyverno's reports to agree", same, 180, 3)
    except AssertionError:
        kyverno, vpol = by_tool(scanned)
        assert set(vpol) == set(kyverno), "resources reported by one tool only"
        for key in sorted(kyverno):
            assert vpol[key] == kyverno[key], f"{key}:\n" + difference(vpol[key], kyverno[key])
        raise
    kyverno, _ = by_tool(scanned)
    # The scenario reaches what it is meant to: every kind of report, outcome and property.
    outcomes = {r["result"] for rep in kyverno.values() for r in rep["results"]}
    assert outcomes >= {"pass", "fail", "error", "skip"}, outcomes
    exempted = {r["message"] for rep in kyverno.values() for r in rep["results"] if "exception" in r["message"]}
    assert len(exempted) == 2, exempted
    kinds = {key.split("/")[0] for key in kyverno}
    assert kinds >= {"Pod", "Deployment", "CronJob", "ConfigMap", "Namespace"}, kinds
    assert {rep["kind"] for rep in kyverno.values()} == {"PolicyReport", "ClusterPolicyReport"}
    properties = {k for rep in kyverno.values() for r in rep["results"] for k in r.get("properties", {})}
    assert {"process", "cel.validationIndex", "image", "failMessage", "exceptions"} <= properties, properties
    assert any(r["message"].startswith("pin a tag") for rep in kyverno.values() for r in rep["results"])
    assert any(r.get("rule") == "evaluation" and r["message"].startswith("failed to load context: ")
               for rep in kyverno.values() for r in rep["results"])
    deployments_only = {key.split("/")[0] for key, rep in kyverno.items()
                        if any(r["policy"] == "diff-deployments-only" for r in rep["results"])}
    assert {"Pod", "Deployment"} <= deployments_only and "CronJob" not in deployments_only, deployments_only
    policies = {r["policy"] for rep in kyverno.values() for r in rep["results"]}
    assert policies == {p["metadata"]["name"] if not p["metadata"].get("namespace")
                        else f"{B}/{p['metadata']['name']}" for p in POLICIES} - UNREPORTED, policies

"""Deployment pieces on a real API server: the manifests are accepted, vpol's pod is "restricted"-clean,
and vpol's own example policies, enforced natively, admit vpol's own Deployment."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.operator_process import REPO
from tests.e2e.vpol_fixtures import GROUP, PLURAL, VERSION, operator, policies, vpol_installed, wait_for  # noqa: F401

def stand_in_crds(group: str, kinds: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    """Stand-ins for another project's CRDs, (kind, plural) at v1 with any content: only their existence
    matters for a dry run."""
    return [
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
         "metadata": {"name": f"{plural}.{group}"},
         "spec": {"group": group, "scope": "Namespaced",
                  "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                  "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                      "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
        for kind, plural in kinds
    ]


# The Prometheus Operator's.
MONITORING_CRDS = stand_in_crds("monitoring.coreos.com",
                                (("ServiceMonitor", "servicemonitors"), ("PrometheusRule", "prometheusrules")))


def rendered() -> list[dict[str, Any]]:
    import subprocess

    import shutil

    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render the kustomization"
    out = subprocess.run([kubectl, "kustomize", str(REPO / "manifests")], capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_everything_kustomize_renders_is_accepted(vpol_installed: Any) -> None:
    cluster = vpol_installed
    for crd in MONITORING_CRDS:
        proc = cluster.kubectl("create", "-f", "-", input=json.dumps(crd), check=False)
        assert proc.returncode == 0 or "AlreadyExists" in proc.stderr, proc.stderr
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}")
    docs = rendered()
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ServiceAccount", "ClusterRole", "Deployment", "Service", "ServiceMonitor",
            "PrometheusRule", "ConfigMap"} <= kinds
    for doc in docs:
        proc = cluster.kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=vpol-e2e",
                               "-f", "-", input=json.dumps(doc), check=False)
        assert proc.returncode == 0, f"{doc['kind']}/{doc['metadata']['name']}: {proc.stderr}"


def check_restricted(cluster: Any, namespace: str, template: dict[str, Any]) -> None:
    """A Pod from ``template`` is admitted without a warning in a namespace enforcing the restricted Pod
    Security level, and (the check has teeth) a variant keeping its capabilities is rejected there."""
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest", "--overwrite")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "vpol-pss", "namespace": namespace, "labels": template["metadata"]["labels"]},
           "spec": copy.deepcopy(template["spec"])}
    pod["spec"]["serviceAccountName"] = "default"
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
    bad = copy.deepcopy(pod)
    del bad["spec"]["containers"][0]["securityContext"]["capabilities"]
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0 and "violates PodSecurity" in proc.stderr


def test_operator_pod_is_admitted_under_restricted_pod_security(cluster: Any, namespace: str) -> None:
    deployment = next(d for d in rendered() if d["kind"] == "Deployment")
    check_restricted(cluster, namespace, deployment["spec"]["template"])


def test_example_policies_enforced_natively_admit_vpols_deployment(policies: Any, cluster: Any,
                                                                    namespace: str) -> None:
    names = []
    for path in sorted((REPO / "examples" / "pod-security").rglob("policy.yaml")):
        spec = yaml.safe_load(Path(path).read_text())["spec"]
        spec["validationActions"] = ["Deny"]
        spec.setdefault("autogen", {})["validatingAdmissionPolicy"] = {"enabled": True}
        names.append(policies.create(path.parent.name, spec))
    for name in names:
        policies.wait_condition(name, "VAPGenerated", "True", timeout=120)
    deployment = next(d for d in rendered() if d["kind"] == "Deployment")
    deployment["metadata"]["namespace"] = namespace
    deployment["spec"]["template"]["spec"]["serviceAccountName"] = "default"

    def admitted() -> bool:
        proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(deployment), check=False)
        assert proc.returncode == 0, proc.stderr
        return True

    assert admitted()
    # ...while a Deployment breaking them is denied by the API server itself
    bad = copy.deepcopy(deployment)
    bad["spec"]["template"]["spec"]["hostNetwork"] = True

    def denied() -> bool:
        proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(bad), check=False)
        return proc.returncode != 0 and "ValidatingAdmissionPolicy" in proc.stderr

    wait_for("a host-network Deployment to be denied", denied, 30, 1)

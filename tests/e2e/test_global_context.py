"""GlobalContextEntries on a real API server: loaded by the operator, read by policies at admission, in scans
and offline; an entry that cannot be loaded says why in its status, and policies reading it get an error with
that reason.

The operator runs as the manifests' ServiceAccount, so every entry is loaded with exactly the permissions
manifests/operator/rbac.yaml grants (and one test grants more through the vpol-global-context role).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.test_scans import result_of, touch_until
from tests.e2e.vpol_fixtures import (  # noqa: F401 - fixtures
    Policies,
    operator,
    policies,
    vpol_installed,
    wait_for,
)
from vpol.cli.main import main

DEPLOY_RULE = {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
               "resources": ["deployments"]}
CM_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}


class Entries:
    """GlobalContextEntries made by a test (deleted afterwards)."""

    def __init__(self, cluster: Any, unique: Callable[..., str]) -> None:
        self.api = client.CustomObjectsApi(cluster.api_client)
        self.unique = unique
        self.created: list[str] = []

    def create(self, hint: str, spec: dict[str, Any], version: str = "v2") -> str:
        name = self.unique("gctx", hint)
        self.api.create_cluster_custom_object("kyverno.io", version, "globalcontextentries", {
            "apiVersion": f"kyverno.io/{version}", "kind": "GlobalContextEntry", "metadata": {"name": name},
            "spec": spec})
        self.created.append(name)
        return name

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.api.get_cluster_custom_object("kyverno.io", "v2", "globalcontextentries", name))

    def ready(self, name: str, status: str = "True", timeout: float = 60) -> dict[str, Any]:
        def check() -> Any:
            for c in (self.get(name).get("status") or {}).get("conditions") or []:
                if c["type"] == "Ready" and c["status"] == status:
                    return c
            return None
        return dict(wait_for(f"{name} Ready={status}", check, timeout))

    def cleanup(self) -> None:
        for name in self.created:
            try:
                self.api.delete_cluster_custom_object("kyverno.io", "v2", "globalcontextentries", name)
            except ApiException:
                pass


@pytest.fixture
def entries(cluster: Any, unique_name: Callable[..., str], vpol_installed: Any) -> Iterator[Entries]:
    e = Entries(cluster, unique_name)
    yield e
    e.cleanup()


def deployment(namespace: str, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}}


def create(cluster: Any, obj: dict[str, Any], dry_run: bool = False) -> tuple[bool, str]:
    """(admitted, the API server's message) of a kubectl create."""
    args = ["create", "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    proc = cluster.kubectl(*args, input=json.dumps(obj), check=False)
    return proc.returncode == 0, proc.stderr


def requires_policy(entry: str) -> dict[str, Any]:
    """A Deployment labelled requires=X is admitted only when a Deployment X exists (per the entry)."""
    return {
        "validationActions": ["Deny"],
        "matchConstraints": {"resourceRules": [DEPLOY_RULE]},
        "variables": [{"name": "existing", "expression": f"globalContext.Get('{entry}', 'names')"}],
        "validations": [{
            "expression": "!has(object.metadata.labels) || !('requires' in object.metadata.labels) || "
                          "object.metadata.labels.requires in variables.existing",
            "messageExpression": "'requires ' + object.metadata.labels.requires + ', which does not exist (' + "
                                 "string(size(globalContext.Get('" + entry + "', ''))) + ' deployments)'"}],
    }


def test_kubernetes_resource_entry_at_admission_in_scans_and_offline(
        policies: Policies, entries: Entries, cluster: Any, namespace: str, tmp_path: Path) -> None:
    for obj in (deployment(namespace, "base"), deployment(namespace, "orphan", {"requires": "ghost"})):
        admitted, message = create(cluster, obj)
        assert admitted, message
    entry = entries.create("deployments", {
        "kubernetesResource": {"group": "apps", "version": "v1", "resource": "deployments", "namespace": namespace},
        "projections": [{"name": "names", "jmesPath": "[].metadata.name"}]})
    ready = entries.ready(entry)
    assert ready["reason"] == "Succeeded" and "deployments.apps/v1" in ready["message"]
    assert entries.get(entry)["status"]["lastRefreshTime"]

    name = policies.create("requires", requires_policy(entry))
    cond = policies.wait_condition(name, "AdmissionEnforced", "True")
    assert cond["reason"] == "Webhook", cond  # globalContext is Kyverno-only: never a native VAP
    policies.wait_condition(name, "Ready", "True")

    # Admission: decided on the cached Deployments...
    admitted, _ = create(cluster, deployment(namespace, "uses-base", {"requires": "base"}))
    assert admitted
    admitted, message = create(cluster, deployment(namespace, "uses-later", {"requires": "later"}))
    assert not admitted and "requires later, which does not exist (" in message, message
    # ...which the watch keeps current: once `later` exists, the same request is admitted.
    admitted, message = create(cluster, deployment(namespace, "later"))
    assert admitted, message
    wait_for("admission to see the new Deployment",
             lambda: create(cluster, deployment(namespace, "uses-later", {"requires": "later"}), dry_run=True)[0], 30)

    # Scans: the Deployment created before the policy is reported; it passes once what it requires exists.
    orphan = client.AppsV1Api(cluster.api_client).read_namespaced_deployment("orphan", namespace).metadata.uid
    res = wait_for("a scan result", lambda: result_of(cluster, namespace, orphan, name), 90)
    assert res["result"] == "fail" and "requires ghost" in res["message"], res
    admitted, message = create(cluster, deployment(namespace, "ghost"))
    assert admitted, message
    touch_until("the scan to see the new Deployment",
                lambda n: client.AppsV1Api(cluster.api_client).patch_namespaced_deployment(
                    "orphan", namespace, {"metadata": {"annotations": {"touched": str(n)}}}),
                lambda: (result_of(cluster, namespace, orphan, name) or {}).get("result") == "pass")

    # Offline: `vpol apply` with the same entry over the same Deployments decides as the webhook did.
    listed = client.AppsV1Api(cluster.api_client).list_namespaced_deployment(namespace)
    objects = [cluster.api_client.sanitize_for_serialization(d) for d in listed.items]
    for obj in objects:
        obj.update(apiVersion="apps/v1", kind="Deployment")
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(objects))
    (tmp_path / "entry.yaml").write_text(yaml.safe_dump({k: v for k, v in entries.get(entry).items()
                                                         if k in ("apiVersion", "kind", "metadata", "spec")}))
    written = policies.get(name)
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump({"apiVersion": written["apiVersion"], "kind": written["kind"],
                                                          "metadata": {"name": name}, "spec": written["spec"]}))
    (tmp_path / "new.yaml").write_text(yaml.safe_dump_all([deployment(namespace, "n1", {"requires": "base"}),
                                                           deployment(namespace, "n2", {"requires": "nothing"})]))
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["apply", "-p", str(tmp_path / "policy.yaml"), "-r", str(tmp_path / "new.yaml"),
                     "--cluster-resources", str(tmp_path / "cluster.yaml"),
                     "--global-context", str(tmp_path / "entry.yaml"), "-o", "json", "--workers", "1"])
    rows = {r["name"]: r for r in json.loads(buffer.getvalue())}
    assert code == 1
    assert rows["n1"]["result"] == "pass"
    assert rows["n2"]["result"] == "fail" and "requires nothing" in rows["n2"]["message"]
    # The entry offline holds the given cluster objects and, as in Kyverno's CLI, the resources under test.
    assert f"({len(objects) + 2} deployments)" in rows["n2"]["message"]
    # The webhook decides the same requests the same way.
    assert create(cluster, deployment(namespace, "n1", {"requires": "base"}), dry_run=True)[0]
    admitted, message = create(cluster, deployment(namespace, "n2", {"requires": "nothing"}), dry_run=True)
    assert not admitted and "requires nothing, which does not exist" in message


def test_api_call_entry_is_refreshed_on_its_interval(policies: Policies, entries: Entries, cluster: Any,
                                                     namespace: str) -> None:
    core = client.CoreV1Api(cluster.api_client)
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="source-a")))
    entry = entries.create("configmaps", {
        "apiCall": {"urlPath": f"/api/v1/namespaces/{namespace}/configmaps", "refreshInterval": "2s"},
        "projections": [{"name": "names", "jmesPath": "items[].metadata.name"},
                        {"name": "count", "jmesPath": "length(items)"}]})
    ready = entries.ready(entry)
    assert ready["reason"] == "Succeeded" and "refreshed every 2s" in ready["message"]
    first = entries.get(entry)["status"]["lastRefreshTime"]
    name = policies.create("source", {
        "validationActions": ["Deny"],
        "matchConstraints": {"resourceRules": [CM_RULE]},
        "matchConditions": [{"name": "has-source", "expression": "has(object.data) && 'source' in object.data"}],
        "validations": [{
            "expression": f"object.data.source in globalContext.Get('{entry}', 'names')",
            # Kyverno decodes an API answer as JSON: numbers are doubles (length() too)
            "messageExpression": f"'unknown source ' + object.data.source + ' among ' + "
                                 f"string(int(globalContext.Get('{entry}', 'count'))) + ' configmaps'"}]})
    policies.wait_condition(name, "Ready", "True")

    def cm(cm_name: str, source: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm_name, "namespace": namespace},
                "data": {"source": source}}

    assert create(cluster, cm("from-a", "source-a"))[0]
    admitted, message = create(cluster, cm("from-b", "source-b"))
    assert not admitted and "unknown source source-b among" in message, message
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="source-b")))
    wait_for("the next refresh to see source-b", lambda: create(cluster, cm("from-b", "source-b"), dry_run=True)[0],
             30)
    wait_for("lastRefreshTime to move", lambda: entries.get(entry)["status"]["lastRefreshTime"] != first, 30)


def test_entries_that_cannot_be_loaded_say_why_and_policies_error(
        policies: Policies, entries: Entries, cluster: Any, namespace: str, unique_name: Callable[..., str]) -> None:
    missing = entries.create("missing", {"kubernetesResource": {"group": "example.com", "version": "v1",
                                                                "resource": "widgets"}})
    failed_call = entries.create("badpath", {"apiCall": {"urlPath": "/api/v1/nothing-here", "refreshInterval": "1h"}})
    # Secrets are not readable by the operator (least privilege): the entry says so and how to grant it.
    secrets = entries.create("secrets", {"kubernetesResource": {"version": "v1", "resource": "secrets",
                                                                "namespace": namespace},
                                         "projections": [{"name": "names", "jmesPath": "[].metadata.name"}]})
    cond = entries.ready(missing, "False")
    # (the API server refuses what the operator may not list before it looks whether it exists: discovery tells)
    assert cond["reason"] == "Failed" and "widgets.example.com/v1" in cond["message"], cond
    assert "the API server does not serve this resource" in cond["message"], cond
    cond = entries.ready(failed_call, "False")
    assert cond["message"].startswith("failed to GET resource with raw url: /api/v1/nothing-here"), cond
    cond = entries.ready(secrets, "False")
    assert "403" in cond["message"] and "grant the operator's ServiceAccount" in cond["message"], cond

    name = policies.create("broken", {
        "validationActions": ["Deny"],
        "matchConstraints": {"resourceRules": [CM_RULE]},
        "matchConditions": [{"name": "probe", "expression": "object.metadata.name.startsWith('probe')"}],
        "validations": [{"expression": f"size(globalContext.Get('{missing}', '')) >= 0"},
                        {"expression": f"globalContext.Get('{failed_call}', '') != null"}]})
    policies.wait_condition(name, "Ready", "True")
    admitted, message = create(cluster, {"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"name": "probe", "namespace": namespace}})
    assert not admitted  # failurePolicy Fail: an evaluation error denies, with the reason
    assert "failed to get global reference" in message and "widgets.example.com/v1" in message, message

    # Granting the read through the aggregated role is picked up (the entry retries with backoff).
    rbac = client.RbacAuthorizationV1Api(cluster.api_client)
    role = unique_name("gctx-secrets")
    rbac.create_cluster_role(client.V1ClusterRole(
        metadata=client.V1ObjectMeta(name=role, labels={"vpol.kyverno.io/aggregate-to-global-context": "true"}),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["secrets"], verbs=["get", "list", "watch"])]))
    try:
        entries.ready(secrets, "True", timeout=90)
    finally:
        rbac.delete_cluster_role(role)

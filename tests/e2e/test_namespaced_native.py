"""Namespaced policies enforced natively, pinned to their namespace (beyond Kyverno, which always uses its webhook).

A NamespacedValidatingPolicy or NamespacedMutatingPolicy whose rules name only namespaced kinds gets a VAP/MAP and
binding whose namespaceSelector requires the namespace's ``kubernetes.io/metadata.name`` (set by the API server,
kept equal to the name). These tests try to make such a policy act outside its namespace: another namespace, a
namespace relabelled to look like its own, cluster-scoped objects and Namespace objects (those stay on the webhook,
where the engine confines the policy).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.operator_process import OperatorProcess
from tests.e2e.vpol_fixtures import operator, vpol_installed, wait_for  # noqa: F401

GROUP, VERSION = "policies.kyverno.io", "v1"
CM = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["CREATE", "UPDATE"]}
NS = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces"], "operations": ["CREATE", "UPDATE"]}


class Namespaced:
    """Namespaced policies of one test, deleted afterwards."""

    def __init__(self, cluster: Any, namespace: str):
        self.cluster = cluster
        self.namespace = namespace
        self.custom = client.CustomObjectsApi(cluster.api_client)
        self.created: list[tuple[str, str]] = []

    def create(self, plural: str, kind: str, name: str, spec: dict[str, Any]) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}, "spec": spec}
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, body)
        self.created.append((plural, name))

    def ready(self, plural: str, name: str) -> dict[str, Any]:
        short = {"namespacedvalidatingpolicies": "nvpol", "namespacedmutatingpolicies": "nmpol"}[plural]
        self.cluster.kubectl("wait", "-n", self.namespace, "--for=condition=Ready", f"{short}/{name}",
                             "--timeout=90s", timeout=120)
        obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)
        return next(c for c in obj["status"]["conditions"] if c["type"] == "AdmissionEnforced")

    def cleanup(self) -> None:
        for plural, name in self.created:
            try:
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)
            except client.ApiException:
                pass


@pytest.fixture
def other_namespace(cluster: Any, namespace: str) -> Iterator[str]:
    name = f"{namespace[:50]}-other"
    core = client.CoreV1Api(cluster.api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture
def namespaced(operator: OperatorProcess, cluster: Any, namespace: str) -> Iterator[Namespaced]:
    n = Namespaced(cluster, namespace)
    yield n
    n.cleanup()


def create(cluster: Any, obj: dict[str, Any]) -> Any:
    return cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj), check=False)


def cm(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}


def test_a_namespaced_validating_policy_is_a_vap_pinned_to_its_namespace(
        namespaced: Namespaced, cluster: Any, namespace: str, other_namespace: str) -> None:
    namespaced.create("namespacedvalidatingpolicies", "NamespacedValidatingPolicy", "no-bad", {
        "matchConstraints": {"resourceRules": [CM]},
        "validations": [{"expression": "!object.metadata.name.startsWith('bad')", "message": "no bad names here"}]})
    enforced = namespaced.ready("namespacedvalidatingpolicies", "no-bad")
    assert enforced["reason"] == "NativeVAP", enforced
    vap = client.AdmissionregistrationV1Api(cluster.api_client).read_validating_admission_policy(
        f"nvpol-{namespace}.no-bad")
    expressions = vap.spec.match_constraints.namespace_selector.match_expressions
    assert [(e.key, e.operator, e.values) for e in expressions] == [
        ("kubernetes.io/metadata.name", "In", [namespace])]
    assert all(r.scope == "Namespaced" for r in vap.spec.match_constraints.resource_rules)
    assert vap.metadata.labels["vpol.kyverno.io/policy-namespace"] == namespace and not vap.metadata.owner_references
    denied = create(cluster, cm(namespace, "bad-here"))
    assert denied.returncode != 0 and "no bad names here" in denied.stderr, denied.stderr
    assert create(cluster, cm(other_namespace, "bad-there")).returncode == 0  # another namespace
    # A namespace relabelled to look like the policy's: the API server keeps the label equal to the name.
    cluster.kubectl("label", "namespace", other_namespace, f"kubernetes.io/metadata.name={namespace}",
                    "--overwrite", check=False)
    labels = client.CoreV1Api(cluster.api_client).read_namespace(other_namespace).metadata.labels
    assert labels["kubernetes.io/metadata.name"] == other_namespace
    assert create(cluster, cm(other_namespace, "bad-again")).returncode == 0
    # Deleting the policy removes its VAP (no owner reference: the reconciler does).
    namespaced.cleanup()
    wait_for("the VAP removed", lambda: not client.AdmissionregistrationV1Api(
        cluster.api_client).list_validating_admission_policy(
        label_selector=f"vpol.kyverno.io/policy-namespace={namespace}").items, 60)


def test_a_namespaced_policy_naming_cluster_scoped_kinds_stays_on_the_webhook_and_in_its_namespace(
        namespaced: Namespaced, cluster: Any, namespace: str, unique_name: Callable[..., str]) -> None:
    namespaced.create("namespacedvalidatingpolicies", "NamespacedValidatingPolicy", "no-bad-ns", {
        "matchConstraints": {"resourceRules": [NS, CM]},
        "validations": [{"expression": "!object.metadata.name.startsWith('bad')", "message": "no bad names"}]})
    enforced = namespaced.ready("namespacedvalidatingpolicies", "no-bad-ns")
    assert enforced["reason"] == "Webhook" and "namespaces" in enforced["message"], enforced
    # A Namespace is cluster-scoped: not the namespaced policy's business, even through the webhook.
    bad_ns = unique_name("bad")
    assert create(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": bad_ns}}).returncode == 0
    client.CoreV1Api(cluster.api_client).delete_namespace(bad_ns)
    denied = create(cluster, cm(namespace, "bad-cm"))
    assert denied.returncode != 0 and "no bad names" in denied.stderr, denied.stderr


def test_a_namespaced_mutating_policy_mutates_only_its_namespace(
        namespaced: Namespaced, cluster: Any, namespace: str, other_namespace: str) -> None:
    for name, value in (("native", '"yes"'), ("webhook", 'string(size(sha256("x")))')):
        namespaced.create("namespacedmutatingpolicies", "NamespacedMutatingPolicy", name, {
            "matchConstraints": {"resourceRules": [CM]},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": f'Object{{metadata: Object.metadata{{labels: {{"{name}": {value}}}}}}}'}}]})
    assert namespaced.ready("namespacedmutatingpolicies", "native")["reason"] == "NativeMAP"
    assert namespaced.ready("namespacedmutatingpolicies", "webhook")["reason"] == "Webhook"
    mutating = client.AdmissionregistrationV1Api(cluster.api_client).read_mutating_admission_policy(
        f"nmpol-{namespace}.native")
    assert mutating.spec.match_constraints.namespace_selector.match_expressions[0].values == [namespace]
    here = json.loads(create(cluster, cm(namespace, "here")).stdout)["metadata"].get("labels") or {}
    assert here == {"native": "yes", "webhook": "64"}, here
    there = json.loads(create(cluster, cm(other_namespace, "there")).stdout)["metadata"].get("labels") or {}
    assert there == {}, there


def test_a_namespaced_mutating_policy_mutates_existing_objects_of_its_namespace_only(
        namespaced: Namespaced, cluster: Any, namespace: str, other_namespace: str) -> None:
    core = client.CoreV1Api(cluster.api_client)
    for ns in (namespace, other_namespace):
        core.create_namespaced_config_map(ns, {"metadata": {"name": "old"}})
    namespaced.create("namespacedmutatingpolicies", "NamespacedMutatingPolicy", "existing", {
        "evaluation": {"mutateExisting": {"enabled": True}},
        "matchConstraints": {"resourceRules": [CM]},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
            "expression": 'Object{metadata: Object.metadata{labels: {"existing": "yes"}}}'}}]})
    namespaced.ready("namespacedmutatingpolicies", "existing")
    wait_for("the object in the policy's namespace mutated",
             lambda: (core.read_namespaced_config_map("old", namespace).metadata.labels or {}).get("existing"), 60)
    assert not (core.read_namespaced_config_map("old", other_namespace).metadata.labels or {}).get("existing")

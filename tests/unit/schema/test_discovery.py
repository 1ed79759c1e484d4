"""The built-in API table: kind lookups, rule resolution with wildcards, CRDs on top."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vpol.model.discovery import Discovery, ResourceInfo, builtin, resources_from_crd, schemas_from_crd

ROOT = Path(__file__).resolve().parents[3]


def paths(infos: list[ResourceInfo]) -> set[tuple[str, str, str]]:
    return {(i.group, i.version, i.path) for i in infos}


def test_builtin_is_cached() -> None:
    assert builtin() is builtin()


@pytest.mark.parametrize(
    ("api_version", "kind", "resource", "namespaced"),
    [
        ("v1", "Pod", "pods", True),
        ("v1", "Namespace", "namespaces", False),
        ("v1", "ConfigMap", "configmaps", True),
        ("apps/v1", "Deployment", "deployments", True),
        ("batch/v1", "CronJob", "cronjobs", True),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", False),
        ("networking.k8s.io/v1", "Ingress", "ingresses", True),
    ],
)
def test_resource_for_kind(api_version: str, kind: str, resource: str, namespaced: bool) -> None:
    info = builtin().resource_for_kind(api_version, kind)
    assert info is not None
    assert (info.resource, info.namespaced, info.kind, info.api_version) == (resource, namespaced, kind, api_version)
    assert "list" in info.verbs and "watch" in info.verbs


def test_unknown_kinds_and_versions() -> None:
    d = builtin()
    assert d.resource_for_kind("v1", "Deployment") is None  # wrong group
    assert d.resource_for_kind("apps/v1beta1", "Deployment") is None  # not served in 1.37
    assert d.resource_for_kind("example.com/v1", "Widget") is None
    assert d.resource("", "v1", "widgets") is None


def test_subresources() -> None:
    d = builtin()
    pods = d.resource("", "v1", "pods")
    assert pods is not None and {"status", "log", "exec", "eviction", "binding"} <= set(pods.subresources)
    scale = d.resource("apps", "v1", "deployments/scale")
    assert scale is not None and (scale.kind, scale.subresource, scale.path) == ("Scale", "scale", "deployments/scale")
    status = d.resource("apps", "v1", "deployments/status")
    assert status is not None and status.kind == "Deployment"
    assert d.resource("", "v1", "configmaps/status") is None


def test_gvk_string_is_kubernetes_format() -> None:
    d = builtin()
    assert d.resource("", "v1", "pods").gvk_string == "/v1, Kind=Pod"  # type: ignore[union-attr]
    assert d.resource("apps", "v1", "deployments").gvk_string == "apps/v1, Kind=Deployment"  # type: ignore[union-attr]


def test_resolve_exact() -> None:
    got = builtin().resolve([""], ["v1"], ["pods", "configmaps"])
    assert paths(got) == {("", "v1", "pods"), ("", "v1", "configmaps")}


def test_resolve_all_resources_excludes_subresources() -> None:
    got = builtin().resolve([""], ["v1"], ["*"])
    p = paths(got)
    assert ("", "v1", "pods") in p and ("", "v1", "namespaces") in p and ("", "v1", "secrets") in p
    assert not any("/" in r for _, _, r in p)
    assert all(g == "" for g, _, _ in p)


def test_resolve_wildcard_groups_and_versions() -> None:
    got = builtin().resolve(["*"], ["*"], ["deployments"])
    assert paths(got) == {("apps", "v1", "deployments")}
    got = builtin().resolve(["resource.k8s.io"], ["*"], ["resourceclaims"])
    assert {v for _, v, _ in paths(got)} == {"v1", "v1beta1", "v1beta2"}
    got = builtin().resolve(["*"], ["v1"], ["events"])
    assert paths(got) == {("", "v1", "events"), ("events.k8s.io", "v1", "events")}


def test_resolve_subresource_forms() -> None:
    d = builtin()
    pod_subs = paths(d.resolve([""], ["v1"], ["pods/*"]))
    assert ("", "v1", "pods/status") in pod_subs and ("", "v1", "pods/log") in pod_subs
    assert ("", "v1", "pods") not in pod_subs
    scales = paths(d.resolve(["*"], ["*"], ["*/scale"]))
    assert {("apps", "v1", "deployments/scale"), ("apps", "v1", "statefulsets/scale"),
            ("", "v1", "replicationcontrollers/scale")} <= scales
    assert all(r.endswith("/scale") for _, _, r in scales)
    everything = paths(d.resolve([""], ["v1"], ["*/*"]))
    assert ("", "v1", "pods") in everything and ("", "v1", "pods/status") in everything
    assert ("", "v1", "secrets") in everything
    one = d.resolve([""], ["v1"], ["pods/eviction"])
    assert [(i.kind, i.group, i.subresource) for i in one] == [("Eviction", "", "eviction")]


def test_resolve_unknown_and_duplicates() -> None:
    d = builtin()
    assert d.resolve(["apps"], ["v1"], ["widgets"]) == []
    got = d.resolve(["apps"], ["v1"], ["deployments", "deployments", "*"])
    assert len([i for i in got if i.resource == "deployments"]) == 1


def test_group_versions_preferred_first() -> None:
    assert builtin().group_versions("autoscaling") == ("v2", "v1")
    assert builtin().group_versions("") == ("v1",)


def test_crds_join_the_table() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "validatingpolicies.yaml").read_text())
    infos = resources_from_crd(crd)
    assert {(i.group, i.version, i.resource, i.kind, i.namespaced) for i in infos} == {
        ("policies.kyverno.io", v, "validatingpolicies", "ValidatingPolicy", False) for v in ("v1", "v1beta1", "v1alpha1")
    }
    assert all(i.subresources == ("status",) for i in infos)
    d = builtin().with_crds([crd])
    assert d.resource_for_kind("policies.kyverno.io/v1", "ValidatingPolicy") is not None
    assert d.resource_for_kind("v1", "Pod") is not None  # built-ins stay
    assert builtin().resource_for_kind("policies.kyverno.io/v1", "ValidatingPolicy") is None  # no mutation
    wildcard = paths(d.resolve(["policies.kyverno.io"], ["*"], ["*"]))
    assert ("policies.kyverno.io", "v1beta1", "validatingpolicies") in wildcard


def test_crd_schema_uses_object_meta() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "validatingpolicies.yaml").read_text())
    docs = schemas_from_crd(crd)
    doc = docs[("policies.kyverno.io", "v1", "ValidatingPolicy")]
    assert doc["properties"]["metadata"] == {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in doc["components"]["schemas"]
    assert doc["properties"]["spec"] == crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_with_extra_replaces_same_resource() -> None:
    extra = ResourceInfo("apps", "v1", "deployments", "MyDeployment", True)
    d = builtin().with_extra([extra])
    assert d.resource("apps", "v1", "deployments") == extra
    assert len(d.resources) == len(builtin().resources)


def test_empty_discovery() -> None:
    d = Discovery()
    assert d.resolve(["*"], ["*"], ["*"]) == [] and d.schema("", "v1", "Pod") is None

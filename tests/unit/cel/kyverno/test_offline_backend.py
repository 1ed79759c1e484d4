"""OfflineBackend: lookups by apiVersion/resource/namespace/name, plurals, documents.

Plural rules are apimachinery's meta.UnsafeGuessKindToResource; missing
objects are reported with the API server's NotFound wording
(``<resource>[.<group>] "<name>" not found``) as Kyverno's CLI does.
"""

from __future__ import annotations

from typing import Any

import pytest

from vpol.cel.backend import BackendUnavailable
from vpol.cel.offline_backend import MissingObject, NotFound, OfflineBackend, guess_plural, split_api_version

GATEWAY_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gateways.gateway.networking.k8s.io"},
    "spec": {"group": "gateway.networking.k8s.io", "scope": "Namespaced",
             "names": {"kind": "Gateway", "plural": "gateways", "singular": "gateway"},
             "versions": [{"name": "v1", "served": True, "storage": True}]},
}
GATEWAY = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"name": "gw", "namespace": "infra"}}


@pytest.mark.parametrize(
    ("kind", "plural"),
    [
        ("Pod", "pods"),
        ("ConfigMap", "configmaps"),
        ("Ingress", "ingresses"),
        ("IngressClass", "ingressclasses"),
        ("NetworkPolicy", "networkpolicies"),
        ("Endpoints", "endpoints"),
        ("ComponentStatus", "componentstatuses"),
        ("Gateway", "gatewaies"),  # the guess is naive: CRDs give the real plural
        ("Box", "boxs"),
        ("", ""),
    ],
)
def test_guess_plural(kind: str, plural: str) -> None:
    assert guess_plural(kind) == plural


@pytest.mark.parametrize(
    ("api_version", "expected"),
    [("v1", ("", "v1")), ("apps/v1", ("apps", "v1")), ("cloud.google.com/v1", ("cloud.google.com", "v1")), ("", ("", ""))],
)
def test_split_api_version(api_version: str, expected: tuple[str, str]) -> None:
    assert split_api_version(api_version) == expected


def test_split_api_version_rejects_two_slashes() -> None:
    with pytest.raises(ValueError, match="unexpected GroupVersion string"):
        split_api_version("a/b/c")


def test_crd_plural_wins_over_guess() -> None:
    backend = OfflineBackend(resources=[GATEWAY], crds=[GATEWAY_CRD])
    assert backend.get_resource("gateway.networking.k8s.io/v1", "gateways", "infra", "gw")["metadata"]["name"] == "gw"
    with pytest.raises(NotFound):
        backend.get_resource("gateway.networking.k8s.io/v1", "gatewaies", "infra", "gw")
    assert backend.to_gvr("gateway.networking.k8s.io/v1", "Gateway") == {
        "group": "gateway.networking.k8s.io", "version": "v1", "resource": "gateways"}
    # the CRD itself is served too
    crd = backend.get_resource("apiextensions.k8s.io/v1", "customresourcedefinitions", "", "gateways.gateway.networking.k8s.io")
    assert crd["spec"]["names"]["plural"] == "gateways"


def test_without_crd_the_guess_is_used() -> None:
    backend = OfflineBackend(resources=[GATEWAY])
    assert backend.get_resource("gateway.networking.k8s.io/v1", "gatewaies", "infra", "gw")["kind"] == "Gateway"
    assert backend.to_gvr("apps/v1", "Deployment") == {"group": "apps", "version": "v1", "resource": "deployments"}


def test_namespaced_and_cluster_scoped() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "a"}}
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}
    backend = OfflineBackend(resources=[cm, ns])
    assert backend.get_resource("v1", "configmaps", "a", "cm")["metadata"]["namespace"] == "a"
    assert backend.get_resource("v1", "namespaces", "", "a")["kind"] == "Namespace"
    for args in [("v1", "configmaps", "", "cm"), ("v1", "configmaps", "b", "cm"), ("v1", "namespaces", "a", "a")]:
        with pytest.raises(NotFound):
            backend.get_resource(*args)


def test_version_and_group_must_match() -> None:
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "x"}}
    backend = OfflineBackend(resources=[deploy])
    with pytest.raises(NotFound, match='deployments.apps "d" not found'):
        backend.get_resource("apps/v1beta1", "deployments", "x", "d")
    with pytest.raises(NotFound, match='deployments "d" not found'):
        backend.get_resource("v1", "deployments", "x", "d")


def test_returned_objects_are_copies() -> None:
    cm: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "a"}, "data": {"k": "v"}}
    backend = OfflineBackend(resources=[cm])
    got = backend.get_resource("v1", "configmaps", "a", "cm")
    got["data"]["k"] = "changed"
    cm["data"]["k"] = "changed too"
    assert backend.get_resource("v1", "configmaps", "a", "cm")["data"]["k"] == "v"


def test_list_within_one_namespace_as_kyvernos_cli() -> None:
    # Kyverno's CLI lists exactly the namespace asked for: "" gives the objects given without a namespace (not
    # every namespace, as a cluster would), and a resource nothing was given for is an error (tests/kyverno).
    objs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": ns}}
        for n, ns in [("b", "x"), ("a", "x"), ("c", "y")]
    ] + [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unplaced"}}]
    backend = OfflineBackend(resources=objs)
    unplaced = backend.list_resources("v1", "configmaps", "")
    assert [i["metadata"]["name"] for i in unplaced["items"]] == ["unplaced"]
    assert unplaced["kind"] == "ConfigMapList"
    assert [i["metadata"]["name"] for i in backend.list_resources("v1", "configmaps", "x")["items"]] == ["a", "b"]
    assert backend.list_resources("v1", "configmaps", "z")["items"] == []
    with pytest.raises(MissingObject, match="secrets resource not found"):
        backend.list_resources("v1", "secrets", "")


def test_list_documents_are_expanded() -> None:
    lst = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "n"}}]}
    assert OfflineBackend(resources=[lst]).get_resource("v1", "secrets", "n", "s")["kind"] == "Secret"


def test_invalid_resource_is_rejected() -> None:
    with pytest.raises(ValueError, match="metadata.name"):
        OfflineBackend(resources=[{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}])


def test_from_documents_context_and_cluster_resource() -> None:
    context = {
        "apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Context", "metadata": {"name": "context"},
        "spec": {
            "resources": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "platform"},
                           "data": {"k": "v"}}],
            "images": [{"image": "ghcr.io/x/y:1", "manifest": {"annotations": {"a": "b"}}}],
        },
    }
    cluster = {
        "apiVersion": "cli.kyverno.io/v1alpha1", "kind": "ClusterResource", "metadata": {"name": "cr"},
        "spec": {"crds": ["crds/gateway.yaml", GATEWAY_CRD], "resources": [GATEWAY]},
    }
    test = {"apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Test", "metadata": {"name": "t"}}
    backend = OfflineBackend.from_documents([context, cluster, test, None])  # type: ignore[list-item]
    assert backend.get_resource("v1", "configmaps", "platform", "cm")["data"] == {"k": "v"}
    assert backend.get_resource("gateway.networking.k8s.io/v1", "gateways", "infra", "gw")["metadata"]["name"] == "gw"
    assert backend.image_metadata("ghcr.io/x/y:1") == {
        "image": "ghcr.io/x/y:1", "resolvedImage": "", "registry": "", "repository": "",
        "manifest": {"annotations": {"a": "b"}}}
    with pytest.raises(NotFound, match="image data for ghcr.io/x/y:2 not found in the context"):
        backend.image_metadata("ghcr.io/x/y:2")


def test_from_documents_plain_objects_and_crds() -> None:
    backend = OfflineBackend.from_documents([GATEWAY_CRD, GATEWAY])
    assert backend.plural("gateway.networking.k8s.io", "Gateway") == "gateways"
    assert backend.get_resource("gateway.networking.k8s.io/v1", "gateways", "infra", "gw")["kind"] == "Gateway"


def test_images_as_mapping() -> None:
    backend = OfflineBackend(images={"nginx:1": {"config": {"os": "linux"}}})
    assert backend.image_metadata("nginx:1") == {"config": {"os": "linux"}}


def test_http_canned_responses() -> None:
    backend = OfflineBackend(http_responses=[
        {"method": "GET", "url": "https://a", "response": {"statusCode": 200, "body": {"x": 1}}},
        {"method": "post", "url": "https://a", "response": {"statusCode": 201}},
        {"url": "https://b", "response": {"statusCode": 202}},
    ])
    assert backend.http_get("https://a") == {"statusCode": 200, "body": {"x": 1}}
    assert backend.http_post("https://a", {"k": "v"}) == {"statusCode": 201}
    assert backend.http_put("https://b", None) == {"statusCode": 202}
    assert backend.http_get("https://b") == {"statusCode": 202}
    with pytest.raises(NotFound, match="no canned response for PUT https://a"):
        backend.http_put("https://a", {})


def test_global_context_semantics() -> None:
    backend = OfflineBackend(global_context={"e": {"p": [1]}, "s": "text"})
    assert backend.global_context("e", "") == {"p": [1]}
    assert backend.global_context("e", "p") == [1]
    assert backend.global_context("s", "") == "text"
    # Kyverno's FakeContextProvider: a projection of data that is not an object is an error.
    with pytest.raises(NotFound, match='projection "p" not found in global context entry "s": stored value is not '
                                       'an object'):
        backend.global_context("s", "p")
    assert backend.global_context("missing", "") is None
    with pytest.raises(NotFound, match='projection "q" not found in global context entry "e"'):
        backend.global_context("e", "q")


def test_unsupported_operations() -> None:
    backend = OfflineBackend()
    with pytest.raises(BackendUnavailable):
        backend.post_resource("v1", "configmaps", "x", {})
    with pytest.raises(BackendUnavailable):
        backend.get_resource("v1", "pods/exec", "x", "p")
    with pytest.raises(ValueError):
        backend.to_gvr("v1", "")

"""resource.*, http.*, globalContext.* and image.GetMetadata through the backend.

The functions must return what the current backend returns, shaped as
Kyverno shapes it, and turn every backend failure (no backend, missing data,
a backend that raises anything, unusable data) into a CEL error value that
names the call; an exception must never escape evaluation.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.cel.kyverno.conftest import error, run, value
from vpol.cel.backend import Backend
from vpol.cel.offline_backend import OfflineBackend

CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default", "labels": {"env": "prod"}},
      "data": {"registries": "ghcr.io, myregistry", "spot-values": "true,false"}}
CM2 = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "team", "labels": {"env": "dev"}},
       "data": {}}
NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
DEPLOY = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "team"}, "spec": {"replicas": 4}}


@pytest.fixture
def offline() -> OfflineBackend:
    return OfflineBackend(
        resources=[CM, CM2, NS, DEPLOY],
        images=[{"image": "ghcr.io/a/b:1", "manifest": {"annotations": {"k": "v"}}}],
        global_context={"entry": {"a": 1, "nested": {"b": "c"}}, "scalar": 7},
        http_responses=[
            {"method": "GET", "url": "https://example.com/config", "response": {"statusCode": 200, "body": {"allowed": True}}},
            {"method": "POST", "url": "https://authz.example.com/validate", "response": {"statusCode": 200, "body": {"allowed": False}}},
            {"url": "https://any.example.com", "response": {"statusCode": 204, "body": None}},
        ],
    )


@pytest.mark.parametrize("get", ["Get", "get"])
def test_resource_get(offline: OfflineBackend, get: str) -> None:
    assert value(f'resource.{get}("v1", "configmaps", "default", "cm").data.registries', backend=offline) == "ghcr.io, myregistry"
    assert value(f'resource.{get}("v1", "namespaces", "", "team").metadata.name', backend=offline) == "team"
    assert value(f'resource.{get}("apps/v1", "deployments", "team", "web").spec.replicas', backend=offline) == 4


def test_resource_get_optional_field_access(offline: OfflineBackend) -> None:
    # the conformance policies' pattern: a map with optional selection
    assert value('resource.get("v1", "configmaps", "default", "cm").data[?"missing"].orValue("none")', backend=offline) == "none"


def test_resource_get_missing_is_null(offline: OfflineBackend) -> None:
    # Kyverno's resource library answers NotFound with null (other failures are errors)
    assert value('resource.Get("v1", "configmaps", "default", "nope") == null', backend=offline) is True
    # wrong namespace: the object is namespaced
    assert value('resource.Get("v1", "configmaps", "team", "cm")', backend=offline) is None
    assert value('resource.get("apps/v1", "deployments", "team", "x") == null', backend=offline) is True
    # reading a field of it is still an error
    assert error('resource.Get("v1", "configmaps", "default", "nope").data', backend=offline)


def test_resource_get_other_failures_are_errors() -> None:
    message = error('resource.Get("v1", "configmaps", "default", "cm")', backend=Backend())
    assert message.endswith('resource.Get("v1", "configmaps", "default", "cm"): failed to get resource: '
                            'resource.Get is not available (none backend)')


def test_resource_get_status_subresource(offline: OfflineBackend) -> None:
    assert value('resource.Get("apps/v1", "deployments", "team", "web", ["status"]).metadata.name', backend=offline) == "web"
    assert "scale subresource" in error('resource.Get("apps/v1", "deployments", "team", "web", ["scale"])', backend=offline)


@pytest.mark.parametrize("list_", ["List", "list"])
def test_resource_list(offline: OfflineBackend, list_: str) -> None:
    # Offline, as Kyverno's CLI: exactly the namespace asked for ("" holds the objects given without one).
    assert value(f'resource.{list_}("v1", "configmaps", "").items', backend=offline) == []
    assert value(f'resource.{list_}("v1", "configmaps", "default").items.map(i, i.metadata.name)', backend=offline) == ["cm"]
    assert value(f'resource.{list_}("v1", "configmaps", "team").items.map(i, i.metadata.name)', backend=offline) == ["other"]
    assert value(f'resource.{list_}("v1", "configmaps", "empty").items', backend=offline) == []
    assert value(f'resource.{list_}("v1", "configmaps", "default", {{"env": "prod"}}).items.map(i, i.metadata.name)', backend=offline) == ["cm"]
    assert "resource not found" in error(f'resource.{list_}("v1", "secrets", "default")', backend=offline)
    assert value(f'resource.{list_}("apps/v1", "deployments", "team").items.exists(d, d.spec.replicas > 3)', backend=offline) is True


def test_to_gvr_and_gvr_overloads(offline: OfflineBackend) -> None:
    assert value('resource.ToGVR("apps/v1", "Deployment") == resource.toGVR("apps/v1", "Deployment")', backend=offline) is True
    assert value('resource.Get(resource.ToGVR("apps/v1", "Deployment"), "team", "web").spec.replicas', backend=offline) == 4
    assert value('resource.get(resource.toGVR("v1", "ConfigMap"), "default", "cm").metadata.name', backend=offline) == "cm"
    assert value('resource.List(resource.ToGVR("v1", "ConfigMap"), "default").items.size()', backend=offline) == 1
    assert value('resource.List(resource.ToGVR("v1", "ConfigMap"), "team", {"env": "dev"}).items.size()', backend=offline) == 1
    assert value('resource.Get(resource.ToGVR("apps/v1", "Deployment"), "team", "web", ["status"]).kind', backend=offline) == "Deployment"


def test_resource_post_is_unavailable_offline(offline: OfflineBackend) -> None:
    message = error('resource.Post("authorization.k8s.io/v1", "subjectaccessreviews", {"spec": {}})', backend=offline)
    assert "resource.Post(" in message and "failed to create resource" in message
    assert "failed to create resource" in error('resource.post("v1", "configmaps", "default", {"a": 1})', backend=offline)


def test_http_get_and_post(offline: OfflineBackend) -> None:
    assert value('http.Get("https://example.com/config").body.allowed == true', backend=offline) is True
    assert value('http.get("https://example.com/config", {"Authorization": "x"}).statusCode', backend=offline) == 200
    assert value('http.Post("https://authz.example.com/validate", {"name": "x"}).body.allowed', backend=offline) is False
    assert value('http.post("https://authz.example.com/validate", ["a"], {"h": "v"}).statusCode', backend=offline) == 200
    assert value('http.Post("https://authz.example.com/validate", "text").statusCode', backend=offline) == 200
    assert value('http.Put("https://any.example.com", 1).statusCode', backend=offline) == 204
    assert value('http.Client("").Get("https://example.com/config").body.allowed', backend=offline) is True


def test_http_post_body_from_object(offline: OfflineBackend) -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns"}}
    expr = 'http.Post("https://authz.example.com/validate", {"namespace": object.metadata.namespace, "name": object.metadata.name}).body.allowed == true'
    assert value(expr, obj=pod, backend=offline) is False


def test_http_errors(offline: OfflineBackend) -> None:
    message = error('http.Get("https://authz.example.com/validate")', backend=offline)
    assert message.endswith('http.Get("https://authz.example.com/validate"): request failed: no canned response for GET https://authz.example.com/validate')
    assert "failed to parse PEM CA bundle for APICall" in error('http.Client("not a pem").Get("https://example.com/config")', backend=offline)


@pytest.mark.parametrize("get", ["Get", "get"])
def test_global_context(offline: OfflineBackend, get: str) -> None:
    assert value(f'globalContext.{get}("entry", "")', backend=offline) == {"a": 1, "nested": {"b": "c"}}
    assert value(f'globalContext.{get}("entry")', backend=offline) == {"a": 1, "nested": {"b": "c"}}
    assert value(f'globalContext.{get}("entry", "nested").b', backend=offline) == "c"
    assert value(f'globalContext.{get}("scalar", "")', backend=offline) == 7
    assert "stored value is not an object" in error(f'globalContext.{get}("scalar", "anything")', backend=offline)
    assert value(f'globalContext.{get}("unknown", "")', backend=offline) is None
    assert "failed to get global reference" in error(f'globalContext.{get}("entry", "missing")', backend=offline)


@pytest.mark.parametrize("get", ["GetMetadata", "getMetadata"])
def test_image_metadata(offline: OfflineBackend, get: str) -> None:
    assert value(f'image.{get}("ghcr.io/a/b:1").manifest.annotations.k', backend=offline) == "v"
    assert value(f'image.{get}("ghcr.io/a/b:1").resolvedImage', backend=offline) == ""
    message = error(f'image.{get}("ghcr.io/a/b:2")', backend=offline)
    assert message.endswith(f'image.{get}("ghcr.io/a/b:2"): failed to get image data: image data for ghcr.io/a/b:2 not found in the context')


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ('resource.Get("v1", "configmaps", "default", "cm")', 'resource.Get("v1", "configmaps", "default", "cm"): failed to get resource'),
        ('resource.List("v1", "configmaps", "")', "failed to list resource"),
        ('resource.ToGVR("v1", "Pod")', "failed to map kind to resource"),
        ('http.Get("https://x")', 'http.Get("https://x"): request failed'),
        ('http.Post("https://x", {})', "request failed"),
        ('http.Put("https://x", {})', "request failed"),
        ('globalContext.Get("e", "")', "failed to get global reference"),
        ('image.GetMetadata("nginx")', "failed to get image data"),
    ],
)
def test_no_backend_is_an_error_value(expr: str, words: str) -> None:
    # The default backend serves nothing: every call is a CEL error, not an exception.
    message = run(expr).error
    assert message is not None and words in message and "not available" in message


class _Broken(Backend):
    name = "broken"

    def get_resource(self, api_version: str, resource: str, namespace: str, name: str) -> dict[str, Any]:
        raise KeyError("boom")

    def list_resources(self, api_version: str, resource: str, namespace: str) -> dict[str, Any]:
        return {"items": [{"n": 2**70}]}  # not representable in CEL

    def http_get(self, url: str, headers: dict[str, str] | None = None) -> Any:
        return object()  # not a CEL value

    def global_context(self, name: str, projection: str) -> Any:
        raise ZeroDivisionError("division by zero")

    def image_metadata(self, image: str) -> dict[str, Any]:
        return "not a map"  # type: ignore[return-value]

    def to_gvr(self, api_version: str, kind: str) -> dict[str, str]:
        return None  # type: ignore[return-value]


@pytest.mark.parametrize(
    "expr",
    [
        'resource.Get("v1", "configmaps", "default", "cm")',
        'resource.List("v1", "configmaps", "")',
        'http.Get("https://x")',
        'globalContext.Get("e", "")',
        'resource.ToGVR("v1", "Pod")',
    ],
)
def test_misbehaving_backend_is_an_error_value(expr: str) -> None:
    outcome = run(expr, backend=_Broken())
    assert outcome.error is not None


def test_misbehaving_backend_message_names_call() -> None:
    assert 'resource.Get("v1", "configmaps", "default", "cm"): failed to get resource' in error(
        'resource.Get("v1", "configmaps", "default", "cm")', backend=_Broken()
    )


def test_image_metadata_non_map_is_passed_through_as_dyn() -> None:
    # image.GetMetadata is dyn in Kyverno; a string from the backend is a string.
    assert value('image.GetMetadata("x")', backend=_Broken()) == "not a map"


def test_backend_is_chosen_per_evaluation(offline: OfflineBackend) -> None:
    expr = 'resource.get("v1", "configmaps", "default", "cm").metadata.name'
    assert value(expr, backend=offline) == "cm"
    assert run(expr).error is not None
    assert value(expr, backend=OfflineBackend(resources=[CM])) == "cm"

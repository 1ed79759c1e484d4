"""The bundled discovery/OpenAPI data, its generator, and fetching the same from a cluster."""

from __future__ import annotations

import gzip
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from vpol.cel.typecheck import check
from vpol.kube import openapi
from vpol.model.discovery import builtin, bundle_source

UPSTREAM = Path.home() / "go/pkg/mod/k8s.io/kubernetes@v1.37.2/api"
needs_upstream = pytest.mark.skipif(not UPSTREAM.is_dir(), reason="Kubernetes v1.37.2 module not in the Go module cache")


def data_file(name: str) -> bytes:
    return resources.files("vpol").joinpath("data", name).read_bytes()


def test_bundle_is_small_package_data() -> None:
    total = sum(len(data_file(n)) for n in ("discovery.json.gz", "openapi.json.gz"))
    assert total < 1_500_000
    assert bundle_source() == "kubernetes v1.37.2"


@needs_upstream
def test_bundle_regenerates_byte_for_byte(tmp_path: Path) -> None:
    assert openapi.main(["--from-dir", str(UPSTREAM), "--out", str(tmp_path), "--source", "kubernetes v1.37.2"]) == 0
    for name in ("discovery.json.gz", "openapi.json.gz"):
        assert (tmp_path / name).read_bytes() == data_file(name), name


@needs_upstream
def test_bundle_agrees_with_upstream_resource_lists() -> None:
    # The per-version APIResourceList files are an independent rendering of discovery.
    d = builtin()
    checked = 0
    for path in sorted((UPSTREAM / "discovery").glob("*__*.json")):
        doc = json.loads(path.read_text())
        if doc.get("kind") != "APIResourceList":
            continue
        group, _, version = doc["groupVersion"].rpartition("/")
        for res in doc["resources"]:
            info = d.resource(group, version, res["name"])
            assert info is not None, (group, version, res["name"])
            if "/" not in res["name"]:
                assert (info.kind, info.namespaced) == (res["kind"], res["namespaced"]), res["name"]
                assert set(info.verbs) == set(res["verbs"])
                checked += 1
    assert checked >= 90


@needs_upstream
def test_every_resource_kind_has_a_schema() -> None:
    d = builtin()
    missing = [r.gvk_string for r in d.resources if d.schema(r.group, r.version, r.kind) is None]
    # kinds only created through a parent (bindings) or never stored still have schemas upstream
    assert missing == []


def test_trim_schema() -> None:
    trimmed = openapi.trim_schema({
        "description": "x", "type": "object", "required": ["a"], "default": {},
        "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Pod"}],
        "properties": {
            "when": {"type": "string", "format": "date-time", "description": "t"},
            "count": {"type": "integer", "format": "int32", "minimum": 0},
            "meta": {"allOf": [{"$ref": "#/components/schemas/M"}], "default": {}, "description": "d"},
            "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "list": {"type": "array", "items": {"type": "string", "enum": ["a"]}, "x-kubernetes-list-type": "set"},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    })
    assert trimmed == {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "count": {"type": "integer"},
            "meta": {"$ref": "#/components/schemas/M"},
            "port": {"x-kubernetes-int-or-string": True},
            "list": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},  # merge type kept
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }


AGGREGATED = {
    "kind": "APIGroupDiscoveryList",
    "items": [{
        "metadata": {"name": "example.com"},
        "versions": [{"version": "v1", "resources": [{
            "resource": "widgets", "responseKind": {"group": "", "version": "", "kind": "Widget"},
            "scope": "Namespaced", "verbs": ["list", "get", "watch"],
            "subresources": [{"subresource": "status", "responseKind": {"kind": "Widget"}, "verbs": ["get"]}],
        }]}],
    }],
}
CORE_AGGREGATED = {
    "kind": "APIGroupDiscoveryList",
    "items": [{"metadata": {}, "versions": [{"version": "v1", "resources": [{
        "resource": "pods", "responseKind": {"kind": "Pod"}, "scope": "Namespaced", "verbs": ["get", "list"],
    }]}]}],
}
WIDGET_OPENAPI = {
    "components": {"schemas": {
        "com.example.v1.Widget": {
            "type": "object",
            "description": "A widget.",
            "x-kubernetes-group-version-kind": [{"group": "example.com", "version": "v1", "kind": "Widget"}],
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]},
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
            },
        },
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "properties": {
            "name": {"type": "string"}, "generateName": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        }},
    }},
}


def test_parse_discovery_both_formats() -> None:
    legacy = {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "configmaps", "kind": "ConfigMap", "namespaced": True, "verbs": ["get"]},
        {"name": "pods", "kind": "Pod", "namespaced": True, "verbs": ["get"]},
        {"name": "pods/eviction", "kind": "Eviction", "group": "policy", "version": "v1", "namespaced": True, "verbs": ["create"]},
    ]}
    resources, versions = openapi.parse_discovery([AGGREGATED, legacy])
    by_key = {(r["group"], r["version"], r["resource"]): r for r in resources}
    widget = by_key[("example.com", "v1", "widgets")]
    assert widget["kind"] == "Widget" and widget["namespaced"] is True
    assert widget["subresources"] == [{"name": "status", "group": "example.com", "version": "v1", "kind": "Widget", "verbs": ["get"]}]
    assert by_key[("", "v1", "pods")]["subresources"][0]["kind"] == "Eviction"
    assert by_key[("", "v1", "pods")]["subresources"][0]["group"] == "policy"
    assert versions == {"example.com": ["v1"], "": ["v1"]}


class FakeResponse:
    def __init__(self, body: Any, status: int = 200) -> None:
        self.status = status
        self._body = json.dumps(body).encode()

    def read(self) -> bytes:
        return self._body


class FakeApiClient:
    """The two calls vpol.kube.openapi makes on a kubernetes ApiClient (>= 32)."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.requested: list[tuple[str, str]] = []

    def param_serialize(self, method: str, resource_path: str, header_params: dict[str, str], auth_settings: list[str]) -> tuple[Any, ...]:
        return method, resource_path, header_params, None, None

    def call_api(self, method: str, url: str, header_params: dict[str, str]) -> FakeResponse:
        self.requested.append((url, header_params["Accept"]))
        if url not in self.routes:
            return FakeResponse({"kind": "Status"}, 404)
        return FakeResponse(self.routes[url])


def fake_cluster() -> FakeApiClient:
    return FakeApiClient({
        "/api": CORE_AGGREGATED,
        "/apis": AGGREGATED,
        "/openapi/v3": {"paths": {
            "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=1"},
            "apis/example.com/v1": {"serverRelativeURL": "/openapi/v3/apis/example.com/v1?hash=2"},
            "apis/example.com": {"serverRelativeURL": "/openapi/v3/apis/example.com?hash=3"},
        }},
        "/openapi/v3/apis/example.com/v1?hash=2": WIDGET_OPENAPI,
    })


def test_fetch_discovery_documents_asks_for_aggregated_discovery() -> None:
    client = fake_cluster()
    docs = openapi.fetch_discovery_documents(client)
    assert [d["kind"] for d in docs] == ["APIGroupDiscoveryList", "APIGroupDiscoveryList"]
    assert docs[0]["items"][0]["metadata"]["name"] == ""  # the core group
    assert all("apidiscovery.k8s.io;v=v2" in accept for _, accept in client.requested)


def test_fetch_openapi_documents_by_group_version() -> None:
    client = fake_cluster()
    docs = openapi.fetch_openapi_documents(client, ["example.com/v1"])
    assert list(docs) == ["example.com/v1"]
    assert ("/openapi/v3/api/v1?hash=1", "application/json") not in client.requested


def test_cluster_discovery_adds_custom_kinds_with_schemas() -> None:
    client = fake_cluster()
    d = openapi.cluster_discovery(client)
    widget = d.resource("example.com", "v1", "widgets")
    assert widget is not None and widget.kind == "Widget" and widget.subresources == ("status",)
    assert d.resource("apps", "v1", "deployments") is not None  # the built-in table stays
    # only the group versions the bundle lacks were fetched
    fetched = [url for url, _ in client.requested if url.startswith("/openapi/v3/")]
    assert fetched == ["/openapi/v3/apis/example.com/v1?hash=2"]
    warnings = check([("spec.validations[0].expression", "object.spec.size + 'a' == 'b'", "validation"),
                      ("spec.validations[1].expression", "object.metadata.labels['a'] == 'b'", "validation")],
                     [], [widget], d.schema)
    assert [w.field_path for w in warnings] == ["spec.validations[0].expression"]
    assert warnings[0].warning.startswith("example.com/v1, Kind=Widget: ERROR: <input>:1:18: found no matching overload")


def test_fetch_raises_on_http_errors() -> None:
    with pytest.raises(RuntimeError, match="HTTP 404"):
        openapi.fetch_openapi_documents(FakeApiClient({}))


def test_build_bundle_keeps_only_reachable_components() -> None:
    extra = {"components": {"schemas": {"com.example.v1.Unused": {"type": "object"}}}}
    discovery_data, openapi_data = openapi.build_bundle([WIDGET_OPENAPI, extra], [AGGREGATED], "test")
    assert openapi_data["kinds"] == {"example.com/v1": {"Widget": "com.example.v1.Widget"}}
    assert set(openapi_data["components"]) == {"com.example.v1.Widget", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    assert "description" not in openapi_data["components"]["com.example.v1.Widget"]
    assert discovery_data["resources"][0]["resource"] == "widgets"


def test_written_bundle_is_deterministic(tmp_path: Path) -> None:
    data = openapi.build_bundle([WIDGET_OPENAPI], [AGGREGATED], "test")
    a = openapi.write_bundle(tmp_path / "a", *data)
    b = openapi.write_bundle(tmp_path / "b", *data)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert json.loads(gzip.decompress(a[1].read_bytes()))["kinds"] == {"example.com/v1": {"Widget": "com.example.v1.Widget"}}

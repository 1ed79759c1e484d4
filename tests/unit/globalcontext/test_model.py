"""GlobalContextEntry: the CRD as Kyverno 1.19 serves it, and the model's checks (Kyverno's rules and messages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from vpol.model.global_context import (
    ApiCallSource,
    ResourceSource,
    is_global_context_document,
    parse_global_context_entry,
    parse_go_duration,
)

REPO = Path(__file__).resolve().parents[3]
CRD = REPO / "crds" / "globalcontextentries.yaml"


def crd() -> dict[str, Any]:
    [doc] = [d for d in yaml.safe_load_all(CRD.read_text()) if d]
    return dict(doc)


def entry(spec: dict[str, Any], name: str = "e", version: str = "v2") -> dict[str, Any]:
    return {"apiVersion": f"kyverno.io/{version}", "kind": "GlobalContextEntry", "metadata": {"name": name},
            "spec": spec}


def problems(spec: dict[str, Any], name: str = "e") -> dict[str, str]:
    parsed, found = parse_global_context_entry(entry(spec, name))
    errors = {p.path: p.message for p in found if p.severity == "error"}
    assert (parsed is None) == bool(errors)
    return errors


# --- the CRD -----------------------------------------------------------------------------------------------


def test_crd_names_versions_and_storage_as_kyverno() -> None:
    doc = crd()
    spec = doc["spec"]
    assert doc["metadata"]["name"] == "globalcontextentries.kyverno.io"
    assert spec["group"] == "kyverno.io" and spec["scope"] == "Cluster"
    assert spec["names"] == {"kind": "GlobalContextEntry", "listKind": "GlobalContextEntryList",
                             "plural": "globalcontextentries", "singular": "globalcontextentry",
                             "shortNames": ["gctxentry"], "categories": ["kyverno"]}
    versions = {v["name"]: v for v in spec["versions"]}
    assert set(versions) == {"v2", "v2beta1", "v2alpha1"}
    assert all(v["served"] for v in versions.values())
    assert [n for n, v in versions.items() if v["storage"]] == ["v2beta1"]  # Kyverno's storage version
    assert versions["v2alpha1"].get("deprecated") is True
    assert "v2alpha1 GlobalContextEntry is deprecated" in versions["v2alpha1"]["deprecationWarning"]
    assert not versions["v2"].get("deprecated") and not versions["v2beta1"].get("deprecated")
    first = versions["v2"]
    for v in versions.values():
        assert v["schema"] == first["schema"]
        assert v["subresources"] == {"status": {}}
        assert [c["jsonPath"] for c in v["additionalPrinterColumns"]] == [
            ".metadata.creationTimestamp", ".spec.apiCall.refreshInterval", ".status.lastRefreshTime"]


def test_crd_schema_fields_defaults_and_status() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    assert spec["oneOf"] == [{"required": ["kubernetesResource"]}, {"required": ["apiCall"]}]
    assert set(spec["properties"]) == {"kubernetesResource", "apiCall", "projections"}
    resource = spec["properties"]["kubernetesResource"]
    assert set(resource["properties"]) == {"group", "version", "resource", "namespace"}
    assert sorted(resource["required"]) == ["resource", "version"]
    call = spec["properties"]["apiCall"]["properties"]
    assert set(call) == {"urlPath", "service", "method", "data", "refreshInterval", "retryLimit"}
    assert call["method"]["default"] == "GET" and call["method"]["enum"] == ["GET", "POST"]
    assert call["refreshInterval"]["default"] == "10m" and call["refreshInterval"]["format"] == "duration"
    assert call["retryLimit"]["default"] == 3 and call["retryLimit"]["minimum"] == 1
    assert set(call["service"]["properties"]) == {"url", "caBundle", "headers"}
    assert call["service"]["required"] == ["url"]
    assert call["data"]["items"]["properties"]["value"]["x-kubernetes-preserve-unknown-fields"] is True
    projection = spec["properties"]["projections"]["items"]
    assert set(projection["properties"]) == {"name", "jmesPath"} and sorted(projection["required"]) == ["jmesPath", "name"]
    status = schema["properties"]["status"]["properties"]
    assert set(status) == {"conditions", "lastRefreshTime"}
    assert set(status["conditions"]["items"]["properties"]) == {
        "type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"}
    assert schema["required"] == ["spec"]


def test_crd_is_installed_by_the_kustomization() -> None:
    kustomization = yaml.safe_load((REPO / "crds" / "kustomization.yaml").read_text())
    assert "globalcontextentries.yaml" in kustomization["resources"]


# --- parsing -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v2", "v2beta1", "v2alpha1"])
def test_every_served_version_parses(version: str) -> None:
    doc = entry({"kubernetesResource": {"group": "apps", "version": "v1", "resource": "deployments"}}, version=version)
    assert is_global_context_document(doc)
    parsed, found = parse_global_context_entry(doc)
    assert parsed is not None and not found
    assert parsed.resource == ResourceSource("apps", "v1", "deployments", "")
    assert not is_global_context_document({**doc, "apiVersion": "kyverno.io/v1"})


def test_api_call_defaults_are_the_crds() -> None:
    parsed, found = parse_global_context_entry(entry({"apiCall": {"urlPath": "/api/v1/namespaces"}}))
    assert parsed is not None and not found
    assert parsed.api_call == ApiCallSource(url_path="/api/v1/namespaces", method="GET", refresh_seconds=600.0,
                                            retry_limit=3)


def test_post_body_is_the_data_items() -> None:
    parsed, _ = parse_global_context_entry(entry({"apiCall": {
        "service": {"url": "https://svc.ns:8443/x", "headers": [{"key": "X-A", "value": "1"}]},
        "method": "POST", "data": [{"key": "a", "value": {"b": [1]}}, {"key": "c", "value": "d"}],
        "refreshInterval": "1m30s", "retryLimit": 5}}))
    assert parsed is not None and parsed.api_call is not None
    assert parsed.api_call.body() == {"a": {"b": [1]}, "c": "d"}
    assert parsed.api_call.service is not None and parsed.api_call.service.headers == (("X-A", "1"),)
    assert parsed.api_call.refresh_seconds == 90 and parsed.api_call.retry_limit == 5


@pytest.mark.parametrize("spec,path,message", [
    ({}, "spec.kubernetesResource", "A global context entry should either have KubernetesResource or APICall"),
    ({"kubernetesResource": {"group": "apps", "version": "v1", "resource": "deployments"},
      "apiCall": {"urlPath": "/x"}},
     "spec.kubernetesResource", "A global context entry should either have KubernetesResource or APICall"),
    ({"kubernetesResource": {"version": "v2", "resource": "things"}}, "spec.kubernetesResource.group",
     "A Resource entry requires a group"),
    ({"kubernetesResource": {"group": "apps", "resource": "deployments"}}, "spec.kubernetesResource.version",
     "A Resource entry requires a version"),
    ({"kubernetesResource": {"group": "apps", "version": "v1"}}, "spec.kubernetesResource.resource",
     "A Resource entry requires a resource"),
    ({"apiCall": {}}, "spec.apiCall.service", "An External API call should either have Service or URLPath"),
    ({"apiCall": {"urlPath": "/x", "service": {"url": "https://a"}}}, "spec.apiCall.service",
     "An External API call should either have Service or URLPath"),
    ({"apiCall": {"urlPath": "/x", "data": [{"key": "a", "value": 1}]}}, "spec.apiCall.method",
     "An External API call with data should have method as POST"),
    ({"apiCall": {"urlPath": "/x", "refreshInterval": "0s"}}, "spec.apiCall.refreshInterval",
     "A Resource entry requires a refresh interval greater than 0 seconds"),
    ({"apiCall": {"urlPath": "/x", "refreshInterval": "10"}}, "spec.apiCall.refreshInterval",
     'time: missing unit in duration "10"'),
    ({"apiCall": {"urlPath": "/x", "method": "PUT"}}, "spec.apiCall.method",
     'unsupported value "PUT": must be one of GET, POST'),
    ({"apiCall": {"urlPath": "/x"}, "projections": [{"name": "", "jmesPath": "a"}]}, "spec.projections[0].name",
     "A projection entry requires a name"),
    ({"apiCall": {"urlPath": "/x"}, "projections": [{"name": "e", "jmesPath": "a"}]}, "spec.projections[0].name",
     "A projection entry requires a name different from the global context entry name"),
    ({"apiCall": {"urlPath": "/x"}, "projections": [{"name": "p", "jmesPath": ""}]}, "spec.projections[0].jmesPath",
     "A projection entry requires a JMESPath"),
])
def test_kyvernos_rules_with_their_messages(spec: dict[str, Any], path: str, message: str) -> None:
    assert problems(spec).get(path) == message


def test_core_group_needs_no_group_and_bad_jmespath_is_refused() -> None:
    assert problems({"kubernetesResource": {"version": "v1", "resource": "configmaps", "namespace": "a"}}) == {}
    found = problems({"apiCall": {"urlPath": "/x"}, "projections": [{"name": "p", "jmesPath": "[?"}]})
    assert found["spec.projections[0].jmesPath"].startswith('Invalid value: "[?": ')


@pytest.mark.parametrize("text,seconds", [("10m", 600), ("1.5h", 5400), ("2h45m", 9900), ("300ms", 0.3),
                                          ("1h30m10s", 5410), ("0", 0), ("-1s", -1), ("5us", 5e-6)])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text,message", [("", 'time: invalid duration ""'), ("1", 'time: missing unit in duration "1"'),
                                          ("1d", 'time: unknown unit "d" in duration "1d"'),
                                          ("m", 'time: invalid duration "m"')])
def test_bad_go_durations(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_go_duration(text)


# --- status (vpol.desired.global_context) ----------------------------------------------------------------------


def test_status_is_kyvernos_ready_condition_and_last_refresh_time() -> None:
    from vpol.desired.global_context import entry_status, status_changed

    first = entry_status(ready=True, message="loaded", generation=2, last_refresh="2026-01-01T00:00:00Z",
                         previous={}, now="2026-01-01T00:00:01Z")
    assert first == {"conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "loaded",
                                     "observedGeneration": 2, "lastTransitionTime": "2026-01-01T00:00:01Z"}],
                     "lastRefreshTime": "2026-01-01T00:00:00Z"}
    # nothing new: nothing to write; the transition time moves only when the status flips
    again = entry_status(ready=True, message="loaded", generation=2, last_refresh="", previous=first,
                         now="2026-01-01T00:09:00Z")
    assert not status_changed(first, again)
    failed = entry_status(ready=False, message="HTTP 403", generation=2, last_refresh="", previous=first,
                          now="2026-01-01T00:10:00Z")
    assert failed["conditions"][0]["reason"] == "Failed" and failed["conditions"][0]["lastTransitionTime"] == \
        "2026-01-01T00:10:00Z"
    assert failed["lastRefreshTime"] == "2026-01-01T00:00:00Z"  # the last success is kept


@pytest.mark.parametrize("seconds,text", [(600, "10m0s"), (5400, "1h30m0s"), (2, "2s"), (1.5, "1.5s"), (0.3, "300ms"),
                                          (3600, "1h0m0s"), (90, "1m30s")])
def test_go_duration_strings(seconds: float, text: str) -> None:
    from vpol.controller.global_context import go_duration

    assert go_duration(seconds) == text

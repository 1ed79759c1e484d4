"""vpol's report writes against a real API server (vpol.kube.reports): every way of writing a report answers with
the resourceVersion the API server stored, although the server is asked to answer with the report's metadata
only; a create of a report that exists, and an update at a version that is no longer the report's, say so
instead of failing or replacing what someone else wrote."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.test_scans import make_cm, report
from tests.e2e.vpol_fixtures import vpol_installed  # noqa: F401 - fixture
from vpol.desired.report import PolicyMeta, ReportEntry, ResourceRef, report_for
from vpol.kube.dynamic import METADATA_ANSWER, send_encoded
from vpol.kube.reports import Reports


def _report(cluster: Any, namespace: str, name: str, results: dict[str, ReportEntry]) -> dict[str, Any]:
    uid = make_cm(cluster, namespace, name, {"k": "v"})
    ref = ResourceRef("v1", "ConfigMap", name, namespace, uid)
    return report_for(ref, results, {p: PolicyMeta("medium", "c") for p in results}, f"{uid}/1/h")


def test_writes_answer_with_the_stored_resource_version(cluster: Any, vpol_installed: Any,  # noqa: F811
                                                        namespace: str) -> None:
    reports = Reports(cluster.api_client)
    one = {"p1": ReportEntry("p1", "fail", "no", (), 1700000000)}
    two = {**one, "p2": ReportEntry("p2", "pass", "", (), 1700000001)}
    body = _report(cluster, namespace, "owner", one)
    uid = body["scope"]["uid"]

    created = reports.create(body)
    stored = report(cluster, namespace, uid)
    assert stored is not None and created == stored["metadata"]["resourceVersion"] != ""
    assert [r["policy"] for r in stored["results"]] == ["p1"]
    assert reports.create(body) is None  # it exists: the caller applies instead

    updated = reports.update(report_for(_ref(body), two, _meta(two), f"{uid}/2/h"), created or "")
    stored = report(cluster, namespace, uid)
    assert stored is not None and updated == stored["metadata"]["resourceVersion"] not in ("", created)
    assert [r["policy"] for r in stored["results"]] == ["p1", "p2"]
    # At the version before: someone (here vpol itself) wrote the report since, so it is not replaced.
    assert reports.update(body, created or "") is None
    assert [r["policy"] for r in (report(cluster, namespace, uid) or {})["results"]] == ["p1", "p2"]

    applied = reports.apply(body)
    stored = report(cluster, namespace, uid)
    assert stored is not None and applied == stored["metadata"]["resourceVersion"] not in ("", updated)
    assert [r["policy"] for r in stored["results"]] == ["p1"]


def test_the_api_server_answers_a_write_with_metadata_only_and_an_error_as_a_status(
        cluster: Any, vpol_installed: Any, namespace: str) -> None:  # noqa: F811
    """What the writes above rely on: asked for PartialObjectMetadata, the API server sends the report's
    metadata without its results; a refused write still answers with a Status (the fallback media type)."""
    import json

    body = _report(cluster, namespace, "answered", {"p1": ReportEntry("p1", "pass", "", (), 1700000000)})
    path = f"/apis/wgpolicyk8s.io/v1alpha2/namespaces/{namespace}/policyreports"
    answer = json.loads(send_encoded(cluster.api_client, "POST", path, json.dumps(body).encode(),
                                     content_type="application/json", accept=METADATA_ANSWER))
    assert answer["kind"] == "PartialObjectMetadata" and "results" not in answer
    assert answer["metadata"]["name"] == body["metadata"]["name"] and answer["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as refused:
        send_encoded(cluster.api_client, "POST", path, json.dumps(body).encode(), content_type="application/json",
                     accept=METADATA_ANSWER)
    assert refused.value.status == 409
    assert json.loads(refused.value.body)["kind"] == "Status"
    assert client.CustomObjectsApi(cluster.api_client).get_namespaced_custom_object(
        "wgpolicyk8s.io", "v1alpha2", namespace, "policyreports", body["metadata"]["name"])["results"]


def _ref(body: dict[str, Any]) -> ResourceRef:
    s = body["scope"]
    return ResourceRef(s["apiVersion"], s["kind"], s["name"], s["namespace"], s["uid"])


def _meta(results: dict[str, ReportEntry]) -> dict[str, PolicyMeta]:
    return {p: PolicyMeta("medium", "c") for p in results}

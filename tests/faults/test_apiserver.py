"""The emulated API server behaves as the Kubernetes API does where the operator depends on it.

Expected behaviour is the API server's documented one: resourceVersion
changes on every write, generation only on spec changes of a resource
with a status subresource, the status subresource ignores everything but
status, a failed JSON-patch ``test`` is 422 Invalid, a watch from a
resourceVersion sends only later changes, and injected faults leave the
store untouched.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from tests.faults.apiserver import POLICIES, POLICY_PATH, TEST_CLIENT, Effect, VpolApiServer
from tests.faults.policies import policy_body

pytestmark = pytest.mark.asyncio

MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}


async def create(api: VpolApiServer, name: str) -> dict[str, Any]:
    resp = await api.post(POLICY_PATH, json=policy_body(name))
    assert resp.status in (200, 201)
    return dict(await resp.json())


async def patch(api: VpolApiServer, path: str, body: Any, headers: dict[str, str]) -> aiohttp.ClientResponse:
    return await api.patch(path, data=json.dumps(body), headers=headers)


async def test_writes_stamp_metadata_and_generation_follows_spec_only(kmock: VpolApiServer) -> None:
    created = await create(kmock, "a")
    meta = created["metadata"]
    assert meta["generation"] == 1 and meta["uid"] and meta["creationTimestamp"]

    resp = await patch(kmock, f"{POLICY_PATH}/a/status", {"status": {"x": 1}, "spec": {"ignored": True}}, MERGE)
    after_status = dict(await resp.json())
    assert resp.status == 200
    assert after_status["status"] == {"x": 1} and "ignored" not in after_status["spec"]
    assert after_status["metadata"]["generation"] == 1
    assert int(after_status["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])

    resp = await patch(kmock, f"{POLICY_PATH}/a", {"metadata": {"labels": {"l": "v"}}, "status": {"x": 2}}, MERGE)
    after_labels = dict(await resp.json())
    assert after_labels["metadata"]["generation"] == 1 and after_labels["status"] == {"x": 1}

    resp = await patch(kmock, f"{POLICY_PATH}/a", {"spec": {"validations": [{"expression": "true"}]}}, MERGE)
    after_spec = dict(await resp.json())
    assert after_spec["metadata"]["generation"] == 2
    assert after_spec["spec"]["validations"] == [{"expression": "true"}]
    assert int(after_spec["metadata"]["resourceVersion"]) > int(after_labels["metadata"]["resourceVersion"])


async def test_a_failed_json_patch_test_is_422_and_changes_nothing(kmock: VpolApiServer) -> None:
    created = await create(kmock, "b")
    rv = created["metadata"]["resourceVersion"]
    resp = await patch(kmock, f"{POLICY_PATH}/b", [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "stale"},
        {"op": "add", "path": "/metadata/labels", "value": {"l": "v"}},
    ], JSON_PATCH)
    assert resp.status == 422
    stored = kmock.get_object(POLICIES, "b")
    assert stored is not None and stored["metadata"]["resourceVersion"] == rv and "labels" not in stored["metadata"]

    resp = await patch(kmock, f"{POLICY_PATH}/b", [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/labels", "value": {"l": "v"}},
    ], JSON_PATCH)
    assert resp.status == 200
    stored = kmock.get_object(POLICIES, "b")
    assert stored is not None and stored["metadata"]["labels"] == {"l": "v"}
    assert stored["metadata"]["resourceVersion"] != rv


async def test_injected_write_faults_happen_before_the_store(kmock: VpolApiServer) -> None:
    await create(kmock, "c")
    fault = kmock.inject(Effect.STATUS, status=409, method="PATCH", resource=POLICIES, name="c", times=1,
                         agent=TEST_CLIENT)
    resp = await patch(kmock, f"{POLICY_PATH}/c/status", {"status": {"x": 1}}, MERGE)
    assert resp.status == 409 and (await resp.json())["reason"] == "Conflict"
    stored = kmock.get_object(POLICIES, "c")
    assert stored is not None and "status" not in stored
    resp = await patch(kmock, f"{POLICY_PATH}/c/status", {"status": {"x": 1}}, MERGE)
    assert resp.status == 200 and fault.hits == 1


async def test_a_watch_from_a_resource_version_sends_only_later_changes(kmock: VpolApiServer) -> None:
    await create(kmock, "old")
    listed = await (await kmock.get(POLICY_PATH)).json()
    since = listed["metadata"]["resourceVersion"]
    await create(kmock, "new")

    async def first_events(url: str, n: int) -> list[dict[str, Any]]:
        events = []
        async with kmock.get(url) as resp:
            async for line in resp.content:
                if line.strip():
                    events.append(json.loads(line))
                if len(events) == n:
                    return events
        return events

    from_since = await asyncio.wait_for(first_events(f"{POLICY_PATH}?watch=true&resourceVersion={since}", 1), 5)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in from_since] == [("ADDED", "new")]
    everything = await asyncio.wait_for(first_events(f"{POLICY_PATH}?watch=true", 2), 5)
    assert sorted(e["object"]["metadata"]["name"] for e in everything) == ["new", "old"]


async def test_discovery_prefers_the_ga_version_and_access_reviews_are_allowed(kmock: VpolApiServer) -> None:
    group = await (await kmock.get("/apis/policies.kyverno.io")).json()
    assert group["preferredVersion"]["version"] == "v1"
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"verb": "list", "resource": "configmaps"}}}
    for _ in range(2):  # the plain emulator stores the first review and answers the second 409
        resp = await kmock.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=review)
        assert resp.status == 201 and (await resp.json())["status"]["allowed"] is True

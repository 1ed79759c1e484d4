"""Generation's write path under faults a real API server cannot be made to produce on demand: an error answer
(500) to a downstream's create, and a conflict (409: created meanwhile by another writer). The generation controller
(vpol.controller.generation.Generation) runs against the emulated API server as the scanner runs it.

A failed write makes the trigger's result an ``error`` (as in the trigger's report) and the policy's last error;
without synchronize a trigger generated once is not generated again, but one that failed is, at the next pass, so
a transient failure loses no downstream. A conflict is read again and retried at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client

from tests.faults.apiserver import Effect, VpolApiServer
from vpol.controller.generation import Generation
from vpol.controller.scan_events import Batch
from vpol.desired.report import ReportEntry, ResourceRef
from vpol.engine.subjects import subject_for
from vpol.model.discovery import builtin
from vpol.policies.generating.model import parse_generating_policy

pytestmark = pytest.mark.asyncio

CONFIGMAPS = "v1/configmaps"
PATH = "/api/v1/namespaces/team/configmaps"


def _api(kmock: VpolApiServer) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = str(kmock.url).rstrip("/")
    return client.ApiClient(cfg)


def _policy(created: str) -> Any:
    """A GeneratingPolicy (no synchronize) making ``copy-<name>`` for each ConfigMap labelled ``trigger``; created
    at ``created`` (its triggers made later are owed a generation)."""
    policy, problems = parse_generating_policy({
        "apiVersion": "policies.kyverno.io/v1", "kind": "GeneratingPolicy",
        "metadata": {"name": "copies", "creationTimestamp": created, "resourceVersion": "1"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["configmaps"]}],
                                      "objectSelector": {"matchLabels": {"trigger": "yes"}}},
                 "generate": [{"expression": 'generator.Apply(object.metadata.namespace, [{"apiVersion": "v1", '
                                             '"kind": "ConfigMap", "metadata": {"name": "copy-" + '
                                             'object.metadata.name}}])'}]}})
    assert policy is not None, problems
    return policy


class Reports:
    """The scanner's report store, as generation sees it."""

    def __init__(self) -> None:
        self.entries: dict[str, ReportEntry] = {}

    def store(self, ref: ResourceRef, policy: str, entry: ReportEntry | None) -> None:
        if entry is not None:
            self.entries[ref.uid] = entry

    def reported(self, uid: str, policy: str) -> str:
        entry = self.entries.get(uid)
        return entry.result if entry is not None else ""


def _generation(kmock: VpolApiServer, reports: Reports) -> Generation:
    discovery = builtin()

    def resolve(api_version: str, kind: str) -> Any:
        return subject_for({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}}).type

    return Generation(_api(kmock), resolve=resolve, namespaces={}, discovery=lambda: discovery,
                      store=reports.store, reported=reports.reported)


async def _trigger(kmock: VpolApiServer, name: str) -> dict[str, Any]:
    resp = await kmock.post(PATH, json={"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": name, "namespace": "team", "labels": {"trigger": "yes"}}})
    assert resp.status in (200, 201), await resp.text()
    return dict(await resp.json())


async def test_a_failed_write_is_an_error_and_is_tried_again_at_the_next_pass(kmock: VpolApiServer) -> None:
    reports = Reports()
    generation = _generation(kmock, reports)
    policy = _policy("2020-01-01T00:00:00Z")
    generation.set_policy(policy.key, policy)
    trigger = await _trigger(kmock, "t1")
    kmock.inject(Effect.STATUS, status=500, method="POST", resource=CONFIGMAPS, times=1)
    await asyncio.to_thread(generation.run_pass, policy)
    uid = trigger["metadata"]["uid"]
    assert reports.entries[uid].result == "error", reports.entries
    assert "failed to generate resources" in reports.entries[uid].message
    assert "t1" in generation.errors[policy.key]
    assert kmock.get_object(CONFIGMAPS, "copy-t1", "team") is None

    await asyncio.to_thread(generation.run_pass, policy)  # the next pass (a full scan, a restart)
    assert kmock.get_object(CONFIGMAPS, "copy-t1", "team") is not None
    assert reports.entries[uid].result == "pass", reports.entries
    assert policy.key not in generation.errors
    writes = sum(1 for w in kmock.writes if w[2] == "copy-t1")
    await asyncio.to_thread(generation.run_pass, policy)  # generated once: nothing more is written
    assert sum(1 for w in kmock.writes if w[2] == "copy-t1") == writes


async def test_a_conflict_is_read_again_and_retried(kmock: VpolApiServer) -> None:
    reports = Reports()
    generation = _generation(kmock, reports)
    policy = _policy("2020-01-01T00:00:00Z")
    generation.set_policy(policy.key, policy)
    trigger = await _trigger(kmock, "t2")
    conflict = kmock.inject(Effect.STATUS, status=409, method="POST", resource=CONFIGMAPS, times=1)
    await asyncio.to_thread(generation.run_pass, policy)
    assert conflict.hits == 1
    assert kmock.get_object(CONFIGMAPS, "copy-t2", "team") is not None
    assert reports.entries[trigger["metadata"]["uid"]].result == "pass"


async def test_a_new_triggers_downstream_is_created_without_reading_it_first(kmock: VpolApiServer) -> None:
    """A trigger whose creation is seen for the first time has no downstreams yet: each is created at once (one
    request, not a read and a create); one that exists all the same answers the create with a conflict, and is then
    read as every other write reads it (someone else's is left alone, and the trigger's result is an error)."""
    reports = Reports()
    generation = _generation(kmock, reports)
    policy = _policy("2020-01-01T00:00:00Z")
    generation.set_policy(policy.key, policy)
    read = kmock.inject(Effect.STATUS, status=500, method="GET", resource=CONFIGMAPS, name="copy-t3", times=1)
    trigger = await _trigger(kmock, "t3")
    await asyncio.to_thread(generation.objects_changed, Batch(triggers=[("ADDED", trigger)]), builtin())
    assert read.hits == 0, "the downstream of a new trigger was read before its create"
    assert kmock.get_object(CONFIGMAPS, "copy-t3", "team") is not None
    assert reports.entries[trigger["metadata"]["uid"]].result == "pass"

    resp = await kmock.post(PATH, json={"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": "copy-t4", "namespace": "team"}, "data": {"k": "mine"}})
    assert resp.status in (200, 201)
    trigger = await _trigger(kmock, "t4")
    # (the emulated API server stores a second create of a name: the conflict is the real one's AlreadyExists)
    exists = kmock.inject(Effect.STATUS, status=409, method="POST", resource=CONFIGMAPS, times=1)
    await asyncio.to_thread(generation.objects_changed, Batch(triggers=[("ADDED", trigger)]), builtin())
    assert exists.hits == 1
    entry = reports.entries[trigger["metadata"]["uid"]]
    assert entry.result == "error" and "was not generated by this policy" in entry.message, entry
    assert (kmock.get_object(CONFIGMAPS, "copy-t4", "team") or {}).get("data") == {"k": "mine"}


async def test_a_trigger_made_in_the_policys_second_is_owed(kmock: VpolApiServer) -> None:
    """Creation times are in seconds: a trigger created in the same second as the policy is generated for by the
    next pass (a watch of its kind already running may have delivered it before the policy was known)."""
    reports = Reports()
    generation = _generation(kmock, reports)
    trigger = await _trigger(kmock, "t5")
    created = trigger["metadata"]["creationTimestamp"]
    policy = _policy(created)
    generation.set_policy(policy.key, policy)
    await asyncio.to_thread(generation.run_pass, policy)
    assert kmock.get_object(CONFIGMAPS, "copy-t5", "team") is not None
    assert reports.entries[trigger["metadata"]["uid"]].result == "pass"

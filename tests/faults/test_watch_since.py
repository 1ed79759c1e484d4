"""A watch that starts at a resourceVersion (``vpol.kube.dynamic.Watcher(since=...)``), as the scanner starts the
watch of a MutatingPolicy's triggers from when the policy was seen, so that a trigger made after the policy was
Ready but before the watch started is not missed.

The replay itself is shown against the real API server (tests/e2e/test_mutate_existing.py); what a real server
cannot be made to do on demand is forget the version: 410 Gone, as an ERROR event in the stream or as the HTTP
answer. The watcher must then start from a list that only fixes the starting point (no ADDED event for what
already exists, which the scanner would take for CREATE triggers) and go on watching.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import client

from tests.faults.apiserver import POLICIES, VPOL, Effect, VpolApiServer
from tests.faults.converge import WAIT
from tests.faults.policies import CreatePolicy
from vpol.kube.dynamic import Watcher

pytestmark = pytest.mark.asyncio


def _api(kmock: VpolApiServer) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = str(kmock.url).rstrip("/")
    return client.ApiClient(cfg)


async def _names_seen(events: list[tuple[str, str]], name: str) -> None:
    async with asyncio.timeout(WAIT):
        while not any(n == name for _t, n in events):
            await asyncio.sleep(0.05)


def _watcher(kmock: VpolApiServer, events: list[tuple[str, str]], since: str) -> Watcher:
    def on_event(etype: str, obj: dict[str, Any]) -> None:
        if etype != "SYNCED":
            events.append((etype, str((obj.get("metadata") or {}).get("name"))))

    return Watcher(_api(kmock), "policies.kyverno.io", "v1", "validatingpolicies", on_event,
                   kind="ValidatingPolicy", emit_initial=False, since=since)


async def test_a_watch_from_a_version_replays_what_changed_since(kmock: VpolApiServer,
                                                                 create_policy: CreatePolicy) -> None:
    before = await create_policy("before")
    await create_policy("after")
    events: list[tuple[str, str]] = []
    watcher = _watcher(kmock, events, since=before["metadata"]["resourceVersion"])
    watcher.start()
    try:
        await _names_seen(events, "after")
        assert ("ADDED", "after") in events and not any(n == "before" for _t, n in events), events
    finally:
        watcher.stop()


@pytest.mark.parametrize("how", ["error event", "http status"])
async def test_a_version_the_server_no_longer_has_starts_from_a_quiet_list(
        kmock: VpolApiServer, create_policy: CreatePolicy, how: str) -> None:
    await create_policy("existing")
    release = asyncio.Event()
    release.set()
    if how == "error event":
        gone = kmock.inject(Effect.GONE, method="GET", resource=POLICIES, watch=True, agent=VPOL, release=release)
    else:
        gone = kmock.inject(Effect.STATUS, status=410, method="GET", resource=POLICIES, watch=True, agent=VPOL)
    # The next watch (made after the list that follows the refusal) passes through unchanged; its hit says the
    # starting point is fixed, so an object created after it is a change the watch must deliver.
    next_watch = kmock.inject(Effect.SLOW, method="GET", resource=POLICIES, watch=True, agent=VPOL)
    events: list[tuple[str, str]] = []
    watcher = _watcher(kmock, events, since="1")
    watcher.start()
    try:
        await gone.wait_hits(1, WAIT)
        await next_watch.wait_hits(1, WAIT)
        await create_policy("new")
        await _names_seen(events, "new")
        # The object that existed is no event: the list only fixed where the watch starts.
        assert events == [("ADDED", "new")], events
    finally:
        watcher.stop()

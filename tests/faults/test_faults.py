"""The real operator (`vpol run`) survives API faults injected by an emulated API server.

Each test starts `vpol run` in a subprocess against
:class:`tests.faults.apiserver.VpolApiServer`, scripts faults for the
first requests of a kind, and asserts the end state: the policy's status
says Ready=True (or the right failure) for its *current* generation, every
scripted fault was really hit, writes that failed left no trace, and the
operator process is still alive and live. Every wait is bounded.

Background scanning is disabled (see :class:`tests.faults.operator_process.Operator`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.faults.apiserver import KOPF, POLICIES, POLICY_PATH, VPOL, Effect, Fault, VpolApiServer
from tests.faults.converge import WAIT, condition, expect_condition, is_ready, wait_policy
from tests.faults.operator_process import Operator, StartOperator
from tests.faults.policies import CreatePolicy, policy_body

pytestmark = pytest.mark.asyncio


def requests_of(api: VpolApiServer, *, agent: str, method: str = "GET", path: str = POLICY_PATH,
                watch: bool | None = None) -> list[Any]:
    """Requests kmock recorded from one client to one path (query ignored)."""
    out = []
    for r in list(api):
        if not str(r.headers.get("User-Agent", "")).startswith(agent):
            continue
        if str(r.method.value) != method or r.url.path != path:
            continue
        if watch is not None and (r.params.get("watch") == "true") != watch:
            continue
        out.append(r)
    return out


async def patch_spec(api: VpolApiServer, name: str, spec: dict[str, Any]) -> None:
    resp = await api.patch(f"{POLICY_PATH}/{name}", json={"spec": spec},
                           headers={"Content-Type": "application/merge-patch+json"})
    assert resp.status == 200, await resp.text()


async def assert_healthy(op: Operator) -> None:
    assert op.alive, f"the operator exited with {op.returncode}"
    assert await op.healthz() == 200


async def start_with_held_policy_watch(kmock: VpolApiServer, operator: StartOperator,
                                       effect: Effect) -> tuple[Operator, asyncio.Event, Fault]:
    """Start the operator with Kopf's first policy watch failing with ``effect``, held until the
    returned event is set. The operator's own startup listing fails once too, so only Kopf's
    watch machinery can find a policy created meanwhile."""
    resync_500 = kmock.inject(Effect.STATUS, status=500, method="GET", path=POLICY_PATH, agent=VPOL, times=1)
    release = asyncio.Event()
    first = kmock.inject(effect, method="GET", resource=POLICIES, watch=True, agent=KOPF, release=release,
                         hold_limit=WAIT)
    op = await operator()
    await first.wait_hits(1, WAIT)
    await resync_500.wait_hits(1, WAIT)
    return op, release, first


async def test_500s_on_policy_reads_lists_and_status_writes_are_retried(
        kmock: VpolApiServer, operator: StartOperator,
        create_policy: CreatePolicy) -> None:
    get_500 = kmock.inject(Effect.STATUS, status=500, method="GET", resource=POLICIES, name="p500", agent=VPOL,
                           subresource="", times=2)
    patch_500 = kmock.inject(Effect.STATUS, status=500, method="PATCH", resource=POLICIES, name="p500",
                             subresource="status", times=1)
    list_500 = kmock.inject(Effect.STATUS, status=500, method="GET", resource=POLICIES, name=None, watch=False,
                            agent=KOPF, path=POLICY_PATH, times=1)
    await create_policy("p500")
    op = await operator()

    policy = await wait_policy(kmock, "p500", is_ready, WAIT, op)

    assert (get_500.hits, patch_500.hits, list_500.hits) == (2, 1, 1)
    assert expect_condition(policy, "Compiled")["status"] == "True"
    # The failed status patch stored nothing: exactly one status write got through.
    assert kmock.status_writes("p500") == 1
    # Kopf listed again after its failed list (its own retry), and still watches.
    assert len(requests_of(kmock, agent=KOPF, watch=False)) >= 2
    assert requests_of(kmock, agent=KOPF, watch=True)
    await assert_healthy(op)


async def test_409_conflicts_on_the_status_patch_converge_on_the_latest_generation(
        kmock: VpolApiServer, operator: StartOperator,
        create_policy: CreatePolicy) -> None:
    conflict = kmock.inject(Effect.STATUS, status=409, method="PATCH", resource=POLICIES, name="p409",
                            subresource="status", times=3)
    await create_policy("p409")
    op = await operator()

    await conflict.wait_hits(1, WAIT)
    # Someone changes the spec while the operator's status write conflicts: the status it
    # finally writes must describe generation 2, not the generation it first read.
    spec = policy_body("p409", "object.metadata.name != 'other'")["spec"]
    await patch_spec(kmock, "p409", spec)

    policy = await wait_policy(kmock, "p409", is_ready, WAIT, op)

    assert policy["metadata"]["generation"] == 2
    assert policy["spec"]["validations"][0]["expression"] == "object.metadata.name != 'other'"
    assert conflict.hits == 3
    assert all(c["observedGeneration"] == 2 for c in policy["status"]["conditionStatus"]["conditions"])
    # Conflicting patches were rejected before the store: create, spec patch, one status write.
    writes = [w for w in kmock.writes if w[2] == "p409"]
    assert writes == [("POST", "validatingpolicies", "p409", ""), ("PATCH", "validatingpolicies", "p409", ""),
                      ("PATCH", "validatingpolicies", "p409", "status")]
    await assert_healthy(op)


async def test_410_gone_on_the_policy_watch_relists_and_picks_up_new_policies(
        kmock: VpolApiServer, operator: StartOperator,
        create_policy: CreatePolicy) -> None:
    op, release, first = await start_with_held_policy_watch(kmock, operator, Effect.GONE)
    second = kmock.inject(Effect.GONE, method="GET", resource=POLICIES, watch=True, agent=KOPF)

    # Created while the only watch stream is stuck; its ADDED event never reaches that stream.
    await create_policy("after-gone")
    await asyncio.sleep(0.3)
    assert condition(kmock.get_object(POLICIES, "after-gone"), "Ready") is None
    lists_before = len(requests_of(kmock, agent=KOPF, watch=False))
    release.set()

    await wait_policy(kmock, "after-gone", is_ready, WAIT, op)
    await second.wait_hits(1, WAIT)
    # Each 410 made Kopf list again (two more lists), then it watches normally:
    # a policy created now arrives through the live watch.
    async with asyncio.timeout(WAIT):
        while len(requests_of(kmock, agent=KOPF, watch=False)) < lists_before + 2:
            await asyncio.sleep(0.1)
    await create_policy("later")
    await wait_policy(kmock, "later", is_ready, WAIT, op)
    assert first.hits == 1 and second.hits == 1
    await assert_healthy(op)


async def test_dropped_watch_streams_reconnect_and_pick_up_new_policies(
        kmock: VpolApiServer, operator: StartOperator,
        create_policy: CreatePolicy) -> None:
    op, release, first = await start_with_held_policy_watch(kmock, operator, Effect.DROP)
    # The reconnection is cut too, at once, twice.
    again = kmock.inject(Effect.DROP, method="GET", resource=POLICIES, watch=True, agent=KOPF, times=2)

    await create_policy("after-drop")
    await asyncio.sleep(0.3)
    assert condition(kmock.get_object(POLICIES, "after-drop"), "Ready") is None
    release.set()

    await wait_policy(kmock, "after-drop", is_ready, WAIT, op)
    assert first.hits == 1 and again.hits == 2
    assert len(requests_of(kmock, agent=KOPF, watch=True)) >= 4
    await create_policy("later")
    await wait_policy(kmock, "later", is_ready, WAIT, op)
    await assert_healthy(op)


async def test_slow_responses_stall_neither_other_policies_nor_the_operator(
        kmock: VpolApiServer, operator: StartOperator,
        create_policy: CreatePolicy) -> None:
    release = asyncio.Event()
    slow_get = kmock.inject(Effect.SLOW, method="GET", resource=POLICIES, name="slow", subresource="", agent=VPOL,
                            release=release, hold_limit=10, delay=1.0)
    slow_discovery = kmock.inject(Effect.SLOW, method="GET", path="/apis", agent=VPOL, delay=2.0)
    await create_policy("slow")
    await create_policy("fast")
    op = await operator(workers=2)

    await slow_get.wait_hits(1, WAIT)
    # While one worker waits on a slow GET (and discovery is slow too), the other policy converges
    # and the liveness endpoint answers promptly.
    await wait_policy(kmock, "fast", is_ready, WAIT, op)
    assert slow_discovery.hits == 1
    assert not release.is_set()
    assert condition(kmock.get_object(POLICIES, "slow"), "Ready") is None
    await assert_healthy(op)

    release.set()
    await wait_policy(kmock, "slow", is_ready, WAIT, op)
    assert kmock.status_writes("slow") == 1 and kmock.status_writes("fast") == 1
    await assert_healthy(op)


async def test_an_invalid_policy_never_stalls_a_valid_one(
        kmock: VpolApiServer, operator: StartOperator,
        create_policy: CreatePolicy) -> None:
    await create_policy("bad", "object.metadata.name ==== 'x'")
    await create_policy("good")
    op = await operator(workers=1)

    good = await wait_policy(kmock, "good", is_ready, WAIT, op)
    bad = await wait_policy(kmock, "bad", lambda p: condition(p, "Compiled") is not None, WAIT, op)

    assert expect_condition(good, "Compiled")["status"] == "True"
    compiled, ready = expect_condition(bad, "Compiled"), expect_condition(bad, "Ready")
    assert compiled["status"] == "False" and compiled["reason"] == "CompilationFailed"
    assert "spec.validations[0].expression" in compiled["message"] and "(1:" in compiled["message"]
    assert ready["status"] == "False" and ready["observedGeneration"] == bad["metadata"]["generation"] == 1
    assert bad["status"]["conditionStatus"]["ready"] is False

    # The invalid policy is a result, not an error: no retry loop, no repeated status writes.
    await asyncio.sleep(1.5)
    assert kmock.status_writes("bad") == 1 and kmock.status_writes("good") == 1
    assert "reconciling bad failed" not in op.log()

    # Fixing it makes it Ready for the new generation.
    await patch_spec(kmock, "bad", policy_body("bad")["spec"])
    fixed = await wait_policy(kmock, "bad", is_ready, WAIT, op)
    assert fixed["metadata"]["generation"] == 2
    assert expect_condition(fixed, "Compiled")["status"] == "True"
    await assert_healthy(op)


async def test_failed_discovery_falls_back_to_the_bundled_schemas(
        kmock: VpolApiServer, operator: StartOperator,
        create_policy: CreatePolicy) -> None:
    discovery_500 = kmock.inject(Effect.STATUS, status=500, method="GET", path="/apis", agent=VPOL, times=1)
    await create_policy("nodisco")
    op = await operator()

    policy = await wait_policy(kmock, "nodisco", is_ready, WAIT, op)

    assert discovery_500.hits == 1
    typechecked = expect_condition(policy, "TypeChecked")
    assert typechecked["status"] == "True" and "bundled" in typechecked["message"]
    await assert_healthy(op)

"""The webhook's pool of evaluation workers: first come, first served, and no worker is ever lost."""

from __future__ import annotations

import asyncio
from typing import Any

from vpol.cel.backend import Backend
from vpol.controller.admission.policies import Snapshot
from vpol.controller.admission.server import EvaluatorPool
from vpol.engine.review import Review
from vpol.policies.sandbox import Limits


class FakeWorker:
    def __init__(self, name: str):
        self.name = name
        self.running = True
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.running = True


def pool_of(*workers: FakeWorker) -> EvaluatorPool:
    pool = EvaluatorPool(Snapshot(), 1, Backend(), Limits())
    pool.evaluators = list(workers)  # type: ignore[arg-type]
    return pool


def test_a_freed_worker_goes_to_the_longest_waiting_request_not_to_a_newcomer() -> None:
    async def scenario() -> list[str]:
        w = FakeWorker("w")
        pool = pool_of(w)
        await pool.start()
        held = await pool.acquire(1)
        assert held is w
        order: list[str] = []

        async def request(name: str) -> None:
            ev = await pool.acquire(5)
            assert ev is w
            order.append(name)
            await asyncio.sleep(0.01)
            pool.release(ev, killed=False)

        first = asyncio.create_task(request("first"))
        second = asyncio.create_task(request("second"))
        await asyncio.sleep(0.01)  # both wait now
        pool.release(w, killed=False)
        await request("late")  # asks the moment the worker is freed, before the waiters run: queues behind
        await asyncio.gather(first, second)
        return order

    assert asyncio.run(scenario()) == ["first", "second", "late"]


def test_a_request_that_waits_out_its_time_gets_none_and_the_worker_is_not_lost() -> None:
    async def scenario() -> None:
        w = FakeWorker("w")
        pool = pool_of(w)
        await pool.start()
        held = await pool.acquire(1)
        assert await pool.acquire(0.05) is None
        assert held is not None
        pool.release(held, killed=False)
        assert await asyncio.wait_for(pool.acquire(0.05), 1) is w

    asyncio.run(scenario())


def test_a_dead_idle_worker_is_restarted_off_the_request_path_and_then_served() -> None:
    async def scenario() -> None:
        a, b = FakeWorker("a"), FakeWorker("b")
        pool = pool_of(a, b)
        await pool.start()
        a.running = False  # died while idle
        assert await pool.acquire(1) is b  # the live one, at once
        ev = await pool.acquire(2)  # the dead one, once restarted
        assert ev is a and a.starts == 1

    asyncio.run(scenario())


def test_a_killed_worker_comes_back_after_its_restart() -> None:
    async def scenario() -> None:
        w = FakeWorker("w")
        pool = pool_of(w)
        await pool.start()
        ev = await pool.acquire(1)
        assert ev is w
        w.running = False
        pool.release(w, killed=True)
        assert await pool.acquire(2) is w and w.starts == 1

    asyncio.run(scenario())


def test_the_worker_freed_last_serves_next() -> None:
    async def scenario() -> list[str]:
        a, b = FakeWorker("a"), FakeWorker("b")
        pool = pool_of(a, b)
        await pool.start()
        used = []
        for _ in range(3):  # one request at a time: always the same, warm, worker
            ev = await pool.acquire(1)
            assert ev is not None
            used.append(ev.name)
            pool.release(ev, killed=False)
        first, second = await pool.acquire(1), await pool.acquire(1)  # two at once: both serve
        assert first is not None and second is not None
        used += [first.name, second.name]
        return used

    assert asyncio.run(scenario()) == ["b", "b", "b", "b", "a"]


def test_a_webhook_no_policy_of_the_snapshot_answers_allows_at_once_without_a_worker() -> None:
    """A configuration being updated can still send a request to a webhook whose last policy just left (or to
    the other failurePolicy's): it is allowed at once, and no worker is started or waited for."""
    import json

    from tests.unit.policies import make_policy
    from vpol.controller.admission.server import WebhookServer
    from vpol.model.discovery import builtin

    class Unused(FakeWorker):
        @property  # type: ignore[override]
        def running(self) -> bool:
            raise AssertionError("no worker may be asked")

        @running.setter
        def running(self, value: bool) -> None:
            pass

    class Policies:
        snapshot = Snapshot()

        def listen(self, fn: object) -> None:
            pass

    fail_only = Snapshot(policies={"p": make_policy(name="p", failurePolicy="Fail", validations=[{"expression": "true"}])}, version=1)
    server = WebhookServer(Policies(), None, builtin, None)  # type: ignore[arg-type]
    req = {"uid": "u-7", "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
           "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "default"}}}
    body = json.dumps({"request": req}).encode()

    async def scenario() -> list[dict[str, object]]:
        answers = []
        for snapshot, failure_policy, mutating in [(Snapshot(), "Fail", False), (fail_only, "Ignore", False),
                                                   (fail_only, "Fail", True)]:
            pool = EvaluatorPool(snapshot, 1, Backend(), Limits())
            pool.evaluators = [Unused("w")]  # type: ignore[list-item]
            await pool.start()
            server._pool = pool  # noqa: SLF001 - the pool a snapshot would have built
            answers.append(json.loads(await server.answer(Review(req, "u-7", body), failure_policy, mutating)))
        assert pool.answers("Fail", False) and not pool.answers("Ignore", False)
        return answers

    for answer in asyncio.run(scenario()):
        assert answer["response"] == {"uid": "u-7", "allowed": True}


def test_a_request_waits_for_the_workers_of_newer_policies() -> None:
    """Every replica serves, and the configuration covers a policy once the leader's server answers with it: a
    replica still rebuilding its workers for that policy answers once they are built, not with the old ones."""
    import json

    from tests.unit.policies import make_policy
    from vpol.controller.admission.server import WebhookServer
    from vpol.model.discovery import builtin

    class Policies:
        snapshot = Snapshot(version=2)

        def listen(self, fn: object) -> None:
            pass

    old = Snapshot(version=1)  # no policy answers the Fail webhook: the old pool would allow at once
    new = Snapshot(policies={"p": make_policy(name="p", failurePolicy="Fail", validations=[{"expression": "true"}])},
                   version=2)
    server = WebhookServer(Policies(), None, builtin, None)  # type: ignore[arg-type]
    req = {"uid": "u-8", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
           "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "operation": "CREATE",
           "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}}}
    body = json.dumps({"request": req}).encode()
    asked: list[int] = []

    async def in_worker(pool: EvaluatorPool, *_args: object) -> bytes:
        asked.append(pool.snapshot.version)
        return b"{}"

    async def scenario() -> None:
        server._pool = EvaluatorPool(old, 1, Backend(), Limits())  # noqa: SLF001
        server._in_worker = in_worker  # type: ignore[method-assign]

        async def rebuilt() -> None:
            await asyncio.sleep(0.3)
            server._pool = EvaluatorPool(new, 1, Backend(), Limits())  # noqa: SLF001

        swap = asyncio.create_task(rebuilt())
        await server.answer(Review(req, "u-8", body), "Fail", False)
        await swap

    asyncio.run(scenario())
    assert asked == [2]


def test_workers_start_only_when_some_request_may_need_one() -> None:
    """Policies whose work is bounded (vpol.cel.cost) are answered by the serving process: no worker is started
    for them until a request needs one (then it starts off the request path, as a restarted one would); a
    policy without a bound needs the workers from the start."""
    from tests.unit.policies import make_policy
    from vpol.policies.inline import InlineLimits

    bounded = make_policy(name="bounded", validations=[{"expression": "object.spec.containers.all(c, c.name != '')"}])
    unbounded = make_policy(name="unbounded", validations=[
        {"expression": "object.spec.containers.all(c, object.spec.containers.all(d, c.name != '' || d == c))"}])

    async def scenario(policies: list[Any]) -> tuple[FakeWorker, EvaluatorPool]:
        w = FakeWorker("w")
        w.running = False
        pool = EvaluatorPool(Snapshot(policies={p.key: p for p in policies}), 1, Backend(), Limits(), inline=InlineLimits())
        pool.evaluators = [w]  # type: ignore[list-item]
        await pool.start()
        return w, pool

    w, pool = asyncio.run(scenario([bounded]))
    assert pool.inline is not None and pool.inline.covers("Fail") and w.starts == 0

    async def needed() -> None:
        assert await pool.acquire(2) is w and w.starts == 1  # a request the serving process left to a worker

    asyncio.run(needed())
    w, pool = asyncio.run(scenario([bounded, unbounded]))
    assert pool.inline is not None and not pool.inline.covers("Fail") and w.starts == 1


def test_a_replica_without_its_policies_asks_the_api_server_to_retry() -> None:
    """A starting replica (failover, rollout, scale-up) is Ready for Kubernetes before its policies are loaded:
    its answer is 429 with Retry-After, which the API server retries (at the Service's other endpoints) before the
    failurePolicy decides, never an allow from an empty pool nor a denial another replica would not give."""
    import json

    from vpol.controller.admission.server import WebhookServer
    from vpol.model.discovery import builtin

    class Policies:
        snapshot = Snapshot()
        synced = False

        def listen(self, fn: object) -> None:
            pass

    class Request:
        path = "/validate/fail"
        remote = "127.0.0.1"
        headers: dict[str, str] = {}

        async def read(self) -> bytes:
            return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "u-9", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "operation": "CREATE",
                "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}}}).encode()

    server = WebhookServer(Policies(), None, builtin, None)  # type: ignore[arg-type]
    response = asyncio.run(server._answer(Request(), "Fail", mutating=False))  # type: ignore[arg-type]  # noqa: SLF001
    assert response.status == 429 and response.headers["Retry-After"] == "1"

    async def rebuild_once() -> None:
        server._changed.set()  # noqa: SLF001
        task = asyncio.create_task(server._rebuild_loop())  # noqa: SLF001
        await asyncio.sleep(0.5)
        task.cancel()

    asyncio.run(rebuild_once())
    assert server._pool is None  # noqa: SLF001 - nothing is built before every kind has been listed
    # Nor is the replica Ready (the chart's readinessProbe): it stays out of the Service's endpoints.
    assert asyncio.run(server._readyz(Request())).status == 503  # type: ignore[arg-type]  # noqa: SLF001

    Policies.synced = True  # every kind listed: a pool of them, and Ready
    asyncio.run(rebuild_once())
    try:
        assert server._pool is not None  # noqa: SLF001
        ready = asyncio.run(server._readyz(Request()))  # type: ignore[arg-type]  # noqa: SLF001
        assert ready.status == 200 and json.loads(ready.body)["ready"] is True  # type: ignore[arg-type]
    finally:
        server._pool.close()  # type: ignore[union-attr]  # noqa: SLF001

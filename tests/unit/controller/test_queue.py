"""The work queue: dedupe, no concurrent processing of a key, re-run when dirtied, backoff on failure."""

from __future__ import annotations

import asyncio

from vpol.controller.queue import WorkQueue


def test_dedupe_and_dirty_rerun():
    async def scenario():
        q = WorkQueue(base_delay=0.01)
        seen = []
        gate = asyncio.Event()

        async def process(key):
            seen.append(key)
            if len(seen) == 1:
                q.add("a")  # added while being processed: must run again afterwards
                q.add("a")
                await gate.wait()

        q.add("a")
        q.add("a")
        worker = asyncio.create_task(q.run_worker(process))
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.sleep(0.05)
        worker.cancel()
        return seen

    assert asyncio.run(scenario()) == ["a", "a"]


def test_failure_is_retried_with_backoff():
    async def scenario():
        q = WorkQueue(base_delay=0.01)
        calls = []

        async def process(key):
            calls.append(key)
            if len(calls) < 3:
                raise RuntimeError("transient")

        q.add("k")
        worker = asyncio.create_task(q.run_worker(process))
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(calls) >= 3 and q.idle():
                break
        worker.cancel()
        return calls, q.backoff("k")

    calls, delay = asyncio.run(scenario())
    assert calls == ["k", "k", "k"]
    assert delay == 0.01  # success resets the backoff


def test_a_key_added_from_another_thread_is_processed_at_once():
    """Kopf runs synchronous handlers in an executor thread and the enforcement prover has its own: a key they
    add reaches a worker waiting on the loop at once (asyncio's queue woken from another thread would wait
    until something else woke the loop: here the 5 s timeout)."""
    import threading
    import time

    async def scenario():
        q = WorkQueue()
        done = asyncio.Event()

        async def process(key):
            done.set()

        worker = asyncio.create_task(q.run_worker(process))
        await asyncio.sleep(0.05)  # the worker waits for a key
        started = time.monotonic()

        def later() -> None:
            time.sleep(0.2)  # the loop is asleep by then, waiting for the worker's queue or the timeout
            q.add("from-a-thread")

        threading.Thread(target=later).start()
        await asyncio.wait_for(done.wait(), 5)
        took = time.monotonic() - started
        worker.cancel()
        return took, q.processed

    took, processed = asyncio.run(scenario())
    assert processed == 1 and took < 2.5, took  # 0.2 s and a little


def test_a_key_is_scheduled_once_per_reason():
    """A permission recheck asked on every reconcile is one timer, and a retry's timer is another: neither replaces
    nor swallows the other."""
    async def scenario() -> list[str]:
        q: WorkQueue[str] = WorkQueue(base_delay=0.01)
        seen: list[str] = []

        async def process(key: str) -> None:
            seen.append(key)

        worker = asyncio.create_task(q.run_worker(process))
        for _ in range(3):
            q.add_once_after("k", 0.05, "permissions")
        q.add_once_after("k", 0.2, "retry")
        await asyncio.sleep(0.1)
        first = list(seen)
        await asyncio.sleep(0.2)
        worker.cancel()
        assert first == ["k"]
        return seen

    assert asyncio.run(scenario()) == ["k", "k"]

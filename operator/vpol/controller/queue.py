"""A level-based work queue: keys to reconcile, deduplicated, retried with backoff.

Kopf's event handlers only put the key of the affected policy here; worker
tasks take keys out and reconcile whatever the cluster holds at that
moment. A key is never processed by two workers at once, a key added while
it is being processed is processed again afterwards, and a failed key
comes back after an exponential backoff (capped). A key can also be
scheduled for later once per reason (a retry, a permission recheck): asked
again before it fires, the schedule stays as it is.

The queue lives on one event loop (its asyncio.Queue and sets are not thread-safe); a key added
from another thread (the enforcement prover's, or Kopf's executor, where synchronous handlers
run) is handed to that loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from vpol.kube.errors import describe

logger = logging.getLogger(__name__)

#: A key: any hashable value (the operator's are vpol.controller.queue_keys.PolicyKey).
K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, *, base_delay: float = 0.5, max_delay: float = 60.0):
        self._ready: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._active: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        #: Adds scheduled for later, one per key and reason (add_once_after).
        self._timers: dict[tuple[K, str], asyncio.TimerHandle] = {}
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.processed = 0
        #: The loop the queue belongs to, and its thread: the one it is made on, else its first worker's.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        try:
            self._bind(asyncio.get_running_loop())
        except RuntimeError:
            pass

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop, self._thread = loop, threading.get_ident()

    def add(self, key: K) -> None:
        """Queue ``key`` (from any thread)."""
        if self._loop is not None and threading.get_ident() != self._thread:
            # Done on the loop: from here, the check-then-add below could race a worker finishing the key (and
            # leave it dirty, never processed again), and waking a waiting worker would not wake the loop.
            self._loop.call_soon_threadsafe(self.add, key)
            return
        if key in self._active:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._ready.put_nowait(key)

    def add_once_after(self, key: K, delay: float, reason: str) -> None:
        """Queue ``key`` in ``delay`` seconds for ``reason`` (on the queue's loop), unless that is scheduled
        already: one timer per key and reason, however often asked meanwhile."""
        slot = (key, reason)
        if slot in self._timers:
            return
        self._timers[slot] = asyncio.get_running_loop().call_later(delay, self._fire, slot)

    def _fire(self, slot: tuple[K, str]) -> None:
        self._timers.pop(slot, None)
        self.add(slot[0])

    def add_at_delay(self, key: K, delay: float) -> None:
        """Queue ``key`` in ``delay`` seconds (from any thread), whatever else is scheduled for it (a backoff's
        retry does not replace this one, nor this one the retry)."""
        if self._loop is not None and threading.get_ident() != self._thread:
            self._loop.call_soon_threadsafe(self.add_at_delay, key, delay)
            return
        asyncio.get_running_loop().call_later(max(0.0, delay), self.add, key)

    def backoff(self, key: K) -> float:
        n = self._failures.get(key, 0)
        return min(self.max_delay, self.base_delay * (2 ** n))

    async def run_worker(self, process: Callable[[K], Awaitable[None]]) -> None:
        if self._loop is None:
            self._bind(asyncio.get_running_loop())
        while True:
            key = await self._ready.get()
            self._queued.discard(key)
            self._active.add(key)
            started = time.monotonic()
            try:
                await process(key)
                self._failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - one bad key never stops the worker
                delay = self.backoff(key)
                self._failures[key] = self._failures.get(key, 0) + 1
                logger.warning("reconciling %s failed (%s); retrying in %.1fs", key, describe(exc), delay)
                self.add_once_after(key, delay, "retry")
            finally:
                self._active.discard(key)
                self.processed += 1
                logger.debug("reconciled %s in %.3fs", key, time.monotonic() - started)
            if key in self._dirty:
                self._dirty.discard(key)
                self.add(key)

    def idle(self) -> bool:
        return not self._queued and not self._active and not self._timers

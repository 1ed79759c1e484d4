"""A bounded, thread-safe memo for answers computed from a policy's spec (compile verdicts, type warnings).

functools.lru_cache would key on the arguments as given: the whole policy object (its metadata,
resourceVersion and status included), and hold it. These callers key on what the answer depends on.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class BoundedMemo(Generic[V]):
    """At most ``size`` answers by key; the least recently used goes first.

    A key is computed once even when several threads ask for it at the same moment (a policy applied reaches
    the webhook's policy store, the scanner and the reconciler together, each asking for its verdict): the
    first computes, the others wait for its answer. A waiter computes itself when the first failed or took
    longer than ``wait`` seconds (never blocked for good, whatever ``compute`` does)."""

    def __init__(self, size: int, *, wait: float = 30.0):
        self.size = size
        self.wait = wait
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        #: Keys being computed: by which thread, and the event set when it is done.
        self._computing: dict[Hashable, tuple[int, threading.Event]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The answer kept for ``key``, else ``compute()``'s, kept (computed outside the lock)."""
        me = threading.get_ident()
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            running = self._computing.get(key)
            if running is None:
                done = threading.Event()
                self._computing[key] = (me, done)
        if running is None:
            try:
                return self._compute_and_keep(key, compute)
            finally:
                with self._lock:
                    self._computing.pop(key, None)
                done.set()
        if running[0] != me:  # (the same thread asking again, from within compute(), computes it here)
            running[1].wait(self.wait)
            with self._lock:
                if key in self._values:
                    self._values.move_to_end(key)
                    return self._values[key]
        return self._compute_and_keep(key, compute)

    def _compute_and_keep(self, key: Hashable, compute: Callable[[], V]) -> V:
        value = compute()
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value

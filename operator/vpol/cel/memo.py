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
    """At most ``size`` answers by key; the least recently used goes first."""

    def __init__(self, size: int):
        self.size = size
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The answer kept for ``key``, else ``compute()``'s, kept (computed outside the lock: two threads may
        both compute a new key; either answer is the same)."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = compute()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value

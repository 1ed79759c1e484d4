"""A token bucket: at most ``rate`` takes per second on average, bursts up to ``rate`` (thread-safe).

The operator's writes to objects it does not own (mutated targets, generated downstreams, deletions) go through one
each, so a policy matching thousands of objects cannot flood the API server. Hand-written: it is ten lines, and the
libraries offering one are asyncio-based or bring a scheduler of their own."""

from __future__ import annotations

import threading
import time


class TokenBucket:
    def __init__(self, rate: float):
        self.rate = rate
        self._tokens = rate
        self._refilled = time.monotonic()
        self._lock = threading.Lock()

    def take(self) -> None:
        """Wait until a token is there, and take it."""
        with self._lock:
            while True:
                now = time.monotonic()
                self._tokens = min(self.rate, self._tokens + (now - self._refilled) * self.rate)
                self._refilled = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                time.sleep((1 - self._tokens) / self.rate)

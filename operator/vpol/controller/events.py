"""Sending PolicyViolation Events (vpol.desired.events), bounded so that no scan can flood the API server.

- **Deduplicated**: an event saying what an event sent in the last ``dedup_seconds`` said (the same policy,
  resource and message: a client retrying a denied request, a rescan finding the same failure) is not sent
  again. The scanner only reports results that changed, which already keeps most repeats away.
- **Rate-limited**: a token bucket (``per_second``, ``burst``) in front of the API; what does not fit in the
  bounded queue (``queue_size``) is dropped and counted (``vpol_events_total{outcome="dropped"}``): a scan of
  10,000 failing Pods sends at most the queue plus the rate, never 20,000 events at once.
- Sent by one thread; a failed create is logged and counted, never retried in a loop.

``--events=off`` turns all of this off (no recorder).
"""

from __future__ import annotations

import collections
import datetime
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable

from vpol.controller import metrics
from vpol.desired.events import EventSpec, dedup_key, event_object
from vpol.kube.errors import describe

logger = logging.getLogger(__name__)


class EventRecorder(threading.Thread):
    def __init__(self, create: Callable[[str, dict], object], *, per_second: float = 5.0, burst: int = 50,
                 queue_size: int = 1000, dedup_seconds: float = 3600.0, dedup_size: int = 20000,
                 instance: str = ""):
        super().__init__(daemon=True, name="vpol-events")
        #: create(namespace, body): the API call (vpol.kube.objects.Objects.create_event).
        self.create = create
        self.per_second = per_second
        self.burst = burst
        self.dedup_seconds = dedup_seconds
        self.dedup_size = dedup_size
        self.instance = instance or socket.gethostname()
        self._queue: queue.Queue[EventSpec] = queue.Queue(maxsize=queue_size)
        self._seen: collections.OrderedDict[tuple[str, ...], float] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._tokens = float(burst)
        self._refilled = time.monotonic()
        self.sent = 0

    def record(self, events: Iterable[EventSpec]) -> None:
        """Queue events (from any thread; never blocks)."""
        now = time.monotonic()
        for spec in events:
            key = dedup_key(spec)
            with self._lock:
                at = self._seen.get(key)
                if at is not None and now - at < self.dedup_seconds:
                    metrics.EVENTS.labels("deduplicated").inc()
                    continue
                self._seen[key] = now
                self._seen.move_to_end(key)
                while len(self._seen) > self.dedup_size:
                    self._seen.popitem(last=False)
            try:
                self._queue.put_nowait(spec)
            except queue.Full:
                metrics.EVENTS.labels("dropped").inc()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                spec = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            self._take_token()
            self._send(spec)

    def _take_token(self) -> None:
        while True:
            now = time.monotonic()
            self._tokens = min(float(self.burst), self._tokens + (now - self._refilled) * self.per_second)
            self._refilled = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return
            self._stop_event.wait((1.0 - self._tokens) / self.per_second)
            if self._stop_event.is_set():
                return

    def _send(self, spec: EventSpec) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        body = event_object(spec, instance=self.instance, nanos=time.time_ns(),
                            event_time=now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
        try:
            self.create(body["metadata"]["namespace"], body)
        except Exception as exc:  # noqa: BLE001 - an event is best effort
            metrics.EVENTS.labels("failed").inc()
            logger.debug("sending event %s failed: %s", body["metadata"]["name"], describe(exc))
            return
        self.sent += 1
        metrics.EVENTS.labels("sent").inc()

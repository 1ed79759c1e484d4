"""The background scans' inbox: what happened (objects, policies, exceptions, kinds), handled in batches.

Policy changes are gathered until none arrived for SETTLE_QUIET seconds (at most SETTLE_MAX), so policies applied
together are evaluated in one pass and each report is written once. They come from the scanner's own watch of the
policies (vpol.controller.scan_watches), so a burst arrives as fast as it is applied, however long each policy's
reconcile takes.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: After a policy change, gather further policy changes until none arrives for SETTLE_QUIET seconds (for at most
#: SETTLE_MAX seconds), then rescan once for all of them.
SETTLE_QUIET = 1.0
SETTLE_MAX = 30.0

Event = tuple[Any, ...]
#: The events that start a gathering: a ValidatingPolicy changed, the exceptions changed.
_SETTLING = ("policy", "exceptions")


@dataclass
class Batch:
    """A batch of events sorted by what they ask for."""

    #: Objects changed, the last event of each by uid: (event type, object).
    objects: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    #: Every object event in order (the triggers of mutateExisting and generation).
    triggers: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Keys of the policies changed, by path.
    policies: set[str] = field(default_factory=set)
    mutating: set[str] = field(default_factory=set)
    generating: set[str] = field(default_factory=set)
    images: set[str] = field(default_factory=set)
    #: GeneratingPolicies deleted (their downstreams go as they say).
    removed: list[Any] = field(default_factory=list)
    exceptions: bool = False
    kinds: bool = False
    stop: bool = False

    @classmethod
    def of(cls, events: list[Event]) -> "Batch":
        batch = cls()
        for event in events:
            what = event[0]
            if what == "object":
                _, etype, obj = event
                uid = (obj.get("metadata") or {}).get("uid", "")
                if uid:
                    batch.objects[uid] = (etype, obj)
                batch.triggers.append((etype, obj))
            elif what == "policy":
                batch.policies.add(event[1])
            elif what == "mutating":
                batch.mutating.add(event[1])
            elif what == "images":
                batch.images.add(event[1])
            elif what == "generating":
                batch.generating.update(event[1:])
            elif what == "generating-removed":
                batch.removed.append(event[1])
            elif what == "exceptions":
                batch.exceptions = True
            elif what == "kinds":
                batch.kinds = True
            elif what == "stop":
                batch.stop = True
                break
        return batch

    def policies_changed(self) -> bool:
        return bool(self.policies or self.mutating or self.generating or self.removed or self.images
                    or self.exceptions)


class ScanEvents:
    """A queue of events (tuples whose first item names what happened); thread-safe to put."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Event] = queue.Queue()

    def put(self, event: Event) -> None:
        self._queue.put(event)

    def get(self, timeout: float) -> Event | None:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def empty(self) -> bool:
        return self._queue.empty()

    def batch(self, first: Event, size: int) -> list[Event]:
        """``first`` and what is queued behind it, up to ``size`` events (without waiting)."""
        out = [first]
        while len(out) < size:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return out

    def queued(self) -> list[Event]:
        """Every event queued now (without waiting)."""
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def gather(self, batch: list[Event], *, last_change: Callable[[], float], on_arrival: Callable[[], None],
               always: bool = False) -> list[Event]:
        """When policies change (or ``always``), wait for the rest of the burst, so it costs one pass (and one
        write per resource): until no policy has changed for SETTLE_QUIET seconds (``last_change()``, a
        time.monotonic()), at most SETTLE_MAX. Events arriving meanwhile join the batch, also those that queued up
        while ``on_arrival`` ran (the evaluation worker starting or compiling: they arrived before the quiet)."""
        if not always and not any(e[0] in _SETTLING for e in batch):
            return batch
        started = time.monotonic()
        arrived = True
        while True:
            if arrived:
                # The evaluation worker starts (or compiles the policies changed so far) while the rest arrives:
                # the pass that follows finds them compiled.
                on_arrival()
            arrived = False
            for event in self.queued():
                batch.append(event)
                if event[0] == "stop":
                    return batch
                arrived = arrived or event[0] in _SETTLING
            if time.monotonic() >= started + SETTLE_MAX:
                return batch
            if arrived:
                continue
            left = min(last_change() + SETTLE_QUIET, started + SETTLE_MAX) - time.monotonic()
            if left <= 0:
                return batch
            late = self.get(left)
            if late is None:
                continue
            batch.append(late)
            if late[0] == "stop":
                return batch
            arrived = late[0] in _SETTLING

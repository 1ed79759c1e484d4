"""GlobalContextEntry data on its way to the processes that evaluate policies.

The operator keeps each entry's data in one :class:`GlobalContextStore` (filled by
vpol.controller.global_context). Policies are evaluated in worker processes (vpol.policies.sandbox): each
keeps a :class:`vpol.cel.global_context.GlobalContextView` and is sent, before the next request it gets, what
changed since the version it has (:meth:`GlobalContextStore.changes_since`), never the whole data again:

* a watched object that changed travels alone (an upsert or a removal), so a busy resource costs one object
  per change and worker, and nothing when no request comes;
* a worker that starts, or lags behind what the store still remembers of removals, gets every entry whole;
* nothing at all is sent while nothing changed (one integer compared per request).

Inside the worker, :class:`GlobalContextBackend` answers ``globalContext.Get`` from the view and passes every
other I/O library call to the backend it wraps. What evaluates in the operator's own process (generation,
deletion, the image webhooks and image scans) reads the store through a :class:`SyncedView`, which applies the
same changes before a read.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from vpol.cel.backend import Backend, Delegating
from vpol.cel.compat import tokenize
from vpol.cel.compat.syntax import names
from vpol.cel.global_context import EntryChange, EntryState, GlobalContextView, object_key

#: Removals remembered per entry; a worker further behind gets the entry whole.
MAX_TOMBSTONES = 10_000




def reads_global_context(policies: Iterable[Any]) -> bool:
    """Whether any of these policies (anything with ``expressions()``) may read ``globalContext``: workers of
    policies that never do are sent none of the data."""
    return any(names(tokenize(src), "globalContext") for p in policies for _path, src, _role in p.expressions())


class GlobalContextSource(Protocol):
    """What a sandboxed evaluator needs from the store."""

    @property
    def version(self) -> int: ...

    def changes_since(self, version: int) -> tuple[int, dict[str, EntryChange]]: ...


class _Entry:
    __slots__ = ("state", "state_version", "reset_version", "objects", "removed", "horizon")

    def __init__(self, state: EntryState, version: int) -> None:
        self.state = state
        self.state_version = version
        #: A consumer older than this gets every object again.
        self.reset_version = version
        #: key -> (object, version of its last change)
        self.objects: dict[str, tuple[Any, int]] = {}
        #: key -> version of its removal
        self.removed: dict[str, int] = {}
        #: Removals up to this version were forgotten: older consumers are reset.
        self.horizon = version


class GlobalContextStore:
    """Every entry's current state and objects, versioned; safe to use from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = 0
        self._entries: dict[str, _Entry] = {}
        #: name -> version at which the entry was dropped
        self._gone: dict[str, int] = {}

    @property
    def version(self) -> int:
        return self._version

    def _bump(self) -> int:
        self._version += 1
        return self._version

    # -- writers (the controller) ----------------------------------------------------------------------------

    def set_state(self, state: EntryState) -> None:
        """Create the entry, or change its state (its objects stay)."""
        with self._lock:
            v = self._bump()
            entry = self._entries.get(state.name)
            if entry is None or entry.state.kind != state.kind:
                self._entries[state.name] = _Entry(state, v)
                self._gone.pop(state.name, None)
                return
            entry.state = state
            entry.state_version = v

    def state(self, name: str) -> EntryState | None:
        with self._lock:
            entry = self._entries.get(name)
            return entry.state if entry else None

    def replace_objects(self, name: str, objects: Mapping[str, Any]) -> None:
        """Every object of a resource entry at once (a list, or a relist)."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                return
            v = self._bump()
            entry.objects = {key: (obj, v) for key, obj in objects.items()}
            entry.removed.clear()
            entry.reset_version = entry.horizon = v

    def upsert(self, name: str, obj: Mapping[str, Any]) -> None:
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                return
            key = object_key(obj)
            entry.objects[key] = (obj, self._bump())
            entry.removed.pop(key, None)

    def remove(self, name: str, key: str) -> None:
        with self._lock:
            entry = self._entries.get(name)
            if entry is None or key not in entry.objects:
                return
            del entry.objects[key]
            entry.removed[key] = self._bump()
            if len(entry.removed) > MAX_TOMBSTONES:
                oldest = min(entry.removed, key=entry.removed.__getitem__)
                entry.horizon = max(entry.horizon, entry.removed.pop(oldest))

    def clear_objects(self, name: str) -> None:
        """Drop a resource entry's objects (it failed: nothing of it is served, nothing held)."""
        self.replace_objects(name, {})

    def drop(self, name: str) -> None:
        with self._lock:
            if self._entries.pop(name, None) is not None:
                self._gone[name] = self._bump()

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._entries)

    def object_count(self, name: str) -> int:
        with self._lock:
            entry = self._entries.get(name)
            return len(entry.objects) if entry else 0

    # -- readers (the evaluators) ----------------------------------------------------------------------------

    def changes_since(self, version: int) -> tuple[int, dict[str, EntryChange]]:
        """(the current version, what changed after ``version``); ``version`` -1: everything."""
        with self._lock:
            out: dict[str, EntryChange] = {}
            for name, gone in self._gone.items():
                if gone > version:
                    out[name] = EntryChange(None)
            for name, entry in self._entries.items():
                if version < entry.reset_version or version < entry.horizon:
                    out[name] = EntryChange(entry.state, reset=True,
                                            objects={k: obj for k, (obj, _v) in entry.objects.items()})
                    continue
                objects = {k: obj for k, (obj, v) in entry.objects.items() if v > version}
                removed = tuple(k for k, v in entry.removed.items() if v > version)
                if objects or removed or entry.state_version > version:
                    out[name] = EntryChange(entry.state, objects=objects, removed=removed)
            return self._version, out

    def view(self) -> GlobalContextView:
        """A view of everything now (for evaluation in this process)."""
        view = GlobalContextView()
        view.apply(self.changes_since(-1)[1])
        return view


class SyncedView:
    """A :class:`GlobalContextView` of a source in this process, brought up to date before each read (one integer
    compared while nothing changed); thread-safe."""

    def __init__(self, source: GlobalContextSource) -> None:
        self.source = source
        self._view = GlobalContextView()
        self._version = -1
        self._lock = threading.Lock()

    def get_checked(self, name: str, projection: str) -> Any:
        with self._lock:
            if self.source.version != self._version:
                self._version, changes = self.source.changes_since(self._version)
                self._view.apply(changes)
            return self._view.get_checked(name, projection)


class GlobalContextBackend(Delegating):
    """A backend answering ``globalContext.Get`` from a view and everything else from ``inner``."""

    def __init__(self, inner: Backend, view: GlobalContextView | SyncedView) -> None:
        super().__init__(inner)
        self.view = view

    def global_context(self, name: str, projection: str) -> Any:
        return self.view.get_checked(name, projection)

"""GlobalContextEntries: each entry's data loaded, kept current and served to the policies that read it.

Every replica runs this controller (every replica evaluates admission requests, so every replica needs the
data, as each Kyverno replica keeps its own cache); only the replica holding the leader Lease writes the
entries' status. It watches the GlobalContextEntry objects and runs one loader per entry:

* a **kubernetesResource** entry lists, then watches, its resource (in one namespace, or all) and keeps every
  object in the :class:`vpol.engine.global_context.GlobalContextStore`, object by object, like an informer;
  a broken watch relists, and objects that vanished meanwhile are dropped;
* an **apiCall** entry calls its API (vpol.kube.global_context) at once, then every refreshInterval, each
  time trying up to retryLimit times (10 ms apart, as Kyverno's client-go backoff does); an answer replaces
  the data and its projections, a failure makes the entry answer that failure (Kyverno serves the last
  error, not stale data).

**Bounded.** A kubernetesResource entry holding more than ``max_objects`` objects, or more than
``max_bytes`` of them (counted as compact JSON), stops: its objects are dropped, its status and every
``globalContext.Get`` of it say which limit was crossed, and loading is tried again after ``retry_after``
seconds. An API call's answer larger than ``max_bytes`` fails the call with Kyverno's message (its
``maxAPICallResponseLength``). Every evaluation worker holds a copy of the data, so these limits, times the
worker count, must fit the workers' memory limit.

**Status** (vpol.desired.global_context): ``Ready`` True once the data is loaded, False with the reason when
it cannot be, and ``lastRefreshTime``; written only when it would change. An entry that does not validate
(Kyverno's rules, vpol.model.global_context) is Ready=False with the problems, and serves that error.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from vpol.cel.global_context import (
    API_CALL,
    FAILED,
    LOADING,
    READY,
    RESOURCE,
    EntryState,
    api_call_state,
    object_key,
)
from vpol.cel.go_jmespath import go_json
from vpol.cel.libraries.kubernetes.goquote import go_quote
from vpol.desired.global_context import entry_status, status_changed
from vpol.engine.global_context import GlobalContextStore
from vpol.kube.dynamic import StopWatching, Watcher
from vpol.kube.errors import describe
from vpol.kube.global_context import CallFailed, call, patch_status, served
from vpol.model.global_context import (
    GROUP,
    KIND,
    PLURAL,
    READ_VERSION,
    GlobalContextEntry,
    parse_global_context_entry,
)

logger = logging.getLogger(__name__)

#: Seconds between attempts of one refresh of an API call (client-go's DefaultBackoff: 10 ms, factor 1).
RETRY_DELAY = 0.01
#: How often the status writer looks again even when told nothing (a lost leadership, a missed echo).
STATUS_PERIOD = 10.0


@dataclass(frozen=True)
class GlobalContextOptions:
    #: Most objects one kubernetesResource entry may hold (--global-context-max-objects).
    max_objects: int = 10_000
    #: Most bytes one entry may hold: its objects as compact JSON, or an API call's answer
    #: (--global-context-max-bytes; Kyverno's maxAPICallResponseLength default).
    max_bytes: int = 10_000_000
    #: Timeout of one API call (Kyverno's apiCallTimeout default).
    call_timeout: float = 30.0
    #: Seconds before an entry that crossed a limit is loaded again.
    retry_after: float = 60.0


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def go_duration(seconds: float) -> str:
    """``seconds`` as Go's ``time.Duration.String`` writes it (``10m0s``, ``1h30m0s``, ``1.5s``, ``300ms``)."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:g}ms" if ms >= 1 else f"{seconds * 1e6:g}µs"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{secs:.9f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{text}"
    if minutes:
        return f"{int(minutes)}m{text}"
    return text


class _Loader:
    """Loads one entry into the store; says how it went (``ready``, ``message``, ``last_refresh``)."""

    def __init__(self, entry: GlobalContextEntry, api: Any, store: GlobalContextStore,
                 options: GlobalContextOptions, changed: Callable[[str], None]) -> None:
        self.entry = entry
        #: The API client (None for an entry that calls nothing).
        self.api: client.ApiClient = api
        self.store = store
        self.options = options
        self.projections = tuple((p.name, p.jmes_path) for p in entry.projections)
        self.changed = changed
        self.ready: bool | None = None  # None: still loading
        self.message = ""
        self.last_refresh = ""
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        with self._lock:
            self._stopped = True

    def _outcome(self, ready: bool, message: str, refreshed: bool = False) -> None:
        self.ready, self.message = ready, message
        if refreshed:
            self.last_refresh = _now()
        self.changed(self.entry.name)


class _InvalidEntry(_Loader):
    """An entry that does not validate: it serves its problems as an error."""

    def __init__(self, name: str, problems: str, store: GlobalContextStore, changed: Callable[[str], None]) -> None:
        super().__init__(GlobalContextEntry(name=name), None, store, GlobalContextOptions(), changed)
        self.problems = problems

    def start(self) -> None:
        message = f"invalid GlobalContextEntry: {self.problems}"
        self.store.set_state(EntryState(self.entry.name, RESOURCE, FAILED, error=message))
        self.store.clear_objects(self.entry.name)
        self._outcome(False, message)


class _ResourceLoader(_Loader):
    def __init__(self, entry: GlobalContextEntry, api: client.ApiClient, store: GlobalContextStore,
                 options: GlobalContextOptions, changed: Callable[[str], None]) -> None:
        super().__init__(entry, api, store, options, changed)
        assert entry.resource is not None
        self.source = entry.resource
        self._watcher: Watcher | None = None
        self._retry: threading.Timer | None = None
        self._sizes: dict[str, int] = {}
        self._bytes = 0
        self._seen: set[str] | None = None
        self._synced = False

    def _state(self, status: str, error: str = "") -> EntryState:
        return EntryState(self.entry.name, RESOURCE, status, error=error, projections=self.projections)

    def prepare(self) -> None:
        """The entry in the store, loading, holding nothing yet (what the watch's events then fill)."""
        self.store.set_state(self._state(LOADING, f"listing {self.source.describe()}"))
        self.store.clear_objects(self.entry.name)
        self._sizes, self._bytes, self._synced = {}, 0, False

    def start(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self.prepare()
            s = self.source
            self._watcher = Watcher(self.api, s.group, s.version, s.resource, self._on_event, timeout=60,
                                    namespace=s.namespace, on_list=self._on_list, on_error=self._on_error)
            self._watcher.name = f"gctx-{self.entry.name}"
            self._watcher.start()

    def stop(self) -> None:
        super().stop()
        if self._watcher is not None:
            self._watcher.stop()
        if self._retry is not None:
            self._retry.cancel()

    def _on_list(self) -> None:
        with self._lock:
            self._seen = set()

    def _on_event(self, etype: str, obj: dict[str, Any]) -> None:
        with self._lock:
            if self._stopped:
                raise StopWatching()
            name = self.entry.name
            if etype == "SYNCED":
                for key in set(self._sizes) - (self._seen or set()):
                    self._forget(key)
                self._seen = None
                self._synced = True
                self.store.set_state(self._state(READY))
            elif etype == "DELETED":
                self._forget(object_key(obj))
                return
            else:
                key = object_key(obj)
                if self._seen is not None:
                    self._seen.add(key)
                size = len(json.dumps(obj, separators=(",", ":")))
                self._bytes += size - self._sizes.get(key, 0)
                self._sizes[key] = size
                too_many = len(self._sizes) > self.options.max_objects
                if too_many or self._bytes > self.options.max_bytes:
                    self._over_limit(too_many)
                    raise StopWatching()
                self.store.upsert(name, obj)
                return
        self._outcome(True, f"every object of {self.source.describe()}, kept current by a watch", refreshed=True)

    def _forget(self, key: str) -> None:
        self._bytes -= self._sizes.pop(key, 0)
        self.store.remove(self.entry.name, key)

    def _over_limit(self, too_many: bool) -> None:
        if too_many:
            reason = (f"more than {self.options.max_objects} objects (the limit of --global-context-max-objects)")
        else:
            reason = (f"more than {self.options.max_bytes} bytes of objects as JSON (the limit of "
                      "--global-context-max-bytes)")
        message = (f"global context entry {go_quote(self.entry.name)} would hold {reason} of "
                   f"{self.source.describe()}; nothing of it is served: narrow it (a namespace, an apiCall with a "
                   f"label selector) or raise the limit; loading again in {self.options.retry_after:g}s")
        self.store.set_state(self._state(FAILED, message))
        self.store.clear_objects(self.entry.name)
        self._sizes, self._bytes, self._seen = {}, 0, None
        self._retry = threading.Timer(self.options.retry_after, self._restart)
        self._retry.daemon = True
        self._retry.start()
        self._outcome(False, message)

    def _restart(self) -> None:
        if not self._stopped:
            self.start()

    def _on_error(self, exc: BaseException) -> None:
        status = getattr(exc, "status", None)
        exists = None
        if status in (403, 404):
            s = self.source
            exists = served(self.api, s.group, s.version, s.resource)
        with self._lock:
            if self._stopped:
                raise StopWatching()
            if self._synced and status not in (401, 403, 404):
                return  # a broken watch: it relists; meanwhile the objects held are served, as an informer's
            verb = "watching" if self._synced else "listing"
            hint = ""
            if exists is False or status == 404:
                hint = " (the API server does not serve this resource)"
            elif status in (401, 403):
                hint = (" (grant the operator's ServiceAccount get, list and watch on it, see "
                        "docs/global-context.md)")
            message = (f"failed to load global context entry {go_quote(self.entry.name)}: {verb} "
                       f"{self.source.describe()}: {describe(exc)}{hint}")
            self.store.set_state(self._state(FAILED, message))
            self.store.clear_objects(self.entry.name)
            self._sizes, self._bytes, self._synced = {}, 0, False
        self._outcome(False, message)


class _ApiCallLoader(_Loader):
    def __init__(self, entry: GlobalContextEntry, api: client.ApiClient, store: GlobalContextStore,
                 options: GlobalContextOptions, changed: Callable[[str], None]) -> None:
        super().__init__(entry, api, store, options, changed)
        assert entry.api_call is not None
        self.spec = entry.api_call
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"gctx-{entry.name}")

    def start(self) -> None:
        self.store.set_state(EntryState(self.entry.name, API_CALL, LOADING, error=f"calling {self.spec.describe()}"))
        self._thread.start()

    def stop(self) -> None:
        super().stop()
        self._wake.set()

    def _run(self) -> None:
        while not self._stopped:
            state, ok = self._refresh()
            with self._lock:
                if self._stopped:
                    return
                self.store.set_state(state)
            every = go_duration(self.spec.refresh_seconds)
            self._outcome(ok, f"the answer of {self.spec.describe()}, refreshed every {every}" if ok else
                          f"{state.error} (called again every {every})", refreshed=ok)
            self._wake.wait(self.spec.refresh_seconds)

    def _refresh(self) -> tuple[EntryState, bool]:
        name = self.entry.name
        error = ""
        for attempt in range(max(1, self.spec.retry_limit)):
            if self._stopped:
                break
            if attempt:
                time.sleep(RETRY_DELAY)
            try:
                raw = call(self.api, name, self.spec, max_bytes=self.options.max_bytes,
                           timeout=self.options.call_timeout)
            except CallFailed as exc:
                error = str(exc)
                continue
            try:
                data = go_json(json.loads(raw))  # as Go decodes JSON: every number a float64
            except ValueError as exc:
                return EntryState(name, API_CALL, FAILED, error=f"invalid JSON in the answer: {exc}"), False
            state = api_call_state(name, data, self.projections)
            return state, state.status == READY
        logger.warning("global context entry %s: %s", name, error)
        return EntryState(name, API_CALL, FAILED, error=error), False


class GlobalContextController:
    """Watches GlobalContextEntries and runs their loaders; writes their status when leading."""

    def __init__(self, api: client.ApiClient, store: GlobalContextStore, *,
                 options: GlobalContextOptions = GlobalContextOptions(), leading: threading.Event | None = None):
        self.api = api
        self.store = store
        self.options = options
        self.leading = leading
        self._lock = threading.Lock()
        #: name -> (what the loader was made from, the loader)
        self._loaders: dict[str, tuple[Any, _Loader]] = {}
        #: name -> (generation, status) as last seen on the object (or written)
        self._observed: dict[str, tuple[int, Mapping[str, Any]]] = {}
        self._listing: set[str] | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.watcher = Watcher(api, GROUP, READ_VERSION, PLURAL, self._on_event, kind=KIND, on_list=self._on_list)
        self._writer = threading.Thread(target=self._write_statuses, daemon=True, name="gctx-status")

    def start(self) -> None:
        self.watcher.start()
        self._writer.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.watcher.stop()
        with self._lock:
            loaders = [loader for _key, loader in self._loaders.values()]
        for loader in loaders:
            loader.stop()

    def join(self, timeout: float | None = None) -> None:
        self._writer.join(timeout)

    # -- entries ----------------------------------------------------------------------------------------------

    def _on_list(self) -> None:
        self._listing = set()

    def _on_event(self, etype: str, obj: dict[str, Any]) -> None:
        if etype == "SYNCED":
            seen, self._listing = self._listing or set(), None
            with self._lock:
                gone = [name for name in self._loaders if name not in seen]
            for name in gone:
                self._remove(name)
            return
        md = obj.get("metadata") or {}
        name = str(md.get("name") or "")
        if not name:
            return
        if etype == "DELETED":
            self._remove(name)
            return
        if self._listing is not None:
            self._listing.add(name)
        entry, problems = parse_global_context_entry(obj)
        errors = [p for p in problems if p.severity == "error"]
        key: Any = ("invalid", tuple(f"{p.path}: {p.message}" for p in errors)) if entry is None else \
            (entry.resource, entry.api_call, entry.projections, entry.uid)
        with self._lock:
            self._observed[name] = (int(md.get("generation") or 0), obj.get("status") or {})
            current = self._loaders.get(name)
            if current is not None and current[0] == key:
                return
        if entry is None:
            loader: _Loader = _InvalidEntry(name, "; ".join(key[1]) or "it cannot be read", self.store, self._changed)
        elif entry.resource is not None:
            loader = _ResourceLoader(entry, self.api, self.store, self.options, self._changed)
        else:
            loader = _ApiCallLoader(entry, self.api, self.store, self.options, self._changed)
        with self._lock:
            old = self._loaders.get(name)
            self._loaders[name] = (key, loader)
        if old is not None:
            old[1].stop()
        logger.info("global context entry %s: loading %s", name, loader.entry.source if entry else "(invalid)")
        loader.start()

    def _remove(self, name: str) -> None:
        with self._lock:
            old = self._loaders.pop(name, None)
            self._observed.pop(name, None)
        if old is not None:
            old[1].stop()
        self.store.drop(name)

    def _changed(self, _name: str) -> None:
        self._wake.set()

    def loader(self, name: str) -> _Loader | None:
        with self._lock:
            found = self._loaders.get(name)
        return found[1] if found else None

    # -- status -----------------------------------------------------------------------------------------------

    def _write_statuses(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(STATUS_PERIOD)
            self._wake.clear()
            if self._stop.is_set():
                return
            if self.leading is not None and not self.leading.is_set():
                continue
            with self._lock:
                todo = [(name, loader, self._observed.get(name)) for name, (_k, loader) in self._loaders.items()]
            for name, loader, observed in todo:
                if loader.ready is None or observed is None:
                    continue  # still loading: nothing to say yet
                generation, previous = observed
                desired = entry_status(ready=loader.ready, message=loader.message, generation=generation,
                                       last_refresh=loader.last_refresh, previous=previous)
                if not status_changed(previous, desired):
                    continue
                try:
                    patch_status(self.api, name, desired)
                except Exception as exc:  # noqa: BLE001 - written again on the next change or period
                    logger.warning("global context entry %s: writing its status failed: %s", name, describe(exc))
                    continue
                with self._lock:
                    if name in self._observed:
                        self._observed[name] = (generation, desired)

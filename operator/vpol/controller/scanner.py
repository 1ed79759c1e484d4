"""Background scans: evaluate existing resources, keep one PolicyReport per resource up to date.

How it runs (../shared/NOTES.md sections 3 and 5):
- only while this replica holds the scanner Lease;
- one watcher per resource type that some background policy (or its
  autogen variant) matches, plus a namespace watcher for ``namespaceObject``;
  the first list of each watcher is the initial scan, every later event
  re-evaluates that one resource within seconds;
- a changed policy re-evaluates only that policy (a paged re-list of the
  kinds it matches); a deleted or invalid policy's results are removed;
- policy changes come from the scanner's own watch of the policies
  (``scanned_policy``, before their reconcile runs) and are gathered until none arrived for a
  second, so policies applied together are evaluated in one pass and each
  report is written once; a pass evaluates with the policies it started with;
- a full rescan every ``scan_interval`` catches anything missed;
- evaluation is a synthetic CREATE without userInfo or oldObject, in the
  bounded worker process (``vpol.engine.sandbox``), so an expression that
  errors or runs away gives that resource an ``error`` result and the scan
  goes on; false matchConditions leave no result;
- reports are written only when a result changed; on start the existing
  reports are read back, so a restart rewrites nothing that is unchanged.

Objects are never cached: memory holds the compact results per resource.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import queue
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from vpol.desired.report import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    EntryPool,
    PolicyMeta,
    ReportEntry,
    Results,
    SCAN_KEY_ANNOTATION,
    SOURCE,
    ResourceRef,
    by_policy,
    entries_from_report,
    merge,
    now_seconds,
    report_for,
    report_name,
    reported_meta,
)
from vpol.cel.compiler import compile_verdict
from vpol.controller import metrics
from vpol.controller.background_mutation import BackgroundMutation
from vpol.controller.deletion import Deletion
from vpol.controller.generation import Generation
from vpol.controller.image_scans import ImageScans
from vpol.controller.registry_credentials import RegistryClients
from vpol.controller.queue_keys import GENERATING
from vpol.desired.events import SOURCE_SCAN, ObjectRef, Violation, violating, violation_events
from vpol.kube.errors import describe
from vpol.engine.evaluate import SKIP, CompiledException, Result, compile_exception
from vpol.engine.request import ResourceType
from vpol.engine.global_context import GlobalContextSource, reads_global_context
from vpol.engine.sandbox import Limits, SandboxedEvaluator
from vpol.engine.scope import matched_resources
from vpol.engine.subjects import subject_for
from vpol.kube.dynamic import Watcher, list_pages
from vpol.kube.live_backend import LiveBackend
from vpol.kube.objects import (
    GROUP,
    NAMESPACED_POLICY_PLURAL,
    POLICY_PLURAL,
    STORAGE_VERSION,
    Objects,
    written_by_vpol_only,
)
from vpol.kube.access import AccessChecker
from vpol.kube.reports import Reports
from vpol.model.deleting import DeletingPolicy
from vpol.model.discovery import Discovery, ResourceInfo
from vpol.model.generating import GeneratingPolicy
from vpol.model.image_validating import ImageValidatingPolicy
from vpol.model.mutating import MutatingPolicy
from vpol.model.parse import parse_policy
from vpol.model.policy import PolicyException, ValidatingPolicy, active_exceptions, policy_key

logger = logging.getLogger(__name__)

GVR = tuple[str, str, str]

_IMPURE = re.compile(r"\b(resource|http|globalContext)\s*\.|GetMetadata|getMetadata|time\s*\.\s*now|random\s*\(")

#: Resources evaluated per round trip to the evaluation worker.
CHUNK = 200
#: Concurrent report writes. Where the API server shares the cores with the operator (kind on a laptop, the
#: bench's 2 cores), more writes in flight give it a larger share of them: 16 writers took the scan of 16 policies
#: applied to a running operator with 2,000 Pods to 1.51-1.65x the write floor, against 1.63-1.73x with 8 (three
#: runs each, alternately); with nothing else running, 8 and 16 create reports equally fast (the report floor).
WRITERS = 16
#: The first round trip of a pass evaluates this many; each next one twice as many, up to CHUNK. The report
#: writers start on the first chunk's results instead of waiting for a whole CHUNK (200 Pods x 16 policies took
#: 0.7 s on a busy 2-core host before the first write), and each chunk is evaluated while the one before it is
#: written (evaluating a resource costs less than writing its report), so they are not left idle after it.
FIRST_CHUNK = 2 * WRITERS
#: Report writes queued before the scan waits for them (evaluation continues while
#: earlier writes are in flight; this bounds what is held for them).
MAX_PENDING_WRITES = 2 * CHUNK
#: The policy kinds background scans evaluate: (resource, kind).
POLICY_RESOURCES = ((POLICY_PLURAL, "ValidatingPolicy"), (NAMESPACED_POLICY_PLURAL, "NamespacedValidatingPolicy"))
#: After a policy change, gather further policy changes until none arrives for
#: SETTLE_QUIET seconds (for at most SETTLE_MAX seconds), then rescan once for all of
#: them. Policy changes come from the scanner's watch of the policies (scanned_policy), so a
#: burst arrives as fast as it is applied, however long each policy's reconcile takes.
SETTLE_QUIET = 1.0
SETTLE_MAX = 30.0


@dataclass(slots=True)
class _Write:
    ref: ResourceRef
    #: The results to report (the report body is built by the writer thread, so queued
    #: writes cost a few references each); None deletes the report.
    entries: Results | None
    meta: dict[str, PolicyMeta] | None = None
    key: str = ""
    #: No report is known to exist: create it (cheaper for the API server than an apply).
    create: bool = False


@dataclass
class ScanOptions:
    scan_interval: float = 3600.0
    limits: Limits = field(default_factory=lambda: Limits(seconds_per_subject=5.0))
    #: Largest number of resource events handled in one batch.
    batch: int = 500
    #: Most writes per second of the mutation of existing objects (vpol.controller.background_mutation).
    mutation_writes_per_second: float = 50.0
    #: Most writes (and deletes) per second of generation and of scheduled deletion.
    generation_writes_per_second: float = 50.0
    deletes_per_second: float = 50.0
    #: The operator's namespace, where ImageValidatingPolicies' pull Secrets are (vpol.controller.registry_credentials).
    namespace: str = "vpol-system"


@dataclass(slots=True)
class _State:
    ref: ResourceRef
    #: Shared through the scanner's EntryPool (most resources have equal results).
    entries: Results
    written: bool
    #: What the entries were computed from (see _scan_key); "" when unknown.
    key: str = ""
    #: The report's resourceVersion as vpol last wrote it (updated at that version, see Reports.update); ""
    #: when unknown or when someone else also wrote it (then applied).
    version: str = ""


def background_scanned(policy: ValidatingPolicy | None) -> bool:
    """Whether background scans evaluate ``policy`` and report its results: background evaluation enabled and no
    ``reports.kyverno.io/disabled`` label (Kyverno's reports controller leaves such a policy out)."""
    return policy is not None and policy.spec.evaluation.background_enabled and not policy.reports_disabled


def scanned_policy(body: Mapping[str, Any]) -> ValidatingPolicy | None:
    """What background scans evaluate of a policy object: None when it is invalid, does not
    compile or is not background-scanned (:func:`background_scanned`; the reconciler's decision, made from the
    object itself, so a watch event can tell the scanner before the reconcile runs)."""
    policy, _problems = parse_policy(dict(body))
    if policy is None or not background_scanned(policy):
        return None
    return policy if compile_verdict(policy).ok else None


#: How the scanner counts a MutatingPolicy or a GeneratingPolicy seen (Scanner.expect): their results are in the
#: reports too, and a first scan without them would take those results for stale and rewrite every such report.
MUTATING_SEEN = "MutatingPolicy:"
GENERATING_SEEN = "GeneratingPolicy:"


@dataclass(frozen=True)
class StartupPolicies:
    """The policies whose results the reports hold, as listed at one moment."""

    validating: list[dict[str, Any]]
    mutating: list[dict[str, Any]]
    generating: list[dict[str, Any]]

    @classmethod
    def read(cls, objects: Objects) -> "StartupPolicies":
        return cls(objects.list_policies(), objects.list_mutating_policies(),
                   objects.list_lifecycle_policies(GENERATING))

    def expected(self) -> list[str]:
        """The names Scanner.expect waits for: every ValidatingPolicy's, and every MutatingPolicy's and
        GeneratingPolicy's (cluster-wide and namespaced), whose results are in the reports too."""
        return ([policy_key(b.get("metadata") or {}) for b in self.validating]
                + [MUTATING_SEEN + policy_key(b.get("metadata") or {}) for b in self.mutating]
                + [GENERATING_SEEN + policy_key(b.get("metadata") or {}) for b in self.generating])


class Scanner(threading.Thread):
    def __init__(self, api: client.ApiClient, backend: LiveBackend, discovery: Any, *,
                 leading: threading.Event | None = None, options: ScanOptions | None = None, events: Any = None,
                 global_context: GlobalContextSource | None = None):
        super().__init__(daemon=True, name="vpol-scanner")
        self.api = api
        #: Where PolicyViolation Events of new failing results go (vpol.controller.events; None: off).
        self.events = events
        #: MutatingPolicies with mutateExisting: run here, with this scanner's watches, worker and reports.
        self.mutation = BackgroundMutation(api, evaluator=self._evaluator_now, resolve=self._resolve,
                                           namespaces={}, store=self._store_one,
                                           writes_per_second=(options or ScanOptions()).mutation_writes_per_second)
        self.reports = Reports(api)
        self.backend = backend
        #: GlobalContextEntry data for globalContext.Get (the operator's store).
        self.global_context = global_context
        self.discovery = discovery  # has .get() -> Discovery
        self.leading = leading or _always()
        self.options = options or ScanOptions()
        self._events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._stop_event = threading.Event()
        self._policies: dict[str, ValidatingPolicy] = {}
        self._exceptions: list[PolicyException] = []
        self._lock = threading.Lock()
        self._evaluator: SandboxedEvaluator | None = None
        self._evaluator_key: tuple[Any, ...] = ()
        #: What the running worker was started with and cannot update in place (see _evaluator_now).
        self._evaluator_fixed: tuple[Any, ...] = ()
        self._policy_hash = ""
        self._pure = False
        self._meta_cache: dict[str, PolicyMeta] | None = None
        self._watchers: dict[GVR, Watcher] = {}
        self._types: dict[tuple[str, str], ResourceType] = {}
        self._namespaces: dict[str, dict[str, Any]] = {}
        self.mutation.namespaces = self._namespaces
        #: GeneratingPolicies (vpol.controller.generation) and DeletingPolicies (vpol.controller.deletion): run
        #: here too, with this scanner's watches, namespaces and reports.
        fresh = backend.fresh() if isinstance(backend, LiveBackend) else backend
        self.generation = Generation(api, resolve=self._resolve, namespaces=self._namespaces,
                                     discovery=lambda: self.discovery.get(), store=self._store_one,
                                     reported=self._reported,
                                     backend=fresh, writes_per_second=self.options.generation_writes_per_second,
                                     on_error=self._notify_generating, events=events,
                                     lookup=getattr(self.discovery, "resource_for_kind", None))
        self.deletion = Deletion(api, resolve=self._resolve, namespaces=self._namespaces,
                                 discovery=lambda: self.discovery.get(), backend=fresh, access=AccessChecker(api),
                                 write_status=lambda key, status: Objects(api).patch_lifecycle_status(
                                     "dpol", key, status),
                                 events=events, deletes_per_second=self.options.deletes_per_second,
                                 on_run=self._notify_deleting)
        #: ImageValidatingPolicies (vpol.controller.image_scans): evaluated here beside the validating policies.
        self.images = ImageScans(exceptions=self._compiled_exceptions,
                                 clients=RegistryClients(api, self.options.namespace), backend=backend)
        #: Told the key of a lifecycle policy whose status should be reconciled ("gpol:<key>", "dpol:<key>").
        self.notify: Any = None
        #: GeneratingPolicies that became invalid: when deleted, their downstreams go as they said.
        self._retired: dict[str, GeneratingPolicy] = {}
        self._ns_watcher: Watcher | None = None
        #: While active: the scanner's own watches of the policies it evaluates (see _watch_policies).
        self._policy_watchers: list[Watcher] = []
        self._state: dict[str, _State] = {}
        #: Report writes of single results held until the next _drain (see _store_one), by resource uid.
        self._deferred: dict[str, _Write] = {}
        self._pool_entries = EntryPool()
        self._writers = ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="vpol-report-writer")
        self._pending: deque[tuple[_Write, Future[None]]] = deque()
        #: Results in reports per (policy, namespace, result); published with the policy's severity and category.
        self._counts: Counter[tuple[str, str, str]] = Counter()
        #: Counts changed since they were last published (or whose policy's severity or category changed).
        self._changed_counts: set[tuple[str, str, str]] = set()
        #: The (severity, category) each count is published under (vpol_report_results' last two labels).
        self._published: dict[tuple[str, str, str], tuple[str, str]] = {}
        #: The report metadata of each policy as the reports were last written with (see _meta_changed).
        self._written_meta: dict[str, PolicyMeta] = {}
        self._active = False
        self._last_full = 0.0
        self.writes = 0
        # The first scan waits until every existing policy has been reported once, so a
        # restarted operator does not take its own reports for stale and rewrite them.
        self._expected: set[str] | None = None
        self._seen_policies: set[str] = set()
        self._primed = threading.Event()
        #: When the policies or exceptions scanned with last changed (time.monotonic()).
        self._policies_changed = 0.0

    # -- inputs (thread-safe) ---------------------------------------------------------------

    def set_policy(self, name: str, policy: ValidatingPolicy | None) -> None:
        """A policy to scan with (None, or one not background-scanned: stop scanning with it).

        Called from the scanner's watch of the policies (scanned_policy) and again by its reconcile,
        which may have read an older version of it: a generation of the same object older
        than the one held is ignored.
        """
        if not background_scanned(policy):
            policy = None
        with self._lock:
            self._seen_policies.add(name)
            self._check_primed()
            old = self._policies.get(name)
            if policy is None and old is None:
                return
            if policy is not None and old is not None and policy.uid and policy.uid == old.uid and \
                    policy.generation < old.generation:
                return
            # Only what evaluation depends on counts (status writes change `raw` all the time).
            if policy is not None and old is not None and old.spec == policy.spec and \
                    old.annotations == policy.annotations:
                return
            self._meta_cache = None
            if policy is None:
                self._policies.pop(name, None)
            else:
                self._policies[name] = policy
            self._policies_changed = time.monotonic()
        self._events.put(("policy", name))

    def set_image(self, key: str, policy: ImageValidatingPolicy | None) -> None:
        """An ImageValidatingPolicy to scan with (None, or one not background-scanned: no more)."""
        if self.images.set_policy(key, policy):
            with self._lock:
                self._meta_cache = None
            self._events.put(("images", key))

    def _compiled_exceptions(self) -> list[CompiledException]:
        with self._lock:
            exceptions = list(self._exceptions)
        return [compile_exception(e) for e in exceptions]

    def _seen(self, name: str) -> None:
        with self._lock:
            self._seen_policies.add(name)
            self._check_primed()

    def set_mutating(self, key: str, policy: MutatingPolicy | None) -> None:
        """A MutatingPolicy that mutates existing objects (None: no more); its created or changed spec mutates
        every target at once."""
        self._seen(MUTATING_SEEN + key)
        if self.mutation.set_policy(key, policy):
            with self._lock:
                self._meta_cache = None
            self._events.put(("mutating", key))

    def set_generating(self, key: str, policy: GeneratingPolicy | None, *, gone: bool = False) -> None:
        """A GeneratingPolicy to generate with (None: no more); created or changed, its existing triggers are
        generated for as its settings say; deleted (``gone``), its downstreams go as its settings say (a policy
        that became invalid only stops: what it generated stays)."""
        self._seen(GENERATING_SEEN + key)
        changed = self.generation.set_policy(key, policy)
        if policy is not None:
            self._retired.pop(key, None)
            if changed is True:
                self._forget_meta()
                self._events.put(("generating", key))
            return
        held = changed if isinstance(changed, GeneratingPolicy) else None
        if not gone:
            if held is not None:
                self._retired[key] = held  # invalid now: its downstreams go only when it is deleted
                self._forget_meta()
            return
        held = self._retired.pop(key, None) or held
        if held is not None:
            self._forget_meta()
            self._events.put(("generating-removed", held))

    def retry_generation(self, key: str) -> None:
        """A pass of the GeneratingPolicy ``key`` (its permissions were granted: what failed is tried again)."""
        if self.generation.get(key) is not None:
            self._events.put(("generating", key))

    def _forget_meta(self) -> None:
        with self._lock:
            self._meta_cache = None

    def set_deleting(self, key: str, policy: DeletingPolicy | None, last_execution: str = "") -> None:
        """A DeletingPolicy to run on its schedule (None: no more), and its ``status.lastExecutionTime``."""
        self.deletion.set_policy(key, policy, last_execution)

    def _reported(self, uid: str, policy: str) -> str:
        """The result of ``policy`` in the report of the object ``uid`` ("" when none)."""
        state = self._state.get(uid)
        return next((e.result for e in state.entries if e.policy == policy), "") if state is not None else ""

    def _notify_generating(self, key: str) -> None:
        if self.notify is not None:
            self.notify(f"gpol:{key}")

    def _notify_deleting(self, key: str) -> None:
        if self.notify is not None:
            self.notify(f"dpol:{key}")

    def expect(self, names: Iterable[str]) -> None:
        """The policies that exist at start-up; scanning starts once each has been seen."""
        with self._lock:
            if self._expected is None:
                self._expected = set(names)
                self._check_primed()

    def _check_primed(self) -> None:
        if self._expected is not None and self._expected <= self._seen_policies:
            self._primed.set()

    def set_exceptions(self, exceptions: Iterable[PolicyException]) -> None:
        new = list(exceptions)
        self.deletion.set_exceptions(new)
        if self.generation.set_exceptions(new) and self.generation.policies():
            self._events.put(("generating", *[p.key for p in self.generation.policies()]))
        with self._lock:
            if new == self._exceptions:
                return
            self._exceptions = new
            self._policies_changed = time.monotonic()
        self._events.put(("exceptions",))

    def kinds_changed(self) -> None:
        """The cluster's kinds changed (a CRD came or went; discovery has been refreshed): watch what the policies
        match now."""
        self._events.put(("kinds",))

    def stop(self) -> None:
        self._stop_event.set()
        self._events.put(("stop",))

    # -- main loop --------------------------------------------------------------------------

    def run(self) -> None:
        while not self._stop_event.is_set():
            if not self.leading.wait(1.0):
                if self._active:
                    self._deactivate()
                continue
            if not self._active:
                try:
                    self._activate()
                except Exception as exc:  # noqa: BLE001 - retry activation later
                    logger.warning("starting background scans failed: %s", describe(exc))
                    metrics.RECONCILE_ERRORS.labels("scan").inc()
                    self._stop_event.wait(5)
                    continue
            try:
                self._step()
            except Exception as exc:  # noqa: BLE001 - a scan error never stops the scanner
                logger.exception("background scan step failed: %s", exc)
                metrics.RECONCILE_ERRORS.labels("scan").inc()
                self._stop_event.wait(1)
        self._deactivate()

    def _activate(self) -> None:
        started = time.monotonic()
        self._watch_policies()
        # The policies and exceptions that exist, read directly rather than waiting for the operator's watches
        # and reconciles to report them (they do, later, with the same specs: nothing changes then); the
        # evaluation worker starts compiling them while the reports and namespaces are read back.
        self._prime()
        evaluator = self._evaluator_now()
        # Started from a thread of its own: starting a process waits until it has exec'd, which took 0.2-0.6 s
        # on a busy 2-core host, and a restart with nothing changed needs no evaluation for its first scan.
        # Nothing below uses the evaluator before the join.
        spawner = threading.Thread(target=_start_quietly, args=(evaluator,), daemon=True,
                                   name="vpol-worker-start") if evaluator is not None else None
        if spawner is not None:
            spawner.start()
        self._ns_watcher = Watcher(self.api, "", "v1", "namespaces", self._on_namespace, kind="Namespace")
        self._ns_watcher.start()
        try:
            self._seed_from_reports()
        finally:
            if spawner is not None:
                spawner.join()
        seeded = time.monotonic()
        self._ns_watcher.synced.wait(30)
        if not self._primed.wait(120):
            logger.warning("not every policy was reconciled within 120s; scanning with those that were")
        # Counted once the policies are known: a result's series carries its policy's severity and category.
        for state in self._state.values():
            self._count(state.entries, state.ref, +1)
        self._publish_counts()
        logger.info("background scans starting (%d reports read back in %.1fs)", len(self._state), seeded - started)
        self._active = True
        # Everything queued so far (policy arrivals, object changes) is covered by this scan, once
        # a burst of policy changes under way has arrived whole (it is not scanned half now, half later).
        queued = self._gather(self._queued(), always=True) + self._queued()
        if any(e[0] == "stop" for e in queued):
            self._events.put(("stop",))
            return
        self._meta_changed()
        self._full_scan(mutate=False)
        # Every MutatingPolicy with mutateExisting runs once when scanning starts (as Kyverno's controller does for
        # every policy it finds), whatever its background setting.
        if self.mutation.policies():
            self._mutating_changed({p.key for p in self.mutation.policies()})
        # And every GeneratingPolicy: what was owed while no replica led is generated now.
        if self.generation.policies():
            self._generating_changed({p.key for p in self.generation.policies()}, [])

    def _prime(self) -> None:
        """Tell the scanner every ValidatingPolicy, NamespacedValidatingPolicy and PolicyException there is now, and
        have the first scan wait until the operator's reconciles have told it every MutatingPolicy and
        GeneratingPolicy too (StartupPolicies)."""
        objects = Objects(self.api)
        try:
            listed = StartupPolicies.read(objects)
            exceptions, _next = active_exceptions(objects.policy_exceptions(), time.time())
        except Exception as exc:  # noqa: BLE001 - the operator's watches and reconciles tell them as well
            logger.warning("background scans: listing policies failed (%s); waiting for the operator's watch",
                           describe(exc))
            return
        self.set_exceptions(exceptions)
        for body in listed.validating:
            key = policy_key(body.get("metadata") or {})
            try:
                self.set_policy(key, scanned_policy(body))
            except Exception:  # noqa: BLE001 - one unreadable policy does not stop the others
                logger.exception("background scans: could not read policy %s", key)
        self.expect(listed.expected())

    def _watch_policies(self) -> None:
        """Watch the ValidatingPolicies and NamespacedValidatingPolicies directly (from before _prime lists them,
        so no change falls between the two): a change reaches the scanner as soon as the API server sends it.
        The operator's Kopf handlers tell it too, but later: measured with 16 policies applied at once, their
        events ran 0.5-1.2 s after the last request, each such delay pushing the quiet that starts their one pass."""
        for resource, kind in POLICY_RESOURCES:
            w = Watcher(self.api, GROUP, STORAGE_VERSION, resource, self._on_policy_object, kind=kind,
                        emit_initial=False)
            self._policy_watchers.append(w)
            w.start()

    def _on_policy_object(self, etype: str, obj: dict[str, Any]) -> None:
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            return
        key = policy_key(obj.get("metadata") or {})
        try:
            self.set_policy(key, None if etype == "DELETED" else scanned_policy(obj))
        except Exception:  # noqa: BLE001 - the operator's handlers and reconciles tell the scanner as well
            logger.exception("background scans: could not read policy %s", key)

    def _queued(self) -> list[tuple[Any, ...]]:
        """Every event queued now (without waiting)."""
        out = []
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    def _deactivate(self) -> None:
        self._drain()
        for w in self._policy_watchers:
            w.stop()
        self._policy_watchers.clear()
        for w in self._watchers.values():
            w.stop()
        self._watchers.clear()
        if self._ns_watcher:
            self._ns_watcher.stop()
            self._ns_watcher = None
        if self._evaluator:
            self._evaluator.close()
            self._evaluator = None
        # Another replica reports now: drop our view so series are not counted twice.
        self._state.clear()
        self._counts.clear()
        self._changed_counts.clear()
        self._published.clear()
        self._written_meta = {}
        metrics.REPORT_RESULTS.clear()
        self._active = False

    def _step(self) -> None:
        if self.deletion.due():
            self.deletion.run_due()
        timeout = max(0.1, self.options.scan_interval - (time.monotonic() - self._last_full))
        try:
            first = self._events.get(timeout=min(timeout, 1.0))
        except queue.Empty:
            if time.monotonic() - self._last_full >= self.options.scan_interval:
                self._full_scan()
            return
        batch = [first]
        while len(batch) < self.options.batch:
            try:
                batch.append(self._events.get_nowait())
            except queue.Empty:
                break
        objects: dict[str, tuple[str, dict[str, Any]]] = {}
        policies: set[str] = set()
        mutating: set[str] = set()
        generating: set[str] = set()
        images: set[str] = set()
        removed: list[GeneratingPolicy] = []
        triggers: list[tuple[str, dict[str, Any]]] = []
        resync_all = False
        for event in self._gather(batch):
            if event[0] == "object":
                _, etype, obj = event
                uid = (obj.get("metadata") or {}).get("uid", "")
                if uid:
                    objects[uid] = (etype, obj)
                triggers.append((etype, obj))
            elif event[0] == "policy":
                policies.add(event[1])
            elif event[0] == "mutating":
                mutating.add(event[1])
            elif event[0] == "generating":
                generating.update(event[1:])
            elif event[0] == "generating-removed":
                removed.append(event[1])
            elif event[0] == "images":
                images.add(event[1])
            elif event[0] == "exceptions":
                resync_all = True
            elif event[0] == "kinds":
                # Discovery changed (vpol.controller.handlers.crd_event): kinds newly matched are scanned whole.
                if set(self._wanted()) - set(self._watchers):
                    resync_all = True
                else:
                    self._sync_watchers()
            elif event[0] == "stop":
                return
        if policies or resync_all or mutating or generating or removed or images:
            self._sync_watchers()
            self._meta_changed()
        if mutating:
            self._mutating_changed(mutating)
        if generating or removed:
            self._generating_changed(generating, removed)
        if triggers and self.mutation.policies():
            self.mutation.objects_changed(triggers, self.discovery.get())
            self._drain()
        if triggers and self.generation.policies():
            self.generation.objects_changed(triggers)
            self._drain()
        if self.generation.watches_changed.is_set():
            self.generation.watches_changed.clear()
            self._sync_watchers()
        if resync_all:
            self.images.exceptions_changed()
            self._full_scan()
        else:
            if policies:
                self._rescan_policies(policies)
            if images:
                self._rescan_images(images)
        if objects:
            started = time.perf_counter()
            for uid, (etype, _obj) in objects.items():
                if etype == "DELETED":
                    self._forget(uid)
            self._publish_counts()
            changed = [obj for etype, obj in objects.values() if etype != "DELETED"]
            self._scan_objects(changed, None, self._evaluator_now())
            self._drain()
            metrics.SCAN_DURATION.labels("incremental").observe(time.perf_counter() - started)
            metrics.SCAN_RESOURCES.labels("incremental").inc(len(changed))

    def _gather(self, batch: list[tuple[Any, ...]], *, always: bool = False) -> list[tuple[Any, ...]]:
        """When policies change (or ``always``), wait for the rest of the burst, so it costs one
        pass (and one write per resource): until no policy has changed for SETTLE_QUIET
        seconds, at most SETTLE_MAX. Events arriving meanwhile join the batch, also those that
        queued up while the evaluation worker started or compiled (they arrived before the quiet)."""
        if not always and not any(e[0] in ("policy", "exceptions") for e in batch):
            return batch
        started = time.monotonic()
        arrived = True
        while True:
            if arrived:
                # The evaluation worker starts (or compiles the policies changed so far) while the rest arrives:
                # the pass that follows finds them compiled.
                evaluator = self._evaluator_now()
                if evaluator is not None:
                    evaluator.start()
            arrived = False
            for event in self._queued():
                batch.append(event)
                if event[0] == "stop":
                    return batch
                arrived = arrived or event[0] in ("policy", "exceptions")
            if time.monotonic() >= started + SETTLE_MAX:
                return batch
            if arrived:
                continue
            with self._lock:
                changed = self._policies_changed
            left = min(changed + SETTLE_QUIET, started + SETTLE_MAX) - time.monotonic()
            if left <= 0:
                return batch
            try:
                event = self._events.get(timeout=left)
            except queue.Empty:
                continue
            batch.append(event)
            if event[0] == "stop":
                return batch
            arrived = event[0] in ("policy", "exceptions")

    # -- watching ---------------------------------------------------------------------------

    def _wanted(self) -> dict[GVR, ResourceInfo]:
        discovery: Discovery = self.discovery.get()
        wanted: dict[GVR, ResourceInfo] = {}
        with self._lock:
            policies = list(self._policies.values())
        for policy in policies:
            for info in matched_resources(policy, discovery):
                if "list" in info.verbs or not info.verbs:
                    wanted[(info.group, info.version, info.resource)] = info
        wanted.update(self.mutation.watched(discovery))
        wanted.update(self.generation.watched(discovery))
        wanted.update(self.images.watched(discovery))
        return wanted

    def _sync_watchers(self) -> None:
        wanted = self._wanted()
        for gvr in list(self._watchers):
            if gvr not in wanted:
                self._watchers.pop(gvr).stop()
        for gvr, info in wanted.items():
            self._types[(info.api_version, info.kind)] = ResourceType(info.group, info.version, info.resource,
                                                                     info.kind, info.namespaced)
            if gvr not in self._watchers:
                # Started before the scan that covers existing objects, so no change is missed; the triggers of
                # a MutatingPolicy that mutates existing objects from when the policy was seen.
                w = Watcher(self.api, *gvr, on_event=self._on_object, kind=info.kind, emit_initial=False,
                            since=self._since(gvr))
                self._watchers[gvr] = w
                w.start()

    def _since(self, gvr: GVR) -> str:
        """Where a new watch of ``gvr`` starts: from the oldest resourceVersion a policy triggered by it was seen
        at (mutateExisting, generation), so no trigger is missed; "" (now) when none is, or one is not a number."""
        discovery = self.discovery.get()
        marks = [self.mutation.trigger_since(gvr, discovery), self.generation.trigger_since(gvr, discovery)]
        numbers = [int(m) for m in marks if m.isdigit()]
        return str(min(numbers)) if numbers else ""

    def _on_object(self, etype: str, obj: dict[str, Any]) -> None:
        if etype in ("ADDED", "MODIFIED", "DELETED"):
            self._events.put(("object", etype, obj))

    def _on_namespace(self, etype: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        if etype == "DELETED":
            self._namespaces.pop(name, None)
        else:
            self._namespaces[name] = obj

    def _resolve(self, api_version: str, kind: str) -> ResourceType | None:
        return self._types.get((api_version, kind))

    # -- evaluation -------------------------------------------------------------------------

    def _evaluator_now(self) -> SandboxedEvaluator | None:
        with self._lock:
            policies = sorted(self._policies.values(), key=lambda p: p.name)
            exceptions = list(self._exceptions)
        mutating = self.mutation.policies()
        key = tuple((p.name, repr(p.raw.get("spec")), tuple(sorted(p.annotations.items()))) for p in policies) + (
            repr(exceptions),) + tuple((p.key, repr(p.raw.get("spec"))) for p in mutating)
        self._policy_hash = hashlib.sha256(repr((key, self.images.fingerprint())).encode()).hexdigest()[:16]
        # Results of policies that read other objects, the network or the clock can change
        # without their resource changing: those resources are always evaluated again (image policies read
        # registries).
        self._pure = not any(_IMPURE.search(repr(p.raw.get("spec"))) for p in policies) and \
            not self.images.policies()
        if not policies and not mutating:
            if self._evaluator:
                self._evaluator.close()
                self._evaluator = None
            self._evaluator_key = ()
            return None
        # The worker's MutatingPolicies and global context are fixed at its start; a change of the validating
        # policies or exceptions alone is compiled in the running worker.
        fixed = (tuple((p.key, repr(p.raw.get("spec"))) for p in mutating),
                 reads_global_context([*policies, *mutating]))
        if self._evaluator is None or fixed != self._evaluator_fixed:
            if self._evaluator:
                self._evaluator.close()
            source = self.global_context if fixed[1] else None
            self._evaluator = SandboxedEvaluator(policies, exceptions, self.backend, self.options.limits,
                                                 mutating=mutating, global_context=source)
            self._evaluator_fixed = fixed
        elif key != self._evaluator_key:
            self._evaluator.update(policies, exceptions)  # the running worker compiles what changed
        self._evaluator_key = key
        return self._evaluator

    def _meta(self) -> dict[str, PolicyMeta]:
        """Report metadata of every scanned policy (rebuilt only when the policy set changes:
        it is consulted for every resource)."""
        with self._lock:
            if self._meta_cache is None:
                self._meta_cache = {n: PolicyMeta.of(p.severity, p.category, p.scored)
                                    for n, p in self._policies.items()}
                for p in [*self.mutation.policies(), *self.generation.policies(), *self.images.policies()]:
                    self._meta_cache[p.key] = PolicyMeta(p.severity, p.category, p.scored)
            return self._meta_cache

    def _scan_objects(self, objects: Iterable[dict[str, Any]], only: list[str] | None,
                      evaluator: SandboxedEvaluator | None) -> int:
        """Evaluate objects in chunks (one worker round trip each) and write changed reports.

        ``evaluator`` holds the policies as they were when the pass started (_evaluator_now):
        a policy that changes meanwhile is queued for the next pass (set_policy), instead of
        restarting the evaluation worker in the middle of this one.
        """
        count = 0
        chunk: list[dict[str, Any]] = []
        size = min(FIRST_CHUNK, CHUNK)
        for obj in objects:
            chunk.append(obj)
            if len(chunk) >= size:
                count += self._scan_chunk(evaluator, chunk, only)
                chunk = []
                size = min(2 * size, CHUNK)
        if chunk:
            count += self._scan_chunk(evaluator, chunk, only)
        return count

    def _scan_key(self, obj: dict[str, Any]) -> str:
        """What a full evaluation of ``obj`` depends on; "" when that cannot be told."""
        md = obj.get("metadata") or {}
        namespace = str(md.get("namespace") or "")
        ns_version = ""
        if namespace:
            ns = self._namespaces.get(namespace)
            ns_version = str(((ns or {}).get("metadata") or {}).get("resourceVersion", ""))
            if not ns_version:
                return ""  # the namespace is not in our cache yet: its labels are unknown
        return f"{md.get('resourceVersion', '')}/{ns_version}/{self._policy_hash}"

    def _key_after(self, ref: ResourceRef, key: str, only: list[str] | None) -> str:
        """The key a resource's results have after evaluating ``only`` (None: every policy).

        A partial evaluation keeps a key when it covered every policy, or when the other
        policies' results were computed from this same version of the object and namespace.
        """
        if only is None or not key:
            return key
        with self._lock:
            covered = set(only) >= set(self._policies)
        if covered:
            return key
        state = self._state.get(ref.uid)
        if state is not None and state.key and state.key.rsplit("/", 1)[0] == key.rsplit("/", 1)[0]:
            return key
        return ""

    def _unchanged(self, ref: ResourceRef, key: str) -> bool:
        state = self._state.get(ref.uid)
        return bool(self._pure and state is not None and state.written and state.key and state.key == key)

    def _scan_chunk(self, evaluator: SandboxedEvaluator | None, objects: list[dict[str, Any]],
                    only: list[str] | None) -> int:
        refs = [ResourceRef.of(o) for o in objects]
        keys = {ref.uid: self._scan_key(obj) for ref, obj in zip(refs, objects)}
        # A full evaluation of an object nothing has changed about would only reproduce its report.
        pairs = [(ref, obj) for ref, obj in zip(refs, objects)
                 if ref.uid and not (only is None and self._unchanged(ref, keys[ref.uid]))]
        skipped = sum(1 for ref in refs if ref.uid) - len(pairs)
        results: list[list[Result]] = [[] for _ in pairs]
        images = self.images.policies()
        subjects = [subject_for(obj, operation="CREATE", resolve=self._resolve, namespaces=self._namespaces,
                                default_namespace="") for _ref, obj in pairs] if (evaluator or images) else []
        if evaluator is not None and pairs:
            started = time.perf_counter()
            results = evaluator.evaluate_many(subjects, only)
            elapsed = time.perf_counter() - started
            for _ in subjects:
                metrics.EVALUATION_DURATION.observe(elapsed / len(subjects))
        if images and pairs:
            for index, subject in enumerate(subjects):
                results[index] = [*results[index], *self.images.evaluate(subject, only)]
        now = now_seconds()
        writes = []
        tally: Counter[tuple[str, str, str, str]] = Counter()
        for (ref, _obj), res_list in zip(pairs, results):
            fresh = []
            for res in res_list:
                tally[(res.policy, res.result, ref.kind, ref.namespace)] += 1
                if res.result == SKIP and not res.exception:
                    continue  # false matchConditions leave no result in background reports
                fresh.append(ReportEntry.of(res, now))
            if self.events is not None:
                self._record_violations(ref, fresh)
            write = self._store(ref, fresh, only, self._key_after(ref, keys[ref.uid], only))
            if write is not None:
                writes.append(write)
        for labels, n in tally.items():
            metrics.POLICY_RESULTS.labels(*labels).inc(n)
        self._flush(writes)
        return len(pairs) + skipped

    def _record_violations(self, ref: ResourceRef, fresh: list[ReportEntry]) -> None:
        """PolicyViolation Events for the failing (warning, erroring) results that are new for this resource: an
        unchanged result, also one read back from its report after a restart, makes no event again."""
        state = self._state.get(ref.uid)
        before = by_policy(state.entries) if state else {}
        resource = ObjectRef(ref.api_version, ref.kind, ref.name, ref.namespace, ref.uid)
        specs = []
        for entry in fresh:
            old = before.get(entry.policy)
            if not violating(entry.result) or (old is not None and (old.result, old.message) ==
                                               (entry.result, entry.message)):
                continue
            policy = self._policies.get(entry.policy)
            if policy is None:
                continue
            ref_policy = ObjectRef(policy.api_version, policy.kind, policy.name, policy.namespace, policy.uid)
            specs += violation_events(Violation(ref_policy, resource, entry.result, entry.message),
                                      source=SOURCE_SCAN)
        if specs:
            self.events.record(specs)

    def _store(self, ref: ResourceRef, fresh: list[ReportEntry], only: list[str] | None,
               key: str = "") -> "_Write | None":
        """Update the in-memory results of one resource; return the write it needs, if any.

        ``key`` says what the results were computed from ("" when unknown: the next full
        scan evaluates the resource again).
        """
        state = self._state.get(ref.uid)
        previous = state.entries if state else ()
        known = self._meta()
        if only is None and (self.mutation.policies() or self.generation.policies()):
            # A full evaluation is of the validating and image policies: the results of mutateExisting and
            # generation stay.
            with self._lock:
                only = list(self._policies)
            only += self.images.keys()
        merged = merge(by_policy(previous), fresh, only)
        entries = self._pool_entries.results(e for p, e in merged.items() if p in known)
        if state is not None and entries == previous and (state.written or not entries):
            if state.key != key and entries:
                # Same results from newer inputs: remember them (the report is refreshed lazily,
                # at its next real change; until then a restart evaluates this object again).
                state.key = key
            return None
        self._count(previous, ref, -1)
        self._count(entries, ref, +1)
        if not entries:
            self._state.pop(ref.uid, None)
            if state is not None and state.written:
                return _Write(ref, None)
            return None
        self._state[ref.uid] = _State(ref, entries, False, key, state.version if state is not None else "")
        return _Write(ref, entries, self._meta(), key, create=state is None)

    def _store_one(self, ref: ResourceRef, policy: str, entry: ReportEntry | None) -> None:
        """One policy's result on one resource (mutateExisting's, a generation's), written when it changed: with
        the other results of the same report that come before the next _drain, in one write (a new Namespace
        selected by three GeneratingPolicies has one report write, not three: measured with bench/generate.py)."""
        write = self._store(ref, [entry] if entry is not None else [], [policy])
        if write is None:
            return
        self._deferred[ref.uid] = self._superseding(write)
        if len(self._deferred) >= CHUNK:
            self._flush_deferred()

    def _superseding(self, write: "_Write") -> "_Write":
        """``write``, taking the place of the write _store_one holds for the same report (if any): a create still,
        when the held one was to create the report."""
        held = self._deferred.pop(write.ref.uid, None)
        if held is not None and held.create and write.entries is not None and not write.create:
            return dataclasses.replace(write, create=True)  # the report was not written yet
        return write

    def _flush_deferred(self) -> None:
        writes, self._deferred = list(self._deferred.values()), {}
        for w in writes:
            self._pending.append((w, self._writers.submit(self._write, w)))

    def _mutating_changed(self, keys: set[str]) -> None:
        """MutatingPolicies created, changed or gone: the targets of those present are mutated, the results of
        those gone removed."""
        present = {k for k in keys if self.mutation.get(k) is not None}
        gone = sorted(keys - present)
        if gone:
            stale = [self._store(state.ref, [], gone) for state in list(self._state.values())
                     if any(e.policy in gone for e in state.entries)]
            self._flush([w for w in stale if w is not None])
        if present:
            self.mutation.policy_changed(present, self.discovery.get())
        self._drain()

    def _generating_changed(self, keys: set[str], removed: list[GeneratingPolicy]) -> None:
        """GeneratingPolicies created or changed (a pass each) or gone (their downstreams as they say, their
        results out of the reports)."""
        for policy in removed:
            self.generation.policy_removed(policy)
        gone = sorted({p.key for p in removed} - {p.key for p in self.generation.policies()})
        if gone:
            stale = [self._store(state.ref, [], gone) for state in list(self._state.values())
                     if any(e.policy in gone for e in state.entries)]
            self._flush([w for w in stale if w is not None])
        present = {k for k in keys if self.generation.get(k) is not None}
        if present:
            self.generation.policy_changed(present)
        self._drain()

    def _write(self, w: _Write) -> None:
        """One report write (runs in a writer thread)."""
        if w.entries is None:
            self.reports.delete(report_name(w.ref.uid), w.ref.namespace)
            metrics.REPORT_WRITES.labels("delete").inc()
            return
        report = report_for(w.ref, by_policy(w.entries), w.meta or {}, w.key)
        version = self.reports.create(report) if w.create else None
        if version is None:
            state = self._state.get(w.ref.uid)
            if state is not None and state.version:
                version = self.reports.update(report, state.version)
            if version is None:
                version = self.reports.apply(report)
        metrics.REPORT_WRITES.labels("apply").inc()
        state = self._state.get(w.ref.uid)
        if state is not None:
            # Two writes of one report in flight at once may record their versions out of order: the next
            # update then fails its precondition and is applied instead.
            state.version = version
            if state.entries is w.entries:
                state.written = True

    def _flush(self, writes: list["_Write"]) -> None:
        """Queue report writes (or deletions) to the writer threads; a failed write is
        retried at the next scan. Waits only when too many are queued (see _drain)."""
        self._publish_counts()
        for w in writes:
            # A newer write of a report _store_one holds replaces the held one (written after it, the held one
            # would put older results back).
            w = self._superseding(w)
            self._pending.append((w, self._writers.submit(self._write, w)))
        if len(self._pending) > MAX_PENDING_WRITES:
            self._drain(MAX_PENDING_WRITES // 2)

    def _drain(self, keep: int = 0) -> None:
        """Wait for queued writes until at most ``keep`` are left (those _store_one holds are queued first)."""
        if self._deferred:
            self._flush_deferred()
            self._publish_counts()
        while len(self._pending) > keep:
            w, future = self._pending.popleft()
            try:
                future.result()
            except Exception as exc:  # noqa: BLE001 - logged and counted; the next scan retries
                logger.warning("writing the report of %s/%s failed: %s", w.ref.kind, w.ref.name, exc)
                metrics.RECONCILE_ERRORS.labels("scan").inc()
            else:
                self.writes += 1

    def _forget(self, uid: str) -> None:
        state = self._state.pop(uid, None)
        if state:
            self._count(state.entries, state.ref, -1)

    def _count(self, entries: Results, ref: ResourceRef, sign: int) -> None:
        """Count a resource's results in (or out of) vpol_report_results; the gauge itself is set
        once per chunk (_publish_counts), not once per result."""
        for entry in entries:
            key = (entry.policy, ref.namespace, entry.result)
            self._counts[key] += sign
            self._changed_counts.add(key)

    def _publish_counts(self) -> None:
        meta = self._meta()
        for key in self._changed_counts:
            value = self._counts.get(key, 0)
            m = meta.get(key[0], PolicyMeta())
            labels = (m.severity, m.category)
            old = self._published.pop(key, None)
            if old is not None and (value <= 0 or old != labels):
                try:
                    metrics.REPORT_RESULTS.remove(*key, *old)
                except KeyError:
                    pass
            if value <= 0:
                self._counts.pop(key, None)
            else:
                metrics.REPORT_RESULTS.labels(*key, *labels).set(value)
                self._published[key] = labels
        self._changed_counts.clear()

    def _meta_changed(self) -> None:
        """After policy changes: the reports holding results of a policy whose severity, category or scored
        annotation changed are written again (the rescan of the policy, or the next write of the report,
        finds them not written), and its counts are published under the new labels."""
        meta = self._meta()
        changed = {name for name, old in self._written_meta.items() if name in meta and meta[name] != old}
        self._written_meta = dict(meta)
        if not changed:
            return
        # A write queued with the old metadata that finished after this would mark its report written again.
        self._drain()
        for state in self._state.values():
            if any(e.policy in changed for e in state.entries):
                state.written = False
        self._changed_counts.update(key for key in self._counts if key[0] in changed)
        self._publish_counts()

    # -- scans ------------------------------------------------------------------------------

    def _list_all(self, gvrs: Iterable[GVR]) -> Iterable[dict[str, Any]]:
        for gvr in gvrs:
            kind = self._watchers[gvr].kind if gvr in self._watchers else ""
            # Pages of one chunk: a parsed Pod is ~10x its JSON, and a page is held until its last object is
            # evaluated (pages of 500 were the operator's peak resident memory at 10,000 Pods).
            for items, _rv in list_pages(self.api, *gvr, page_size=CHUNK):
                for item in items:
                    if kind:
                        item.setdefault("kind", kind)
                    yield item

    def _rescan_policies(self, names: set[str]) -> None:
        """Re-evaluate only these policies, in one pass over the kinds they match."""
        evaluator = self._evaluator_now()
        with self._lock:
            present = {n: self._policies[n] for n in names if n in self._policies}
        started = time.perf_counter()
        discovery = self.discovery.get()
        gvrs: dict[GVR, None] = {}
        for policy in present.values():
            for info in matched_resources(policy, discovery):
                gvrs[(info.group, info.version, info.resource)] = None
        seen: set[str] = set()

        def listed() -> Iterable[dict[str, Any]]:
            for obj in self._list_all(gvrs):
                seen.add((obj.get("metadata") or {}).get("uid", ""))
                yield obj

        only = sorted(names)
        writes = self.writes
        count = self._scan_objects(listed(), only, evaluator) if present else 0
        # resources they no longer match (or deleted policies) lose their results
        stale = [self._store(state.ref, [], only) for uid, state in list(self._state.items())
                 if uid not in seen and any(e.policy in names for e in state.entries)]
        self._flush([w for w in stale if w is not None])
        self._drain()
        took = time.perf_counter() - started
        metrics.SCAN_DURATION.labels("incremental").observe(took)
        metrics.SCAN_RESOURCES.labels("incremental").inc(count)
        logger.info("rescan for %d changed polic%s: %d resources, %d report writes in %.1fs", len(names),
                    "y" if len(names) == 1 else "ies", count, self.writes - writes, took)

    def _rescan_images(self, keys: set[str]) -> None:
        """Re-evaluate only these ImageValidatingPolicies, over the kinds they match; objects they no longer match
        (or results of a deleted policy) lose their results."""
        started = time.perf_counter()
        gvrs = self.images.watched(self.discovery.get(), sorted(keys))
        seen: set[str] = set()

        def listed() -> Iterable[dict[str, Any]]:
            for obj in self._list_all(gvrs):
                seen.add((obj.get("metadata") or {}).get("uid", ""))
                yield obj

        only = sorted(keys)
        count = self._scan_objects(listed(), only, None)
        stale = [self._store(state.ref, [], only) for uid, state in list(self._state.items())
                 if uid not in seen and any(e.policy in keys for e in state.entries)]
        self._flush([w for w in stale if w is not None])
        self._drain()
        metrics.SCAN_DURATION.labels("incremental").observe(time.perf_counter() - started)
        metrics.SCAN_RESOURCES.labels("incremental").inc(count)

    def _full_scan(self, mutate: bool = True) -> None:
        evaluator = self._evaluator_now()
        started = time.perf_counter()
        # Values still in use stay shared; new ones are pooled afresh (bounds the pool).
        self._pool_entries.clear()
        self._sync_watchers()
        seen: set[str] = set()

        def listed() -> Iterable[dict[str, Any]]:
            for obj in self._list_all(list(self._watchers)):
                seen.add((obj.get("metadata") or {}).get("uid", ""))
                yield obj

        writes = self.writes
        count = self._scan_objects(listed(), None, evaluator)
        stale = [self._store(state.ref, [], None) for uid, state in list(self._state.items()) if uid not in seen]
        self._flush([w for w in stale if w is not None])
        if mutate and self.mutation.policies():
            self.mutation.periodic(self.discovery.get())
        if mutate and self.generation.policies():
            self.generation.periodic()
        self._drain()
        self._last_full = time.monotonic()
        took = time.perf_counter() - started
        logger.info("full scan with %d policies: %d resources, %d report writes in %.1fs",
                    len(evaluator.policies) if evaluator else 0, count, self.writes - writes, took)
        metrics.SCAN_DURATION.labels("full").observe(took)
        metrics.SCAN_RESOURCES.labels("full").inc(count)
        metrics.SCAN_LAST_SUCCESS.set(time.time())

    def _seed_from_reports(self) -> None:
        """What vpol's reports say (results and the scan key they were computed with), read back at start-up;
        counted into vpol_report_results by the caller, once the policies are known."""
        meta = {name: m.as_reported() for name, m in self._meta().items()}
        for report in self.reports.existing(f"{MANAGED_BY_LABEL}={MANAGED_BY}"):
            scope = report.get("scope") or {}
            md = report.get("metadata") or {}
            uid = str(scope.get("uid") or md.get("name", ""))
            if not uid:
                continue
            ref = ResourceRef(str(scope.get("apiVersion", "")), str(scope.get("kind", "")),
                              str(scope.get("name", "")), str(scope.get("namespace", "") or ""), uid)
            entries = self._pool_entries.results(entries_from_report(report).values())
            key = str((md.get("annotations") or {}).get(SCAN_KEY_ANNOTATION, ""))
            version = str(md.get("resourceVersion", "")) if written_by_vpol_only(report) else ""
            written = True
            if md.get("name") != report_name(uid):
                # Written by an older vpol under the resource's bare UID, the name Kyverno gives its own
                # reports: removed, and its results rewritten under vpol's name by the first scan.
                self.reports.delete(str(md.get("name", "")), ref.namespace)
                written, key, version = False, "", ""
            elif _stale_meta(report, meta):
                # It says another severity, category or scored than its policy does now (changed while no vpol
                # ran): written again by the first scan.
                written = False
            self._state[uid] = _State(ref, entries, written, key, version)
        self._written_meta = dict(self._meta())


def _stale_meta(report: Mapping[str, Any], meta: Mapping[str, PolicyMeta]) -> bool:
    """Whether one of vpol's results in ``report`` carries other policy metadata than ``meta`` (as reported)."""
    for item in report.get("results") or []:
        if isinstance(item, Mapping) and item.get("source") == SOURCE:
            want = meta.get(str(item.get("policy", "")))
            if want is not None and reported_meta(item) != want:
                return True
    return False


def _start_quietly(evaluator: SandboxedEvaluator) -> None:
    """Start the evaluation worker without waiting for it; a failure is logged (its first use starts it again)."""
    try:
        evaluator.start(wait=False)
    except Exception as exc:  # noqa: BLE001 - retried where the worker is first used
        logger.warning("starting the evaluation worker failed: %s", describe(exc))


def _always() -> threading.Event:
    e = threading.Event()
    e.set()
    return e

"""Background work: scans of existing resources, mutation of existing ones, generation, scheduled deletion.

The scanner is one thread that runs every background path while this replica holds the scanner Lease
(../shared/NOTES.md sections 3 and 5; docs/operator.md), over parts of its own:
- :mod:`vpol.controller.scan_watches`: one watcher per resource type some path wants, the namespaces, and the
  scanner's own watch of the ValidatingPolicies; the first list of each watcher is covered by a scan, every later
  event handles that one resource within seconds;
- :mod:`vpol.controller.scan_events`: the inbox, handled in batches; a burst of policy changes is gathered and
  evaluated in one pass, with the policies it started with;
- the paths, each a runner the scanner asks the same of (vpol.controller.background_runner): validation_scans
  (ValidatingPolicies, evaluating ImageValidatingPolicies too), image_scans, background_mutation (mutateExisting),
  generation and deletion;
- :mod:`vpol.controller.scan_evaluator`: the bounded worker process the validating and mutating policies are
  evaluated in;
- :mod:`vpol.controller.report_store`: every path's results per resource, one PolicyReport per resource, written
  only when a result changed; read back at start-up, so a restart rewrites nothing that is unchanged.

A changed policy re-evaluates only that policy (a paged re-list of the kinds it matches); a deleted or invalid
policy's results are removed; a full rescan every ``scan_interval`` catches anything missed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from vpol.controller import metrics
from vpol.controller.background_mutation import BackgroundMutation
from vpol.controller.background_runner import BackgroundRunner
from vpol.controller.deletion import Deletion
from vpol.controller.generation import Generation
from vpol.controller.image_scans import ImageScans
from vpol.controller.queue_keys import PolicyKey
from vpol.controller.registry_credentials import RegistryClients
from vpol.controller.report_store import ReportStore, WritingStopped
from vpol.controller.scan_evaluator import ScanEvaluator, start_quietly
from vpol.controller.scan_events import Batch, Event, ScanEvents
from vpol.controller.scan_startup import StartupGate, StartupPolicies, scanned_policy
from vpol.controller.scan_watches import GVR, ScanWatches
from vpol.controller.validation_scans import ValidationScans
from vpol.desired.report import PolicyMeta
from vpol.engine.global_context import GlobalContextSource
from vpol.kube.access import AccessChecker
from vpol.kube.errors import describe
from vpol.kube.live_backend import LiveBackend
from vpol.kube.objects import PLURALS, Objects
from vpol.kube.reports import Reports
from vpol.model.discovery import ResourceInfo
from vpol.model.policy import PolicyException, active_exceptions
from vpol.policies.sandbox import Limits, SandboxedEvaluator

logger = logging.getLogger(__name__)


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


class Scanner(threading.Thread):
    def __init__(self, api: client.ApiClient, backend: LiveBackend, discovery: Any, *,
                 leading: threading.Event | None = None, options: ScanOptions | None = None, events: Any = None,
                 global_context: GlobalContextSource | None = None):
        super().__init__(daemon=True, name="vpol-scanner")
        self.api = api
        self.discovery = discovery  # has .get() -> Discovery
        self.leading = leading or _always()
        self.options = options or ScanOptions()
        self._events = ScanEvents()
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._exceptions: list[PolicyException] = []
        self._meta_cache: dict[str, PolicyMeta] | None = None
        #: When the policies or exceptions scanned with last changed (time.monotonic()).
        self._policies_changed = 0.0
        self._active = False
        self._last_full = 0.0
        #: The first scan waits until every existing policy has been handed over once, so a restarted operator
        #: does not take its own reports for stale and rewrite them.
        self.startup = StartupGate()
        self.watches = ScanWatches(api, self._on_object)
        self.store = ReportStore(Reports(api), meta=self._meta, full_scope=self._full_scope,
                                 may_write=lambda: self.leading.is_set() and not self._stop_event.is_set())
        self.evaluation = ScanEvaluator(backend, self.options.limits, global_context)
        fresh = backend.fresh() if isinstance(backend, LiveBackend) else backend
        #: The worker GeneratingPolicies, DeletingPolicies and ImageValidatingPolicies are evaluated in, with the
        #: same deadline and memory cap as the others (started at their first evaluation).
        self.lifecycle_worker = SandboxedEvaluator([], (), fresh, self.options.limits, global_context=global_context)
        #: ImageValidatingPolicies (vpol.controller.image_scans): evaluated beside the validating policies.
        self.images = ImageScans(exceptions=self._current_exceptions,
                                 clients=RegistryClients(api, self.options.namespace), worker=self.lifecycle_worker)
        self.validation = ValidationScans(self.store, self.watches, self.evaluation, self.images, self._evaluator_now,
                                          events)
        #: MutatingPolicies with mutateExisting, GeneratingPolicies and DeletingPolicies: run here, with this
        #: scanner's watches, namespaces, worker and reports.
        self.mutation = BackgroundMutation(api, evaluator=self._evaluator_now, resolve=self.watches.resolve,
                                           namespaces=self.watches.namespaces, store=self.store.store_one,
                                           writes_per_second=self.options.mutation_writes_per_second)
        self.generation = Generation(api, resolve=self.watches.resolve, namespaces=self.watches.namespaces,
                                     discovery=lambda: self.discovery.get(), store=self.store.store_one,
                                     reported=self.store.reported,
                                     backend=fresh, writes_per_second=self.options.generation_writes_per_second,
                                     on_error=self._notify_generating, events=events,
                                     lookup=getattr(self.discovery, "resource_for_kind", None),
                                     worker=self.lifecycle_worker)
        self.deletion = Deletion(api, resolve=self.watches.resolve, namespaces=self.watches.namespaces,
                                 discovery=lambda: self.discovery.get(), backend=fresh, access=AccessChecker(api),
                                 write_status=lambda key, status: Objects(api).patch_policy_status(
                                     key, status, PLURALS["DeletingPolicy"]),
                                 events=events, deletes_per_second=self.options.deletes_per_second,
                                 on_run=self._notify_deleting, worker=self.lifecycle_worker)
        #: Every path, in the order each step runs them (vpol.controller.background_runner): mutateExisting and
        #: generation act on a batch's triggers before the validation scans evaluate its objects (a trigger's
        #: downstreams are not held up by the scans).
        self.runners: tuple[BackgroundRunner, ...] = (self.mutation, self.generation, self.validation, self.images,
                                                      self.deletion)
        #: The runner each kind's policies are handed to, and the kinds the first scan waits for.
        self._by_kind: dict[str, BackgroundRunner] = {r.kind: r for r in self.runners if r.kind}
        self._gating = {r.kind for r in self.runners if r.reports_results}
        #: Told the key of a policy whose status should be reconciled (a GeneratingPolicy's or DeletingPolicy's).
        self.notify: Any = None

    # -- inputs (thread-safe) ---------------------------------------------------------------

    def hand_over(self, key: PolicyKey, policy: Any | None, **details: Any) -> None:
        """A policy as its plan (or, for a ValidatingPolicy, the scanner's own watch of them) found it: valid, or
        None (invalid, not for background work, or gone), to the runner of its kind; ``details`` are the kind's own
        (vpol.controller.background_runner.BackgroundRunner.hand_over).

        A ValidatingPolicy is handed over by the scanner's watch and again by its reconcile, which may have read an
        older version of it (vpol.controller.validation_scans.ValidationScans.set_policy)."""
        self.startup.seen(key)
        runner = self._by_kind.get(key.kind)
        if runner is None:
            return
        handed = runner.hand_over(key.policy_key, policy, **details)
        if handed.changed:
            with self._lock:
                self._meta_cache = None
                if handed.settle:
                    self._policies_changed = time.monotonic()
        if handed.event is not None:
            self._events.put(handed.event)

    def retry_generation(self, key: str) -> None:
        """A pass of the GeneratingPolicy ``key`` (its permissions were granted: what failed is tried again)."""
        if self.generation.get(key) is not None:
            self._events.put(("generating", key))

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

    def expect(self, keys: Iterable[PolicyKey]) -> None:
        """The policies that exist at start-up; scanning starts once each whose results are in the reports (its
        runner's ``reports_results``) has been handed over."""
        self.startup.expect(k for k in keys if k.kind in self._gating)

    def kinds_changed(self) -> None:
        """The cluster's kinds changed (a CRD came or went; discovery has been refreshed): watch what the policies
        match now."""
        self._events.put(("kinds",))

    def stop(self) -> None:
        self._stop_event.set()
        self._events.put(("stop",))

    @property
    def writes(self) -> int:
        """Report writes done since the start."""
        return self.store.writes

    def _current_exceptions(self) -> list[PolicyException]:
        with self._lock:
            return list(self._exceptions)

    def _notify_generating(self, key: str) -> None:
        if self.notify is not None:
            self.notify(PolicyKey.of("GeneratingPolicy", key))

    def _notify_deleting(self, key: str) -> None:
        if self.notify is not None:
            self.notify(PolicyKey.of("DeletingPolicy", key))

    def _on_object(self, etype: str, obj: dict[str, Any]) -> None:
        if etype in ("ADDED", "MODIFIED", "DELETED"):
            self._events.put(("object", etype, obj))

    def _on_policy_object(self, etype: str, obj: dict[str, Any]) -> None:
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            return
        key = PolicyKey.from_meta("ValidatingPolicy", obj.get("metadata") or {})
        try:
            self.hand_over(key, None if etype == "DELETED" else scanned_policy(obj))
        except Exception:  # noqa: BLE001 - the operator's handlers and reconciles tell the scanner as well
            logger.exception("background scans: could not read policy %s", key)

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
                except WritingStopped:
                    self._writing_stopped()
                    continue
                except Exception as exc:  # noqa: BLE001 - retry activation later
                    logger.warning("starting background scans failed: %s", describe(exc))
                    metrics.RECONCILE_ERRORS.labels("scan").inc()
                    self._stop_event.wait(5)
                    continue
            try:
                self._step()
            except WritingStopped:
                self._writing_stopped()
            except Exception as exc:  # noqa: BLE001 - a scan error never stops the scanner
                logger.exception("background scan step failed: %s", exc)
                metrics.RECONCILE_ERRORS.labels("scan").inc()
                self._stop_event.wait(1)
        self._deactivate()

    def _writing_stopped(self) -> None:
        """A pass ended because this replica may no longer write reports (ReportStore.may_write). What the store
        holds is then not what the reports say (writes were dropped): the scans stop, and a replica that leads
        again reads the reports back first, as any new leader does."""
        why = "stopping" if self._stop_event.is_set() else "the scanner Lease is not held"
        logger.info("background scans: the pass under way ends here (%s); what it had left to write is the next "
                    "leader's", why)
        self._deactivate()

    def _activate(self) -> None:
        started = time.monotonic()
        # From before _prime lists the policies, so no change falls between the two.
        self.watches.watch_policies(self._on_policy_object)
        # The policies and exceptions that exist, read directly rather than waiting for the operator's watches
        # and reconciles to report them (they do, later, with the same specs: nothing changes then); the
        # evaluation worker starts compiling them while the reports and namespaces are read back.
        self._prime()
        evaluator = self._evaluator_now()
        # Started from a thread of its own: starting a process waits until it has exec'd, which took 0.2-0.6 s
        # on a busy 2-core host, and a restart with nothing changed needs no evaluation for its first scan.
        # Nothing below uses the evaluator before the join.
        spawner = threading.Thread(target=start_quietly, args=(evaluator,), daemon=True,
                                   name="vpol-worker-start") if evaluator is not None else None
        if spawner is not None:
            spawner.start()
        self.watches.start_namespaces()
        try:
            self.store.seed()
        finally:
            if spawner is not None:
                spawner.join()
        seeded = time.monotonic()
        self.watches.namespaces_synced(30)
        if not self.startup.wait(120):
            logger.warning("not every policy was reconciled within 120s; scanning with those that were")
        # Counted once the policies are known: a result's series carries its policy's severity and category.
        self.store.count_all()
        logger.info("background scans starting (%d reports read back in %.1fs)", len(self.store), seeded - started)
        self._active = True
        # Everything queued so far (policy arrivals, object changes) is covered by this scan, once a burst of
        # policy changes under way has arrived whole (it is not scanned half now, half later).
        queued = self._gather(self._events.queued(), always=True) + self._events.queued()
        if any(e[0] == "stop" for e in queued):
            self._events.put(("stop",))
            return
        self.store.meta_changed()
        self._full_scan(only=(self.validation,))
        # Every MutatingPolicy with mutateExisting runs once when scanning starts (as Kyverno's controller does for
        # every policy it finds), whatever its background setting; and every GeneratingPolicy: what was owed while
        # no replica led is generated now.
        self._policies_changed_in(Batch(mutating={p.key for p in self.mutation.policies()},
                                        generating={p.key for p in self.generation.policies()}))

    def _prime(self) -> None:
        """Tell the scanner every ValidatingPolicy, NamespacedValidatingPolicy and PolicyException there is now, and
        have the first scan wait until the operator's reconciles have handed over every other policy whose results
        are in the reports too (StartupPolicies, Scanner.expect)."""
        objects = Objects(self.api)
        try:
            listed = StartupPolicies.read(objects)
            exceptions, _next = active_exceptions(objects.policy_exceptions(), time.time())
        except Exception as exc:  # noqa: BLE001 - the operator's watches and reconciles tell them as well
            logger.warning("background scans: listing policies failed (%s); waiting for the operator's watch",
                           describe(exc))
            return
        self.set_exceptions(exceptions)
        for body in listed.bodies.get("ValidatingPolicy", ()):
            key = PolicyKey.from_meta("ValidatingPolicy", body.get("metadata") or {})
            try:
                self.hand_over(key, scanned_policy(body))
            except Exception:  # noqa: BLE001 - one unreadable policy does not stop the others
                logger.exception("background scans: could not read policy %s", key)
        self.expect(listed.keys())

    def _deactivate(self) -> None:
        self.watches.stop()
        self.evaluation.close()
        self.lifecycle_worker.close()
        # Another replica reports now: drop our view so series are not counted twice.
        self.store.clear()
        self._active = False

    def _gather(self, batch: list[Event], *, always: bool = False) -> list[Event]:
        def start_worker() -> None:
            evaluator = self._evaluator_now()
            if evaluator is not None:
                evaluator.start()

        def last_change() -> float:
            with self._lock:
                return self._policies_changed

        return self._events.gather(batch, last_change=last_change, on_arrival=start_worker, always=always)

    def _step(self) -> None:
        for runner in self.runners:
            runner.run_due()
        timeout = max(0.1, self.options.scan_interval - (time.monotonic() - self._last_full))
        first = self._events.get(min(timeout, 1.0))
        if first is None:
            if time.monotonic() - self._last_full >= self.options.scan_interval:
                self._full_scan()
            return
        batch = Batch.of(self._gather(self._events.batch(first, self.options.batch)))
        if batch.stop:
            return
        resync_all = batch.exceptions
        if batch.kinds:
            # Discovery changed (vpol.controller.handlers.crd_event): kinds newly matched are scanned whole.
            if set(self._wanted()) - set(self.watches.watched()):
                resync_all = True
            else:
                self._sync_watchers()
        if batch.policies_changed() or resync_all:
            self._sync_watchers()
            self.store.meta_changed()
        self._policies_changed_in(batch)
        if resync_all:
            self.images.exceptions_changed()
            self._full_scan()
        else:
            if batch.policies:
                self.validation.rescan(batch.policies, self._evaluator_now(), self.discovery.get())
            if batch.images:
                self.validation.rescan_images(batch.images, self.discovery.get())
        if batch.objects or batch.triggers:
            discovery = self.discovery.get()
            for runner in self.runners:
                if runner.objects_changed(batch, discovery):
                    self.store.drain()
        if self.generation.watches_changed.is_set():
            self.generation.watches_changed.clear()
            self._sync_watchers()

    # -- passes -----------------------------------------------------------------------------

    def _policies_changed_in(self, batch: Batch) -> None:
        """Each path's policies created, changed or gone in ``batch``: what they do at once, and the results of
        those gone out of the reports."""
        if not batch.policies_changed():
            return
        discovery = self.discovery.get()
        for runner in self.runners:
            gone = runner.policies_changed(batch, discovery)
            if gone:
                self.store.drop(gone)
        self.store.drain()

    def _full_scan(self, only: tuple[BackgroundRunner, ...] | None = None) -> None:
        """Every path's part of a full scan (``only`` these paths')."""
        evaluator = self._evaluator_now()
        started = time.perf_counter()
        # Values still in use stay shared; new ones are pooled afresh (bounds the pool).
        self.store.pool.clear()
        self._sync_watchers()
        writes = self.store.writes
        discovery = self.discovery.get()
        count = 0
        for runner in only or self.runners:
            acted_on = runner.periodic(discovery)
            if runner is self.validation:  # vpol_scan_resources_total counts what validation scans evaluated
                count = acted_on
        self.store.drain()
        self._last_full = time.monotonic()
        took = time.perf_counter() - started
        logger.info("full scan with %d policies: %d resources, %d report writes in %.1fs",
                    len(evaluator.policies) if evaluator else 0, count, self.store.writes - writes, took)
        metrics.SCAN_DURATION.labels("full").observe(took)
        metrics.SCAN_RESOURCES.labels("full").inc(count)
        metrics.SCAN_LAST_SUCCESS.set(time.time())

    # -- what the paths share ---------------------------------------------------------------

    def _wanted(self) -> dict[GVR, ResourceInfo]:
        discovery = self.discovery.get()
        wanted: dict[GVR, ResourceInfo] = {}
        for runner in self.runners:
            wanted.update(runner.watched(discovery))
        return wanted

    def _sync_watchers(self) -> None:
        self.watches.sync(self._wanted(), self._since)

    def _since(self, gvr: GVR) -> str:
        """Where a new watch of ``gvr`` starts: from the oldest resourceVersion a policy triggered by it was seen
        at (mutateExisting, generation), so no trigger is missed; "" (now) when none is, or one is not a number."""
        discovery = self.discovery.get()
        marks = [runner.trigger_since(gvr, discovery) for runner in self.runners]
        numbers = [int(m) for m in marks if m.isdigit()]
        return str(min(numbers)) if numbers else ""

    def _evaluator_now(self) -> SandboxedEvaluator | None:
        with self._lock:
            exceptions = list(self._exceptions)
        return self.evaluation.now(self.validation.policies(), exceptions, self.mutation.policies(),
                                   self.images.fingerprint(), bool(self.images.policies()))

    def _meta(self) -> dict[str, PolicyMeta]:
        """Report metadata of every policy with results (rebuilt only when the policy set changes: it is consulted
        for every resource)."""
        with self._lock:
            if self._meta_cache is None:
                self._meta_cache = {}
                # The validation scans' first: a policy of another path with the same key is reported with its own.
                for runner in sorted(self.runners, key=lambda r: r is not self.validation):
                    self._meta_cache.update(runner.report_meta())
            return self._meta_cache

    def _full_scope(self) -> list[str] | None:
        """What a full evaluation is of while mutateExisting or generation results share the reports (they stay):
        the validating and image policies; None (everything) otherwise."""
        if not (self.mutation.policies() or self.generation.policies()):
            return None
        return self.validation.names() + self.images.keys()


def _always() -> threading.Event:
    e = threading.Event()
    e.set()
    return e

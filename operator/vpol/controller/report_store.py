"""The background scans' report store: the results held per resource, the PolicyReport writes and their pool.

Every background path (validation and image scans, the mutation of existing objects, generation) hands its results
here, one resource at a time; the store merges them with the other policies' results of that resource and decides
whether its report must be written (only when a result changed), deleted, or left alone. Writes run on a pool of
writer threads while evaluation goes on; single results (mutateExisting's, a generation's) are held until the next
:meth:`ReportStore.drain` so one resource's report is written once for all of them.

At start-up the existing reports are read back (:meth:`ReportStore.seed`), so a restart rewrites nothing that is
unchanged. The results are counted into ``vpol_report_results`` per policy, namespace and result, labelled with the
policy's severity and category. Objects are never held here: memory holds the compact results per resource.

Only the replica that holds the scanner Lease writes reports, and only until it stops: ``may_write`` is asked before
every write (a write queued before the replica stopped or lost the Lease is dropped, not sent), and a pass that hands
over more writes after that ends with :class:`WritingStopped`. The replica that leads next reads the reports back and
writes what is missing once; a replica still writing would make it write those reports twice.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from vpol.controller import metrics
from vpol.desired.report import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    SCAN_KEY_ANNOTATION,
    SOURCE,
    EntryPool,
    PolicyMeta,
    ReportEntry,
    ResourceRef,
    Results,
    by_policy,
    entries_from_report,
    merge,
    report_for,
    report_name,
    reported_meta,
)
from vpol.kube.objects import written_by_vpol_only
from vpol.kube.reports import Reports

logger = logging.getLogger(__name__)

#: Concurrent report writes. Where the API server shares the cores with the operator (kind on a laptop, the
#: bench's 2 cores), more writes in flight give it a larger share of them: 16 writers took the scan of 16 policies
#: applied to a running operator with 2,000 Pods to 1.51-1.65x the write floor, against 1.63-1.73x with 8 (three
#: runs each, alternately); with nothing else running, 8 and 16 create reports equally fast (the report floor).
WRITERS = 16
#: Single results held (store_one) before they are queued without waiting for the next drain.
HELD_WRITES = 200
#: Report writes queued before the store waits for them (evaluation continues while earlier writes are in flight;
#: this bounds what is held for them).
MAX_PENDING_WRITES = 400


class WritingStopped(Exception):
    """This replica may no longer write reports (it is stopping, or it no longer holds the scanner Lease: another
    replica took it, or it could not renew it): the pass under way ends here, and whatever it had still to write is
    the next leader's."""


@dataclass(slots=True)
class Write:
    """One report write the store asks for."""

    ref: ResourceRef
    #: The results to report (the report body is built by the writer thread, so queued writes cost a few
    #: references each); None deletes the report.
    entries: Results | None
    meta: Mapping[str, PolicyMeta] | None = None
    key: str = ""
    #: No report is known to exist: create it (cheaper for the API server than an apply).
    create: bool = False


@dataclass(slots=True)
class Held:
    """What the store holds of one resource."""

    ref: ResourceRef
    #: Shared through the store's EntryPool (most resources have equal results).
    entries: Results
    written: bool
    #: What the entries were computed from (vpol.controller.validation_scans); "" when unknown.
    key: str = ""
    #: The report's resourceVersion as vpol last wrote it (updated at that version, see Reports.update); ""
    #: when unknown or when someone else also wrote it (then applied).
    version: str = ""


class ReportStore:
    """The results of every background path per resource, and the writes that keep the reports equal to them.

    Used from the scanner's thread only (the writer threads touch a resource's ``version`` and ``written`` alone).
    """

    def __init__(self, reports: Reports, meta: Callable[[], Mapping[str, PolicyMeta]],
                 full_scope: Callable[[], list[str] | None] = lambda: None,
                 may_write: Callable[[], bool] = lambda: True) -> None:
        self.reports = reports
        #: Whether this replica may write reports now (asked before each write: see the module's docstring).
        self.may_write = may_write
        #: The report metadata (severity, category, scored) of every policy whose results are kept: results of a
        #: policy not in it are dropped.
        self._meta = meta
        #: The policies a full evaluation is of, when results of other paths (mutateExisting, generation) share
        #: the reports and must stay (None: a full evaluation is of every policy there is).
        self._full_scope = full_scope
        self._held: dict[str, Held] = {}
        #: Report writes of single results held until the next drain (see store_one), by resource uid.
        self._deferred: dict[str, Write] = {}
        self.pool = EntryPool()
        self._writers = ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="vpol-report-writer")
        self._pending: deque[tuple[Write, Future[bool]]] = deque()
        #: Results in reports per (policy, namespace, result); published with the policy's severity and category.
        self._counts: Counter[tuple[str, str, str]] = Counter()
        #: Counts changed since they were last published (or whose policy's severity or category changed).
        self._changed_counts: set[tuple[str, str, str]] = set()
        #: The (severity, category) each count is published under (vpol_report_results' last two labels).
        self._published: dict[tuple[str, str, str], tuple[str, str]] = {}
        #: The report metadata of each policy as the reports were last written with (see meta_changed).
        self._written_meta: dict[str, PolicyMeta] = {}
        #: Report writes done (successfully) since the start.
        self.writes = 0

    # -- what is held -----------------------------------------------------------------------

    def get(self, uid: str) -> Held | None:
        return self._held.get(uid)

    def __len__(self) -> int:
        return len(self._held)

    def uids(self) -> Iterator[str]:
        return iter(list(self._held))

    def reported(self, uid: str, policy: str) -> str:
        """The result of ``policy`` in the report of the object ``uid`` ("" when none)."""
        held = self._held.get(uid)
        return next((e.result for e in held.entries if e.policy == policy), "") if held is not None else ""

    def pending(self) -> int:
        """Writes queued and not yet waited for."""
        return len(self._pending)

    # -- changes ----------------------------------------------------------------------------

    def store(self, ref: ResourceRef, fresh: list[ReportEntry], only: list[str] | None,
              key: str = "") -> Write | None:
        """Update the results of one resource with ``fresh`` results of ``only`` (None: every policy); return the
        write its report needs, if any.

        ``key`` says what the results were computed from ("" when unknown: the next full scan evaluates the
        resource again).
        """
        held = self._held.get(ref.uid)
        previous = held.entries if held else ()
        known = self._meta()
        if only is None:
            only = self._full_scope()
        merged = merge(by_policy(previous), fresh, only)
        entries = self.pool.results(e for p, e in merged.items() if p in known)
        if held is not None and entries == previous and (held.written or not entries):
            if held.key != key and entries:
                # Same results from newer inputs: remember them (the report is refreshed lazily, at its next real
                # change; until then a restart evaluates this object again).
                held.key = key
            return None
        self._count(previous, ref, -1)
        self._count(entries, ref, +1)
        if not entries:
            self._held.pop(ref.uid, None)
            if held is not None and held.written:
                return Write(ref, None)
            return None
        self._held[ref.uid] = Held(ref, entries, False, key, held.version if held is not None else "")
        return Write(ref, entries, known, key, create=held is None)

    def store_one(self, ref: ResourceRef, policy: str, entry: ReportEntry | None) -> None:
        """One policy's result on one resource (mutateExisting's, a generation's), written when it changed: with
        the other results of the same report that come before the next drain, in one write (a new Namespace
        selected by three GeneratingPolicies has one report write, not three: measured with bench/generate.py)."""
        write = self.store(ref, [entry] if entry is not None else [], [policy])
        if write is None:
            return
        self._deferred[ref.uid] = self._superseding(write)
        if len(self._deferred) >= HELD_WRITES:
            self._flush_deferred()

    def drop(self, policies: Collection[str] | None, *, keep: Collection[str] = ()) -> None:
        """Remove the results of ``policies`` (None: every result) from every resource but those in ``keep``
        (uids): resources a policy no longer matches, policies deleted, resources deleted while nobody watched."""
        only = sorted(policies) if policies is not None else None
        stale = [self.store(held.ref, [], only) for uid, held in list(self._held.items())
                 if uid not in keep and (policies is None or any(e.policy in policies for e in held.entries))]
        self.flush([w for w in stale if w is not None])

    def forget(self, uid: str) -> None:
        """The resource is gone: its report goes with it, by its owner reference (the garbage collector deletes
        it). Behind another API server (Kyverno's reports-server) the report is also deleted here: there the
        collector reaches reports through kube-controller-manager's watch of that server, and after reports-server
        restarted, a deleted resource's report was seen left in place for over 90 s (tests/e2e/test_reports_server.py)."""
        held = self._held.pop(uid, None)
        if held:
            self._count(held.entries, held.ref, -1)
            if held.written and self.reports.served_elsewhere:
                self.flush([Write(held.ref, None)])

    def clear(self) -> None:
        """Forget everything (another replica reports now: series are not counted twice)."""
        self.drain()
        self._held.clear()
        self._counts.clear()
        self._changed_counts.clear()
        self._published.clear()
        self._written_meta = {}
        metrics.REPORT_RESULTS.clear()

    # -- writes -----------------------------------------------------------------------------

    def flush(self, writes: list[Write]) -> None:
        """Queue report writes (or deletions) to the writer threads; a failed write is retried at the next scan.
        Waits only when too many are queued (see drain). Raises WritingStopped once this replica may not write."""
        if not self.may_write():
            raise WritingStopped()
        self.publish_counts()
        for w in writes:
            # A newer write of a report store_one holds replaces the held one (written after it, the held one
            # would put older results back).
            w = self._superseding(w)
            self._pending.append((w, self._writers.submit(self.write, w)))
        if len(self._pending) > MAX_PENDING_WRITES:
            self.drain(MAX_PENDING_WRITES // 2)

    def drain(self, keep: int = 0) -> None:
        """Wait for queued writes until at most ``keep`` are left (those store_one holds are queued first)."""
        if self._deferred:
            self._flush_deferred()
            self.publish_counts()
        while len(self._pending) > keep:
            w, future = self._pending.popleft()
            try:
                written = future.result()
            except Exception as exc:  # noqa: BLE001 - logged and counted; the next scan retries
                logger.warning("writing the report of %s/%s failed: %s", w.ref.kind, w.ref.name, exc)
                metrics.RECONCILE_ERRORS.labels("scan").inc()
            else:
                self.writes += written

    def write(self, w: Write) -> bool:
        """One report write (runs in a writer thread); False when it was not sent (this replica may not write)."""
        if not self.may_write():
            return False
        if w.entries is None:
            self.reports.delete(report_name(w.ref.uid), w.ref.namespace)
            metrics.REPORT_WRITES.labels("delete").inc()
            return True
        report = report_for(w.ref, by_policy(w.entries), w.meta or {}, w.key)
        version = self.reports.create(report) if w.create else None
        if version is None:
            held = self._held.get(w.ref.uid)
            if held is not None and held.version:
                version = self.reports.update(report, held.version)
            if version is None:
                version = self.reports.apply(report)
        metrics.REPORT_WRITES.labels("apply").inc()
        held = self._held.get(w.ref.uid)
        if held is not None:
            # Two writes of one report in flight at once may record their versions out of order: the next update
            # then fails its precondition and is applied instead.
            held.version = version
            if held.entries is w.entries:
                held.written = True
        return True

    def _superseding(self, write: Write) -> Write:
        """``write``, taking the place of the write store_one holds for the same report (if any): a create still,
        when the held one was to create the report."""
        held = self._deferred.pop(write.ref.uid, None)
        if held is not None and held.create and write.entries is not None and not write.create:
            return dataclasses.replace(write, create=True)  # the report was not written yet
        return write

    def _flush_deferred(self) -> None:
        writes, self._deferred = list(self._deferred.values()), {}
        for w in writes:
            self._pending.append((w, self._writers.submit(self.write, w)))

    # -- counts and metadata ----------------------------------------------------------------

    def count_all(self) -> None:
        """Count every held result (once the policies are known: a series carries its policy's severity)."""
        for held in self._held.values():
            self._count(held.entries, held.ref, +1)
        self.publish_counts()

    def _count(self, entries: Results, ref: ResourceRef, sign: int) -> None:
        """Count a resource's results in (or out of) vpol_report_results; the gauge itself is set once per chunk
        (publish_counts), not once per result."""
        for entry in entries:
            key = (entry.policy, ref.namespace, entry.result)
            self._counts[key] += sign
            self._changed_counts.add(key)

    def publish_counts(self) -> None:
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

    def meta_changed(self) -> None:
        """After policy changes: the reports holding results of a policy whose severity, category or scored
        annotation changed are written again (the rescan of the policy, or the next write of the report, finds
        them not written), and its counts are published under the new labels."""
        meta = self._meta()
        changed = {name for name, old in self._written_meta.items() if name in meta and meta[name] != old}
        self._written_meta = dict(meta)
        if not changed:
            return
        # A write queued with the old metadata that finished after this would mark its report written again.
        self.drain()
        for held in self._held.values():
            if any(e.policy in changed for e in held.entries):
                held.written = False
        self._changed_counts.update(key for key in self._counts if key[0] in changed)
        self.publish_counts()

    # -- start-up ---------------------------------------------------------------------------

    def seed(self) -> None:
        """What vpol's reports say (results and the scan key they were computed with), read back at start-up;
        counted into vpol_report_results by :meth:`count_all`, once the policies are known."""
        meta = {name: m.as_reported() for name, m in self._meta().items()}
        for report in self.reports.existing(f"{MANAGED_BY_LABEL}={MANAGED_BY}"):
            scope = report.get("scope") or {}
            md = report.get("metadata") or {}
            uid = str(scope.get("uid") or md.get("name", ""))
            if not uid:
                continue
            ref = ResourceRef.make(scope.get("apiVersion"), scope.get("kind"), scope.get("name"),
                                   scope.get("namespace"), uid)
            entries = self.pool.results(entries_from_report(report).values())
            key = str((md.get("annotations") or {}).get(SCAN_KEY_ANNOTATION, ""))
            version = str(md.get("resourceVersion", "")) if written_by_vpol_only(report) else ""
            written = True
            if md.get("name") != report_name(uid):
                # Written by an older vpol under the resource's bare UID, the name Kyverno gives its own reports:
                # removed, and its results rewritten under vpol's name by the first scan.
                self.reports.delete(str(md.get("name", "")), ref.namespace)
                written, key, version = False, "", ""
            elif _stale_meta(report, meta):
                # It says another severity, category or scored than its policy does now (changed while no vpol
                # ran): written again by the first scan.
                written = False
            self._held[uid] = Held(ref, entries, written, key, version)
        self._written_meta = dict(self._meta())


def _stale_meta(report: Mapping[str, Any], meta: Mapping[str, PolicyMeta]) -> bool:
    """Whether one of vpol's results in ``report`` carries other policy metadata than ``meta`` (as reported)."""
    for item in report.get("results") or []:
        if isinstance(item, Mapping) and item.get("source") == SOURCE:
            want = meta.get(str(item.get("policy", "")))
            if want is not None and reported_meta(item) != want:
                return True
    return False

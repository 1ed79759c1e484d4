"""ValidatingPolicies and ImageValidatingPolicies in background scans: the resources they evaluate and how.

Evaluation is a synthetic CREATE without userInfo or oldObject (as Kyverno's background scan makes it), in chunks:
one round trip to the evaluation worker (vpol.controller.scan_evaluator) per chunk, the first chunks small so the
report writers start early, each next one twice as large. ImageValidatingPolicies are evaluated in this process
beside them (vpol.controller.image_scans). False matchConditions leave no result. Results go to the report store
(vpol.controller.report_store) with the scan key they were computed from: a full scan skips a resource whose key is
unchanged while no policy reads anything but the object and its namespace.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from vpol.controller import metrics
from vpol.controller.background_runner import Handed, RunnerDefaults
from vpol.controller.image_scans import ImageScans
from vpol.controller.report_store import WRITERS, ReportStore
from vpol.controller.scan_evaluator import ScanEvaluator
from vpol.controller.scan_events import Batch
from vpol.controller.scan_startup import background_scanned
from vpol.controller.scan_watches import GVR, ScanWatches
from vpol.desired.events import SOURCE_SCAN, ObjectRef, Violation, violating, violation_events
from vpol.desired.report import PolicyMeta, ReportEntry, ResourceRef, by_policy, now_seconds
from vpol.engine.evaluate import SKIP, Result
from vpol.engine.scope import matched_resources
from vpol.engine.subjects import subject_for
from vpol.model.discovery import Discovery, ResourceInfo
from vpol.policies.registry import kind_of
from vpol.policies.sandbox import SandboxedEvaluator
from vpol.policies.validating.model import ValidatingPolicy

logger = logging.getLogger(__name__)

#: Resources evaluated per round trip to the evaluation worker.
CHUNK = 200
#: The first round trip of a pass evaluates this many; each next one twice as many, up to CHUNK. The report
#: writers start on the first chunk's results instead of waiting for a whole CHUNK (200 Pods x 16 policies took
#: 0.7 s on a busy 2-core host before the first write), and each chunk is evaluated while the one before it is
#: written (evaluating a resource costs less than writing its report), so they are not left idle after it.
FIRST_CHUNK = 2 * WRITERS


class ValidationScans(RunnerDefaults):
    """The ValidatingPolicies scanned with (thread-safe to set) and the passes that evaluate them and the
    ImageValidatingPolicies over existing resources (the scanner's thread)."""

    def __init__(self, store: ReportStore, watches: ScanWatches, evaluation: ScanEvaluator, images: ImageScans,
                 evaluator: Callable[[], SandboxedEvaluator | None], events: Any = None) -> None:
        self.store = store
        #: The worker that evaluates the policies now (started on first use; vpol.controller.scan_evaluator).
        self.evaluator = evaluator
        self.watches = watches
        self.evaluation = evaluation
        self.images = images
        #: Where PolicyViolation Events of new failing results go (vpol.controller.events; None: off).
        self.events = events
        self._lock = threading.Lock()
        self._policies: dict[str, ValidatingPolicy] = {}

    # -- the policies -----------------------------------------------------------------------

    kind = "ValidatingPolicy"
    reports_results = True

    def hand_over(self, key: str, policy: Any | None, **details: Any) -> Handed:
        if not self.set_policy(key, policy):
            return Handed()
        return Handed(changed=True, settle=True, event=("policy", key))

    def set_policy(self, name: str, policy: ValidatingPolicy | None) -> bool:
        """Scan with ``policy`` (None, or one not background-scanned: no more); whether that changed anything.

        A generation of the same object older than the one held is ignored (the reconcile may have read an older
        version than the scanner's watch), and so is a change of neither spec nor annotations (status writes)."""
        if not background_scanned(policy):
            policy = None
        with self._lock:
            old = self._policies.get(name)
            if policy is None and old is None:
                return False
            if policy is not None and old is not None and policy.uid and policy.uid == old.uid and \
                    policy.generation < old.generation:
                return False
            if policy is not None and old is not None and old.spec == policy.spec and \
                    old.annotations == policy.annotations:
                return False
            if policy is None:
                self._policies.pop(name, None)
            else:
                self._policies[name] = policy
        return True

    def policies(self) -> list[ValidatingPolicy]:
        with self._lock:
            return sorted(self._policies.values(), key=lambda p: p.name)

    def get(self, name: str) -> ValidatingPolicy | None:
        with self._lock:
            return self._policies.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._policies)

    def named(self) -> dict[str, ValidatingPolicy]:
        """The policies by the names they were set under."""
        with self._lock:
            return dict(self._policies)

    def report_meta(self) -> dict[str, PolicyMeta]:
        with self._lock:
            return {name: PolicyMeta.of(p.severity, p.category, p.scored) for name, p in self._policies.items()}

    def watched(self, discovery: Discovery) -> dict[GVR, ResourceInfo]:
        """The listable resource types the policies (and their autogen variants) match."""
        wanted: dict[GVR, ResourceInfo] = {}
        for policy in self.policies():
            for info in matched_resources(kind_of(policy).variants(policy), discovery):
                if "list" in info.verbs or not info.verbs:
                    wanted[(info.group, info.version, info.resource)] = info
        return wanted

    # -- passes -----------------------------------------------------------------------------

    def rescan(self, names: set[str], evaluator: SandboxedEvaluator | None, discovery: Discovery) -> None:
        """Evaluate only these ValidatingPolicies, in one pass over the kinds they match; resources they no longer
        match (or results of deleted ones) lose their results."""
        gvrs: dict[GVR, None] = {}
        present = [p for p in (self.get(n) for n in names) if p is not None]
        for policy in present:
            for info in matched_resources(kind_of(policy).variants(policy), discovery):
                gvrs[(info.group, info.version, info.resource)] = None
        writes = self.store.writes
        count, took = self._incremental(lambda: self._pass(list(gvrs), sorted(names), evaluator,
                                                           evaluate=bool(present)))
        logger.info("rescan for %d changed polic%s: %d resources, %d report writes in %.1fs", len(names),
                    "y" if len(names) == 1 else "ies", count, self.store.writes - writes, took)

    def rescan_images(self, keys: set[str], discovery: Discovery) -> None:
        """Evaluate only these ImageValidatingPolicies, over the kinds they match; objects they no longer match
        (or results of a deleted policy) lose their results."""
        self._incremental(lambda: self._pass(list(self.images.watched(discovery, sorted(keys))), sorted(keys), None))

    def objects_changed(self, batch: Batch, discovery: Discovery) -> int:
        """Objects created, changed or deleted (the last event of each uid): evaluate those that are there with the
        ValidatingPolicies and ImageValidatingPolicies, forget those deleted (their reports go with them, by owner
        reference). Their report writes are not waited for."""
        objects, evaluator = batch.objects, self.evaluator
        if not objects:
            return 0

        def run() -> int:
            for uid, (etype, _obj) in objects.items():
                if etype == "DELETED":
                    self.store.forget(uid)
            self.store.publish_counts()
            changed = [obj for etype, obj in objects.values() if etype != "DELETED"]
            self.scan_objects(changed, None, evaluator())
            return len(changed)

        count, _took = self._incremental(run)
        return count

    def periodic(self, discovery: Discovery) -> int:
        """Every ValidatingPolicy and ImageValidatingPolicy over every watched type (scan_all)."""
        return self.scan_all(self.evaluator())

    def scan_all(self, evaluator: SandboxedEvaluator | None) -> int:
        """Evaluate every policy over every watched type; results of resources not seen are removed (the caller
        waits for the writes)."""
        return self._pass(self.watches.watched(), None, evaluator)

    def _incremental(self, run: Callable[[], int]) -> tuple[int, float]:
        """Run one incremental pass (``run`` returns the resources it evaluated) and wait for its writes."""
        started = time.perf_counter()
        count = run()
        self.store.drain()
        took = time.perf_counter() - started
        metrics.SCAN_DURATION.labels("incremental").observe(took)
        metrics.SCAN_RESOURCES.labels("incremental").inc(count)
        return count, took

    def _pass(self, gvrs: list[GVR], only: list[str] | None, evaluator: SandboxedEvaluator | None, *,
              evaluate: bool = True) -> int:
        seen: set[str] = set()

        def listed() -> Iterable[dict[str, Any]]:
            for obj in self.watches.list_all(gvrs, CHUNK):
                seen.add((obj.get("metadata") or {}).get("uid", ""))
                yield obj

        count = self.scan_objects(listed(), only, evaluator) if evaluate else 0
        self.store.drop(only, keep=seen)
        return count

    def scan_objects(self, objects: Iterable[dict[str, Any]], only: list[str] | None,
                     evaluator: SandboxedEvaluator | None) -> int:
        """Evaluate objects in chunks (one worker round trip each) and write changed reports.

        ``evaluator`` holds the policies as they were when the pass started: a policy that changes meanwhile is
        queued for the next pass, instead of restarting the evaluation worker in the middle of this one.
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

    def _scan_chunk(self, evaluator: SandboxedEvaluator | None, objects: list[dict[str, Any]],
                    only: list[str] | None) -> int:
        refs = [ResourceRef.of(o) for o in objects]
        keys = {ref.uid: self.scan_key(obj) for ref, obj in zip(refs, objects)}
        # A full evaluation of an object nothing has changed about would only reproduce its report.
        pairs = [(ref, obj) for ref, obj in zip(refs, objects)
                 if ref.uid and not (only is None and self._unchanged(ref, keys[ref.uid]))]
        skipped = sum(1 for ref in refs if ref.uid) - len(pairs)
        results: list[list[Result]] = [[] for _ in pairs]
        images = self.images.policies()
        subjects = [subject_for(obj, operation="CREATE", resolve=self.watches.resolve,
                                namespaces=self.watches.namespaces, default_namespace="")
                    for _ref, obj in pairs] if (evaluator or images) else []
        if evaluator is not None and pairs:
            started = time.perf_counter()
            results = evaluator.evaluate_many(subjects, only)
            elapsed = time.perf_counter() - started
            for _ in subjects:
                metrics.EVALUATION_DURATION.observe(elapsed / len(subjects))
        if images and pairs:
            for index, found in enumerate(self.images.evaluate_many(subjects, only)):
                results[index] = [*results[index], *found]
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
            write = self.store.store(ref, fresh, only, self._key_after(ref, keys[ref.uid], only))
            if write is not None:
                writes.append(write)
        for labels, n in tally.items():
            metrics.POLICY_RESULTS.labels(*labels).inc(n)
        self.store.flush(writes)
        return len(pairs) + skipped

    # -- scan keys --------------------------------------------------------------------------

    def scan_key(self, obj: dict[str, Any]) -> str:
        """What a full evaluation of ``obj`` depends on; "" when that cannot be told."""
        md = obj.get("metadata") or {}
        namespace = str(md.get("namespace") or "")
        ns_version = ""
        if namespace:
            ns = self.watches.namespaces.get(namespace)
            ns_version = str(((ns or {}).get("metadata") or {}).get("resourceVersion", ""))
            if not ns_version:
                return ""  # the namespace is not in our cache yet: its labels are unknown
        return f"{md.get('resourceVersion', '')}/{ns_version}/{self.evaluation.policy_hash}"

    def _key_after(self, ref: ResourceRef, key: str, only: list[str] | None) -> str:
        """The key a resource's results have after evaluating ``only`` (None: every policy).

        A partial evaluation keeps a key when it covered every policy, or when the other policies' results were
        computed from this same version of the object and namespace.
        """
        if only is None or not key:
            return key
        if set(only) >= set(self.names()):
            return key
        held = self.store.get(ref.uid)
        if held is not None and held.key and held.key.rsplit("/", 1)[0] == key.rsplit("/", 1)[0]:
            return key
        return ""

    def _unchanged(self, ref: ResourceRef, key: str) -> bool:
        held = self.store.get(ref.uid)
        return bool(self.evaluation.pure and held is not None and held.written and held.key and held.key == key)

    def _record_violations(self, ref: ResourceRef, fresh: list[ReportEntry]) -> None:
        """PolicyViolation Events for the failing (warning, erroring) results that are new for this resource: an
        unchanged result, also one read back from its report after a restart, makes no event again."""
        held = self.store.get(ref.uid)
        before = by_policy(held.entries) if held else {}
        resource = ObjectRef(ref.api_version, ref.kind, ref.name, ref.namespace, ref.uid)
        specs = []
        for entry in fresh:
            old = before.get(entry.policy)
            if not violating(entry.result) or (old is not None and (old.result, old.message) ==
                                               (entry.result, entry.message)):
                continue
            policy = self.get(entry.policy)
            if policy is None:
                continue
            ref_policy = ObjectRef(policy.api_version, policy.kind, policy.name, policy.namespace, policy.uid)
            specs += violation_events(Violation(ref_policy, resource, entry.result, entry.message),
                                      source=SOURCE_SCAN)
        if specs:
            self.events.record(specs)


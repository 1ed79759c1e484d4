"""Scheduled deletion (DeletingPolicies and NamespacedDeletingPolicies), run by the scanner.

Not a loop of its own: the scanner (leader only) asks it every second which policies are due and runs them on its
own thread. Kyverno's cleanup controller's semantics (docs/internals/generating-and-deleting.md, "Deletion"):

- a policy runs at the first time its ``schedule`` names after ``status.lastExecutionTime`` (after its
  ``creationTimestamp`` before its first run), so the schedule survives operator restarts and leader changes; a
  controller away for several periods runs once; a successful run writes ``status.lastExecutionTime``;
- a run lists every resource of the policy's matchConstraints (a namespaced policy: its namespace only), keeps the
  objects its constraints select (any operation), that no PolicyException exempts and whose ``conditions`` all
  hold (``object`` the object, ``namespaceObject`` its Namespace), and deletes them with the policy's
  ``deletionPropagationPolicy`` (rate-limited, each delete guarded by the object's uid);
- before a run the operator asks the API server whether it may list and delete each of those resources: when it
  may not, nothing is deleted, the run does not count as done, and the policy's status names what is missing
  (Kyverno skips such resources silently); the next attempt is at the next scheduled time;
- an object that cannot be evaluated or deleted fails the run (it is retried at the next scheduled time, and the
  other objects are deleted); Events say what was deleted and what failed; metrics
  ``vpol_deleting_policy_runs_total``, ``vpol_deleted_objects_total`` and ``vpol_deletion_errors_total``.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.cel.backend import Backend, using
from vpol.controller import metrics
from vpol.controller.background_runner import Handed, RunnerDefaults
from vpol.controller.token_bucket import TokenBucket
from vpol.desired.events import EventSpec, ObjectRef
from vpol.desired.report import PolicyMeta
from vpol.engine.evaluate import ERROR, PASS, Result, SubjectData, compile_exception
from vpol.engine.request import ResourceType, Subject
from vpol.engine.scope import trigger_resources
from vpol.engine.subjects import subject_for
from vpol.kube.access import AccessChecker
from vpol.kube.dynamic import delete_object, list_pages
from vpol.kube.errors import describe
from vpol.model import schedule
from vpol.model.discovery import Discovery, ResourceInfo
from vpol.model.policy import GROUP, PolicyException
from vpol.policies.deleting.engine import DeletingPolicyEngine
from vpol.policies.deleting.model import DeletingPolicy
from vpol.policies.sandbox import SandboxedEvaluator

logger = logging.getLogger(__name__)

#: Kyverno's event source for deletions.
SOURCE = "vpol-cleanup"


def parse_time(text: str) -> datetime.datetime | None:
    """An RFC 3339 time as the API server writes it (None when absent or unreadable)."""
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def due_at(policy: DeletingPolicy, last_execution: str) -> datetime.datetime | None:
    """When ``policy`` runs next: the first scheduled time after its last run (or its creation)."""
    after = parse_time(last_execution) or parse_time(str((policy.raw.get("metadata") or {}).get("creationTimestamp")
                                                         or ""))
    if after is None:
        after = datetime.datetime.now(datetime.timezone.utc)
    return schedule.next_run(policy.spec.schedule, after)


def candidates(policy: DeletingPolicy, discovery: Discovery) -> list[ResourceInfo]:
    """The resources a run lists: those of the policy's resource rules that can be listed and deleted."""
    return [i for i in trigger_resources(policy, discovery)
            if not i.verbs or ("list" in i.verbs and "delete" in i.verbs)]


def needed_permissions(policy: DeletingPolicy, discovery: Discovery) -> list[tuple[str, str, str]]:
    return [(i.group, i.version, i.resource) for i in candidates(policy, discovery)]


@dataclass
class RunOutcome:
    deleted: int = 0
    kept: int = 0
    errors: int = 0
    #: What the operator may not do (nothing was deleted then).
    missing: tuple[str, ...] = ()


class Deletion(RunnerDefaults):
    def __init__(self, api: client.ApiClient, *, resolve: Callable[[str, str], ResourceType | None],
                 namespaces: dict[str, dict[str, Any]], discovery: Callable[[], Discovery],
                 backend: Backend | None = None, access: AccessChecker | None = None,
                 write_status: Callable[[str, dict[str, Any]], object] | None = None,
                 events: Any = None, deletes_per_second: float = 50.0,
                 on_run: Callable[[str], None] | None = None, worker: SandboxedEvaluator | None = None):
        self.api = api
        #: Where the policies are evaluated, with the deadline and memory cap of every evaluation (None: in this
        #: process, under ``backend``).
        self.worker = worker
        self.resolve = resolve
        self.namespaces = namespaces
        self.discovery = discovery
        self.backend = backend or Backend()
        self.access = access
        #: write_status(policy key, status fields): a merge patch of the policy's status.
        self.write_status = write_status or (lambda key, status: None)
        self.events = events
        #: Told the key of a policy after each of its runs (its status is reconciled: missing permissions).
        self.on_run = on_run or (lambda key: None)
        self._bucket = TokenBucket(deletes_per_second)
        self._lock = threading.Lock()
        self._policies: dict[str, DeletingPolicy] = {}
        self._last: dict[str, str] = {}
        self._exceptions: list[PolicyException] = []
        #: When each policy runs next (None: its schedule names no future time).
        self._due: dict[str, datetime.datetime | None] = {}
        #: What the last run of each policy found missing (for its status).
        self.missing: dict[str, tuple[str, ...]] = {}

    # -- the policies (thread-safe) ---------------------------------------------------------------------------

    kind = "DeletingPolicy"

    def hand_over(self, key: str, policy: Any | None, **details: Any) -> Handed:
        """A DeletingPolicy to run on its schedule (None: no more), with its ``status.lastExecutionTime``
        (``last_execution``)."""
        self.set_policy(key, policy, str(details.get("last_execution", "")))
        return Handed()

    def set_policy(self, key: str, policy: DeletingPolicy | None, last_execution: str = "") -> None:
        """A valid policy and its ``status.lastExecutionTime`` (None: gone or invalid)."""
        with self._lock:
            if policy is None:
                self._policies.pop(key, None)
                self._due.pop(key, None)
                self._last.pop(key, None)
                self.missing.pop(key, None)
                return
            old, old_last = self._policies.get(key), self._last.get(key, "")
            self._policies[key] = policy
            # The status may lag behind a run this replica made (its write is on the way): the later time counts.
            newer = max(last_execution, old_last, key=lambda t: parse_time(t) or datetime.datetime.min.replace(
                tzinfo=datetime.timezone.utc))
            self._last[key] = newer
            if old is None or old.spec.schedule != policy.spec.schedule or newer != old_last or key not in self._due:
                self._due[key] = due_at(policy, newer)

    def set_exceptions(self, exceptions: Iterable[PolicyException]) -> None:
        with self._lock:
            self._exceptions = list(exceptions)

    def policies(self) -> list[DeletingPolicy]:
        with self._lock:
            return sorted(self._policies.values(), key=lambda p: p.key)

    def next_run(self, key: str) -> datetime.datetime | None:
        with self._lock:
            return self._due.get(key)

    def due(self, now: datetime.datetime | None = None) -> list[str]:
        """The policies whose time has come."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        with self._lock:
            return sorted(k for k, at in self._due.items() if at is not None and at <= now)

    # -- a run ------------------------------------------------------------------------------------------------

    def report_meta(self) -> dict[str, PolicyMeta]:
        """Nothing: deletion writes no results into reports (its runs are Events and metrics)."""
        return {}

    def run_due(self) -> int:
        """Run every policy whose time has come."""
        return sum(self.run(key).deleted for key in self.due())

    def run(self, key: str) -> RunOutcome:
        with self._lock:
            policy = self._policies.get(key)
            exceptions = list(self._exceptions)
        if policy is None:
            return RunOutcome()
        started = datetime.datetime.now(datetime.timezone.utc)
        discovery = self.discovery()
        resources = candidates(policy, discovery)
        outcome = RunOutcome()
        if self.access is not None:
            needed = [(i.group, i.version, i.resource) for i in resources]
            outcome.missing = tuple(self.access.missing(needed, verbs=("list", "delete")))
        if outcome.missing:
            logger.warning("deleting policy %s: not run, the operator lacks %s", key, ", ".join(outcome.missing))
            metrics.DELETING_RUNS.labels(key, "forbidden").inc()
        else:
            engine = DeletingPolicyEngine(policy, [compile_exception(e) for e in exceptions])
            if self.worker is not None:
                self.worker.load(key, "DeletingPolicy", policy, exceptions)
            for info in resources:
                self._run_resource(policy, engine, info, outcome)
            if self.worker is not None:
                self.worker.unload(key)  # loaded again by the next run, with the exceptions of then
            metrics.DELETING_RUNS.labels(key, "failed" if outcome.errors else "succeeded").inc()
            logger.info("deleting policy %s: %d deleted, %d kept, %d errors", key, outcome.deleted, outcome.kept,
                        outcome.errors)
        with self._lock:
            self.missing[key] = outcome.missing
            if outcome.missing or outcome.errors:
                # Tried again at the next scheduled time; lastExecutionTime stays (Kyverno retries a failed run).
                self._due[key] = schedule.next_run(policy.spec.schedule, started)
            else:
                stamp = rfc3339(started)
                self._last[key] = stamp
                self._due[key] = schedule.next_run(policy.spec.schedule, started)
        if not outcome.missing and not outcome.errors:
            try:
                self.write_status(key, {"lastExecutionTime": rfc3339(started)})
            except Exception as exc:  # noqa: BLE001 - the next reconcile reads the status again
                logger.warning("deleting policy %s: writing status.lastExecutionTime failed: %s", key, describe(exc))
        self.on_run(key)
        return outcome

    def _run_resource(self, policy: DeletingPolicy, engine: DeletingPolicyEngine, info: ResourceInfo,
                      outcome: RunOutcome) -> None:
        namespace = policy.namespace if info.namespaced else ""
        if policy.namespace and not info.namespaced:
            return  # a namespaced policy never deletes cluster-scoped objects
        selector = _label_selector(policy)
        try:
            pages = list_pages(self.api, info.group, info.version, info.resource, namespace=namespace,
                               label_selector=selector)
            for items, _rv in pages:
                for obj in items:
                    try:
                        self._consider(policy, engine, info, obj, outcome)
                    except Exception as exc:  # noqa: BLE001 - one object's failure fails the run, not the others
                        outcome.errors += 1
                        metrics.DELETION_ERRORS.labels(policy.key).inc()
                        logger.warning("deleting policy %s: %s %s: %s", policy.key, info.kind,
                                       (obj.get("metadata") or {}).get("name"), describe(exc))
        except ApiException as exc:
            outcome.errors += 1
            metrics.DELETION_ERRORS.labels(policy.key).inc()
            self._event(policy, None, f"failed to list {info.resource}: {describe(exc)}", warning=True)

    def _evaluate(self, engine: DeletingPolicyEngine, subject: Subject) -> Result | None:
        """What the policy says of ``subject`` (None: it does not select it), evaluated in the worker when there is
        one; one that runs past its deadline or memory cap is an error of this object."""
        if self.worker is None:
            with using(self.backend):
                return engine.evaluate(subject)
        if not engine.ok or not engine.selects(subject):
            return None
        status, answer = self.worker.call(engine.policy.key, "evaluate", [subject])
        if status == "ok":
            return answer[0]  # type: ignore[no-any-return]
        api_version, kind, namespace, name, uid = SubjectData(subject).identity()
        return Result(engine.policy.key, ERROR, str(answer), api_version, kind, namespace, name, uid)

    def _consider(self, policy: DeletingPolicy, engine: DeletingPolicyEngine, info: ResourceInfo,
                  obj: dict[str, Any], outcome: RunOutcome) -> None:
        try:
            subject = subject_for(obj, operation="CREATE", resolve=self.resolve, namespaces=self.namespaces,
                                  default_namespace="")
        except Exception:  # noqa: BLE001 - a kind nobody can place is not considered
            return
        verdict = self._evaluate(engine, subject)
        if verdict is None:
            return
        md = obj.get("metadata") or {}
        target = ObjectRef(str(obj.get("apiVersion") or info.api_version), info.kind, str(md.get("name") or ""),
                           str(md.get("namespace") or ""), str(md.get("uid") or ""))
        where = f"{info.kind}/{target.namespace + '/' if target.namespace else ''}{target.name}"
        if verdict.result == ERROR:
            outcome.errors += 1
            metrics.DELETION_ERRORS.labels(policy.key).inc()
            self._event(policy, target, f"failed to evaluate the target resource {where}: {verdict.message}",
                        warning=True)
            return
        if verdict.result != PASS:
            outcome.kept += 1
            return
        self._bucket.take()
        try:
            delete_object(self.api, info.group, info.version, info.resource, target.namespace, target.name,
                          propagation_policy=policy.spec.deletion_propagation_policy, uid=target.uid)
        except ApiException as exc:
            if exc.status == 409:  # the uid precondition: it was replaced meanwhile
                return
            outcome.errors += 1
            metrics.DELETION_ERRORS.labels(policy.key).inc()
            self._event(policy, target, f"failed to delete the target resource {where}: {describe(exc)}",
                        warning=True)
            return
        outcome.deleted += 1
        metrics.DELETED_OBJECTS.labels(policy.key, info.resource).inc()
        self._event(policy, target, f"successfully deleted the target resource {where}", warning=False)

    def _event(self, policy: DeletingPolicy, target: ObjectRef | None, note: str, *, warning: bool) -> None:
        if self.events is None:
            return
        regarding = ObjectRef(f"{GROUP}/v1", policy.kind, policy.name, policy.namespace, policy.uid)
        self.events.record([EventSpec(SOURCE, "Resource Cleaned Up", regarding, target, note,
                                      reason="PolicyError" if warning else "PolicyApplied",
                                      type="Warning" if warning else "Normal")])


def _label_selector(policy: DeletingPolicy) -> str:
    """The objectSelector's matchLabels as a label selector (a first filter; the engine checks the whole
    selector)."""
    constraints = policy.spec.match_constraints
    selector = constraints.object_selector if constraints else None
    labels = dict(selector.match_labels) if selector is not None else {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


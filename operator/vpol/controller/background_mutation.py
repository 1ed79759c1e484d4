"""Mutation of existing objects (MutatingPolicies with ``evaluation.mutateExisting.enabled``), run by the scanner.

Not a loop of its own: the scanner (leader only) hands it what its watches and its schedule produce, on its own
thread, and it evaluates with the scanner's bounded worker process (the mutate path of the engine,
``MutatingPolicyEngine.mutate_target``) and reports through the scanner's report store. When it runs (Kyverno's
semantics, docs/mutate-existing.md):

- **the policy was created or changed**: every target (listed targets), or the targets resolved from every
  existing trigger (an expression);
- **a trigger**: a change of an object ``matchConstraints`` matches (operations: ADDED is CREATE, MODIFIED is
  UPDATE, DELETED is DELETE), when admission is enabled and the trigger's matchConditions hold: every target
  (listed), or those the expression resolves from that trigger. vpol sees triggers through its watches rather than
  through admission requests (so one replica does all the work, and dry runs never trigger): the trigger's
  ``request`` has no userInfo and no oldObject. An object whose deletion waits for finalizers or a grace period
  is deleted, as an admission request sees it, when its ``deletionTimestamp`` appears: that change is its DELETE
  trigger (with the object as it was before), and its removal later is not a second one. Changes vpol itself made
  to targets are not triggers (``skipBackgroundRequests``, default true);
- **background scans** (``evaluation.background.enabled``): every target again at each full scan (listed targets).

Each target: evaluated with the trigger's request (or a synthetic UPDATE of itself); when the mutation changed
it, written as a JSON patch under the field manager ``vpol``, guarded by its resourceVersion (nothing vpol did
not compute is overwritten: a conflict re-reads the object, evaluates again and retries, three times at most);
nothing is written when nothing changed. Writes go through a token bucket (``writes_per_second``) and a small
pool of threads. Results go to the target's PolicyReport (``pass``, message ``success``, when mutated or already
conformant; ``error`` with the reason) and to ``vpol_background_mutations_total{policy, result}``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import jsonpatch
from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.controller import metrics
from vpol.controller.background_runner import Handed, RunnerDefaults
from vpol.controller.scan_events import Batch
from vpol.controller.token_bucket import TokenBucket
from vpol.controller.triggers import Operations, TriggeredPolicies, trigger_subject
from vpol.desired.report import ReportEntry, ResourceRef, now_seconds
from vpol.engine.evaluate import ERROR, PASS, Result
from vpol.engine.match import constraints_match
from vpol.engine.request import ResourceType, Subject
from vpol.engine.scope import trigger_resources
from vpol.engine.subjects import subject_for
from vpol.kube.dynamic import get_object, json_patch_object, list_pages
from vpol.kube.errors import describe
from vpol.kube.objects import FIELD_MANAGER
from vpol.model.discovery import Discovery, ResourceInfo
from vpol.policies.mutating.model import MutatingPolicy
from vpol.policies.mutating.mutate_existing import as_target, resolved_route, selects_target, target_resources
from vpol.policies.sandbox import SandboxedEvaluator

logger = logging.getLogger(__name__)

#: Targets evaluated per round trip to the worker.
CHUNK = 200
#: Attempts to write one target when it keeps changing under us.
ATTEMPTS = 3


@dataclass
class _Pending:
    """A target whose mutation changed it: to be written."""

    info: ResourceInfo
    subresource: str
    before: dict[str, Any]
    after: dict[str, Any]
    request: dict[str, Any] | None
    attempt: int = 1


class BackgroundMutation(RunnerDefaults):
    def __init__(self, api: client.ApiClient, *, evaluator: Callable[[], SandboxedEvaluator | None],
                 resolve: Callable[[str, str], ResourceType | None], namespaces: dict[str, dict[str, Any]],
                 store: Callable[[ResourceRef, str, ReportEntry | None], None], writes_per_second: float = 50.0,
                 writers: int = 4):
        self.api = api
        self.evaluator = evaluator
        self.resolve = resolve
        self.namespaces = namespaces
        #: store(target, policy key, entry or None): the scanner's report store for one policy's result.
        self.store = store
        self.writes_per_second = writes_per_second
        self._pool = ThreadPoolExecutor(max_workers=writers, thread_name_prefix="vpol-mutate-writer")
        #: The policies, the resourceVersion each spec was seen at (a trigger watch started for it later replays the
        #: changes since) and the objects vpol wrote last (their change events are not triggers).
        self._triggered: TriggeredPolicies[MutatingPolicy] = TriggeredPolicies(restart_on_change=True)
        self._operations = Operations()
        self._bucket = TokenBucket(writes_per_second)
        self.writes = 0

    # -- the policies (thread-safe) ---------------------------------------------------------------------------

    kind = "MutatingPolicy"
    reports_results = True

    def hand_over(self, key: str, policy: Any | None, **details: Any) -> Handed:
        """A MutatingPolicy that mutates existing objects (None: no more); a created or changed spec mutates every
        target at once."""
        return Handed(changed=True, event=("mutating", key)) if self.set_policy(key, policy) else Handed()

    def set_policy(self, key: str, policy: MutatingPolicy | None) -> bool:
        """A policy that mutates existing objects (None: stop). True when what evaluation depends on changed."""
        changed = self._triggered.set(key, policy)
        return changed is not None and changed is not False

    def policies(self) -> list[MutatingPolicy]:
        return self._triggered.policies()

    def get(self, key: str) -> MutatingPolicy | None:
        return self._triggered.get(key)

    def watched(self, discovery: Discovery) -> dict[tuple[str, str, str], ResourceInfo]:
        """What the scanner must watch for these policies: their triggers and their targets."""
        out: dict[tuple[str, str, str], ResourceInfo] = {}
        for policy in self.policies():
            infos = [*trigger_resources(policy, discovery), *(i for i, _sub in target_resources(policy, discovery))]
            for info in infos:
                if "list" in info.verbs or not info.verbs:
                    out[(info.group, info.version, info.resource)] = info
        return out

    def trigger_since(self, gvr: tuple[str, str, str], discovery: Discovery) -> str:
        """Where a new watch of ``gvr`` starts (vpol.controller.triggers.TriggeredPolicies.trigger_since)."""
        return self._triggered.trigger_since(gvr, discovery)

    # -- when it runs ------------------------------------------------------------------------------------------

    def policy_changed(self, keys: Iterable[str], discovery: Discovery) -> int:
        """The policies were created or changed: every target (or the targets of every existing trigger)."""
        count = 0
        for key in sorted(keys):
            policy = self.get(key)
            if policy is None:
                continue
            if policy.spec.target_expression:
                for trigger in self._existing_triggers(policy, discovery):
                    count += self._resolve_and_mutate(policy, trigger, discovery)
            else:
                count += self.mutate_all(policy, None, discovery)
        return count

    def policies_changed(self, batch: Batch, discovery: Discovery) -> set[str]:
        """MutatingPolicies created, changed or gone (``batch.mutating``): the targets of those present are mutated
        (policy_changed); those gone are returned."""
        present = {k for k in batch.mutating if self.get(k) is not None}
        if present:
            self.policy_changed(present, discovery)
        return batch.mutating - present

    def periodic(self, discovery: Discovery) -> int:
        """A full background scan: every target of the background-enabled policies with listed targets."""
        return sum(self.mutate_all(p, None, discovery) for p in self.policies()
                   if p.spec.evaluation.background_enabled and not p.spec.target_expression)

    def objects_changed(self, batch: Batch, discovery: Discovery) -> int:
        """Changes seen by the scanner's watches: the triggers among them."""
        events = batch.triggers
        policies = [p for p in self.policies() if p.spec.evaluation.admission_enabled]
        if not policies:
            return 0
        count = 0
        listed_done: set[str] = set()
        for etype, obj in events:
            md = obj.get("metadata") or {}
            own = self._triggered.own(str(md.get("uid", ""))) == str(md.get("resourceVersion", ""))
            operation, obj = self._operations.of(etype, obj)
            if operation is None:
                continue
            trigger = self._trigger(obj, operation)
            if trigger is None:
                continue
            for policy in policies:
                if own and policy.spec.evaluation.skip_background_requests:
                    continue
                if policy.key in listed_done or not self._triggers(policy, trigger):
                    continue
                if policy.spec.target_expression:
                    count += self._resolve_and_mutate(policy, trigger, discovery)
                    continue
                evaluator = self.evaluator()
                if evaluator is None or not evaluator.resolve_targets(policy.key, trigger).matched:
                    continue
                # Every target of the policy, once for the whole batch of triggers (Kyverno lists them all for
                # each trigger).
                listed_done.add(policy.key)
                count += self.mutate_all(policy, trigger.request, discovery)
        return count

    # -- triggers ---------------------------------------------------------------------------------------------

    def _trigger(self, obj: dict[str, Any], operation: str) -> Subject | None:
        return trigger_subject(obj, operation, self.resolve, self.namespaces, api=self.api)

    def _triggers(self, policy: MutatingPolicy, trigger: Subject) -> bool:
        if policy.namespace and trigger.namespace != policy.namespace:
            return False
        probe = Subject(type=trigger.type, object=trigger.object if trigger.operation != "DELETE" else None,
                        old_object=trigger.old_object, operation=trigger.operation,
                        namespace_object=trigger.namespace_object)
        return constraints_match(policy.spec.match_constraints, probe)

    def _existing_triggers(self, policy: MutatingPolicy, discovery: Discovery) -> Iterable[Subject]:
        """Every existing object that matches the policy's matchConstraints, as a synthetic UPDATE trigger."""
        for info in trigger_resources(policy, discovery):
            for obj in self._list(info, policy.namespace):
                trigger = self._trigger(obj, "UPDATE")
                if trigger is not None and self._triggers(policy, trigger):
                    yield trigger

    def _resolve_and_mutate(self, policy: MutatingPolicy, trigger: Subject, discovery: Discovery) -> int:
        evaluator = self.evaluator()
        if evaluator is None:
            return 0
        found = evaluator.resolve_targets(policy.key, trigger)
        if found.error:
            logger.warning("mutateExisting %s: resolving targets from %s %s/%s failed: %s", policy.key,
                           trigger.type.kind, trigger.namespace, trigger.name, found.error)
            metrics.BACKGROUND_MUTATIONS.labels(policy.key, "error").inc()
            return 0
        if not found.matched or not found.objects:
            return 0
        targets = []
        for obj in found.objects:
            if not obj.get("apiVersion") or not obj.get("kind"):
                logger.warning("mutateExisting %s: a resolved target has no apiVersion or kind: %s", policy.key,
                               (obj.get("metadata") or {}).get("name"))
                metrics.BACKGROUND_MUTATIONS.labels(policy.key, "error").inc()
                continue
            subject = self._target_subject(obj)
            if subject is None:
                continue
            subject = resolved_route(policy, subject)
            if policy.namespace and not (subject.type.namespaced and subject.namespace == policy.namespace):
                continue  # a namespaced policy never acts outside its namespace
            targets.append(subject)
        return self._mutate(policy, targets, trigger.request, discovery)

    # -- targets ----------------------------------------------------------------------------------------------

    def _list(self, info: ResourceInfo, namespace: str) -> Iterable[dict[str, Any]]:
        ns = namespace if info.namespaced else ""
        for items, _rv in list_pages(self.api, info.group, info.version, info.resource, namespace=ns):
            for item in items:
                item.setdefault("kind", info.kind)
                yield item

    def _target_subject(self, obj: dict[str, Any], subresource: str = "") -> Subject | None:
        """A target as evaluated and written: through ``subresource`` when the target rules name one
        (``pods/resize``), as Kyverno's background controller evaluates and updates it."""
        try:
            subject = subject_for(obj, operation="UPDATE", resolve=self.resolve, namespaces=self.namespaces,
                                  default_namespace="")
        except Exception:  # noqa: BLE001 - a kind nobody can place is no target
            return None
        if subresource:
            subject = dataclasses.replace(subject, type=dataclasses.replace(subject.type, subresource=subresource))
        return subject

    def mutate_all(self, policy: MutatingPolicy, request: dict[str, Any] | None, discovery: Discovery) -> int:
        """Every listed target of ``policy`` (with the trigger's ``request``, or each its synthetic one)."""
        count = 0
        for info, sub in target_resources(policy, discovery):
            chunk: list[Subject] = []
            for obj in self._list(info, policy.namespace):
                subject = self._target_subject(obj, sub)
                if subject is not None and selects_target(policy, subject):
                    chunk.append(subject)
                if len(chunk) >= CHUNK:
                    count += self._mutate(policy, chunk, request, discovery)
                    chunk = []
            count += self._mutate(policy, chunk, request, discovery)
        return count

    def _route(self, subject: Subject, discovery: Discovery) -> tuple[ResourceInfo, str]:
        """Where a target is written: its resource, and the subresource it was selected through."""
        t = subject.type
        info = discovery.resource(t.group, t.version, t.resource) or ResourceInfo(
            t.group, t.version, t.resource, t.kind, t.namespaced)
        return info, t.subresource

    def _mutate(self, policy: MutatingPolicy, targets: list[Subject], request: dict[str, Any] | None,
                discovery: Discovery) -> int:
        evaluator = self.evaluator()
        if evaluator is None or not targets:
            return 0
        subjects = [as_target(t, request) for t in targets]
        outcomes = evaluator.mutate_targets(policy.key, subjects)
        pending: list[_Pending] = []
        for target, (result, patched) in zip(targets, outcomes):
            before = target.object or {}
            if result.result == PASS and patched != before:
                info, sub = self._route(target, discovery)
                pending.append(_Pending(info, sub, before, patched, request))
                continue
            self._report(policy, before, result, mutated=False)
        self._write(policy, pending, discovery)
        return len(targets)

    def _report(self, policy: MutatingPolicy, obj: dict[str, Any], result: Result, *, mutated: bool) -> None:
        ref = ResourceRef.of(obj)
        if not ref.uid:
            return
        if result.result not in (PASS, ERROR):  # skip: targetMatchConditions false, or an exception
            metrics.BACKGROUND_MUTATIONS.labels(policy.key, "skip").inc()
            self.store(ref, policy.key, None)
            return
        outcome = "error" if result.result == ERROR else ("mutated" if mutated else "unchanged")
        metrics.BACKGROUND_MUTATIONS.labels(policy.key, outcome).inc()
        if policy.reports_disabled:
            # Mutated, not reported: Kyverno writes no report result for a policy labelled
            # reports.kyverno.io/disabled (pkg/utils/report IsPolicyReportable); one written before the label goes.
            self.store(ref, policy.key, None)
            return
        process = "background scan" if policy.spec.evaluation.background_enabled else "admission review"
        entry = ReportEntry(policy.key, result.result, result.message if result.result == ERROR else "success",
                            (("process", process),), now_seconds())
        self.store(ref, policy.key, entry)

    # -- writing ----------------------------------------------------------------------------------------------

    def _patch(self, p: _Pending) -> tuple[str, dict[str, Any] | str]:
        """("ok", written object) | ("conflict", why) | ("gone", "") | ("error", why)."""
        self._bucket.take()
        md = p.before.get("metadata") or {}
        ops = jsonpatch.make_patch(p.before, p.after).patch
        guard = [{"op": "test", "path": "/metadata/resourceVersion", "value": md.get("resourceVersion", "")}]
        try:
            written = json_patch_object(self.api, p.info.group, p.info.version, p.info.resource,
                                        str(md.get("namespace") or ""), str(md.get("name") or ""), guard + ops,
                                        field_manager=FIELD_MANAGER, subresource=p.subresource)
        except ApiException as exc:
            if exc.status == 404:
                return "gone", ""
            if exc.status in (409, 422):  # the guard failed (changed since read), or the API server refused it
                return "conflict", describe(exc)
            return "error", describe(exc)
        except Exception as exc:  # noqa: BLE001 - reported as the target's error
            return "error", str(exc)
        return "ok", written

    def _write(self, policy: MutatingPolicy, pending: list[_Pending], discovery: Discovery) -> None:
        while pending:
            outcomes = list(self._pool.map(self._patch, pending))
            retry: list[_Pending] = []
            for p, (status, value) in zip(pending, outcomes):
                ref_obj = p.before
                if status == "ok" and isinstance(value, dict):
                    self._triggered.remember(value)
                    self.writes += 1
                    self._report(policy, value, Result(policy=policy.key, result=PASS, message="success"),
                                 mutated=True)
                elif status == "gone":
                    continue
                elif status == "conflict" and p.attempt < ATTEMPTS:
                    again = self._reread(policy, p, discovery)
                    if again is not None:
                        retry.append(again)
                else:
                    message = f"writing the mutated object failed: {value}"
                    self._report(policy, ref_obj, Result(policy=policy.key, result=ERROR, message=message),
                                 mutated=False)
            pending = retry

    def _reread(self, policy: MutatingPolicy, p: _Pending, discovery: Discovery) -> _Pending | None:
        """The object changed since it was read: read it again and evaluate it again (None: nothing to write)."""
        md = p.before.get("metadata") or {}
        fresh = get_object(self.api, p.info.group, p.info.version, p.info.resource, str(md.get("namespace") or ""),
                           str(md.get("name") or ""))
        evaluator = self.evaluator()
        if fresh is None or evaluator is None:
            return None
        fresh.setdefault("kind", p.info.kind)
        subject = self._target_subject(fresh, p.subresource)
        if subject is None:
            return None
        ((result, patched),) = evaluator.mutate_targets(policy.key, [as_target(subject, p.request)])
        if result.result != PASS or patched == fresh:
            self._report(policy, fresh, result, mutated=False)
            return None
        return _Pending(p.info, p.subresource, fresh, patched, p.request, p.attempt + 1)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

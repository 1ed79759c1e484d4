"""Generation (GeneratingPolicies and NamespacedGeneratingPolicies), run by the scanner.

Not a loop of its own: the scanner (leader only) hands it what its watches and its schedule produce, on its own
thread, as it does for mutateExisting (vpol.controller.background_mutation); evaluation is the pure engine's
(vpol.policies.generating.engine) with the cluster as ``resource.Get/List`` sees it. Kyverno's semantics
(docs/internals/generating-and-deleting.md), and where vpol goes beyond them:

- **Triggers** come from the scanner's watches of the kinds the policies match (vpol.controller.triggers): a
  created object is a CREATE, a change an UPDATE, a deletion a DELETE; each is evaluated when the policy's
  matchConstraints (operations included) select it. A watch of a trigger kind starts from the resourceVersion the
  policy was first seen at, so triggers that arrived before the watch (or while no replica led) are replayed.
- **Existing triggers** (a pass): when a policy is created or changed, when scanning starts (a restart) and at
  every full scan. A trigger is *owed* a generation when the policy has ``generateExisting``, was created before
  the trigger or in the same second (creation times are in seconds: a trigger made just after the policy may have
  been seen by a watch that was already running before the scanner knew the policy; one made just before it, in
  the same second, is generated for too, which Kyverno would not do), already has a result of the policy in its
  report, or
  already has downstreams. Without ``synchronize`` an owed trigger is generated once (its report result records
  it; one that failed is tried again at each pass; a restarted operator generates for the triggers created while
  it was away, and for no other); with
  ``synchronize`` every owed trigger is re-rendered, its downstreams written where they differ and those it no
  longer renders deleted.
- **Synchronize**: a downstream edited or deleted by someone else is put back (its trigger re-rendered), a clone
  source that changes updates its clones (deleted: its clones go), a trigger deleted or no longer selected takes
  its downstreams with it, and a deleted policy takes its data downstreams (not its clones) unless
  ``orphanDownstreamOnPolicyDelete``.
- **Writing**: an absent downstream is created (server-side applied with ``useServerSideApply``); one labelled as
  this policy's for this trigger is replaced where it differs (nothing is written when it holds what was
  rendered); one that someone else made is never overwritten: the trigger's result is an error naming it
  (Kyverno leaves it alone silently). Writes are rate-limited (``writes_per_second``) and retried on conflict.
  Downstreams carry Kyverno's labels (vpol.policies.generating.engine.downstream_labels), plus the policy's
  namespace for a namespaced policy, so a namespaced policy finds its own downstreams again (Kyverno's do not).
- **Reports**: the trigger's report gets the policy's result: ``pass`` with the ``generated-resources`` property,
  ``skip`` for an exception, ``error`` with the reason. A failure is also a Warning Event on the policy (related:
  the trigger) and the policy's GenerationSucceeded condition. Metrics: ``vpol_generations_total{policy,
  outcome}`` and ``vpol_generated_objects_total{policy, action}`` (created, updated, deleted).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.cel.backend import Backend, using
from vpol.controller import metrics
from vpol.controller.background_runner import Handed, RunnerDefaults
from vpol.controller.scan_evaluator import start_quietly
from vpol.controller.scan_events import Batch
from vpol.controller.token_bucket import TokenBucket
from vpol.controller.triggers import Operations, TriggeredPolicies, trigger_subject
from vpol.desired.events import EventSpec, ObjectRef
from vpol.desired.report import PROCESS, ReportEntry, ResourceRef, now_seconds
from vpol.engine.evaluate import ERROR, PASS, Result, SubjectData, compile_exception
from vpol.engine.request import ResourceType, Subject
from vpol.engine.scope import trigger_resources
from vpol.kube.dynamic import apply_object, create_object, delete_object, get_object, list_pages, replace_object
from vpol.kube.errors import describe
from vpol.kube.objects import FIELD_MANAGER
from vpol.model.discovery import Discovery, ResourceInfo
from vpol.model.policy import GROUP, PolicyException
from vpol.policies.generating.engine import (
    GENERATED_RESOURCES,
    MANAGED_BY,
    MANAGED_BY_VALUE,
    POLICY_NAME,
    POLICY_NAMESPACE,
    SOURCE_UID,
    TRIGGER_GROUP,
    TRIGGER_KIND,
    TRIGGER_NAME,
    TRIGGER_NAMESPACE,
    TRIGGER_UID,
    TRIGGER_VERSION,
    Downstream,
    GeneratingPolicyEngine,
    KnownScopes,
    labelled,
)
from vpol.policies.generating.engine import Generation as Generated
from vpol.policies.generating.model import GeneratingPolicy
from vpol.policies.sandbox import SandboxedEvaluator

logger = logging.getLogger(__name__)

GVR = tuple[str, str, str]
#: Attempts to write one downstream that keeps changing under us.
ATTEMPTS = 3
#: What vpol remembers of a downstream it deleted (its DELETED event is then no edit to revert).
DELETED_BY_US = "deleted"
#: The source of generation's Events (Kyverno's is kyverno-generate).
SOURCE = "vpol-generate"
#: Kyverno's report process for generation results.
PROCESS_ADMISSION = "admission review"


@dataclass(frozen=True, order=True)
class DownRef:
    """Where a downstream lives."""

    group: str
    version: str
    resource: str
    namespace: str
    name: str


@dataclass(frozen=True)
class TriggerRef:
    """How to read a trigger again (by the labels of its downstreams, or as seen)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


@dataclass
class _Known:
    """What one policy generated, as far as this replica knows: trigger uid -> downstreams (ref -> source uid)."""

    downstreams: dict[str, dict[DownRef, str]] = field(default_factory=dict)
    triggers: dict[str, TriggerRef] = field(default_factory=dict)
    #: Resources whose downstreams carry this policy's labels (listed to find what it made before a restart).
    resources: dict[GVR, ResourceInfo] = field(default_factory=dict)
    #: trigger uid -> (its resourceVersion, the policy's metadata.generation) of the last generation that passed: a
    #: watch replaying that same version (the trigger watches start where the policy was seen, so after a restart
    #: they replay what the start-up pass has just generated for) has nothing new to generate from.
    generated: dict[str, tuple[str, str]] = field(default_factory=dict)


def _md(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    md = obj.get("metadata")
    return md if isinstance(md, Mapping) else {}


#: What a trigger's change asks of a policy (Generation._decide).
SKIP, FORGET, GENERATE, DESELECTED = "skip", "forget", "generate", "deselected"


def _policy_generation(policy: GeneratingPolicy) -> str:
    return str(_md(policy.raw).get("generation", ""))


def holds(existing: Any, desired: Any) -> bool:
    """Whether ``existing`` already holds everything ``desired`` says (fields the API server defaulted, and labels or
    annotations others added, may be there too); ``status`` is not compared."""
    if isinstance(desired, Mapping):
        if not isinstance(existing, Mapping):
            return False
        return all(k in existing and holds(existing[k], v) for k, v in desired.items() if k != "status")
    if isinstance(desired, list):
        return isinstance(existing, list) and len(existing) == len(desired) and \
            all(holds(e, d) for e, d in zip(existing, desired))
    if isinstance(desired, bool) or isinstance(existing, bool):
        return type(desired) is type(existing) and desired == existing
    if isinstance(desired, (int, float)) and isinstance(existing, (int, float)):
        return float(desired) == float(existing)
    return bool(existing == desired)


class Generation(RunnerDefaults):
    def __init__(self, api: client.ApiClient, *, resolve: Callable[[str, str], ResourceType | None],
                 namespaces: dict[str, dict[str, Any]], discovery: Callable[[], Discovery],
                 store: Callable[[ResourceRef, str, ReportEntry | None], None],
                 reported: Callable[[str, str], str], backend: Backend | None = None,
                 writes_per_second: float = 50.0, on_error: Callable[[str], None] | None = None,
                 events: Any = None, lookup: Callable[[str, str], ResourceInfo | None] | None = None,
                 worker: SandboxedEvaluator | None = None):
        self.api = api
        #: Where the policies are evaluated, with the deadline and memory cap of every evaluation (None: in this
        #: process, under ``backend``).
        self.worker = worker
        self.resolve = resolve
        self.namespaces = namespaces
        self.discovery = discovery
        #: What serves a kind (the scanner's DiscoveryCache.resource_for_kind: a kind it does not know is looked up
        #: again, so a CRD installed after the operator started is generated).
        self.lookup = lookup or (lambda api_version, kind: self.discovery().resource_for_kind(api_version, kind))
        #: store(trigger, policy key, entry or None): the scanner's report store for one policy's result.
        self.store = store
        #: reported(trigger uid, policy key): the policy's result in the trigger's report ("" when none).
        self.reported = reported
        self.backend = backend or Backend()
        #: Told the key of a policy whose generation failed somewhere (its status says so).
        self.on_error = on_error or (lambda key: None)
        #: Where a failed generation's Warning Event goes (vpol.controller.events; None: off).
        self.events = events
        self._bucket = TokenBucket(writes_per_second)
        self._lock = threading.Lock()
        #: The policies, the resourceVersion each was first seen at (a trigger watch started for it later replays the
        #: changes since) and the objects generation wrote last (their change events are no triggers).
        self._triggered: TriggeredPolicies[GeneratingPolicy] = TriggeredPolicies(restart_on_change=False)
        self._engines: dict[str, GeneratingPolicyEngine] = {}
        self._exceptions: list[PolicyException] = []
        #: Policies that became invalid: when deleted, their downstreams go as they said.
        self._retired: dict[str, GeneratingPolicy] = {}
        #: Generations evaluated ahead for a batch of triggers (see _evaluate_ahead), by (policy key, id(trigger)):
        #: a 1-tuple of the answer (None among them: the policy does not apply).
        self._ahead: dict[tuple[str, int], tuple[Generated | None]] = {}
        self._known: dict[str, _Known] = {}
        #: source uid -> {(policy key, trigger uid)}: the clones to update when a source changes.
        self._sources: dict[str, set[tuple[str, str]]] = {}
        self._operations = Operations()
        #: policy key -> the last generation error (cleared by a pass without one): the policy's status shows it.
        self.errors: dict[str, str] = {}
        #: Set when the resources to watch changed (a new kind of downstream): the scanner re-syncs its watches.
        self.watches_changed = threading.Event()
        self.writes = 0

    # -- the policies (thread-safe) ---------------------------------------------------------------------------

    def set_policy(self, key: str, policy: GeneratingPolicy | None) -> GeneratingPolicy | None | bool:
        """A valid policy (None: gone or invalid). Returns the policy that was held when it went (its downstreams
        may have to go), True when what evaluation depends on changed, else False."""
        with self._lock:
            changed = self._triggered.set(key, policy)
            if policy is None:
                self.errors.pop(key, None)
            if changed is not False:
                self._engines.pop(key, None)
            return changed

    kind = "GeneratingPolicy"
    reports_results = True

    def hand_over(self, key: str, policy: Any | None, **details: Any) -> Handed:
        """A GeneratingPolicy to generate with (None: no more); created or changed, its existing triggers are
        generated for as its settings say; deleted (``gone``), its downstreams go as its settings say (a policy
        that became invalid only stops: what it generated stays)."""
        changed, removed = self.take(key, policy, gone=bool(details.get("gone")))
        if removed is not None:
            return Handed(changed=changed, event=("generating-removed", removed))
        return Handed(changed=changed, event=("generating", key) if changed and policy is not None else None)

    def take(self, key: str, policy: GeneratingPolicy | None, *,
             gone: bool = False) -> tuple[bool, GeneratingPolicy | None]:
        """The policy as its reconcile read it: valid, invalid (None) or deleted (``gone``). Returns whether the
        policies changed, and the policy whose downstreams must now go as it said (a deleted one; one that became
        invalid only stops, and what it generated stays until it is deleted)."""
        changed = self.set_policy(key, policy)
        held = None if isinstance(changed, bool) else changed  # the policy held when it went
        with self._lock:
            if policy is not None:
                self._retired.pop(key, None)
                return changed is True, None
            if not gone:
                if held is not None:
                    self._retired[key] = held
                return held is not None, None
            held = self._retired.pop(key, None) or held
        return held is not None, held

    def set_exceptions(self, exceptions: Iterable[PolicyException]) -> bool:
        new = list(exceptions)
        with self._lock:
            if new == self._exceptions:
                return False
            self._exceptions = new
            self._engines.clear()
            return True

    def policies(self) -> list[GeneratingPolicy]:
        return self._triggered.policies()

    def get(self, key: str) -> GeneratingPolicy | None:
        return self._triggered.get(key)

    def _engine(self, policy: GeneratingPolicy) -> GeneratingPolicyEngine:
        with self._lock:
            engine = self._engines.get(policy.key)
            if engine is None or engine.policy is not policy:
                exceptions = [compile_exception(e) for e in self._exceptions]
                engine = self._engines[policy.key] = GeneratingPolicyEngine(policy, exceptions,
                                                                            namespaced=self._scope)
                self._load(policy)
            return engine

    def _load(self, policy: GeneratingPolicy) -> None:
        """Have the worker build the policy's engine, with the kinds' scopes as discovery knows them now."""
        if self.worker is not None:
            self.worker.load(policy.key, "GeneratingPolicy", policy, list(self._exceptions),
                             KnownScopes.of(self.discovery().resources))

    def _evaluate(self, policy: GeneratingPolicy, engine: GeneratingPolicyEngine, trigger: Subject
                  ) -> Generated | None:
        """What ``policy`` generates for ``trigger`` (None: nothing, it does not apply), evaluated in the worker
        when there is one; one that runs past its deadline or memory cap is an error of this trigger."""
        if self.worker is None:
            with using(self.backend):
                return engine.generate(trigger)
        if not engine.ok or not engine.selects(trigger):
            return None
        for attempt in (1, 2):
            ahead = self._ahead.pop((policy.key, id(trigger)), None) if attempt == 1 else None
            status, answer = ("ok", [ahead[0]]) if ahead is not None else \
                self.worker.call(policy.key, "generate", [trigger])
            if status != "ok":
                api_version, kind, namespace, name, uid = SubjectData(trigger).identity()
                return Generated(Result(policy.key, ERROR, f"failed to evaluate policy: {answer}", api_version, kind,
                                        namespace, name, uid))
            generated: Generated | None = answer[0]
            if generated is None or not generated.unknown_kinds or attempt == 2 or \
                    not any(self.lookup(*gvk) is not None for gvk in generated.unknown_kinds):
                return generated
            self._load(policy)  # a kind installed since the worker's table was made: placed as it is
        return None

    def _scope(self, api_version: str, kind: str) -> bool | None:
        info = self.lookup(api_version, kind)
        return None if info is None else info.namespaced

    def watched(self, discovery: Discovery) -> dict[GVR, ResourceInfo]:
        """What the scanner must watch: the triggers of every policy, and the downstreams (and clone sources, of the
        same kinds) of the synchronized ones."""
        out: dict[GVR, ResourceInfo] = {}
        for policy in self.policies():
            for info in trigger_resources(policy, discovery):
                if "watch" in info.verbs or not info.verbs:
                    out[(info.group, info.version, info.resource)] = info
            if policy.spec.evaluation.synchronize:
                with self._lock:
                    known = self._known.get(policy.key)
                    out.update(known.resources if known else {})
        return out

    def generated_resources(self, key: str) -> list[ResourceInfo]:
        """The resources of the objects the policy ``key`` generated so far (for its RBAC condition)."""
        with self._lock:
            known = self._known.get(key)
            return list(known.resources.values()) if known else []

    def trigger_since(self, gvr: tuple[str, str, str], discovery: Discovery) -> str:
        """Where a new watch of ``gvr`` starts (vpol.controller.triggers.TriggeredPolicies.trigger_since)."""
        return self._triggered.trigger_since(gvr, discovery)

    # -- when it runs ------------------------------------------------------------------------------------------

    def policy_changed(self, keys: Iterable[str]) -> int:
        """Policies created or changed (or all of them, when scanning starts): a pass of each."""
        return sum(self.run_pass(p) for p in (self.get(k) for k in sorted(keys)) if p is not None)

    def policies_changed(self, batch: Batch, discovery: Discovery) -> set[str]:
        """GeneratingPolicies created or changed (``batch.generating``: a pass each) or gone (``batch.removed``:
        their downstreams as they say); the keys of those gone are returned. The worker is started first (not at
        the first trigger: that takes about a second)."""
        if not (batch.generating or batch.removed):
            return set()
        if self.worker is not None and self.policies():
            start_quietly(self.worker)
        for policy in batch.removed:
            self.policy_removed(policy)
        gone = {p.key for p in batch.removed} - {p.key for p in self.policies()}
        present = {k for k in batch.generating if self.get(k) is not None}
        if present:
            self.policy_changed(present)
        return gone

    def periodic(self, discovery: Discovery) -> int:
        """A full background scan: a pass of every policy (which reads discovery when it needs it)."""
        return sum(self.run_pass(p) for p in self.policies())

    def policy_removed(self, policy: GeneratingPolicy) -> int:
        """A policy deleted (or made invalid): with synchronize, its data downstreams go unless it orphans them."""
        if self.worker is not None:
            self.worker.unload(policy.key)  # here, in the scanner's thread: the worker is used from that thread only
        with self._lock:
            known = self._known.pop(policy.key, None)
        spec = policy.spec.evaluation
        if not spec.synchronize or spec.orphan_downstream_on_policy_delete:
            return 0
        deleted = 0
        for refs in self._existing(policy, known or _Known()).values():
            for ref, source_uid in refs.items():
                if not source_uid:
                    deleted += self._delete(policy, ref)
        return deleted

    def objects_changed(self, batch: Batch, discovery: Discovery) -> int:
        """Changes seen by the scanner's watches: triggers, downstreams and clone sources among them."""
        events = batch.triggers
        policies = self.policies()
        if not policies:
            return 0
        changes: list[tuple[str, dict[str, Any], Subject | None]] = []
        for etype, raw in events:
            md = _md(raw)
            own = self._triggered.own(str(md.get("uid", "")))
            if own == str(md.get("resourceVersion", "")) or (etype == "DELETED" and own == DELETED_BY_US):
                continue  # our own write's (or deletion's) echo
            operation, obj = self._operations.of(etype, raw)
            trigger = trigger_subject(obj, operation, self.resolve, self.namespaces, api=self.api) \
                if operation is not None else None
            changes.append((etype, raw, trigger))
        try:
            self._evaluate_ahead(policies, [t for _e, _r, t in changes if t is not None])
            return sum(self._changed(etype, raw, trigger, policies) for etype, raw, trigger in changes)
        finally:
            self._ahead.clear()

    def _changed(self, etype: str, raw: dict[str, Any], trigger: Subject | None,
                 policies: list[GeneratingPolicy]) -> int:
        md = _md(raw)
        count = 0
        labels = md.get("labels") or {}
        try:
            if labels.get(MANAGED_BY) == MANAGED_BY_VALUE and labels.get(POLICY_NAME):
                count += self._downstream_changed(etype, raw, policies)
            elif str(md.get("uid", "")) in self._sources:
                count += self._source_changed(etype, raw)
        except Exception as exc:  # noqa: BLE001 - retried by the next pass (synchronize)
            logger.warning("generation: keeping %s %s in sync failed: %s", raw.get("kind"), md.get("name"),
                           describe(exc))
        if trigger is None:
            return count
        for policy in policies:
            try:
                count += self._trigger_changed(policy, trigger)
            except Exception as exc:  # noqa: BLE001 - one trigger's failure never loses the others
                self._failed(policy, f"{trigger.type.kind} {trigger.name}: {describe(exc)}")
        return count

    # -- triggers ---------------------------------------------------------------------------------------------

    def _decide(self, policy: GeneratingPolicy, trigger: Subject) -> str:
        """What a trigger's change asks of ``policy`` (no side effect): nothing (SKIP), its downstreams gone
        (FORGET), a generation if the policy selects it (GENERATE), or the policy no longer selects it (DESELECTED)."""
        ev = policy.spec.evaluation
        md = _md(trigger.current)
        if not ev.admission_enabled:
            return SKIP
        if trigger.operation == "UPDATE" and md.get("deletionTimestamp"):
            return SKIP  # being deleted (its DELETE came with its deletionTimestamp): nothing is generated into it
        if trigger.operation == "DELETE" and not _lists_delete(policy):
            # A deleted trigger takes its downstreams with it (synchronize), unless the policy generates on DELETE.
            return FORGET if ev.synchronize else SKIP
        uid = str(md.get("uid", ""))
        version = (str(md.get("resourceVersion", "")), _policy_generation(policy))
        with self._lock:
            known = self._known.get(policy.key)
            if version[0] and known is not None and known.generated.get(uid) == version:
                return SKIP
        if trigger.operation == "CREATE" and self.reported(uid, policy.key) not in ("", ERROR):
            # An object is created once: a creation already reported is a watch replaying it (after a restart the
            # trigger watches start where the policy was seen); what a restart owes is the start-up pass's.
            return SKIP
        return GENERATE if self._engine(policy).selects(trigger) else DESELECTED

    def _trigger_changed(self, policy: GeneratingPolicy, trigger: Subject) -> int:
        ev = policy.spec.evaluation
        uid = str(_md(trigger.current).get("uid", ""))
        decision = self._decide(policy, trigger)
        if decision == FORGET:
            return self._forget_trigger(policy, uid)
        if decision == DESELECTED:
            if trigger.operation == "UPDATE" and ev.synchronize and self._has(policy, uid):
                return self._forget_trigger(policy, uid)  # no longer selected: its downstreams go
            return 0
        if decision != GENERATE:
            return 0
        # A trigger just created (its creation not seen before: see above) has no downstreams yet.
        fresh = trigger.operation == "CREATE" and not self._has(policy, uid)
        outcome = self._generate(policy, trigger, sync=ev.synchronize, fresh=fresh)
        if outcome == "" and trigger.operation == "UPDATE" and ev.synchronize and self._has(policy, uid):
            # Its matchConditions no longer hold: its downstreams go too, as for matchConstraints (Kyverno 1.19,
            # kyverno/kyverno#16832); they are generated again when the conditions hold again.
            return self._forget_trigger(policy, uid)
        return int(outcome != "")

    def _evaluate_ahead(self, policies: list[GeneratingPolicy], triggers: list[Subject]) -> None:
        """Evaluate in the worker, one round trip per policy, the generations a batch of trigger changes will ask
        for (a round trip per trigger cost about a third of a millisecond each, more than most generations). A
        batch that fails is left to the triggers one at a time (each with its own deadline)."""
        if self.worker is None:
            return
        for policy in policies:
            wanted = [t for t in triggers if self._decide(policy, t) == GENERATE]
            if len(wanted) < 2 or not self._engine(policy).ok:
                continue
            status, answers = self.worker.call(policy.key, "generate", wanted)
            if status == "ok":
                for trigger, answer in zip(wanted, answers):
                    self._ahead[(policy.key, id(trigger))] = (answer,)

    def _has(self, policy: GeneratingPolicy, trigger_uid: str) -> bool:
        with self._lock:
            known = self._known.get(policy.key)
            return bool(known and known.downstreams.get(trigger_uid))

    def _forget_trigger(self, policy: GeneratingPolicy, trigger_uid: str) -> int:
        with self._lock:
            known = self._known.get(policy.key)
            refs = known.downstreams.pop(trigger_uid, {}) if known else {}
            if known:
                known.triggers.pop(trigger_uid, None)
                known.generated.pop(trigger_uid, None)
        return sum(self._delete(policy, ref) for ref in sorted(refs))

    # -- passes -----------------------------------------------------------------------------------------------

    def _existing_triggers(self, policy: GeneratingPolicy) -> Iterable[dict[str, Any]]:
        discovery = self.discovery()
        for info in trigger_resources(policy, discovery):
            if info.verbs and "list" not in info.verbs:
                continue
            namespace = policy.namespace if info.namespaced else ""
            try:
                for items, _rv in list_pages(self.api, info.group, info.version, info.resource, namespace=namespace):
                    yield from items
            except ApiException as exc:
                self._failed(policy, f"listing {info.resource} failed: {describe(exc)}")

    def _existing(self, policy: GeneratingPolicy, known: _Known) -> dict[str, dict[DownRef, str]]:
        """What carries the policy's labels in the cluster now (the kinds it generated), by trigger uid."""
        selector = f"{MANAGED_BY}={MANAGED_BY_VALUE},{POLICY_NAME}={policy.name}"
        if policy.namespace:
            selector += f",{POLICY_NAMESPACE}={policy.namespace}"
        out: dict[str, dict[DownRef, str]] = {}
        for trigger_uid, refs in known.downstreams.items():
            out.setdefault(trigger_uid, {}).update(refs)
        for info in list(known.resources.values()):
            try:
                for items, _rv in list_pages(self.api, info.group, info.version, info.resource,
                                             label_selector=selector):
                    for item in items:
                        md, labels = _md(item), _md(item).get("labels") or {}
                        if not policy.namespace and labels.get(POLICY_NAMESPACE):
                            continue  # a namespaced policy's of the same name
                        ref = DownRef(info.group, info.version, info.resource, str(md.get("namespace") or ""),
                                      str(md.get("name") or ""))
                        out.setdefault(str(labels.get(TRIGGER_UID) or ""), {})[ref] = str(labels.get(SOURCE_UID)
                                                                                           or "")
            except ApiException as exc:
                logger.debug("generation %s: listing %s failed: %s", policy.key, info.resource, describe(exc))
        return out

    def run_pass(self, policy: GeneratingPolicy) -> int:
        """Every existing trigger of ``policy`` that is owed a generation (see the module docstring)."""
        ev = policy.spec.evaluation
        with self._lock:
            known = self._known.setdefault(policy.key, _Known())
        engine = self._engine(policy)
        if not engine.ok:
            return 0
        existing = self._existing(policy, known)
        created = str(_md(policy.raw).get("creationTimestamp") or "")
        count = 0
        seen: set[str] = set()
        rendered: set[str] = set()
        failed_before = self.errors.pop(policy.key, None)
        for obj in self._existing_triggers(policy):
            md = _md(obj)
            uid = str(md.get("uid", ""))
            if md.get("deletionTimestamp"):
                continue  # being deleted: as good as gone
            seen.add(uid)
            reported = self.reported(uid, policy.key)
            owed = ev.generate_existing or bool(existing.get(uid)) or bool(reported) or \
                bool(created and str(md.get("creationTimestamp") or "") >= created)
            if not owed:
                continue
            if not ev.synchronize and reported and reported != ERROR:
                continue  # generated once (an error is tried again): without synchronize, nothing is kept up to date
            # Policy-started generation is a CREATE without a request user (as Kyverno's background controller).
            trigger = trigger_subject(obj, "CREATE", self.resolve, self.namespaces, api=self.api)
            if trigger is None:
                continue
            if not engine.selects(trigger):
                if ev.synchronize and existing.get(uid):
                    count += sum(self._delete(policy, ref) for ref in sorted(existing[uid]))
                continue
            try:
                outcome = self._generate(policy, trigger, sync=ev.synchronize, previous=existing.get(uid, {}))
            except Exception as exc:  # noqa: BLE001 - one trigger's failure never stops the pass
                self._failed(policy, f"{trigger.type.kind} {trigger.name}: {describe(exc)}")
                continue
            count += outcome != ""
            if outcome == PASS:
                rendered.add(uid)
        if ev.synchronize:
            # Listed again now that the kinds the policy generates are known (after a restart they are not before
            # its first pass): downstreams of triggers that are gone, and those a trigger no longer renders.
            with self._lock:
                current = {uid: dict(refs) for uid, refs in known.downstreams.items()}
            for uid, refs in self._existing(policy, known).items():
                stale = set(refs) if uid not in seen else (set(refs) - set(current.get(uid, {})) if uid in rendered
                                                           else set())
                count += sum(self._delete(policy, ref) for ref in sorted(stale))
                if uid not in seen:
                    with self._lock:
                        known.downstreams.pop(uid, None)
                        known.triggers.pop(uid, None)
                        known.generated.pop(uid, None)
        if failed_before and policy.key not in self.errors:
            self.on_error(policy.key)  # the error is gone: the status says so
        return count

    # -- generating -------------------------------------------------------------------------------------------

    def _generate(self, policy: GeneratingPolicy, trigger: Subject, *, sync: bool,
                  previous: Mapping[DownRef, str] | None = None, fresh: bool = False) -> str:
        """Evaluate ``policy`` for ``trigger``, write what it generates, report the result; the outcome ("" when
        the policy does not apply to it). ``fresh``: the trigger was just created, so its downstreams are most
        likely not there (see _write)."""
        engine = self._engine(policy)
        generation = self._evaluate(policy, engine, trigger)
        if generation is None:
            return ""
        result = generation.result
        uid = str(_md(trigger.current).get("uid", ""))
        ref = ResourceRef.of(trigger.current)
        written: list[tuple[DownRef, str]] = []
        message = result.message
        outcome = result.result
        for downstream in generation.downstreams:
            status, detail = self._write(policy, trigger, downstream, fresh=fresh)
            if status == "ok" and isinstance(detail, DownRef):
                written.append((detail, downstream.source_uid))
            elif outcome != ERROR:
                outcome, message = ERROR, f"failed to evaluate policy: failed to generate resources: {detail}"
        with self._lock:
            known = self._known.setdefault(policy.key, _Known())
            before = dict(previous or {}) | known.downstreams.get(uid, {})
            now = dict(written)
            if outcome == PASS:
                known.downstreams[uid] = now
                known.generated[uid] = (str(_md(trigger.current).get("resourceVersion", "")),
                                        _policy_generation(policy))
            else:
                known.downstreams.setdefault(uid, {}).update(now)
                known.generated.pop(uid, None)
            known.triggers[uid] = TriggerRef(trigger.type.api_version, trigger.type.kind, trigger.namespace,
                                             trigger.name, uid)
            for _down, source_uid in now.items():
                if source_uid:
                    self._sources.setdefault(source_uid, set()).add((policy.key, uid))
        if sync and outcome == PASS:
            # Downstreams of this trigger the policy no longer renders.
            for stale in sorted(set(before) - set(now)):
                self._delete(policy, stale)
        if outcome == ERROR:
            self._failed(policy, f"{trigger.type.kind} {trigger.namespace + '/' if trigger.namespace else ''}"
                                 f"{trigger.name}: {message}")
            if self.events is not None:
                regarding = ObjectRef(f"{GROUP}/v1", policy.kind, policy.name, policy.namespace, policy.uid)
                related = ObjectRef(trigger.type.api_version, trigger.type.kind, trigger.name, trigger.namespace, uid)
                self.events.record([EventSpec(SOURCE, "Resource Generated", regarding, related,
                                              f"policy {policy.key} error: {message}", reason="PolicyError")])
        metrics.GENERATIONS.labels(policy.key, outcome).inc()
        # A deleted trigger has no report left to hold the result (the garbage collector takes it).
        if ref.uid and not policy.reports_disabled and trigger.operation != "DELETE":
            properties = dict(result.properties)
            if outcome != PASS:
                properties.pop(GENERATED_RESOURCES, None)
            properties[PROCESS] = PROCESS_ADMISSION
            if result.exception:
                properties["exceptions"] = result.exception
            rule = "exception" if result.exception else ""
            entry = ReportEntry(policy.key, outcome, message, tuple(sorted(properties.items())), now_seconds(), rule)
            self.store(ref, policy.key, entry)
        return outcome

    def _failed(self, policy: GeneratingPolicy, message: str) -> None:
        logger.warning("generation %s: %s", policy.key, message)
        first = policy.key not in self.errors
        self.errors[policy.key] = message
        if first:
            self.on_error(policy.key)

    def _info(self, obj: Mapping[str, Any]) -> ResourceInfo | None:
        return self.lookup(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))

    def _write(self, policy: GeneratingPolicy, trigger: Subject, downstream: Downstream, *,
               fresh: bool = False) -> tuple[str, Any]:
        """("ok", its DownRef) or ("error", why). ``fresh``: created without reading it first (a conflict reads it
        then, as every other write does): a new trigger's downstreams cost one request each, not two."""
        desired = labelled(downstream, policy, trigger)
        info = self._info(desired)
        md = _md(desired)
        name = str(md.get("name") or "")
        if info is None:
            return "error", f"the API server serves no {desired.get('apiVersion')}, Kind={desired.get('kind')}"
        if not name:
            return "error", f"a generated {desired.get('kind')} has no metadata.name"
        namespace = str(md.get("namespace") or "") if info.namespaced else ""
        if info.namespaced and not namespace:
            return "error", f"{desired.get('kind')} {name} is namespaced and was generated without a namespace"
        ref = DownRef(info.group, info.version, info.resource, namespace, name)
        with self._lock:
            known = self._known.setdefault(policy.key, _Known())
            if (info.group, info.version, info.resource) not in known.resources:
                known.resources[(info.group, info.version, info.resource)] = info
                if policy.spec.evaluation.synchronize:
                    self.watches_changed.set()
        trigger_uid = str(_md(trigger.current).get("uid", ""))
        blind = fresh and not policy.spec.use_server_side_apply
        for attempt in range(ATTEMPTS + blind):
            try:
                existing = None if blind and attempt == 0 else \
                    get_object(self.api, info.group, info.version, info.resource, namespace, name)
                if existing is not None:
                    labels = _md(existing).get("labels") or {}
                    ours = labels.get(MANAGED_BY) == MANAGED_BY_VALUE and labels.get(POLICY_NAME) == policy.name \
                        and labels.get(TRIGGER_UID) == trigger_uid and \
                        (labels.get(POLICY_NAMESPACE) or "") == policy.namespace
                    if not ours:
                        where = f"{namespace}/{name}" if namespace else name
                        return "error", (f"{desired.get('kind')} {where} exists and was not generated by this policy "
                                         f"for this trigger: left as it is")
                    if holds(existing, desired):
                        # This version holds what is wanted: an event of it (a watch replaying it after a
                        # restart) is as much an echo as one of our own write.
                        self._remember(existing)
                        return "ok", ref
                self._bucket.take()
                if policy.spec.use_server_side_apply:
                    written = apply_object(self.api, info.group, info.version, info.resource, namespace, desired,
                                           field_manager=FIELD_MANAGER)
                elif existing is None:
                    written = create_object(self.api, info.group, info.version, info.resource, namespace, desired)
                else:
                    body = copy.deepcopy(desired)
                    body["metadata"]["resourceVersion"] = _md(existing).get("resourceVersion")
                    written = replace_object(self.api, info.group, info.version, info.resource, namespace, name,
                                             body)
            except ApiException as exc:
                if exc.status == 409:
                    continue  # created or changed meanwhile: read it again
                if exc.status in (401, 403):
                    return "error", f"permission denied: {describe(exc)}"
                return "error", describe(exc)
            except Exception as exc:  # noqa: BLE001 - reported as the trigger's error
                return "error", str(exc)
            self._remember(written)
            self.writes += 1
            metrics.GENERATED_OBJECTS.labels(policy.key, "created" if existing is None else "updated").inc()
            return "ok", ref
        return "error", f"{desired.get('kind')} {name} kept changing while it was written"

    def _remember(self, written: Mapping[str, Any]) -> None:
        self._triggered.remember(written)

    def _delete(self, policy: GeneratingPolicy, ref: DownRef) -> int:
        self._bucket.take()
        try:
            gone = delete_object(self.api, ref.group, ref.version, ref.resource, ref.namespace, ref.name)
        except ApiException as exc:
            self._failed(policy, f"deleting {ref.resource} {ref.namespace}/{ref.name} failed: {describe(exc)}")
            return 0
        if gone is None:
            return 0
        # Its DELETED event is ours: not a downstream to put back.
        self._remember({"metadata": {"uid": _deleted_uid(gone), "resourceVersion": DELETED_BY_US}})
        metrics.GENERATED_OBJECTS.labels(policy.key, "deleted").inc()
        return 1

    # -- synchronize ------------------------------------------------------------------------------------------

    def _owner(self, labels: Mapping[str, Any], policies: list[GeneratingPolicy]) -> GeneratingPolicy | None:
        name, namespace = labels.get(POLICY_NAME), labels.get(POLICY_NAMESPACE) or ""
        return next((p for p in policies if p.name == name and p.namespace == namespace), None)

    def _downstream_changed(self, etype: str, obj: Mapping[str, Any], policies: list[GeneratingPolicy]) -> int:
        """A downstream changed or went: its trigger is rendered again (synchronize), which puts it back."""
        labels = _md(obj).get("labels") or {}
        policy = self._owner(labels, policies)
        if policy is None or not policy.spec.evaluation.synchronize:
            return 0
        group, version = str(labels.get(TRIGGER_GROUP) or ""), str(labels.get(TRIGGER_VERSION) or "")
        trigger_ref = TriggerRef(f"{group}/{version}" if group else version, str(labels.get(TRIGGER_KIND) or ""),
                                 str(labels.get(TRIGGER_NAMESPACE) or ""), str(labels.get(TRIGGER_NAME) or ""),
                                 str(labels.get(TRIGGER_UID) or ""))
        return self._regenerate(policy, trigger_ref, orphan=(obj, etype))

    def _regenerate(self, policy: GeneratingPolicy, ref: TriggerRef,
                    orphan: tuple[Mapping[str, Any], str] | None = None) -> int:
        """Render the trigger ``ref`` names again; when it is gone, the downstream ``orphan`` goes too."""
        info = self.lookup(ref.api_version, ref.kind)
        live = get_object(self.api, info.group, info.version, info.resource, ref.namespace, ref.name) \
            if info is not None else None
        if live is None or str(_md(live).get("uid", "")) != ref.uid:
            if orphan is not None and orphan[1] != "DELETED":
                obj = orphan[0]
                down = self._info(obj)
                if down is not None:
                    md = _md(obj)
                    return self._delete(policy, DownRef(down.group, down.version, down.resource,
                                                        str(md.get("namespace") or ""), str(md.get("name") or "")))
            return 0
        live.setdefault("apiVersion", ref.api_version)
        live.setdefault("kind", ref.kind)
        trigger = trigger_subject(live, "UPDATE", self.resolve, self.namespaces, api=self.api)
        if trigger is None or not self._engine(policy).selects(trigger):
            trigger = trigger_subject(live, "CREATE", self.resolve, self.namespaces, api=self.api)
        if trigger is None:
            return 0
        return int(self._generate(policy, trigger, sync=True) != "")

    def _source_changed(self, etype: str, obj: Mapping[str, Any]) -> int:
        """A clone source changed (its clones are rendered again) or went (its clones go)."""
        uid = str(_md(obj).get("uid", ""))
        with self._lock:
            users = sorted(self._sources.get(uid, set()))
            if etype == "DELETED":
                self._sources.pop(uid, None)
        count = 0
        for key, trigger_uid in users:
            policy = self.get(key)
            if policy is None or not policy.spec.evaluation.synchronize:
                continue
            with self._lock:
                known = self._known.get(key)
                refs = dict(known.downstreams.get(trigger_uid, {})) if known else {}
                trigger_ref = known.triggers.get(trigger_uid) if known else None
            if etype == "DELETED":
                for ref, source_uid in sorted(refs.items()):
                    if source_uid == uid:
                        count += self._delete(policy, ref)
                        with self._lock:
                            if known is not None:
                                known.downstreams.get(trigger_uid, {}).pop(ref, None)
            elif trigger_ref is not None:
                count += self._regenerate(policy, trigger_ref)
        return count


def _deleted_uid(answer: Mapping[str, Any]) -> str:
    """The uid of the object a DELETE answered for (the object itself, or a Status naming it)."""
    return str(_md(answer).get("uid") or (answer.get("details") or {}).get("uid") or "")


def _lists_delete(policy: GeneratingPolicy) -> bool:
    """Whether a rule of the policy names DELETE literally (Kyverno then generates for a deleted trigger; ``*``
    does not count)."""
    constraints = policy.spec.match_constraints
    return any("DELETE" in rule.operations for rule in (constraints.resource_rules if constraints else ()))

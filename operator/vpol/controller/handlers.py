"""Kopf handlers: they only turn events into work-queue keys.

- every event of a ValidatingPolicy or NamespacedValidatingPolicy (any served
  version) queues that policy (key ``name`` or ``namespace/name``); a
  MutatingPolicy queues ``mpol:<key>``, a GeneratingPolicy ``gpol:<key>``, a
  DeletingPolicy ``dpol:<key>`` and an ImageValidatingPolicy ``ivpol:<key>``
  (``<key>``: ``name``, or ``namespace/name`` for their namespaced variants);
- startup builds the one evaluation context every path is handed (vpol.kube.live_backend);
- an event of a generated VAP, MAP or binding (label ``vpol.kyverno.io/policy``)
  queues its policy, so edits and deletions are repaired within seconds;
- an event of a PolicyException queues the policies it references;
- an event of vpol's ValidatingWebhookConfiguration queues the policies whose
  covered generation changed (their ``AdmissionEnforced`` condition depends on it);
- on startup every policy is queued, and again every ``resync`` seconds.

No handler here holds state on the watched objects (no finalizers, no
progress annotations): reconciling is level-based. The event handlers are
coroutines: they do no I/O, so they run on Kopf's event loop, where the work
queue lives, rather than each in a thread of Kopf's executor (two hand-overs
per event; a Pod Security policy applied to a running operator brings a dozen
events or more: its own, its VAPs' and its bindings').
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from vpol.cel.backend import install as install_backend
from vpol.desired.vap import MANAGED_BY, MANAGED_BY_LABEL, POLICY_LABEL, policy_key_of
from vpol.desired.webhook import MUTATING_WEBHOOK_CONFIGURATION, WEBHOOK_CONFIGURATION
from vpol.desired.webhook_coverage import IMAGE_PREFIX, covered
from vpol.controller import metrics
from vpol.controller.queue import WorkQueue
from vpol.controller.enforcement_proof import EnforcementProver
from vpol.controller.events import EventRecorder
from vpol.controller.reconcile import DiscoveryCache, Reconciler
from vpol.controller.queue_keys import DELETING, GENERATING, IMAGE_VALIDATING, QUEUE_KEYS, lifecycle_key, mutating_key
from vpol.controller.reconcile_lifecycle import LifecycleReconciler, is_lifecycle_key
from vpol.controller.reconcile_mutating import MutatingReconciler, is_mutating_key, served_map_version
from vpol.controller.global_context import GlobalContextController, GlobalContextOptions
from vpol.controller.admission.images import REGISTRY_TIMEOUT
from vpol.controller.registry_credentials import metadata_client
from vpol.controller.scan_startup import StartupPolicies
from vpol.controller.scanner import ScanOptions, Scanner
from vpol.engine.global_context import GlobalContextStore
from vpol.engine.sandbox import Limits
from vpol.kube.dependencies import problems as dependency_problems
from vpol.kube.errors import describe
from vpol.kube.lease import LeaderElection
from vpol.kube.live_backend import LiveBackend
from vpol.kube.objects import Objects
from vpol.model.policy import policy_key
from vpol.controller.runtime import Runtime
from vpol.controller.admission.webhook import Admission

logger = logging.getLogger(__name__)

POLICIES = "validatingpolicies.policies.kyverno.io"
NAMESPACED_POLICIES = "namespacedvalidatingpolicies.policies.kyverno.io"
EXCEPTIONS = "policyexceptions.policies.kyverno.io"
MUTATING_POLICIES = "mutatingpolicies.policies.kyverno.io"
NAMESPACED_MUTATING_POLICIES = "namespacedmutatingpolicies.policies.kyverno.io"
GENERATING_POLICIES = "generatingpolicies.policies.kyverno.io"
NAMESPACED_GENERATING_POLICIES = "namespacedgeneratingpolicies.policies.kyverno.io"
DELETING_POLICIES = "deletingpolicies.policies.kyverno.io"
NAMESPACED_DELETING_POLICIES = "namespaceddeletingpolicies.policies.kyverno.io"
IMAGE_VALIDATING_POLICIES = "imagevalidatingpolicies.policies.kyverno.io"
NAMESPACED_IMAGE_VALIDATING_POLICIES = "namespacedimagevalidatingpolicies.policies.kyverno.io"
#: vpol's own objects (its webhook configurations).
OWN_LABELS = {MANAGED_BY_LABEL: MANAGED_BY}
#: The admission policies and bindings generated from policies (labelled managed-by Kyverno, as Kyverno's are).
GENERATED_LABELS = {POLICY_LABEL: kopf.PRESENT}


def _runtime(memo: Any) -> Runtime:
    rt = memo.get("vpol")
    assert isinstance(rt, Runtime)
    return rt


def _enqueue(memo: Any, name: str) -> None:
    queue = _runtime(memo).queue
    if queue is not None:
        queue.add(name)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    rt = _runtime(memo)
    settings.persistence.finalizer = "vpol.kyverno.io/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="vpol.kyverno.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="vpol.kyverno.io")
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    rt.queue = WorkQueue()
    discovery = rt.discovery = DiscoveryCache(rt.api)
    rt.kinds_changed = asyncio.Event()
    options = rt.options
    if options.scan_interval > 0 or options.webhook:
        # One leader (a Lease) scans and writes the webhook configuration; every replica serves admission.
        rt.leader = LeaderElection(rt.api, options.namespace)
        rt.leader.start()
    if options.events:
        rt.events = EventRecorder(Objects(rt.api).create_event, per_second=options.events_per_second,
                                  burst=max(1, int(options.events_per_second * 10)))
        rt.events.start()
    # GlobalContextEntry data: every replica loads it (every replica evaluates); the leader writes the status.
    rt.global_context = GlobalContextStore()
    rt.global_context_controller = GlobalContextController(
        rt.api, rt.global_context, leading=rt.leader.leading if rt.leader else None,
        options=GlobalContextOptions(max_objects=options.global_context_max_objects,
                                     max_bytes=options.global_context_max_bytes,
                                     call_timeout=options.global_context_call_timeout))
    rt.global_context_controller.start()
    # One evaluation context for every path (resource.*, http.*, globalContext.*, image.GetMetadata), handed to
    # each and made the process's default, so a thread that evaluates without being handed it is served too.
    backend = LiveBackend(options.kubeconfig, options.context, http_allowlist=options.http_allow,
                          global_context=rt.global_context,
                          registry=functools.partial(metadata_client, timeout=REGISTRY_TIMEOUT),
                          registry_timeout=REGISTRY_TIMEOUT)
    install_backend(backend)
    if options.scan_interval > 0:
        limits = Limits(seconds_per_subject=options.eval_timeout, memory_bytes=options.eval_memory_mib * 1024**2)
        rt.scanner = Scanner(rt.api, backend, discovery, leading=rt.leader.leading,
                             options=ScanOptions(scan_interval=options.scan_interval, limits=limits,
                                                 mutation_writes_per_second=options.mutate_existing_writes_per_second,
                                                 generation_writes_per_second=options.generation_writes_per_second,
                                                 deletes_per_second=options.deletions_per_second,
                                                 namespace=options.namespace),
                             events=rt.events,
                             global_context=rt.global_context)
        rt.scanner.start()
    # Ready means enforced: what the reconcilers write is proven enforced by the API server first. The prover
    # requeues from its own thread: the queue hands such adds to its loop.
    rt.prover = EnforcementProver(Objects(rt.api), options.namespace, notify=rt.queue.add,
                                  map_api_version=lambda: served_map_version(discovery.get()))
    rt.prover.start()
    rt.reconciler = Reconciler(rt.api, discovery=discovery,
                               on_policy=rt.scanner.set_policy if rt.scanner else None,
                               on_exceptions=rt.scanner.set_exceptions if rt.scanner else None,
                               generation=options.vap_generation, webhook=options.webhook,
                               webhook_configuration=WEBHOOK_CONFIGURATION, prover=rt.prover,
                               requeue=rt.queue.add_at_delay, http_enabled=bool(options.http_allow))
    rt.mutating = MutatingReconciler(rt.reconciler.objects, discovery, rt.reconciler.exceptions,
                                     generation=options.vap_generation, webhook=options.webhook, prover=rt.prover,
                                     access=rt.reconciler.access,
                                     on_policy=rt.scanner.set_mutating if rt.scanner else None,
                                     scans=rt.scanner is not None, http_enabled=bool(options.http_allow))
    rt.lifecycle = LifecycleReconciler(rt.reconciler.objects, discovery, access=rt.reconciler.access,
                                       runner=rt.scanner, webhook=options.webhook, prover=rt.prover,
                                       exceptions=rt.reconciler.exceptions, http_enabled=bool(options.http_allow))
    if rt.scanner is not None:
        rt.scanner.notify = rt.queue.add  # thread-safe: the queue hands adds from other threads to its loop
    if options.webhook:
        rt.admission = Admission(rt.api, options, leading=rt.leader.leading, backend=backend, discovery=discovery,
                                 events=rt.events, global_context=rt.global_context)
        await rt.admission.start()

    reconciler = rt.reconciler
    mutating = rt.mutating
    lifecycle = rt.lifecycle
    work_queue = rt.queue
    assert work_queue is not None
    #: Keys whose permission recheck is scheduled: one each, however often they are reconciled meanwhile.
    rechecking: set[str] = set()

    def recheck(name: str) -> None:
        rechecking.discard(name)
        work_queue.add(name)

    async def process(name: str) -> None:
        try:
            work = mutating.reconcile if is_mutating_key(name) else \
                lifecycle.reconcile if is_lifecycle_key(name) else reconciler.reconcile
            result = await asyncio.to_thread(work, name)
        except Exception:
            metrics.RECONCILE_ERRORS.labels("policy").inc()
            raise  # the queue retries with backoff
        rt.record(result)
        if result.permissions_missing and name not in rechecking:
            rechecking.add(name)
            asyncio.get_running_loop().call_later(PERMISSIONS_RECHECK, recheck, name)

    for i in range(rt.options.workers):
        rt.tasks.append(asyncio.create_task(rt.queue.run_worker(process), name=f"vpol-worker-{i}"))
    rt.tasks.append(asyncio.create_task(_resync(rt), name="vpol-resync"))
    rt.tasks.append(asyncio.create_task(_follow_kinds(rt), name="vpol-kinds"))
    rt.tasks.append(asyncio.create_task(_dependencies(rt), name="vpol-dependencies"))


#: Seconds after which a policy lacking permissions is reconciled again (the access checks' cache lasts as long):
#: a ClusterRole granting them (aggregated into the operator's) shows in its status without waiting for the resync.
PERMISSIONS_RECHECK = 30.0

#: How often what the operator needs from the cluster is checked again (sooner while something is missing).
DEPENDENCY_PERIOD = 60.0
DEPENDENCY_PERIOD_MISSING = 10.0


async def _dependencies(rt: Runtime) -> None:
    """Say once, in a sentence, what the operator needs and lacks (and when it is fixed); keep checking."""
    while True:
        try:
            now = await asyncio.to_thread(dependency_problems, rt.api)
        except Exception as exc:  # noqa: BLE001 - try again at the next period
            logger.debug("checking the operator's dependencies failed: %s", exc)
        else:
            for name, sentence in now.items():
                if rt.dependency_problems.get(name) != sentence:
                    logger.warning("%s", sentence)
                metrics.DEPENDENCY_PROBLEM.labels(name).set(1)
            for name in set(rt.dependency_problems) - set(now):
                logger.warning("fixed: %s is available now", name)
                metrics.DEPENDENCY_PROBLEM.labels(name).set(0)
            rt.dependency_problems = now
        await asyncio.sleep(DEPENDENCY_PERIOD_MISSING if rt.dependency_problems else DEPENDENCY_PERIOD)


async def _queue_every_policy(rt: Runtime) -> None:
    try:
        assert rt.reconciler is not None and rt.queue is not None
        objects = rt.reconciler.objects
        listed = await asyncio.to_thread(StartupPolicies.read, objects)
        if rt.scanner is not None:
            rt.scanner.expect(listed.expected())
        names = [policy_key(p["metadata"]) for p in listed.validating]
        mutating = [mutating_key(policy_key(p["metadata"])) for p in listed.mutating]
        deleting = await asyncio.to_thread(objects.list_lifecycle_policies, DELETING)
        image = await asyncio.to_thread(objects.list_lifecycle_policies, IMAGE_VALIDATING)
        lifecycle = [lifecycle_key(kind, policy_key(p["metadata"]))
                     for kind, bodies in ((GENERATING, listed.generating), (DELETING, deleting),
                                          (IMAGE_VALIDATING, image)) for p in bodies]
        for name in [*names, *mutating, *lifecycle]:
            rt.queue.add(name)
    except Exception as exc:  # noqa: BLE001 - try again at the next period
        # A missing CRD is said by the dependency check (vpol.kube.dependencies), once.
        log = logger.debug if getattr(exc, "status", None) == 404 else logger.warning
        log("listing policies for resync failed: %s", describe(exc))


async def _resync(rt: Runtime) -> None:
    while True:
        await _queue_every_policy(rt)
        await asyncio.sleep(rt.options.resync)


#: Seconds gathered after a CRD changed before discovery is refreshed (a CRD is created, then established).
KINDS_SETTLE = 1.0


async def _follow_kinds(rt: Runtime) -> None:
    """Kinds came or went (a CRD was created, changed what it serves, or was deleted): discovery is refreshed, the
    scanner watches what the policies match now, and every policy is reconciled (its matched kinds, RBAC, webhook
    rules and native eligibility follow)."""
    assert rt.kinds_changed is not None
    while True:
        await rt.kinds_changed.wait()
        await asyncio.sleep(KINDS_SETTLE)
        rt.kinds_changed.clear()
        try:
            if rt.discovery is not None:
                rt.discovery.invalidate()
            if rt.scanner is not None:
                rt.scanner.kinds_changed()
            await _queue_every_policy(rt)
        except Exception as exc:  # noqa: BLE001 - the next change (or the resync) tries again
            logger.warning("following the cluster's kinds failed: %s", describe(exc))


def _served(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a CustomResourceDefinition serves: (group, kind, served versions, established)."""
    spec = body.get("spec") or {}
    versions = tuple(sorted(str(v.get("name")) for v in spec.get("versions") or []
                            if isinstance(v, Mapping) and v.get("served")))
    established = any(c.get("type") == "Established" and c.get("status") == "True"
                      for c in (body.get("status") or {}).get("conditions") or [] if isinstance(c, Mapping))
    return str(spec.get("group") or ""), str((spec.get("names") or {}).get("kind") or ""), versions, established


@kopf.on.event("apiextensions.k8s.io", "v1", "customresourcedefinitions")
async def crd_event(type: str | None, name: str, body: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
    """Kinds follow the cluster's CRDs: a change of what one serves (after the first listing, whose objects were
    served when the operator started) sets Runtime.kinds_changed."""
    rt = _runtime(memo)
    state = None if type == "DELETED" else _served(body)
    if rt.crds.get(name) == state:
        return
    if state is None:
        rt.crds.pop(name, None)
    else:
        rt.crds[name] = state
    if type is not None and rt.kinds_changed is not None:
        rt.kinds_changed.set()


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    rt = _runtime(memo)
    for task in rt.tasks:
        task.cancel()
    await asyncio.gather(*rt.tasks, return_exceptions=True)
    if rt.admission:
        await rt.admission.stop()
    if rt.scanner:
        rt.scanner.stop()
        await asyncio.to_thread(rt.scanner.join, 10)
    if rt.prover:
        rt.prover.stop()
    if rt.events:
        rt.events.stop()
    if rt.global_context_controller:
        rt.global_context_controller.stop()
        await asyncio.to_thread(rt.global_context_controller.join, 5)
    if rt.leader:
        rt.leader.stop()
        await asyncio.to_thread(rt.leader.join, 10)


def _seen(memo: Any, kind: str, event_type: str | None, meta: Mapping[str, Any]) -> None:
    """Keep the queue keys of the namespaced policies seen (Runtime.namespaced)."""
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    if not namespace:
        return
    kind = f"Namespaced{kind}"
    keys = _runtime(memo).namespaced.setdefault((kind, name), set())
    key = QUEUE_KEYS[kind](policy_key(meta))
    if event_type == "DELETED":
        keys.discard(key)
    else:
        keys.add(key)


@kopf.on.event(POLICIES)
@kopf.on.event(NAMESPACED_POLICIES)
async def policy_event(type: str | None, meta: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
    """A policy changed: it is reconciled. (Background scans learn of it from their own watch of the policies,
    vpol.controller.scanner, before the reconcile gets to it.)"""
    _seen(memo, "ValidatingPolicy", type, meta)
    rt = _runtime(memo)
    key = policy_key(meta)
    version = str(meta.get("resourceVersion", ""))
    if rt.reconciler is not None and version and rt.reconciler.written_versions.get(key) == version:
        return  # the echo of our own status write: nothing new to reconcile
    _enqueue(memo, key)


@kopf.on.event(MUTATING_POLICIES)
@kopf.on.event(NAMESPACED_MUTATING_POLICIES)
async def mutating_policy_event(type: str | None, meta: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
    _seen(memo, "MutatingPolicy", type, meta)
    rt = _runtime(memo)
    key = policy_key(meta)
    version = str(meta.get("resourceVersion", ""))
    if rt.mutating is not None and version and rt.mutating.written_versions.get(key) == version:
        return  # the echo of our own status write
    _enqueue(memo, mutating_key(key))


@kopf.on.event(GENERATING_POLICIES)
@kopf.on.event(NAMESPACED_GENERATING_POLICIES)
async def generating_policy_event(type: str | None, meta: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
    _seen(memo, "GeneratingPolicy", type, meta)
    _lifecycle_event(GENERATING, meta, memo)


@kopf.on.event(DELETING_POLICIES)
@kopf.on.event(NAMESPACED_DELETING_POLICIES)
async def deleting_policy_event(type: str | None, meta: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
    _seen(memo, "DeletingPolicy", type, meta)
    _lifecycle_event(DELETING, meta, memo)


@kopf.on.event(IMAGE_VALIDATING_POLICIES)
@kopf.on.event(NAMESPACED_IMAGE_VALIDATING_POLICIES)
async def image_validating_policy_event(type: str | None, meta: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
    _seen(memo, "ImageValidatingPolicy", type, meta)
    _lifecycle_event(IMAGE_VALIDATING, meta, memo)


def _lifecycle_event(kind: str, meta: Mapping[str, Any], memo: Any) -> None:
    rt = _runtime(memo)
    key = lifecycle_key(kind, policy_key(meta))
    version = str(meta.get("resourceVersion", ""))
    if rt.lifecycle is not None and version and rt.lifecycle.written_versions.get(key) == version:
        return  # the echo of our own status write
    _enqueue(memo, key)


@kopf.on.event("admissionregistration.k8s.io", "v1", "mutatingadmissionpolicies", labels=GENERATED_LABELS)
async def map_event(type: str | None, name: str, meta: Mapping[str, Any], labels: Mapping[str, str],
                    memo: kopf.Memo, **_: Any) -> None:
    _generated_event("MutatingAdmissionPolicy", type, name, meta, labels, memo)


@kopf.on.event("admissionregistration.k8s.io", "v1", "mutatingadmissionpolicybindings", labels=GENERATED_LABELS)
async def map_binding_event(type: str | None, name: str, meta: Mapping[str, Any], labels: Mapping[str, str],
                            memo: kopf.Memo, **_: Any) -> None:
    _generated_event("MutatingAdmissionPolicyBinding", type, name, meta, labels, memo)


@kopf.on.event("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
               labels=OWN_LABELS, when=lambda name, **_: name == MUTATING_WEBHOOK_CONFIGURATION)
async def mutating_webhook_configuration_event(type: str | None, body: Mapping[str, Any], memo: kopf.Memo,
                                               **_: Any) -> None:
    """MutatingPolicies (and ImageValidatingPolicies pinning digests, keyed ``ivpol:<key>`` there and in the queue)
    whose covered generation changed get their AdmissionEnforced condition rewritten."""
    rt = _runtime(memo)
    rt.covered_mutating, changed = _coverage_changes(rt.covered_mutating, type, body)
    for key in changed:
        _enqueue(memo, key if key.startswith(IMAGE_PREFIX) else mutating_key(key))


@kopf.on.event("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
               labels=OWN_LABELS, when=lambda name, **_: name == WEBHOOK_CONFIGURATION)
async def webhook_configuration_event(type: str | None, body: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
    """Policies whose covered generation changed get their AdmissionEnforced condition rewritten (an
    ImageValidatingPolicy's coverage key, ``ivpol:<key>``, is its queue key)."""
    rt = _runtime(memo)
    rt.covered, changed = _coverage_changes(rt.covered, type, body)
    for key in changed:
        _enqueue(memo, key)


def _coverage_changes(before: dict[str, int], event_type: str | None,
                      body: Mapping[str, Any]) -> tuple[dict[str, int], list[str]]:
    """What a webhook configuration covers now, and the policy keys whose covered generation changed."""
    now: dict[str, int] = {} if event_type == "DELETED" else covered(body)
    return now, [key for key in set(before) | set(now) if before.get(key) != now.get(key)]


def _generated_event(kind: str, event_type: str | None, name: str, meta: Mapping[str, Any],
                     labels: Mapping[str, str], memo: Any) -> None:
    """A generated VAP, MAP or binding changed: its policy is reconciled (unless it is our own apply's echo)."""
    owner = policy_key_of(labels)
    if not owner:
        return
    rt = _runtime(memo)
    mutating = kind.startswith("MutatingAdmissionPolicy")
    reconciler = rt.mutating if mutating else rt.reconciler
    version = str(meta.get("resourceVersion", ""))
    if event_type != "DELETED" and reconciler is not None and version and \
            reconciler.generated.versions.get((kind, name)) == version:
        return  # the echo of our own apply
    _enqueue(memo, mutating_key(owner) if mutating else owner)


@kopf.on.event("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", labels=GENERATED_LABELS)
async def vap_event(type: str | None, name: str, meta: Mapping[str, Any], labels: Mapping[str, str],
                    memo: kopf.Memo, **_: Any) -> None:
    _generated_event("ValidatingAdmissionPolicy", type, name, meta, labels, memo)


@kopf.on.event("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", labels=GENERATED_LABELS)
async def binding_event(type: str | None, name: str, meta: Mapping[str, Any], labels: Mapping[str, str],
                        memo: kopf.Memo, **_: Any) -> None:
    _generated_event("ValidatingAdmissionPolicyBinding", type, name, meta, labels, memo)


@kopf.on.event(EXCEPTIONS)
async def exception_event(spec: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
    """The policies an exception names (by kind and name; a namespaced kind's in every namespace, as Kyverno matches
    them) are reconciled. A reference without a kind names the policies of that name of every kind (what
    PolicyException.applies_to exempts)."""
    rt = _runtime(memo)
    for ref in spec.get("policyRefs") or []:
        if not isinstance(ref, Mapping) or not ref.get("name"):
            continue
        name = str(ref["name"])
        for kind in [str(ref["kind"])] if ref.get("kind") else list(QUEUE_KEYS):
            if kind not in QUEUE_KEYS:
                continue
            keys = sorted(rt.namespaced.get((kind, name), ())) if kind.startswith("Namespaced") else \
                [QUEUE_KEYS[kind](name)]
            for key in keys:
                _enqueue(memo, key)


@kopf.on.probe(id="leader")
def leader_probe(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    """Whether this replica leads, and what stops it from trying (a missing namespace, RBAC)."""
    rt = _runtime(memo)
    if rt.leader is None:
        return {"leading": False, "problem": ""}
    metrics.LEADER_PROBLEM.set(1 if rt.leader.problem else 0)
    return {"leading": rt.leader.leading.is_set(), "problem": rt.leader.problem}


@kopf.on.probe(id="dependencies")
def dependencies_probe(memo: kopf.Memo, **_: Any) -> dict[str, str]:
    """What the operator needs from the cluster and does not have (empty when all is there)."""
    return dict(_runtime(memo).dependency_problems)


@kopf.on.probe(id="queue")
def queue_probe(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    rt = _runtime(memo)
    return {"processed": rt.queue.processed if rt.queue else 0, "idle": rt.queue.idle() if rt.queue else True}

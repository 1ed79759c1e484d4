"""Kopf handlers: they only turn events into work-queue keys (vpol.controller.queue_keys.PolicyKey).

- every event of a policy of any kind (vpol.policies.registry; either variant, any
  served version) queues that policy, unless it is the echo of the
  reconciler's own status write; one handler, registered for every kind's
  resources in one loop over the registry;
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
from vpol.controller import metrics
from vpol.controller.admission.images import REGISTRY_TIMEOUT
from vpol.controller.admission.webhook import Admission
from vpol.controller.discovery_cache import DiscoveryCache
from vpol.controller.enforcement_proof import EnforcementProver
from vpol.controller.events import EventRecorder
from vpol.controller.global_context import GlobalContextController, GlobalContextOptions
from vpol.controller.plans.mutating import served_map_version
from vpol.controller.queue import WorkQueue
from vpol.controller.queue_keys import PolicyKey
from vpol.controller.reconcile import Reconciler
from vpol.controller.registry_credentials import metadata_client
from vpol.controller.runtime import Runtime
from vpol.controller.scan_startup import StartupPolicies
from vpol.controller.scanner import ScanOptions, Scanner
from vpol.desired.admission_policy import MANAGED_BY, MANAGED_BY_LABEL, POLICY_LABEL, policy_key_of
from vpol.desired.webhook import MUTATING_WEBHOOK_CONFIGURATION, WEBHOOK_CONFIGURATION
from vpol.desired.webhook_coverage import covered, covered_policy
from vpol.engine.global_context import GlobalContextStore
from vpol.kube.dependencies import problems as dependency_problems
from vpol.kube.errors import describe
from vpol.kube.lease import LeaderElection
from vpol.kube.live_backend import LiveBackend
from vpol.kube.objects import EXCEPTION_PLURAL, GROUP, Objects
from vpol.policies.registry import KINDS, kind_named
from vpol.policies.sandbox import Limits

logger = logging.getLogger(__name__)

EXCEPTIONS = f"{EXCEPTION_PLURAL}.{GROUP}"
#: vpol's own objects (its webhook configurations).
OWN_LABELS = {MANAGED_BY_LABEL: MANAGED_BY}
#: The admission policies and bindings generated from policies (labelled managed-by Kyverno, as Kyverno's are).
GENERATED_LABELS = {POLICY_LABEL: kopf.PRESENT}


def _runtime(memo: Any) -> Runtime:
    rt = memo.get("vpol")
    assert isinstance(rt, Runtime)
    return rt


def _enqueue(memo: Any, key: PolicyKey) -> None:
    queue = _runtime(memo).queue
    if queue is not None:
        queue.add(key)


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
    rt.reconciler = Reconciler(rt.api, discovery=discovery, runner=rt.scanner, generation=options.vap_generation,
                               webhook=options.webhook, webhook_configuration=WEBHOOK_CONFIGURATION, prover=rt.prover,
                               requeue=rt.queue.add_at_delay, http_enabled=bool(options.http_allow))
    if rt.scanner is not None:
        rt.scanner.notify = rt.queue.add  # thread-safe: the queue hands adds from other threads to its loop
    if options.webhook:
        rt.admission = Admission(rt.api, options, leading=rt.leader.leading, backend=backend, discovery=discovery,
                                 events=rt.events, global_context=rt.global_context)
        await rt.admission.start()

    reconciler = rt.reconciler
    work_queue = rt.queue
    assert work_queue is not None
    async def process(key: PolicyKey) -> None:
        try:
            result = await asyncio.to_thread(reconciler.reconcile, key)
        except Exception:
            metrics.RECONCILE_ERRORS.labels("policy").inc()
            raise  # the queue retries with backoff
        rt.record(result)
        if result.permissions_missing:
            # One recheck each, however often the key is reconciled meanwhile.
            work_queue.add_once_after(key, PERMISSIONS_RECHECK, "permissions")

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
            rt.scanner.expect(listed.keys())
        for key in listed.keys():
            rt.queue.add(key)
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
    # The webhook drains (seconds: WebhookServer.stop) while the rest stops, the scanner's Lease released meanwhile.
    admission = asyncio.create_task(rt.admission.stop()) if rt.admission else None
    scanning = False
    if rt.scanner:
        rt.scanner.stop()  # no report is written after this (ReportStore.may_write); writes in flight are waited for
        await asyncio.to_thread(rt.scanner.join, 10)
        scanning = rt.scanner.is_alive()
        if scanning:
            logger.warning("background scans did not stop within 10 s: the scanner Lease is left to expire rather "
                           "than released, so that no two replicas write reports at once")
    if rt.prover:
        rt.prover.stop()
    if rt.events:
        rt.events.stop()
    if rt.global_context_controller:
        rt.global_context_controller.stop()
        await asyncio.to_thread(rt.global_context_controller.join, 5)
    if rt.leader:
        rt.leader.stop(release=not scanning)
        await asyncio.to_thread(rt.leader.join, 10)
    if admission:
        await admission


def _seen(memo: Any, key: PolicyKey, event_type: str | None) -> None:
    """Keep the keys of the namespaced policies seen (Runtime.namespaced)."""
    if not key.namespace:
        return
    keys = _runtime(memo).namespaced.setdefault((key.variant, key.name), set())
    if event_type == "DELETED":
        keys.discard(key)
    else:
        keys.add(key)


async def policy_event(type: str | None, resource: kopf.Resource, meta: Mapping[str, Any], memo: kopf.Memo,
                       **_: Any) -> None:
    """A policy of any kind changed: it is reconciled, unless this is the echo of the reconciler's own status write.
    (Background scans learn of a ValidatingPolicy from their own watch of the policies, vpol.controller.scanner,
    before the reconcile gets to it.)"""
    kind = _KIND_OF_PLURAL[resource.plural]
    key = PolicyKey.from_meta(kind, meta)
    _seen(memo, key, type)
    rt = _runtime(memo)
    if rt.reconciler is not None and rt.reconciler.is_echo(key, str(meta.get("resourceVersion", ""))):
        return
    _enqueue(memo, key)


#: The cluster-wide kind's name of each policy resource (plural).
_KIND_OF_PLURAL = {plural: kind.kind for kind in KINDS for plural in kind.plurals}
for _kind in KINDS:
    for _plural in _kind.plurals:
        kopf.on.event(f"{_plural}.{_kind.group}")(policy_event)


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
    """MutatingPolicies (and ImageValidatingPolicies pinning digests) whose covered generation changed get their
    AdmissionEnforced condition rewritten."""
    rt = _runtime(memo)
    rt.covered_mutating, changed = _coverage_changes(rt.covered_mutating, type, body)
    for covered_as in changed:
        _enqueue(memo, PolicyKey.of(*covered_policy(covered_as, "MutatingPolicy")))


@kopf.on.event("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
               labels=OWN_LABELS, when=lambda name, **_: name == WEBHOOK_CONFIGURATION)
async def webhook_configuration_event(type: str | None, body: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
    """ValidatingPolicies and ImageValidatingPolicies whose covered generation changed get their AdmissionEnforced
    condition rewritten."""
    rt = _runtime(memo)
    rt.covered, changed = _coverage_changes(rt.covered, type, body)
    for covered_as in changed:
        _enqueue(memo, PolicyKey.of(*covered_policy(covered_as, "ValidatingPolicy")))


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
    version = str(meta.get("resourceVersion", ""))
    if event_type != "DELETED" and rt.reconciler is not None and version and \
            rt.reconciler.generated.versions.get((kind, name)) == version:
        return  # the echo of our own apply
    _enqueue(memo, PolicyKey.of("MutatingPolicy" if kind.startswith("MutatingAdmissionPolicy") else
                                "ValidatingPolicy", owner))


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
        for kind in [str(ref["kind"])] if ref.get("kind") else [k for policy in KINDS for k in policy.kinds]:
            if kind_named(kind) is None:
                continue
            keys = sorted(rt.namespaced.get((kind, name), ())) if kind.startswith("Namespaced") else \
                [PolicyKey.of(kind, name)]
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

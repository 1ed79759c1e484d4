"""What the running operator holds: options, the API client, the queue, the reconciler, its tasks."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from vpol.controller import metrics
from vpol.controller.plan_context import ReconcileResult
from vpol.controller.queue import WorkQueue
from vpol.controller.queue_keys import PolicyKey
from vpol.controller.reconcile import Reconciler


@dataclass(frozen=True)
class Options:
    kubeconfig: str | None = None
    context: str | None = None
    metrics_port: int = 8080
    liveness_port: int = 8081
    #: Kopf peering name; empty runs standalone (a single replica).
    peering: str = ""
    priority: int | None = None  # None: drawn at random (vpol.controller.run.peering_priority)
    workers: int = 2
    #: Seconds between full re-reconciles of every policy.
    resync: float = 600.0
    #: Seconds between full background rescans (0 disables background scans).
    scan_interval: float = 3600.0
    #: Namespace of the scanner Lease (the operator's own namespace).
    namespace: str = "vpol-system"
    #: URL prefixes http.Get/Post may reach (empty: http.* is disabled).
    http_allow: tuple[str, ...] = ()
    #: Per-resource evaluation deadline and worker memory cap of background scans.
    eval_timeout: float = 5.0
    eval_memory_mib: int = 1024
    #: --vap-generation: "eligible" (native VAPs for every eligible policy unless it opts out) or "opt-in".
    vap_generation: str = "eligible"
    #: Run the admission webhook for the policies the API server cannot enforce natively.
    webhook: bool = True
    webhook_port: int = 9443
    #: Development and tests: the API server calls this URL instead of the Service.
    webhook_url: str = ""
    #: The Service in front of the webhook (in ``namespace``).
    webhook_service: str = "vpol-webhook"
    webhook_timeout: int = 10
    #: An existing Secret holding the serving certificate (cert-manager); empty: vpol manages its own.
    webhook_cert_secret: str = ""
    webhook_workers: int = 2
    #: A CA file: the webhook requires a client certificate it signed (the API server's); "": none required.
    webhook_client_ca: str = ""
    webhook_eval_timeout: float = 3.0
    #: Seconds a stopping replica keeps answering, each answer closing its connection, before it closes
    #: (vpol.controller.admission.server.WebhookServer.stop); none with ``webhook_url`` (no other replica there).
    webhook_drain: float = 5.0
    #: Namespaces vpol's webhooks never match, besides kube-system and ``namespace`` (Kyverno's equivalent is the
    #: namespaceSelector of its ConfigMap's ``webhooks``): requests there are not sent to vpol at all.
    webhook_excluded_namespaces: tuple[str, ...] = ()
    #: Requests whose work is bounded before it starts are answered by the serving process (vpol.policies.inline);
    #: False: every request goes to an evaluation worker.
    webhook_inline: bool = True
    #: Refuse invalid policies at apply time (a ValidatingWebhookConfiguration with failurePolicy Ignore).
    policy_validation: bool = True
    #: PolicyViolation Events (admission and background results), and their rate limit.
    events: bool = True
    events_per_second: float = 5.0
    #: Most writes per second of the mutation of existing objects (mutateExisting).
    mutate_existing_writes_per_second: float = 50.0
    generation_writes_per_second: float = 50.0
    deletions_per_second: float = 50.0
    #: The installation's ClusterRole: it owns the webhook configurations, so uninstalling vpol deletes them.
    owner_cluster_role: str = ""
    #: Bounds of one GlobalContextEntry's cached data (vpol.controller.global_context).
    global_context_max_objects: int = 10_000
    global_context_max_bytes: int = 10_000_000
    #: Timeout of one GlobalContextEntry API call.
    global_context_call_timeout: float = 30.0


@dataclass
class Runtime:
    options: Options
    api: client.ApiClient
    queue: WorkQueue[PolicyKey] | None = None
    #: Reconciles a policy of any kind (vpol.controller.reconcile).
    reconciler: Reconciler | None = None
    scanner: Any = None
    leader: Any = None
    #: The admission webhook's parts (None with --webhook=off).
    admission: Any = None
    #: Proves enforcement before a policy is called Ready (vpol.controller.enforcement_proof).
    prover: Any = None
    #: Sends PolicyViolation Events (vpol.controller.events; None with --events=off).
    events: Any = None
    #: GlobalContextEntry data (vpol.engine.global_context.GlobalContextStore) and its controller.
    global_context: Any = None
    global_context_controller: Any = None
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    #: Last known readiness per policy (for metrics).
    ready: dict[str, bool] = field(default_factory=dict)
    infos: dict[str, tuple[bool, str, bool, bool]] = field(default_factory=dict)
    enforcement: dict[str, str] = field(default_factory=dict)
    #: What vpol's webhook configuration covered when last seen (policy key -> generation).
    covered: dict[str, int] = field(default_factory=dict)
    covered_mutating: dict[str, int] = field(default_factory=dict)
    #: What the operator needs from the cluster and lacks (vpol.kube.dependencies), by dependency.
    dependency_problems: dict[str, str] = field(default_factory=dict)
    #: The namespaced policies seen, (kind, name) -> their keys: a PolicyException names a policy by kind and name
    #: only, and exempts it in every namespace (Kyverno), so its events queue each of them.
    namespaced: dict[tuple[str, str], set[PolicyKey]] = field(default_factory=dict)
    #: The cluster's discovery (vpol.controller.discovery_cache.DiscoveryCache), shared by every part.
    discovery: Any = None
    #: What each CustomResourceDefinition serves (group, kind, served versions, established), by name; and the
    #: signal that it changed (kinds came or went: discovery is refreshed and every policy reconciled).
    crds: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    kinds_changed: asyncio.Event | None = None

    def record(self, result: ReconcileResult) -> None:
        """A reconcile's result in the per-policy metrics (their ``policy`` label: the key's text)."""
        name = str(result.key)
        if result.ready is None:
            self.ready.pop(name, None)
            self.infos.pop(name, None)
            self.enforcement.pop(name, None)
        else:
            self.ready[name] = result.ready
            self.infos[name] = (result.ready, result.actions, result.background, result.generated)
            self.enforcement[name] = result.enforcement
        metrics.observe_reconcile(result, self.ready)
        metrics.set_policy_info(self.infos)
        metrics.set_enforcement(self.enforcement)

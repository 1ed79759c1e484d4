"""Reconciling one ValidatingPolicy or NamespacedValidatingPolicy: read, call the core, write.

Reads the policy, the PolicyExceptions, the cluster's API discovery and vpol's
webhook configuration; the core compiles, type-checks, computes autogen, the
admission route (:mod:`vpol.desired.enforcement`), the desired VAPs and the
status; this module applies/deletes generated objects and writes the status
only when it changed. Everything is level-based: the same cluster state
always leads to the same writes, and a second pass writes nothing.

Keys are policy keys: ``name`` for a ValidatingPolicy, ``namespace/name`` for
a NamespacedValidatingPolicy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.cel.library_use import unserved_libraries
from vpol.controller.queue_keys import QUEUE_KEYS
from vpol.controller.generated_apply import GeneratedObjects, api_message
from vpol.controller.enforcement_proof import VAP, EnforcementProver, Proof
from vpol.desired.enforcement import GENERATION_ELIGIBLE, NATIVE, WEBHOOK, WebhookState, admission_finding, route
from vpol.desired.probe import probed_epoch
from vpol.desired.status import Findings, desired_status, status_changed
from vpol.desired.vap import desired_objects, generated_selector
from vpol.desired.webhook_coverage import covered_generation
from vpol.cel.compiler import compile_verdict
from vpol.cel.typecheck import check_policy_cached
from vpol.engine.autogen import autogen_configs, status_configs
from vpol.engine.scope import matched_resources
from vpol.kube.access import AccessChecker
from vpol.kube.errors import describe
from vpol.kube.objects import Listed, Objects
from vpol.kube.openapi import cluster_discovery
from vpol.model.discovery import Discovery, ResourceInfo, builtin
from vpol.model.parse import parse_policy
from vpol.model.policy import PolicyException, ValidatingPolicy, active_exceptions

logger = logging.getLogger(__name__)

#: How long cluster discovery (resources and schemas) is reused before refetching.
DISCOVERY_TTL = 300.0
#: After a failed discovery, how soon to try again (seconds).
RETRY_AFTER_FAILURE = 15.0
#: Seconds between the rediscoveries that a kind missing from the cached discovery may cause.
MISS_REFRESH = 5.0


@dataclass
class ReconcileResult:
    name: str
    status_written: bool = False
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    ready: bool | None = None
    #: For the vpol_policy_info metric.
    actions: str = ""
    background: bool = False
    generated: bool = False
    #: NativeVAP, Webhook, None or NotApplicable ("" when the policy is gone).
    enforcement: str = ""
    #: The operator lacks permissions the policy needs (RBACPermissionsGranted is False): checked again soon, as
    #: nothing tells the operator when a ClusterRole grants them.
    permissions_missing: bool = False


class DiscoveryCache:
    """The cluster's discovery and schemas, refreshed every ``ttl`` seconds (thread-safe)."""

    def __init__(self, api: client.ApiClient, ttl: float = DISCOVERY_TTL):
        self.api = api
        self.ttl = ttl
        self._value: Discovery | None = None
        self._at = 0.0
        self._lock = threading.Lock()
        self.error = ""

    def get(self) -> Discovery:
        with self._lock:
            if self._value is None or time.monotonic() - self._at > self.ttl:
                try:
                    self._value = cluster_discovery(self.api, builtin())
                    self.error = ""
                    self._at = time.monotonic()
                except Exception as exc:  # noqa: BLE001 - fall back to the bundled discovery
                    logger.warning("cluster discovery failed, using the bundled one: %s", describe(exc))
                    self.error = describe(exc)
                    if self._value is None:
                        self._value = builtin()
                    # try again soon rather than after a whole TTL
                    self._at = time.monotonic() - self.ttl + RETRY_AFTER_FAILURE
            return self._value

    def invalidate(self) -> None:
        with self._lock:
            self._at = 0.0

    def resource_for_kind(self, api_version: str, kind: str) -> ResourceInfo | None:
        """What serves ``kind`` of ``api_version``; a kind the cached discovery does not know is looked up again
        first (a CRD installed since), at most once every :data:`MISS_REFRESH` seconds."""
        found = self.get().resource_for_kind(api_version, kind)
        if found is not None:
            return found
        with self._lock:
            if time.monotonic() - self._at >= MISS_REFRESH:
                self._at = 0.0
        return self.get().resource_for_kind(api_version, kind)


#: Seconds after an exception's expiresAt at which the policies it names are reconciled again (it has expired then).
EXPIRY_MARGIN = 1.0


def exception_policy_keys(exc: PolicyException) -> list[str]:
    """The work-queue keys of the policies an exception names (vpol.controller.queue_keys), a namespaced kind's
    in the exception's namespace; a reference without a kind names a ValidatingPolicy."""
    out = []
    for ref in exc.policy_refs:
        kind = ref.kind or "ValidatingPolicy"
        if kind not in QUEUE_KEYS:
            continue
        key = f"{exc.namespace}/{ref.name}" if kind.startswith("Namespaced") and exc.namespace else ref.name
        out.append(QUEUE_KEYS[kind](key))
    return out


class Reconciler:
    def __init__(self, api: client.ApiClient, *, discovery: DiscoveryCache | None = None,
                 on_policy: Callable[[str, ValidatingPolicy | None], None] | None = None,
                 on_exceptions: Callable[[list[PolicyException]], None] | None = None,
                 generation: str = GENERATION_ELIGIBLE, webhook: bool = True,
                 webhook_configuration: str = "", prover: EnforcementProver | None = None,
                 requeue: Callable[[str, float], None] | None = None, http_enabled: bool = True):
        self.api = api
        #: Whether http.* can be served (the operator was given --http-allow prefixes): vpol.cel.library_use.
        self.http_enabled = http_enabled
        #: requeue(key, delay): reconcile a policy again later (when an exception naming it expires).
        self.requeue = requeue or (lambda key, delay: None)
        #: (policy key, expiresAt) of the exception expiries already scheduled.
        self._expiries: set[tuple[str, float]] = set()
        self._expiries_lock = threading.Lock()
        #: Proves the API server enforces what was written before a policy is called enforced (None: trust writes;
        #: only for tests of the reconciler itself).
        self.prover = prover
        #: When (monotonic) each policy's generated objects last changed in this process.
        self.written_at: dict[str, float] = {}
        #: --vap-generation: "eligible" or "opt-in".
        self.generation = generation
        #: Whether this operator runs its admission webhook, and the name of its configuration.
        self.webhook = webhook
        self.webhook_configuration = webhook_configuration
        self.objects = Objects(api)
        self.access = AccessChecker(api)
        self.discovery = discovery or DiscoveryCache(api)
        #: resourceVersion of each policy right after our own status write: the watch event
        #: that write causes needs no reconcile.
        self.written_versions: dict[str, str] = {}
        #: The VAPs and bindings we apply (vpol.controller.generated_apply), and their resourceVersions.
        self.generated = GeneratedObjects(self.objects)
        #: Told about every valid policy (None when it is gone or invalid): the scanner listens.
        self.on_policy = on_policy or (lambda name, policy: None)
        self.on_exceptions = on_exceptions or (lambda exceptions: None)

    def exceptions(self) -> list[PolicyException]:
        """The cluster's PolicyExceptions that have not expired (Kyverno leaves expired ones out when it lists them);
        the policies an unexpired one names are reconciled again when it expires, so their generated objects and
        scans stop applying it then."""
        now = time.time()
        out, _next = active_exceptions(self.objects.policy_exceptions(), now)
        with self._expiries_lock:
            self._expiries = {(k, at) for k, at in self._expiries if at >= now}
            for exc in out:
                if exc.expires_at is None:
                    continue
                for key in exception_policy_keys(exc):
                    if (key, exc.expires_at) not in self._expiries:
                        self._expiries.add((key, exc.expires_at))
                        self.requeue(key, exc.expires_at - now + EXPIRY_MARGIN)
        self.on_exceptions(out)
        return out

    def reconcile(self, name: str) -> ReconcileResult:
        """Reconcile the policy with key ``name`` (``name`` or ``namespace/name``)."""
        result = ReconcileResult(name)
        body = self.objects.get_policy(name)
        existing = self.objects.list_generated(generated_selector(name))
        if body is None:
            self.on_policy(name, None)
            self.written_at.pop(name, None)
            if self.prover is not None:
                self.prover.forget(name)
            # Deleted: ownerReferences let the garbage collector remove what we generated;
            # deleting explicitly as well makes it immediate and covers objects without owners.
            result.deleted = self._delete_generated(existing, keep=set())
            return result

        generation = int((body.get("metadata") or {}).get("generation") or 0)
        policy, problems = parse_policy(body)
        findings = Findings(generation=generation)
        if policy is None:
            self.on_policy(name, None)
            findings.compile_errors = [p.short() for p in problems if p.severity == "error"]
            findings.vap = None
            findings.admission = (False, "CompilationFailed", "not enforced: the policy is invalid")
            result.deleted = self._delete_generated(existing, keep=set())
            return self._write_status(result, body, findings)

        result.actions = ",".join(policy.spec.validation_actions)
        result.background = policy.spec.evaluation.background_enabled
        compiled = compile_verdict(policy)  # the scanner and the webhook asked the same of this spec already
        findings.compile_errors = [p.short() for p in compiled.errors]
        findings.unserved_libraries = unserved_libraries(policy.expressions(), http_enabled=self.http_enabled)
        findings.background_enabled = policy.spec.evaluation.background_enabled
        self.on_policy(name, policy if compiled.ok else None)
        # Read once per reconcile (the scanner is told; the native plan below uses the same list).
        exceptions: list[PolicyException] | None = None
        if compiled.ok and policy.spec.evaluation.background_enabled:
            exceptions = self.exceptions()
        configs = autogen_configs(policy)
        findings.autogen = status_configs(configs)

        discovery = self.discovery.get()
        try:
            warnings = check_policy_cached(policy, discovery)
            findings.type_warnings = [(w.field_path, w.warning) for w in warnings]
            if self.discovery.error:
                findings.type_check_note = "checked against the bundled built-in schemas (cluster discovery " \
                                           f"failed: {self.discovery.error})"
        except Exception as exc:  # noqa: BLE001 - type checking is informational
            findings.type_checked = False
            findings.type_check_note = f"type checking could not run: {exc}"

        if policy.spec.evaluation.background_enabled:
            resources = [(r.group, r.version, r.resource) for r in matched_resources(policy, discovery)]
            findings.missing_permissions = self.access.missing(resources)

        way = route(policy, generation=self.generation, compiles=compiled.ok)
        keep: set[tuple[str, str]] = set()
        native_objects: tuple[str, ...] = ()
        native_error = ""
        native_pending = ""
        if way.native_wanted:
            if not compiled.ok:
                findings.vap = (False, "CompilationFailed", "not generated: the policy does not compile")
            elif not way.native:
                findings.vap = (False, "NotEligible", f"skip generating ValidatingAdmissionPolicy: {way.ineligible}")
            else:
                plan = desired_objects(policy, exceptions=exceptions if exceptions is not None else self.exceptions(),
                                       force=True)
                ok, message = self.generated.apply(plan.objects, existing, result.applied)
                keep = {(o["kind"], o["metadata"]["name"]) for o in plan.objects}
                findings.vap = (ok, "Generated" if ok else "ApplyFailed", message)
                findings.generated = ok
                if ok:
                    native_objects = tuple(o["metadata"]["name"] for o in plan.objects
                                           if o["kind"] == "ValidatingAdmissionPolicy")
                    changed = self.generated.changed(plan.objects, existing)
                    proof = self.native_proof(name, body, generation, VAP, changed, NATIVE)
                    native_pending = "" if proof.proven else proof.waiting_for
                    vap_warnings = self._vap_warnings(plan.objects)
                    merged = list(dict.fromkeys([*findings.type_warnings, *vap_warnings]))
                    findings.type_warnings = merged
                else:
                    # The API server refused the VAP: the webhook enforces the policy instead.
                    native_error = message
                    way = route(policy, generation=self.generation, compiles=True, vap_failed=True)
        webhook = WebhookState(enabled=self.webhook, configuration=self.webhook_configuration)
        if way.webhook and self.webhook:
            webhook = self._webhook_state(name, body, generation)
        findings.admission, findings.enforcement = admission_finding(
            way, native_objects=native_objects, native_error=native_error, native_pending=native_pending,
            webhook=webhook, generation=generation)
        result.deleted = self._delete_generated(existing, keep)
        result.enforcement = findings.enforcement
        return self._write_status(result, body, findings)

    def native_proof(self, key: str, body: dict[str, Any], generation: int, kind: str, changed: bool,
                     reason: str) -> Proof:
        """Whether the native objects of policy ``key`` (just applied; ``changed`` when that changed them) are
        enforced by the API server. Objects unchanged since before this process started are taken as enforced
        when the status already says so for this generation (an earlier run proved it)."""
        return proof_of_native(self.prover, self.written_at, key, body, generation, kind, changed, reason)

    def _webhook_state(self, key: str, body: dict[str, Any], generation: int) -> WebhookState:
        return webhook_state(self.objects, self.prover, self.webhook_configuration, key, body, generation)

    def _vap_warnings(self, objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
        out = []
        for obj in objects:
            if obj["kind"] != "ValidatingAdmissionPolicy":
                continue
            vap = self.objects.get_vap(obj["metadata"]["name"])
            checking = ((vap or {}).get("status") or {}).get("typeChecking") or {}
            for w in checking.get("expressionWarnings") or []:
                out.append((str(w.get("fieldRef", "")), str(w.get("warning", ""))))
        return out

    def _delete_generated(self, existing: Mapping[tuple[str, str], Listed], keep: set[tuple[str, str]]) -> list[str]:
        deleted = []
        for kind, name in existing:
            if (kind, name) not in keep:
                self.objects.delete(kind, name)
                deleted.append(name)
        return deleted

    def _write_status(self, result: ReconcileResult, body: dict[str, Any], findings: Findings) -> ReconcileResult:
        current = body.get("status") or {}
        desired = desired_status(findings, current)
        result.ready = desired["conditionStatus"]["ready"]
        result.generated = bool(desired["generated"])
        result.permissions_missing = bool(findings.missing_permissions)
        if status_changed(current, desired):
            self.written_versions[result.name] = self.objects.patch_policy_status(result.name, desired)
            result.status_written = True
        return result


def webhook_state(objects: Objects, prover: EnforcementProver | None, configuration: str, key: str,
                  body: dict[str, Any], generation: int, *, mutating: bool = False,
                  coverage_key: str = "") -> WebhookState:
    """Whether the webhook configuration ``configuration`` in the cluster covers generation ``generation`` of policy
    ``key`` (under ``coverage_key`` in its annotation, when that differs), and whether the API server is known to
    call vpol with it."""
    state = WebhookState(enabled=True, configuration=configuration)
    try:
        config = objects.get_webhook_configuration(configuration, mutating=mutating)
    except ApiException as exc:
        return WebhookState(enabled=True, configuration=configuration, error=api_message(exc))
    if config is None:
        return state
    covered = covered_generation(config, coverage_key or key)
    if covered is None or covered < generation:
        return state
    proof = proof_of_webhook(prover, key, body, generation, config, configuration, mutating)
    return WebhookState(enabled=True, configuration=configuration, covered=True,
                        pending="" if proof.proven else proof.waiting_for)


def enforced_already(body: dict[str, Any], generation: int, reason: str) -> bool:
    """Whether the policy's status already says AdmissionEnforced=True for ``reason`` at ``generation``."""
    status = body.get("status") or {}
    conditions = ((status.get("conditionStatus") or {}).get("conditions")) or status.get("conditions") or []
    return any(isinstance(c, dict) and c.get("type") == "AdmissionEnforced" and c.get("status") == "True"
               and c.get("reason") == reason and c.get("observedGeneration") == generation for c in conditions)


def proof_of_native(prover: EnforcementProver | None, written_at: dict[str, float], key: str, body: dict[str, Any],
                    generation: int, kind: str, changed: bool, reason: str) -> Proof:
    """The proof that policy ``key``'s native objects (of ``kind``) are enforced (see Reconciler.native_proof)."""
    if prover is None:
        return Proof(True)
    if changed:
        written_at[key] = time.monotonic()
    elif key not in written_at:
        if enforced_already(body, generation, reason):
            return Proof(True)
        written_at[key] = time.monotonic()
    return prover.native(key, kind, written_at[key])


def proof_of_webhook(prover: EnforcementProver | None, key: str, body: dict[str, Any], generation: int,
                     config: dict[str, Any], configuration: str, mutating: bool) -> Proof:
    """The proof that the API server calls vpol's webhook with ``config`` (which covers the policy). A policy
    already enforced through the webhook at this generation stays so: every configuration since covered it."""
    if prover is None or enforced_already(body, generation, WEBHOOK):
        return Proof(True)
    return prover.webhook(key, configuration, probed_epoch(config), mutating)


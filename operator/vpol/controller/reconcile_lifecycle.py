"""Reconciling one GeneratingPolicy, DeletingPolicy or ImageValidatingPolicy (cluster-wide or namespaced): read,
call the core, write.

Reads the policy and the cluster's discovery; the core parses and compiles it; a valid one is handed to the
scanner, which generates (vpol.controller.generation) or deletes on schedule (vpol.controller.deletion); the status
says what it does and what it lacks, written only when it changed:

- ``Compiled``; ``RBACPermissionsGranted``: a GeneratingPolicy's triggers must be readable (get, list, watch) and
  the kinds its templates name writable (create, update, delete, get, list, watch, as for every kind it generated
  so far); a DeletingPolicy's resources must be listable and deletable (an operator without those rights deletes
  nothing, and this condition names what is missing);
- ``Generating`` (False when the operator runs no background work) and ``GenerationSucceeded`` (informational:
  False with the last error while generating for a trigger fails, for example a namespaced policy generating
  into another namespace); ``Scheduled`` (when a DeletingPolicy runs next);
- an ImageValidatingPolicy's ``AdmissionEnforced`` (when admission is enabled): True (reason ``Webhook``) once
  vpol's validating webhook configuration, and for a policy that pins digests its mutating one too, cover the
  policy's generation and the API server is known to call vpol with them; ``BackgroundScanned``
  (informational): True while existing objects are verified in background scans (vpol.controller.image_scans),
  False with ``ScansDisabled`` when the operator runs none; ``AttestorsVerifiable`` (informational);
- ``Ready`` when every condition but the informational ones is True.

Queue keys are ``gpol:<key>``, ``dpol:<key>`` and ``ivpol:<key>`` (``<key>``: ``name`` or ``namespace/name``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from vpol.cel.library_use import unserved_libraries
from vpol.cel.compiler import compile_deleting_policy, compile_generating_policy, compile_image_validating_policy
from vpol.controller.deletion import candidates, due_at
from vpol.controller.enforcement_proof import EnforcementProver
from vpol.controller.queue_keys import DELETING, GENERATING, IMAGE_VALIDATING, lifecycle_key
from vpol.controller.reconcile import DiscoveryCache, ReconcileResult, webhook_state
from vpol.desired.enforcement import WebhookState
from vpol.desired.webhook import MUTATING_WEBHOOK_CONFIGURATION, WEBHOOK_CONFIGURATION
from vpol.desired.webhook_coverage import IMAGE_PREFIX
from vpol.desired.status import Findings, lifecycle_status, status_changed
from vpol.engine.mutate_existing import trigger_resources
from vpol.kube.access import AccessChecker
from vpol.kube.objects import Objects
from vpol.model.deleting import DeletingPolicy, parse_deleting_policy
from vpol.model.discovery import Discovery, ResourceInfo
from vpol.model.generating import GeneratingPolicy, parse_generating_policy
from vpol.model.image_validating import ImageValidatingPolicy, parse_image_validating_policy, unverifiable
from vpol.model.templates import parse as parse_template

logger = logging.getLogger(__name__)

GENERATING_CONDITION = "Generating"
BACKGROUND_SCANNED = "BackgroundScanned"
ATTESTORS_VERIFIABLE = "AttestorsVerifiable"
GENERATION_SUCCEEDED = "GenerationSucceeded"
SCHEDULED = "Scheduled"
#: What generation needs on the kinds it writes (watch: synchronized downstreams are watched).
WRITE_VERBS = ("create", "update", "delete", "get", "list", "watch")


key_for = lifecycle_key


def is_lifecycle_key(key: str) -> bool:
    return key.startswith((f"{GENERATING}:", f"{DELETING}:", f"{IMAGE_VALIDATING}:"))


class Runner(Protocol):
    """What the reconciler tells the scanner (vpol.controller.scanner.Scanner)."""

    generation: Any
    deletion: Any
    images: Any

    def set_generating(self, key: str, policy: GeneratingPolicy | None, *, gone: bool = False) -> None: ...

    def set_deleting(self, key: str, policy: DeletingPolicy | None, last_execution: str = "") -> None: ...

    def set_image(self, key: str, policy: ImageValidatingPolicy | None) -> None: ...

    def retry_generation(self, key: str) -> None: ...


def _image_admission(states: Sequence[WebhookState], generation: int) -> tuple[tuple[bool, str, str], str]:
    """The AdmissionEnforced condition of an ImageValidatingPolicy from the state of each webhook configuration it
    needs (validating; mutating too when it pins digests), and the route in one word."""
    for state in states:
        if state.error:
            return (False, "WebhookNotConfigured", f"not enforced: the webhook configuration {state.configuration} "
                                                   f"could not be read or written: {state.error}"), "None"
        if not state.covered:
            return (False, "Pending", f"waiting for the webhook configuration {state.configuration} to cover "
                                      f"generation {generation} of the policy"), "Pending"
        if state.pending:
            return (False, "Pending", f"{state.configuration} covers generation {generation} of the policy; "
                                      f"waiting for {state.pending}"), "Pending"
    names = " and ".join(s.configuration for s in states)
    return (True, "Webhook", f"enforced by vpol's image webhooks ({names})"), "Webhook"


def _template_types(policy: GeneratingPolicy) -> list[tuple[str, str]]:
    """(apiVersion, kind) of each object a policy's templates name literally (expressions decide theirs at run
    time)."""
    out: list[tuple[str, str]] = []
    for item in policy.spec.generate:
        if not item.is_template:
            continue
        try:
            template = parse_template(item.template, item.interpolate == "cel")
        except ValueError:
            continue
        for doc in template.documents:
            api_version, kind = doc.get("apiVersion"), doc.get("kind")
            if isinstance(api_version, str) and isinstance(kind, str) and "((" not in api_version + kind:
                out.append((api_version, kind))
    return out


def template_kinds(policy: GeneratingPolicy, discovery: Discovery) -> list[ResourceInfo]:
    """The resources of the kinds a policy's templates name literally."""
    found: dict[tuple[str, str, str], ResourceInfo] = {}
    for api_version, kind in _template_types(policy):
        info = discovery.resource_for_kind(api_version, kind)
        if info is not None:
            found[(info.group, info.version, info.resource)] = info
    return [found[k] for k in sorted(found)]


def unserved_template_kinds(policy: GeneratingPolicy, discovery: Discovery) -> list[str]:
    """``<apiVersion>, Kind=<kind>`` of each kind a policy's templates name that the API server does not serve."""
    return sorted({f"{v}, Kind={k}" for v, k in _template_types(policy) if discovery.resource_for_kind(v, k) is None})


class LifecycleReconciler:
    def __init__(self, objects: Objects, discovery: DiscoveryCache, *, access: AccessChecker | None = None,
                 runner: Runner | None = None, webhook: bool = False, prover: EnforcementProver | None = None,
                 exceptions: Callable[[], Any] | None = None, http_enabled: bool = True):
        self.objects = objects
        #: Whether http.* can be served (vpol.cel.library_use).
        self.http_enabled = http_enabled
        #: Reads the cluster's PolicyExceptions and hands them to the scanner (Reconciler.exceptions): a
        #: PolicyException event queues the policies it names, and generation and deletion must see it then, even
        #: where no ValidatingPolicy is reconciled to hand them over.
        self.exceptions = exceptions
        #: Whether the operator runs its admission webhook (which enforces ImageValidatingPolicies), and the
        #: prover of the API server calling it.
        self.webhook = webhook
        self.prover = prover
        self.discovery = discovery
        self.access = access
        #: The scanner (None: the operator runs no background work, so nothing generates or deletes).
        self.runner = runner
        #: The resourceVersion of our last status write per queue key (its watch event is no change).
        self.written_versions: dict[str, str] = {}

    def reconcile(self, key: str) -> ReconcileResult:
        kind, _, name = key.partition(":")
        result = ReconcileResult(key)
        if self.exceptions is not None and self.runner is not None:
            self.exceptions()
        body = self.objects.get_lifecycle_policy(kind, name)
        if body is None:
            self._tell(kind, name, None, "", gone=True)
            return result
        generation = int((body.get("metadata") or {}).get("generation") or 0)
        findings = Findings(generation=generation, background_enabled=True,
                            type_check_note="expressions type-check (objects are typed dyn, as in Kyverno; they are "
                                            "not checked against the matched kinds' schemas)")
        if kind == GENERATING:
            self._generating(name, body, findings)
        elif kind == IMAGE_VALIDATING:
            result.enforcement = self._image_validating(name, body, generation, findings)
        else:
            self._deleting(name, body, findings)
        result.enforcement = result.enforcement or "NotApplicable"
        result.permissions_missing = bool(findings.missing_permissions)
        current = body.get("status") or {}
        was_lacking = any(c.get("type") == "RBACPermissionsGranted" and c.get("status") == "False"
                          for c in current.get("conditions") or [] if isinstance(c, dict))
        if was_lacking and not result.permissions_missing and kind == GENERATING and self.runner is not None:
            # Triggers whose generation was refused are owed it: a pass of the policy retries them now.
            self.runner.retry_generation(name)
        desired = lifecycle_status(findings, current)
        result.ready = bool(desired["conditionStatus"]["ready"])
        if status_changed(current, desired):
            self.written_versions[key] = self.objects.patch_lifecycle_status(kind, name, desired)
            result.status_written = True
        return result

    def _libraries(self, findings: Findings, policy: Any) -> None:
        """What the policy calls that this operator cannot serve (vpol.cel.library_use) goes into its status."""
        if policy is not None:
            findings.unserved_libraries = unserved_libraries(policy.expressions(), http_enabled=self.http_enabled)

    def _tell(self, kind: str, name: str, policy: Any, last_execution: str, *, gone: bool = False) -> None:
        """Hand the scanner the policy (None: invalid, or ``gone``: deleted)."""
        if self.runner is None:
            return
        if kind == IMAGE_VALIDATING:
            self.runner.set_image(name, policy)
        elif kind == GENERATING:
            self.runner.set_generating(name, policy, gone=gone)
        else:
            self.runner.set_deleting(name, policy, last_execution)

    def _missing(self, reads: Sequence[ResourceInfo], writes: Sequence[ResourceInfo],
                 write_verbs: Sequence[str]) -> list[str]:
        if self.access is None:
            return []
        gvrs = lambda infos: sorted({(i.group, i.version, i.resource) for i in infos})  # noqa: E731
        return self.access.missing(gvrs(reads)) + self.access.missing(gvrs(writes), verbs=write_verbs)

    def _generating(self, name: str, body: dict[str, Any], findings: Findings) -> None:
        policy, problems = parse_generating_policy(body)
        self._libraries(findings, policy)
        errors = [p.short() for p in problems if p.severity == "error"]
        if policy is not None and not errors:
            errors = [p.short() for p in compile_generating_policy(policy).errors()]
        findings.compile_errors = errors
        findings.rbac_message = "the operator may read the triggers and write the kinds the policy generates"
        if policy is None or errors:
            self._tell(GENERATING, name, None, "")
            findings.extra = [(GENERATING_CONDITION, False, "CompilationFailed",
                               "nothing is generated: the policy is invalid", False)]
            return
        self._tell(GENERATING, name, policy, "")
        discovery = self.discovery.get()
        triggers = trigger_resources(policy, discovery)
        written = list(template_kinds(policy, discovery))
        if self.runner is not None:
            written += self.runner.generation.generated_resources(policy.key)
        findings.missing_permissions = self._missing(triggers, written, WRITE_VERBS)
        ev = policy.spec.evaluation
        kinds = ", ".join(sorted({i.kind for i in triggers})) or "nothing (no matched resource is known)"
        when = []
        if ev.admission_enabled:
            ops = sorted({op for rule in (policy.spec.match_constraints.resource_rules
                                          if policy.spec.match_constraints else ()) for op in rule.operations})
            when.append(f"on {', '.join(ops)} of {kinds}")
        if ev.generate_existing:
            when.append(f"for the existing {kinds}")
        what = "generates " + (" and ".join(when) if when else "nothing (admission and generateExisting are off)")
        if ev.synchronize:
            what += ", keeping its objects synchronized"
        unserved = unserved_template_kinds(policy, discovery)
        if unserved:
            # Said, not blocking: the kind's CRD may come later (vpol.controller.handlers.crd_event follows it).
            what += f"; the API server serves no {'; no '.join(unserved)}: those objects cannot be generated yet"
        extra: list[tuple[str, bool, str, str, bool]] = []
        if self.runner is None:
            extra.append((GENERATING_CONDITION, False, "ScansDisabled", "nothing is generated: the operator runs "
                                                                         "with --scan-interval=0 (no background work)",
                          False))
        else:
            extra.append((GENERATING_CONDITION, True, "Active", what, False))
            error = self.runner.generation.errors.get(policy.key, "")
            extra.append((GENERATION_SUCCEEDED, not error, "Errors" if error else "Succeeded",
                          f"the last generation failed: {error}" if error else "no generation has failed", True))
        findings.extra = extra

    def _image_validating(self, name: str, body: dict[str, Any], generation: int, findings: Findings) -> str:
        """Compiled, and enforced once vpol's image webhooks serve this generation (the route in one word)."""
        policy, problems = parse_image_validating_policy(body)
        self._libraries(findings, policy)
        errors = [p.short() for p in problems if p.severity == "error"]
        if policy is not None and not errors:
            errors = [p.short() for p in compile_image_validating_policy(policy).errors()]
        findings.compile_errors = errors
        findings.rbac_applicable = False
        self._tell(IMAGE_VALIDATING, name, policy if policy is not None and not errors else None, "",
                   gone=policy is None)
        background = policy is not None and policy.spec.evaluation.background_enabled and not policy.json_mode
        findings.background_enabled = background
        if background and not errors:
            findings.extra = [(BACKGROUND_SCANNED, True, "Active",
                               "existing objects the policy matches are verified in background scans, with results "
                               "in their PolicyReports", True)] if self.runner is not None else \
                [(BACKGROUND_SCANNED, False, "ScansDisabled", "existing objects are not scanned: the operator runs "
                                                              "with --scan-interval=0", True)]
        if policy is not None and not errors:
            cannot = [f"{a.name}: {why}" for a in policy.spec.attestors if (why := unverifiable(a))]
            findings.extra = [*findings.extra, (ATTESTORS_VERIFIABLE, not cannot, "Unsupported" if cannot else
                                                "Succeeded", "every verification with these attestors fails: " +
                                                "; ".join(cannot) if cannot else "vpol can verify every attestor",
                                                True)]
        if background and not errors and self.runner is not None and self.discovery is not None:
            matched = list(self.runner.images.watched(self.discovery.get(), [name]).values())
            findings.rbac_applicable = True
            findings.rbac_message = "the operator may get, list and watch every matched resource"
            findings.missing_permissions = self._missing(matched, [], ())
        if policy is None or not policy.spec.evaluation.admission_enabled or policy.json_mode:
            return "NotApplicable"
        if errors:
            findings.admission = (False, "CompilationFailed", "not enforced: the policy does not compile")
            return "None"
        if not self.webhook:
            findings.admission = (False, "WebhookDisabled", "not enforced: ImageValidatingPolicies are enforced by "
                                                            "vpol's admission webhook, and the operator runs without "
                                                            "it (--webhook=off)")
            return "None"
        states = [webhook_state(self.objects, self.prover, WEBHOOK_CONFIGURATION, IMAGE_PREFIX + name, body,
                                generation, coverage_key=IMAGE_PREFIX + name)]
        if policy.spec.validation_configurations.mutate_digest:
            states.append(webhook_state(self.objects, self.prover, MUTATING_WEBHOOK_CONFIGURATION, IMAGE_PREFIX + name,
                                        body, generation, mutating=True, coverage_key=IMAGE_PREFIX + name))
        findings.admission, route = _image_admission(states, generation)
        return route

    def _deleting(self, name: str, body: dict[str, Any], findings: Findings) -> None:
        policy, problems = parse_deleting_policy(body)
        self._libraries(findings, policy)
        errors = [p.short() for p in problems if p.severity == "error"]
        if policy is not None and not errors:
            errors = [p.short() for p in compile_deleting_policy(policy).errors()]
        findings.compile_errors = errors
        findings.rbac_message = "the operator may list and delete every matched resource"
        last_execution = str((body.get("status") or {}).get("lastExecutionTime") or "")
        if policy is None or errors:
            self._tell(DELETING, name, None, "")
            findings.extra = [(SCHEDULED, False, "CompilationFailed", "nothing is deleted: the policy is invalid",
                               False)]
            return
        self._tell(DELETING, name, policy, last_execution)
        discovery = self.discovery.get()
        resources = candidates(policy, discovery)
        findings.missing_permissions = self._missing(resources, resources, ("delete",))
        if self.runner is None:
            findings.extra = [(SCHEDULED, False, "ScansDisabled", "nothing is deleted: the operator runs with "
                                                                  "--scan-interval=0 (no background work)", False)]
            return
        due = self.runner.deletion.next_run(policy.key) or due_at(policy, last_execution)
        kinds = ", ".join(sorted({i.kind for i in resources})) or "nothing (no matched resource is known)"
        if due is None:
            findings.extra = [(SCHEDULED, False, "NoFutureRun", f"the schedule {policy.spec.schedule!r} names no "
                                                                f"future time", False)]
        else:
            when = due.strftime("%Y-%m-%dT%H:%M:%SZ")
            findings.extra = [(SCHEDULED, True, "Scheduled", f"deletes matching {kinds} on {policy.spec.schedule!r};"
                                                             f" next run at {when}", False)]

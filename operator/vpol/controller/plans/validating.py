"""The plan of a ValidatingPolicy or NamespacedValidatingPolicy.

The core compiles, type-checks, computes autogen, the admission route (:mod:`vpol.desired.enforcement`) and the
desired VAPs; this plan applies them (deleting those no longer wanted), hands a valid policy to the background scans
and says whether the API server (natively) or vpol's webhook enforces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vpol.cel.library_use import unserved_libraries
from vpol.cel.typecheck import check_policy_cached
from vpol.controller.enforcement_proof import VAP
from vpol.controller.enforcement_state import proof_of_native, webhook_state
from vpol.controller.plan_context import ReconcileContext, ReconcileResult
from vpol.controller.queue_keys import PolicyKey
from vpol.desired.admission_policy import generated_selector
from vpol.desired.enforcement import NATIVE, WebhookState
from vpol.desired.status import Findings, desired_status
from vpol.desired.webhook_coverage import coverage_key
from vpol.engine.scope import matched_resources
from vpol.kube.objects import Listed
from vpol.model.policy import PolicyException
from vpol.policies.registry import kind_of
from vpol.policies.validating.autogen import autogen_configs, status_configs
from vpol.policies.validating.compile import compile_verdict
from vpol.policies.validating.enforcement import admission_finding, route
from vpol.policies.validating.model import parse_policy
from vpol.policies.validating.vap import desired_objects


class ValidatingPlan:
    def __init__(self, context: ReconcileContext):
        self.ctx = context

    def status(self, findings: Findings, current: Mapping[str, Any]) -> dict[str, Any]:
        return desired_status(findings, current)

    def _set_policy(self, key: PolicyKey, policy: Any) -> None:
        if self.ctx.runner is not None:
            self.ctx.runner.hand_over(key, policy)

    def gone(self, key: PolicyKey) -> ReconcileResult:
        self._set_policy(key, None)
        # ownerReferences let the garbage collector remove what was generated; deleting explicitly as well makes
        # it immediate and covers objects without owners.
        result = ReconcileResult(key)
        result.deleted = self._delete_generated(self._existing(key), keep=set())
        return result

    def _existing(self, key: PolicyKey) -> dict[tuple[str, str], Listed]:
        return self.ctx.objects.list_generated(generated_selector(key.policy_key))

    def plan(self, key: PolicyKey, body: dict[str, Any]) -> tuple[ReconcileResult, Findings]:
        ctx = self.ctx
        result = ReconcileResult(key)
        existing = self._existing(key)
        generation = int((body.get("metadata") or {}).get("generation") or 0)
        policy, problems = parse_policy(body)
        findings = Findings(generation=generation)
        if policy is None:
            self._set_policy(key, None)
            findings.compile_errors = [p.short() for p in problems if p.severity == "error"]
            findings.vap = None
            findings.admission = (False, "CompilationFailed", "not enforced: the policy is invalid")
            result.deleted = self._delete_generated(existing, keep=set())
            return result, findings

        result.actions = ",".join(policy.spec.validation_actions)
        result.background = policy.spec.evaluation.background_enabled
        compiled = compile_verdict(policy)  # the scanner and the webhook asked the same of this spec already
        findings.compile_errors = [p.short() for p in compiled.errors]
        findings.unserved_libraries = unserved_libraries(policy.expressions(), http_enabled=ctx.http_enabled)
        findings.background_enabled = policy.spec.evaluation.background_enabled
        self._set_policy(key, policy if compiled.ok else None)
        # Read once per reconcile (the scanner is told; the native plan below uses the same list).
        exceptions: list[PolicyException] | None = None
        if compiled.ok and policy.spec.evaluation.background_enabled:
            exceptions = ctx.exceptions()
        findings.autogen = status_configs(autogen_configs(policy))

        discovery = ctx.discovery.get()
        try:
            warnings = check_policy_cached(policy, discovery)
            findings.type_warnings = [(w.field_path, w.warning) for w in warnings]
            if ctx.discovery.error:
                findings.type_check_note = "checked against the bundled built-in schemas (cluster discovery " \
                                           f"failed: {ctx.discovery.error})"
        except Exception as exc:  # noqa: BLE001 - type checking is informational
            findings.type_checked = False
            findings.type_check_note = f"type checking could not run: {exc}"

        if policy.spec.evaluation.background_enabled and ctx.access is not None:
            resources = [(r.group, r.version, r.resource)
                         for r in matched_resources(kind_of(policy).variants(policy), discovery)]
            findings.missing_permissions = ctx.access.missing(resources)

        way = route(policy, generation=ctx.generation, compiles=compiled.ok)
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
                plan = desired_objects(policy, exceptions=exceptions if exceptions is not None else ctx.exceptions(),
                                       force=True)
                ok, message = ctx.generated.apply(plan.objects, existing, result.applied)
                keep = {(o["kind"], o["metadata"]["name"]) for o in plan.objects}
                findings.vap = (ok, "Generated" if ok else "ApplyFailed", message)
                findings.generated = ok
                if ok:
                    native_objects = tuple(o["metadata"]["name"] for o in plan.objects
                                           if o["kind"] == "ValidatingAdmissionPolicy")
                    changed = ctx.generated.changed(plan.objects, existing)
                    proof = proof_of_native(ctx.prover, ctx.written_at, key, body, generation, VAP, changed, NATIVE)
                    native_pending = "" if proof.proven else proof.waiting_for
                    vap_warnings = self._vap_warnings(plan.objects)
                    findings.type_warnings = list(dict.fromkeys([*findings.type_warnings, *vap_warnings]))
                else:
                    # The API server refused the VAP: the webhook enforces the policy instead.
                    native_error = message
                    way = route(policy, generation=ctx.generation, compiles=True, vap_failed=True)
        webhook = WebhookState(enabled=ctx.webhook, configuration=ctx.webhook_configuration)
        if way.webhook and ctx.webhook:
            webhook = webhook_state(ctx.objects, ctx.prover, ctx.webhook_configuration, key, body, generation,
                                    coverage_key=coverage_key(key.kind, key.policy_key))
        findings.admission, findings.enforcement = admission_finding(
            way, native_objects=native_objects, native_error=native_error, native_pending=native_pending,
            webhook=webhook, generation=generation)
        result.deleted = self._delete_generated(existing, keep)
        result.enforcement = findings.enforcement
        return result, findings

    def _vap_warnings(self, objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
        """The API server's own type-checking warnings of the VAPs applied (their status.typeChecking)."""
        out = []
        for obj in objects:
            if obj["kind"] != "ValidatingAdmissionPolicy":
                continue
            vap = self.ctx.objects.get_vap(obj["metadata"]["name"])
            checking = ((vap or {}).get("status") or {}).get("typeChecking") or {}
            for w in checking.get("expressionWarnings") or []:
                out.append((str(w.get("fieldRef", "")), str(w.get("warning", ""))))
        return out

    def _delete_generated(self, existing: Mapping[tuple[str, str], Listed], keep: set[tuple[str, str]]) -> list[str]:
        deleted = []
        for kind, name in existing:
            if (kind, name) not in keep:
                self.ctx.objects.delete(kind, name)
                deleted.append(name)
        return deleted

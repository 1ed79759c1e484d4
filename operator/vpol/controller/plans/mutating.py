"""The plan of a MutatingPolicy or NamespacedMutatingPolicy.

The core compiles and type-checks the mutations (a mutation that cannot apply to a matched kind, such as one
setting an atomic list, counts as an error, as in `vpol check`), computes the pod-controller variants and the
desired MutatingAdmissionPolicies; this plan applies them in the newest MAP version the cluster serves, deletes
what is no longer wanted, and hands a policy that mutates existing objects to the background work.

Admission route (:func:`vpol.policies.mutating.map.mutating_route`, shared with every replica's webhook): the same
``--vap-generation`` mode as for validation. In ``eligible`` (the default) every MutatingPolicy that does not set
``spec.autogen.mutatingAdmissionPolicy.enabled: false`` gets its MAPs when the API server can express it; in
``opt-in`` only an explicit ``true`` does (Kyverno's behaviour). Everything else (Kyverno-only functions, no
opt-in, a MAP the API server refused) is applied by vpol's mutating webhook (``vpol-mutating``):
``AdmissionEnforced=True, Webhook`` once that configuration covers the policy's generation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes.client.rest import ApiException

from vpol.cel.library_use import unserved_libraries
from vpol.cel.typecheck import check_policy_cached
from vpol.controller.enforcement_proof import MAP
from vpol.controller.enforcement_state import proof_of_native, proof_of_webhook
from vpol.controller.generated_apply import api_message
from vpol.controller.plan_context import ReconcileContext, ReconcileResult
from vpol.controller.queue_keys import PolicyKey
from vpol.desired.admission_policy import generated_selector
from vpol.desired.enforcement import PENDING
from vpol.desired.status import MAP_GENERATED, Findings, desired_status
from vpol.desired.webhook import MUTATING_WEBHOOK_CONFIGURATION
from vpol.desired.webhook_coverage import coverage_key, covered_generation
from vpol.engine.autogen import CONTROLLERS
from vpol.engine.scope import trigger_resources
from vpol.kube.objects import Listed
from vpol.model.discovery import Discovery
from vpol.policies.mutating.autogen import mutating_autogen_configs
from vpol.policies.mutating.compile import compile_mutating_policy
from vpol.policies.mutating.map import MAP_API_VERSIONS, desired_map_objects, map_ineligibility, wants_native_map
from vpol.policies.mutating.model import MutatingPolicy, parse_mutating_policy
from vpol.policies.mutating.mutate_existing import target_resources

NATIVE_MAP = "NativeMAP"
#: Label telling generated MAPs of one policy apart from VAPs of a ValidatingPolicy of the same name.
KIND_LABEL = "vpol.kyverno.io/policy-kind"


def served_map_version(discovery: Discovery) -> str | None:
    """The newest MutatingAdmissionPolicy version ``discovery`` lists (None: none)."""
    for api_version in MAP_API_VERSIONS:
        group, _, version = api_version.partition("/")
        if discovery.resource(group, version, "mutatingadmissionpolicies") is not None:
            return api_version
    return None


def _selector(key: str) -> str:
    return f"{generated_selector(key)},{KIND_LABEL}=MutatingPolicy"


class MutatingPlan:
    def __init__(self, context: ReconcileContext):
        self.ctx = context

    def status(self, findings: Findings, current: Mapping[str, Any]) -> dict[str, Any]:
        return desired_status(findings, current)

    def map_api_version(self) -> str | None:
        """The newest MutatingAdmissionPolicy version the cluster serves (None: none)."""
        return served_map_version(self.ctx.discovery.get())

    def _set_policy(self, key: PolicyKey, policy: MutatingPolicy | None) -> None:
        if self.ctx.runner is not None:
            self.ctx.runner.hand_over(key, policy)

    def _existing(self, key: PolicyKey, api_version: str | None) -> dict[tuple[str, str], Listed]:
        return self.ctx.objects.list_generated_maps(_selector(key.policy_key), api_version) if api_version else {}

    def gone(self, key: PolicyKey) -> ReconcileResult:
        self._set_policy(key, None)
        api_version = self.map_api_version()
        result = ReconcileResult(key)
        result.deleted = self._delete_generated(self._existing(key, api_version), set(), api_version)
        return result

    def plan(self, key: PolicyKey, body: dict[str, Any]) -> tuple[ReconcileResult, Findings]:
        ctx = self.ctx
        result = ReconcileResult(key)
        if ctx.runner is not None:
            # The cluster's exceptions reach the scanner's mutation of existing objects (also when no
            # ValidatingPolicy is reconciled to hand them over): an exception's event queues this policy.
            ctx.exceptions()
        api_version = self.map_api_version()
        existing = self._existing(key, api_version)
        generation = int((body.get("metadata") or {}).get("generation") or 0)
        findings = Findings(generation=generation, native_condition=MAP_GENERATED, rbac_applicable=False,
                            background_enabled=False)
        policy, problems = parse_mutating_policy(body)
        if policy is None:
            self._set_policy(key, None)
            findings.compile_errors = [p.short() for p in problems if p.severity == "error"]
            findings.admission = (False, "CompilationFailed", "not enforced: the policy is invalid")
            result.deleted = self._delete_generated(existing, set(), api_version)
            return result, findings

        compiled = compile_mutating_policy(policy)
        errors = [p.short() for p in compiled.errors()]
        discovery = ctx.discovery.get()
        try:
            warnings = check_policy_cached(policy, discovery)
            # A mutation that cannot apply to a matched kind fails every request: an error, as in `vpol check`.
            errors += [f"{w.field_path}: {w.warning.strip()}" for w in warnings if w.wrong_result]
            findings.type_warnings = [(w.field_path, w.warning) for w in warnings]
        except Exception as exc:  # noqa: BLE001 - type checking is informational
            findings.type_checked = False
            findings.type_check_note = f"type checking could not run: {exc}"
        findings.compile_errors = errors
        findings.unserved_libraries = unserved_libraries(policy.expressions(), http_enabled=ctx.http_enabled)
        self._set_policy(key, policy if not errors and policy.spec.evaluation.mutate_existing_enabled else None)
        if policy.spec.evaluation.mutate_existing_enabled:
            self._mutate_existing_findings(policy, findings, discovery)
        findings.autogen = {
            config: {"targets": [{"group": CONTROLLERS[r][0], "version": CONTROLLERS[r][1], "resource": r,
                                  "kind": CONTROLLERS[r][2]}
                                 for rule in variant.spec.match_constraints.resource_rules  # type: ignore[union-attr]
                                 for r in rule.resources if r in CONTROLLERS],
                     "spec": variant.raw.get("spec", {})}
            for config, variant in mutating_autogen_configs(policy)}

        keep: set[tuple[str, str]] = set()
        wanted = wants_native_map(policy, ctx.generation)
        if not policy.spec.evaluation.admission_enabled or policy.targets_others:
            findings.enforcement = "NotApplicable"
        elif errors:
            if wanted:
                findings.vap = (False, "CompilationFailed", "not generated: the policy does not compile")
            findings.admission = (False, "CompilationFailed", "not enforced: the policy does not compile")
        else:
            why_not = ""
            if not wanted:
                why_not = ("MutatingAdmissionPolicy generation is off (spec.autogen.mutatingAdmissionPolicy.enabled: "
                           "false)" if policy.spec.autogen.map_enabled is False else
                           "the operator runs with --vap-generation=opt-in and the policy does not set "
                           "spec.autogen.mutatingAdmissionPolicy.enabled: true")
            elif api_version is None:
                findings.vap = (False, "NotServed", "the API server serves no MutatingAdmissionPolicy version")
                why_not = "the API server serves no MutatingAdmissionPolicy version"
            elif (reason := map_ineligibility(policy)):
                findings.vap = (False, "NotEligible", f"skip generating MutatingAdmissionPolicy: {reason}")
                why_not = reason
            else:
                plan = desired_map_objects(policy, exceptions=ctx.exceptions(), force=True, api_version=api_version)
                for obj in plan.objects:
                    obj["metadata"].setdefault("labels", {})[KIND_LABEL] = "MutatingPolicy"
                ok, message = ctx.generated.apply(plan.objects, existing, result.applied)
                findings.vap = (ok, "Generated" if ok else "ApplyFailed", message)
                findings.generated = ok
                if ok:
                    keep = {(o["kind"], o["metadata"]["name"]) for o in plan.objects}
                    names = ", ".join(o["metadata"]["name"] for o in plan.objects
                                      if o["kind"] == "MutatingAdmissionPolicy")
                    changed = ctx.generated.changed(plan.objects, existing)
                    proof = proof_of_native(ctx.prover, ctx.written_at, key, body, generation, MAP, changed,
                                            NATIVE_MAP)
                    if proof.proven:
                        findings.admission = (True, NATIVE_MAP, f"applied by the API server: {names}")
                        findings.enforcement = NATIVE_MAP
                    else:
                        findings.admission = (False, PENDING, f"MutatingAdmissionPolicies {names} and their "
                                                              f"bindings exist; waiting for {proof.waiting_for}")
                        findings.enforcement = PENDING
                else:
                    why_not = message  # the API server refused the MAP: vpol's webhook applies the policy
            if why_not:
                findings.admission, findings.enforcement = self._webhook_finding(key, body, generation,
                                                                                 why_not)
        result.deleted = self._delete_generated(existing, keep, api_version)
        result.enforcement = findings.enforcement
        return result, findings

    def _mutate_existing_findings(self, policy: MutatingPolicy, findings: Findings, discovery: Discovery) -> None:
        """The MutateExisting condition and the permissions it needs (read triggers and targets, patch targets)."""
        targets = target_resources(policy, discovery)
        triggers = trigger_resources(policy, discovery)
        kinds = ", ".join(sorted({info.kind for info, _sub in targets})) or "nothing (no target resource is known)"
        when = "when the policy is created or changed"
        if policy.spec.target_expression:
            when += ", and for the targets its expression resolves from each trigger"
        else:
            when += ", on each trigger"
            if policy.spec.evaluation.background_enabled:
                when += ", and in every background scan"
        if self.ctx.runner is None:
            findings.mutate_existing = (False, "ScansDisabled", "existing objects are not mutated: the operator runs "
                                                                "with --scan-interval=0 (no background work)")
        else:
            findings.mutate_existing = (True, "Active", f"mutates existing {kinds} {when}")
        findings.rbac_applicable = True
        findings.background_enabled = True
        findings.rbac_message = "the operator may read the triggers and targets and patch the targets"
        if self.ctx.access is not None:
            reads = {(i.group, i.version, i.resource) for i in triggers} | \
                {(i.group, i.version, i.resource) for i, _sub in targets}
            writes = [(i.group, i.version, f"{i.resource}/{sub}" if sub else i.resource) for i, sub in targets]
            findings.missing_permissions = self.ctx.access.missing(sorted(reads)) + \
                self.ctx.access.missing(writes, verbs=("patch",))

    def _webhook_finding(self, key: PolicyKey, body: dict[str, Any], generation: int,
                         why_not_native: str) -> tuple[tuple[bool, str, str], str]:
        """AdmissionEnforced (and the route word) of a policy vpol's mutating webhook applies."""
        if not self.ctx.webhook:
            return (False, "WebhookDisabled", f"not applied at admission: {why_not_native}; vpol's webhook is off "
                                              "(--webhook=off)"), "None"
        try:
            config = self.ctx.objects.get_webhook_configuration(MUTATING_WEBHOOK_CONFIGURATION, mutating=True)
        except ApiException as exc:
            return (False, "WebhookNotConfigured", f"not applied at admission: {why_not_native}; reading "
                                                   f"{MUTATING_WEBHOOK_CONFIGURATION} failed: {api_message(exc)}"), \
                "None"
        covered = covered_generation(config, coverage_key(key.kind, key.policy_key))
        if config is None or covered is None or covered < generation:
            return (False, PENDING, f"not applied at admission yet: {MUTATING_WEBHOOK_CONFIGURATION} does not "
                                    f"cover generation {generation} (not native because {why_not_native})"), PENDING
        proof = proof_of_webhook(self.ctx.prover, key, body, generation, config, MUTATING_WEBHOOK_CONFIGURATION,
                                 True)
        if not proof.proven:
            return (False, PENDING, f"{MUTATING_WEBHOOK_CONFIGURATION} covers generation {generation} (not native "
                                    f"because {why_not_native}); waiting for {proof.waiting_for}"), PENDING
        return (True, "Webhook", f"applied by vpol's webhook ({MUTATING_WEBHOOK_CONFIGURATION}): not native "
                                 f"because {why_not_native}"), "Webhook"

    def _delete_generated(self, existing: Mapping[tuple[str, str], Listed], keep: set[tuple[str, str]],
                          api_version: str | None) -> list[str]:
        deleted = []
        for kind, obj_name in existing:
            if (kind, obj_name) not in keep and api_version:
                self.ctx.objects.delete_map(kind, obj_name, api_version)
                deleted.append(obj_name)
        return deleted

"""The plan of a GeneratingPolicy or NamespacedGeneratingPolicy.

A valid policy is handed to the background work, which generates for its triggers (vpol.controller.generation).
Its status says what it generates and on what (``Generating``; False when the operator runs no background work),
whether the last generation failed (``GenerationSucceeded``, informational: for example a namespaced policy
generating into another namespace), and whether the operator may read the triggers and write the kinds the
templates name (``RBACPermissionsGranted``: create, update, delete, get, list, watch, as for every kind generated so
far).
"""

from __future__ import annotations

from typing import Any

from vpol.controller.plans.lifecycle import LifecyclePlan
from vpol.controller.queue_keys import PolicyKey
from vpol.desired.status import Findings
from vpol.engine.scope import trigger_resources
from vpol.model.discovery import Discovery, ResourceInfo
from vpol.model.templates import parse as parse_template
from vpol.policies.generating.model import GeneratingPolicy

GENERATING_CONDITION = "Generating"
GENERATION_SUCCEEDED = "GenerationSucceeded"
#: What generation needs on the kinds it writes (watch: synchronized downstreams are watched).
WRITE_VERBS = ("create", "update", "delete", "get", "list", "watch")


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


class GeneratingPlan(LifecyclePlan):
    def decide(self, key: PolicyKey, body: dict[str, Any], findings: Findings) -> str:
        self._generating(key, body, findings)
        current = body.get("status") or {}
        was_lacking = any(c.get("type") == "RBACPermissionsGranted" and c.get("status") == "False"
                          for c in current.get("conditions") or [] if isinstance(c, dict))
        if was_lacking and not findings.missing_permissions and self.runner is not None:
            # Triggers whose generation was refused are owed it: a pass of the policy retries them now.
            self.runner.retry_generation(key.policy_key)
        return ""

    def _generating(self, key: PolicyKey, body: dict[str, Any], findings: Findings) -> None:
        policy, errors = self.parsed(key, body, findings)
        findings.rbac_message = "the operator may read the triggers and write the kinds the policy generates"
        if policy is None or errors:
            self.hand_over(key, None)
            findings.extra = [(GENERATING_CONDITION, False, "CompilationFailed",
                               "nothing is generated: the policy is invalid", False)]
            return
        self.hand_over(key, policy)
        discovery = self.ctx.discovery.get()
        triggers = trigger_resources(policy, discovery)
        written = list(template_kinds(policy, discovery))
        if self.runner is not None:
            written += self.runner.generation.generated_resources(policy.key)
        findings.missing_permissions = self.missing(triggers, written, WRITE_VERBS)
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

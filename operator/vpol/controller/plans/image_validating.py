"""The plan of an ImageValidatingPolicy or NamespacedImageValidatingPolicy.

A valid policy is handed to the background work, which verifies the images of existing objects in scans
(vpol.controller.image_scans). Its status: ``AdmissionEnforced`` (when admission is enabled) is True (reason
``Webhook``) once vpol's validating webhook configuration, and for a policy that pins digests its mutating one too,
cover the policy's generation and the API server is known to call vpol with them; ``BackgroundScanned``
(informational) is True while existing objects are verified in background scans, False with ``ScansDisabled`` when
the operator runs none; ``AttestorsVerifiable`` (informational) names attestors vpol cannot verify with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vpol.controller.enforcement_state import webhook_state
from vpol.controller.plans.lifecycle import LifecyclePlan
from vpol.controller.queue_keys import PolicyKey
from vpol.desired.enforcement import WebhookState
from vpol.desired.status import Findings
from vpol.desired.webhook import MUTATING_WEBHOOK_CONFIGURATION, WEBHOOK_CONFIGURATION
from vpol.desired.webhook_coverage import coverage_key
from vpol.policies.image_validating.model import ImageValidatingPolicy, unverifiable

BACKGROUND_SCANNED = "BackgroundScanned"
ATTESTORS_VERIFIABLE = "AttestorsVerifiable"


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


class ImageValidatingPlan(LifecyclePlan):
    def decide(self, key: PolicyKey, body: dict[str, Any], findings: Findings) -> str:
        return self._image_validating(key, body, findings.generation, findings)

    def _image_validating(self, key: PolicyKey, body: dict[str, Any], generation: int,
                          findings: Findings) -> str:
        """Compiled, and enforced once vpol's image webhooks serve this generation (the route in one word)."""
        policy, errors = self.parsed(key, body, findings)
        findings.rbac_applicable = False
        self.hand_over(key, policy if policy is not None and not errors else None)
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
        if background and not errors and self.runner is not None:
            matched = list(self.runner.images.watched(self.ctx.discovery.get(), [key.policy_key]).values())
            findings.rbac_applicable = True
            findings.rbac_message = "the operator may get, list and watch every matched resource"
            findings.missing_permissions = self.missing(matched, [], ())
        if policy is None or not policy.spec.evaluation.admission_enabled or policy.json_mode:
            return "NotApplicable"
        if errors:
            findings.admission = (False, "CompilationFailed", "not enforced: the policy does not compile")
            return "None"
        if not self.ctx.webhook:
            findings.admission = (False, "WebhookDisabled", "not enforced: ImageValidatingPolicies are enforced by "
                                                            "vpol's admission webhook, and the operator runs without "
                                                            "it (--webhook=off)")
            return "None"
        covered_as = coverage_key(key.kind, key.policy_key)
        states = [webhook_state(self.ctx.objects, self.ctx.prover, WEBHOOK_CONFIGURATION, key, body, generation,
                                coverage_key=covered_as)]
        if policy.spec.validation_configurations.mutate_digest:
            states.append(webhook_state(self.ctx.objects, self.ctx.prover, MUTATING_WEBHOOK_CONFIGURATION, key, body,
                                        generation, mutating=True, coverage_key=covered_as))
        findings.admission, route = _image_admission(states, generation)
        return route

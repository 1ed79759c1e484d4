"""Whether the API server enforces what a policy's plan wrote: its native objects (VAPs, MAPs) or vpol's webhook
configuration covering it, answered from the enforcement prover (vpol.controller.enforcement_proof) and from what
the policy's status already says of this generation (an earlier run proved it)."""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client.rest import ApiException

from vpol.controller.enforcement_proof import EnforcementProver, Proof
from vpol.controller.generated_apply import api_message
from vpol.controller.queue_keys import PolicyKey
from vpol.desired.enforcement import WEBHOOK, WebhookState
from vpol.desired.probe import probed_epoch
from vpol.desired.webhook_coverage import covered_generation
from vpol.kube.objects import Objects


def webhook_state(objects: Objects, prover: EnforcementProver | None, configuration: str, key: PolicyKey,
                  body: dict[str, Any], generation: int, *, coverage_key: str, mutating: bool = False) -> WebhookState:
    """Whether the webhook configuration ``configuration`` in the cluster covers generation ``generation`` of policy
    ``key`` (``coverage_key`` in its annotation, vpol.desired.webhook_coverage), and whether the API server is known
    to call vpol with it."""
    state = WebhookState(enabled=True, configuration=configuration)
    try:
        config = objects.get_webhook_configuration(configuration, mutating=mutating)
    except ApiException as exc:
        return WebhookState(enabled=True, configuration=configuration, error=api_message(exc))
    if config is None:
        return state
    covered = covered_generation(config, coverage_key)
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


def proof_of_native(prover: EnforcementProver | None, written_at: dict[PolicyKey, float], key: PolicyKey,
                    body: dict[str, Any], generation: int, kind: str, changed: bool, reason: str) -> Proof:
    """The proof that policy ``key``'s native objects (of ``kind``) are enforced (an unchanged object already proven
    at this generation, as the status says, is enforced: an earlier run proved it)."""
    if prover is None:
        return Proof(True)
    if changed:
        written_at[key] = time.monotonic()
    elif key not in written_at:
        if enforced_already(body, generation, reason):
            return Proof(True)
        written_at[key] = time.monotonic()
    return prover.native(key, kind, written_at[key])


def proof_of_webhook(prover: EnforcementProver | None, key: PolicyKey, body: dict[str, Any], generation: int,
                     config: dict[str, Any], configuration: str, mutating: bool) -> Proof:
    """The proof that the API server calls vpol's webhook with ``config`` (which covers the policy). A policy
    already enforced through the webhook at this generation stays so: every configuration since covered it."""
    if prover is None or enforced_already(body, generation, WEBHOOK):
        return Proof(True)
    return prover.webhook(key, configuration, probed_epoch(config), mutating)


"""The ValidatingWebhookConfiguration through which vpol validates its own kinds at apply time (pure).

A policy that cannot work (it does not compile, or breaks Kyverno's rules) is
refused by ``kubectl apply``, with the same messages, paths and positions as
``vpol check``, so its author sees the error in the terminal, in CI and in
GitOps tools; type-check warnings come back as admission warnings.

``failurePolicy: Ignore``: a stopped operator never blocks policy edits (the
policy is then admitted, and its status says what is wrong once the operator
is back). Only CREATE and UPDATE of the objects themselves are sent (not their
status), and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vpol.desired.admission_policy import MANAGED_BY, MANAGED_BY_LABEL
from vpol.desired.webhook import API_VERSION, client_config_at

POLICY_VALIDATION_CONFIGURATION = "vpol-policy-validation"
POLICY_VALIDATION_PATH = "/validate-policy"
POLICY_VALIDATION_WEBHOOK = "policies.validate.vpol.kyverno.io"
def validated(policy_plurals: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(API group, resources) vpol validates: the policy kinds' (``policy_plurals``, both variants of each:
    vpol.policies.registry.PLURALS), PolicyExceptions and GlobalContextEntries."""
    return (("policies.kyverno.io", (*policy_plurals, "policyexceptions")), ("kyverno.io", ("globalcontextentries",)))


def policy_validation_configuration(client_config: Mapping[str, Any], policy_plurals: Sequence[str], *,
                                    timeout_seconds: int = 10) -> dict[str, Any]:
    """The configuration sending vpol's kinds (the policy kinds' ``policy_plurals``, see :func:`validated`) to
    ``/validate-policy`` of the server ``client_config`` names."""
    rules = [{"apiGroups": [group], "apiVersions": ["*"], "resources": list(resources),
              "operations": ["CREATE", "UPDATE"], "scope": "*"} for group, resources in validated(policy_plurals)]
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": POLICY_VALIDATION_CONFIGURATION, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "webhooks": [{
            "name": POLICY_VALIDATION_WEBHOOK,
            "clientConfig": client_config_at(client_config, POLICY_VALIDATION_PATH),
            "rules": rules,
            "failurePolicy": "Ignore",
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "timeoutSeconds": timeout_seconds,
            "admissionReviewVersions": ["v1"],
        }],
    }


#: Longest warning the answer carries (the API server truncates longer ones).
MAX_WARNING = 1000


def warning_line(text: str) -> str:
    """A warning as the API server passes it on: one line (it drops warnings with line breaks, which cannot be
    HTTP header values), so the caret excerpt lines are left out."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("|")]
    return " ".join(lines)


def policy_validation_response(uid: str, ref: str, errors: list[str], warnings: list[str]) -> dict[str, Any]:
    """The AdmissionReview response for a validated object: refused with every error (one per line) when there
    is any, with the warnings either way."""
    response: dict[str, Any] = {"uid": uid, "allowed": not errors}
    if errors:
        noun = "error" if len(errors) == 1 else "errors"
        response["status"] = {"code": 400, "reason": "BadRequest",
                              "message": f"{ref} is invalid ({len(errors)} {noun}):\n" + "\n".join(errors)}
    if warnings:
        lines = [warning_line(w) for w in warnings]
        response["warnings"] = [w if len(w) <= MAX_WARNING else w[:MAX_WARNING - 3] + "..." for w in lines]
    return response

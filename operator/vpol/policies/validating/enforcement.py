"""Where a ValidatingPolicy is enforced at admission (pure): natively by the API server through its
ValidatingAdmissionPolicies, by vpol's webhook, or nowhere (the routes and their rules: vpol.desired.enforcement)."""

from __future__ import annotations

from vpol.desired.enforcement import GENERATION_ELIGIBLE, Route
from vpol.policies.validating.model import ValidatingPolicy
from vpol.policies.validating.vap import ineligibility


def not_applicable(policy: ValidatingPolicy) -> str:
    """Why the policy never applies at admission ("" when it does)."""
    if not policy.spec.evaluation.admission_enabled:
        return "admission evaluation is disabled (spec.evaluation.admission.enabled: false)"
    if policy.json_mode:
        return "JSON-mode policies evaluate JSON payloads, which never come through admission"
    return ""


def wants_native(policy: ValidatingPolicy, generation: str) -> bool:
    """Whether native ValidatingAdmissionPolicies are asked for (explicitly, or by the generation mode)."""
    explicit = policy.spec.autogen.vap_enabled
    if explicit is not None:
        return explicit
    # Namespaced policies too (beyond Kyverno): their VAPs are pinned to the namespace
    # (vpol.desired.admission_policy.pinning).
    return generation == GENERATION_ELIGIBLE


def route(policy: ValidatingPolicy, *, generation: str = GENERATION_ELIGIBLE, compiles: bool = True,
          vap_failed: bool = False) -> Route:
    """The admission route of ``policy``.

    ``compiles``: every expression compiles (the caller has compiled it).
    ``vap_failed``: the API server refused the generated VAP for this generation
    of the policy; the webhook then takes over.
    """
    wanted = wants_native(policy, generation)
    why_not = not_applicable(policy)
    if not compiles:
        return Route(native=False, webhook=False, native_wanted=wanted, not_applicable=why_not)
    ineligible = ineligibility(policy) if wanted else ""
    native = wanted and not ineligible
    webhook = not why_not and (not native or vap_failed)
    return Route(native=native, webhook=webhook, native_wanted=wanted, ineligible=ineligible,
                 not_applicable=why_not)

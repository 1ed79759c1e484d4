"""Where a ValidatingPolicy is enforced at admission: natively by the API server, by vpol's webhook, or nowhere
(pure).

Every admission-enabled policy in Kubernetes mode applies at admission, whatever
its validationActions (Deny denies, Warn warns, Audit annotates). The route:

1. **Native** (``NativeVAP``): the policy wants a ValidatingAdmissionPolicy and the
   API server can express it (see :func:`vpol.policies.validating.vap.ineligibility`). It wants
   one when ``spec.autogen.validatingAdmissionPolicy.enabled`` is true, or, with the
   operator's generation mode ``eligible`` (the default), when that field is unset.
   In mode ``opt-in`` only an explicit ``true`` asks for one (Kyverno's behaviour).
2. **Webhook** (``Webhook``): everything else that applies at admission, and a
   native policy whose VAP the API server refused (``vap_failed``), is enforced by
   vpol's own admission webhook (when the operator runs it).
3. **Not applicable**: admission evaluation disabled, or JSON mode (JSON payloads
   never come through admission).

A policy that does not compile is enforced nowhere (it is not Ready either): a
broken policy in the webhook would turn every matching request into an error.

The same function (:func:`route`) decides for the reconciler (status, VAPs), the webhook configuration writer and
every replica's webhook server, so they always agree; :func:`admission_finding` words the ``AdmissionEnforced``
condition. The route names and the webhook's state are vpol.desired.enforcement's.
"""

from __future__ import annotations

from dataclasses import dataclass

from vpol.desired.enforcement import GENERATION_ELIGIBLE, NATIVE, NONE, NOT_APPLICABLE, PENDING, WEBHOOK, WebhookState
from vpol.policies.validating.model import ValidatingPolicy
from vpol.policies.validating.vap import ineligibility


@dataclass(frozen=True)
class Route:
    #: Native VAPs (and bindings) should exist.
    native: bool
    #: vpol's webhook should enforce the policy.
    webhook: bool
    #: Native generation was asked for (the VAPGenerated condition is shown).
    native_wanted: bool
    #: Why native generation was asked for but is impossible ("" otherwise).
    ineligible: str = ""
    #: Why the policy does not apply at admission at all ("" when it does).
    not_applicable: str = ""


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


def admission_finding(route: Route, *, native_objects: tuple[str, ...] = (), native_error: str = "",
                      native_pending: str = "", webhook: WebhookState = WebhookState(), generation: int = 0
                      ) -> tuple[tuple[bool, str, str] | None, str]:
    """The ``AdmissionEnforced`` condition (enforced, reason, message) and the one-word route.

    ``native_objects``: the VAPs the API server accepted (empty when none were applied);
    ``native_error``: why applying them failed; ``native_pending``: what is awaited before the API server is
    known to enforce them ("" once it is).
    """
    if route.not_applicable:
        return None, NOT_APPLICABLE
    if route.native and native_objects and not native_error:
        names = ", ".join(native_objects)
        if native_pending:
            return (False, PENDING, f"ValidatingAdmissionPolicies {names} and their bindings exist; waiting for "
                                    f"{native_pending}"), PENDING
        return (True, NATIVE, f"enforced by the API server through ValidatingAdmissionPolicies {names}"), NATIVE
    if not route.native and not route.webhook:
        return (False, "CompilationFailed", "not enforced: the policy does not compile"), NONE
    why_webhook = route.ineligible or native_error or \
        "native generation is off for this policy (spec.autogen.validatingAdmissionPolicy.enabled, " \
        "or the operator's --vap-generation=opt-in)"
    if not webhook.enabled:
        return (False, "WebhookDisabled", f"not enforced: {why_webhook}, and the operator runs without its "
                                          "admission webhook (--webhook=off)"), NONE
    if webhook.error:
        return (False, "WebhookNotConfigured", f"not enforced: the webhook configuration {webhook.configuration} "
                                               f"could not be read or written: {webhook.error}"), NONE
    if not webhook.covered:
        return (False, PENDING, f"waiting for the webhook configuration {webhook.configuration} to "
                                f"cover generation {generation} of the policy"), PENDING
    if webhook.pending:
        return (False, PENDING, f"{webhook.configuration} covers generation {generation} of the policy; waiting "
                                f"for {webhook.pending}"), PENDING
    return (True, WEBHOOK, f"enforced by vpol's admission webhook ({webhook.configuration}): "
                           f"{why_webhook}"), WEBHOOK

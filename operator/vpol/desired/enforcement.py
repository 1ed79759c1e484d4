"""Where a policy is enforced at admission: natively by the API server, by vpol's webhook, or nowhere (pure).

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

The same function (a ValidatingPolicy's: vpol.policies.validating.enforcement.route) decides for the
reconciler (status, VAPs), the webhook configuration writer and every replica's webhook server, so they always
agree. Here: the routes, what the reconciler found of the webhook and the ``AdmissionEnforced`` condition.
"""

from __future__ import annotations

from dataclasses import dataclass


GENERATION_ELIGIBLE = "eligible"
GENERATION_OPT_IN = "opt-in"
GENERATION_MODES = (GENERATION_ELIGIBLE, GENERATION_OPT_IN)

NATIVE = "NativeVAP"
WEBHOOK = "Webhook"
NOT_APPLICABLE = "NotApplicable"
NONE = "None"
#: The route is in place, but the API server is not yet known to enforce it (vpol.desired.probe).
PENDING = "Pending"


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


@dataclass(frozen=True)
class WebhookState:
    """What the reconciler found out about vpol's webhook for one policy."""

    #: The operator runs the webhook (--webhook on).
    enabled: bool = True
    #: The webhook configuration in the cluster covers this generation of the policy.
    covered: bool = False
    #: Name of the webhook configuration (for messages).
    configuration: str = ""
    #: Why the configuration could not be read or written ("" when fine).
    error: str = ""
    #: What is awaited before the API server is known to call the webhook with that configuration ("" once it
    #: is known).
    pending: str = ""


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

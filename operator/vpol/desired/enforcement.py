"""Where a policy is enforced at admission, the words every kind's status uses (pure): the operator's generation
modes for native admission policies, the route names (``NativeVAP``, ``Webhook``, ``NotApplicable``, ``None``,
``Pending``) and what the reconciler found of vpol's webhook (:class:`WebhookState`). A ValidatingPolicy's route and
its ``AdmissionEnforced`` condition are vpol.policies.validating.enforcement's; a MutatingPolicy's route is
vpol.policies.mutating.map.mutating_route.
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

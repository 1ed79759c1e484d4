"""Enforcement probes: objects built so that a dry-run request proves the API server enforces what vpol wrote (pure).

Why: the API server does not enforce a ValidatingAdmissionPolicy, a
MutatingAdmissionPolicy or a webhook configuration the moment it is stored.
Its admission plugins read them through informers, and the policy plugins
(``k8s.io/apiserver/pkg/admission/plugin/policy/generic/policy_source.go``)
recompile their whole set from the informers' stores only when a one-second
refresh loop finds it dirty. Measured: requests made right after the objects
exist are still admitted. ``Ready`` must mean enforced, so vpol proves it:

**Native policies: a sentinel.** One ValidatingAdmissionPolicy and binding
(``vpol-enforcement-probe``), and one MutatingAdmissionPolicy and binding when
the cluster serves them, that match only a ConfigMap named for an *epoch*
(``resourceNames`` in both the policy and the binding), in vpol's own
namespace. After writing a policy's objects, the prover rewrites both sentinel
objects for a new epoch and sends a dry-run CREATE of that ConfigMap:

- the sentinel VAP denies it with :data:`VAP_PROBE_MESSAGE`, the sentinel MAP
  adds the label :data:`MAP_PROBE_LABEL` = epoch, only once the plugin's
  compiled set holds *both* new sentinel objects;
- a policy informer delivers events in resourceVersion order, so a store
  holding the sentinel policy written after vpol's VAP also holds that VAP; the
  same for bindings; and the plugin builds its set from both stores at once.
  So an answered probe proves every object vpol wrote before the epoch is
  enforced, for all policies at once (one probe round serves many writes).

**vpol's webhook: a probe webhook in each configuration.** The configuration
carries one more webhook, ``probe.validate.vpol.kyverno.io`` (or
``probe.mutate...``), limited to ConfigMaps in vpol's namespace labelled
:data:`WEBHOOK_PROBE_LABEL` with the configuration's *epoch* (a hash of the
rest of the configuration). vpol's server denies those with
:data:`WEBHOOK_PROBE_MESSAGE`. The webhook plugin reads a configuration as one
object: a dry-run answered for the current epoch proves the API server calls
vpol's webhook with the configuration that covers the policies.

The probe objects can only ever match the probe ConfigMaps (a name or label
nobody else uses, one namespace, CREATE only, dry-run), so they add no
admission cost to other requests.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from vpol.desired.admission_policy import MANAGED_BY, MANAGED_BY_LABEL, VAP_API_VERSION

#: Name of the sentinel VAP and MAP (their bindings add ``-binding``).
SENTINEL = "vpol-enforcement-probe"
#: The sentinel VAP's denial message (the prover looks for it in the dry-run's error).
VAP_PROBE_MESSAGE = "vpol enforcement probe"
#: The label the sentinel MAP sets on its probe ConfigMap.
MAP_PROBE_LABEL = "vpol.kyverno.io/enforcement-probe"
#: The label a webhook probe ConfigMap carries (value: the configuration's epoch).
WEBHOOK_PROBE_LABEL = "vpol.kyverno.io/webhook-probe"
#: vpol's answer to a webhook probe (followed by the epoch it was asked with).
WEBHOOK_PROBE_MESSAGE = "vpol webhook probe"
#: The server path of the probe webhook.
PROBE_PATH = "/probe"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

_CONFIGMAPS_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["CREATE"]}


def vap_probe_name(epoch: str) -> str:
    """The ConfigMap the sentinel VAP denies at ``epoch``."""
    return f"vpol-probe-v-{epoch}"


def map_probe_name(epoch: str) -> str:
    """The ConfigMap the sentinel MAP labels at ``epoch``."""
    return f"vpol-probe-m-{epoch}"


def _metadata(name: str) -> dict[str, Any]:
    return {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}}


def _match(namespace: str, name: str) -> dict[str, Any]:
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
        "resourceRules": [{**_CONFIGMAPS_RULE, "resourceNames": [name]}],
    }


def sentinel_vap(namespace: str, epoch: str) -> list[dict[str, Any]]:
    """The sentinel ValidatingAdmissionPolicy and binding for ``epoch``: they deny (only) the dry-run CREATE of
    ConfigMap :func:`vap_probe_name` in ``namespace``, once the API server's plugin has loaded both."""
    name = vap_probe_name(epoch)
    return [
        {"apiVersion": VAP_API_VERSION, "kind": "ValidatingAdmissionPolicy", "metadata": _metadata(SENTINEL),
         "spec": {"failurePolicy": "Fail", "matchConstraints": _match(namespace, name),
                  "validations": [{"expression": "false", "message": VAP_PROBE_MESSAGE}]}},
        {"apiVersion": VAP_API_VERSION, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": _metadata(f"{SENTINEL}-binding"),
         "spec": {"policyName": SENTINEL, "validationActions": ["Deny"], "matchResources": _match(namespace, name)}},
    ]


def sentinel_map(namespace: str, epoch: str, api_version: str) -> list[dict[str, Any]]:
    """The sentinel MutatingAdmissionPolicy and binding for ``epoch``: they label (only) the dry-run CREATE of
    ConfigMap :func:`map_probe_name` in ``namespace`` with :data:`MAP_PROBE_LABEL` = ``epoch``."""
    name = map_probe_name(epoch)
    patch = "Object{metadata: Object.metadata{labels: {" + json.dumps(MAP_PROBE_LABEL) + ": " + \
        json.dumps(epoch) + "}}}"
    return [
        {"apiVersion": api_version, "kind": "MutatingAdmissionPolicy", "metadata": _metadata(SENTINEL),
         "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "Never", "matchConstraints": _match(namespace, name),
                  "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": patch}}]}},
        {"apiVersion": api_version, "kind": "MutatingAdmissionPolicyBinding",
         "metadata": _metadata(f"{SENTINEL}-binding"),
         "spec": {"policyName": SENTINEL, "matchResources": _match(namespace, name)}},
    ]


def probe_configmap(name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name}
    if labels:
        md["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md}


def vap_answered(error_message: str) -> bool:
    """Whether a dry-run's error is the sentinel VAP's denial."""
    return VAP_PROBE_MESSAGE in error_message and SENTINEL in error_message


#: How the API server names the admission policy or webhook that refused a request, in the refusal's message.
_REFUSED_BY = re.compile(r"(?:ValidatingAdmissionPolicy |policy )'([^']+)' with binding '[^']*' denied request"
                         r"|admission webhook \"([^\"]+)\" denied the request")


def refused_by_another(error_message: str) -> str:
    """The admission policy or webhook other than vpol's probes that refused a probe ConfigMap ("" when none): the
    API server reports the first refusal only, so a policy of the cluster's that denies the probe (all ConfigMaps
    without some label, say) hides the sentinel's answer, whichever has loaded."""
    m = _REFUSED_BY.search(error_message)
    if m is None:
        return ""
    name = m.group(1) or m.group(2)
    return "" if name == SENTINEL or name.startswith("probe.") and name.endswith(".vpol.kyverno.io") else name


def map_answered(obj: Mapping[str, Any], epoch: str) -> bool:
    """Whether the dry-run's result carries the sentinel MAP's label for ``epoch``."""
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(MAP_PROBE_LABEL) == epoch


# -- the probe webhook of vpol's webhook configurations


def configuration_epoch(config: Mapping[str, Any]) -> str:
    """A hash of what a webhook configuration says (its webhooks, but the probe webhook, and its annotations):
    the value its probe webhook answers for."""
    webhooks = [w for w in config.get("webhooks") or [] if not str(w.get("name", "")).startswith("probe.")]
    annotations = ((config.get("metadata") or {}).get("annotations")) or {}
    text = json.dumps({"webhooks": webhooks, "annotations": annotations}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def probe_webhook_name(mutating: bool) -> str:
    return f"probe.{'mutate' if mutating else 'validate'}.vpol.kyverno.io"


def probe_webhook(client_config: Mapping[str, Any], namespace: str, epoch: str, mutating: bool) -> dict[str, Any]:
    """The webhook entry vpol's server answers with a denial for ConfigMaps labelled with ``epoch`` in vpol's
    namespace (failurePolicy Ignore: it can never block anything else)."""
    webhook: dict[str, Any] = {
        "name": probe_webhook_name(mutating),
        "clientConfig": dict(client_config),
        "rules": [{**_CONFIGMAPS_RULE, "scope": "Namespaced"}],
        "failurePolicy": "Ignore",
        "matchPolicy": "Equivalent",
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
        "objectSelector": {"matchLabels": {WEBHOOK_PROBE_LABEL: epoch}},
        "sideEffects": "None",
        "timeoutSeconds": 5,
        "admissionReviewVersions": ["v1"],
    }
    if mutating:
        webhook["reinvocationPolicy"] = "Never"
    return webhook


def with_probe(config: dict[str, Any], client_config: Mapping[str, Any], namespace: str,
               mutating: bool) -> dict[str, Any]:
    """``config`` with its probe webhook appended (for the epoch of the rest of it)."""
    epoch = configuration_epoch(config)
    config["webhooks"] = [*config.get("webhooks", []), probe_webhook(client_config, namespace, epoch, mutating)]
    return config


def probed_epoch(config: Mapping[str, Any] | None) -> str:
    """The epoch the probe webhook of a configuration (as read from the cluster) answers for ("" when it has
    none)."""
    for webhook in (config or {}).get("webhooks") or []:
        if str(webhook.get("name", "")).startswith("probe."):
            labels = ((webhook.get("objectSelector") or {}).get("matchLabels")) or {}
            return str(labels.get(WEBHOOK_PROBE_LABEL, ""))
    return ""


def webhook_probe_answer(request: Mapping[str, Any]) -> dict[str, Any]:
    """The AdmissionReview response of vpol's server to a probe request: a denial naming the epoch."""
    obj = request.get("object") or {}
    epoch = str((((obj.get("metadata") or {}).get("labels")) or {}).get(WEBHOOK_PROBE_LABEL, ""))
    return {"uid": str(request.get("uid") or ""), "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": f"{WEBHOOK_PROBE_MESSAGE} {epoch}"}}


def webhook_answered(error_message: str, epoch: str) -> bool:
    return f"{WEBHOOK_PROBE_MESSAGE} {epoch}" in error_message

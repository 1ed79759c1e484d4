"""The ValidatingWebhookConfiguration vpol's webhook needs for a set of policies (pure).

One webhook per failurePolicy present (``fail.validate.vpol.kyverno.io``
at ``/validate/fail``, ``ignore.validate.vpol.kyverno.io`` at
``/validate/ignore``), so the API server applies each policy's
failurePolicy when the webhook cannot be reached, and the server evaluates
only the policies of the webhook that called it. Each webhook's rules are
exactly the resource rules of its policies and of their pod-controller
autogen variants (deduplicated, sorted: the same policies always give the
same object); a NamespacedValidatingPolicy's rules are ``scope: Namespaced``.
``resourceNames`` and exclusions are not webhook rule fields: the engine
applies them.

Selectors: when every policy of a webhook has the same namespaceSelector
(a NamespacedValidatingPolicy's is its own namespace) or objectSelector,
the webhook carries it; otherwise the engine filters. The namespaceSelector
always excludes ``excluded_namespaces`` (kube-system and vpol's own, by
the caller), so a broken policy can never lock the cluster out.

``timeoutSeconds``: the largest ``spec.webhookConfiguration.timeoutSeconds``
of the webhook's policies, else the operator's default.

Owner: when the operator is given its installation's ClusterRole
(``--owner-clusterrole``), the configuration is owned by it, so deleting the
installation (``helm uninstall``, ``kubectl delete -k manifests/operator``)
lets the garbage collector delete the configuration too: a webhook left
behind without its server would fail (or slow) every request it matches.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from vpol.desired.admission_policy import MANAGED_BY, MANAGED_BY_LABEL

WEBHOOK_CONFIGURATION = "vpol-validating"
#: The MutatingWebhookConfiguration of the MutatingPolicies the API server cannot apply natively.
MUTATING_WEBHOOK_CONFIGURATION = "vpol-mutating"
API_VERSION = "admissionregistration.k8s.io/v1"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
FAILURE_POLICIES = ("Fail", "Ignore")


class WebhookPolicy(Protocol):
    """What the configuration reads of a policy vpol's webhook enforces (a ValidatingPolicy, MutatingPolicy or
    ImageValidatingPolicy): its namespace, its matchConstraints as written (``raw``) and its spec's
    ``match_constraints``, ``failure_policy``, ``webhook_timeout_seconds`` and, where the kind has them,
    ``reinvocation_policy`` (a MutatingPolicy's) and ``validation_configurations`` (an ImageValidatingPolicy's)."""

    @property
    def namespace(self) -> str: ...
    @property
    def raw(self) -> Mapping[str, Any]: ...
    @property
    def spec(self) -> Any: ...


P = TypeVar("P", bound=WebhookPolicy)

#: A policy's variants: the policy and its autogen variants (vpol.model.kind.PolicyKind.variants).
Variants = Callable[[Any], Sequence[WebhookPolicy]]


def webhook_path(failure_policy: str, mutating: bool = False, images: bool = False) -> str:
    return f"{'/images' if images else ''}/{'mutate' if mutating else 'validate'}/{failure_policy.lower()}"


def webhook_name(failure_policy: str, mutating: bool = False, images: bool = False) -> str:
    return f"{failure_policy.lower()}.{'images.' if images else ''}{'mutate' if mutating else 'validate'}" \
           ".vpol.kyverno.io"


def _rules(policy: WebhookPolicy, variants: Variants) -> list[tuple[Any, ...]]:
    out = []
    namespaced = bool(policy.namespace)
    for variant in variants(policy):
        m = variant.spec.match_constraints
        if m is None:
            continue
        for r in m.resource_rules:
            scope = "Namespaced" if namespaced else r.scope
            out.append((tuple(sorted(r.operations)), tuple(sorted(r.api_groups)), tuple(sorted(r.api_versions)),
                        tuple(sorted(r.resources)), scope))
    return out


def _rule_dict(rule: tuple[Any, ...]) -> dict[str, Any]:
    operations, groups, versions, resources, scope = rule
    return {"operations": list(operations), "apiGroups": list(groups), "apiVersions": list(versions),
            "resources": list(resources), "scope": scope}


def _raw_selector(policy: WebhookPolicy, key: str) -> dict[str, Any]:
    mc = (policy.raw.get("spec") or {}).get("matchConstraints") or {}
    selector = mc.get(key)
    return dict(selector) if isinstance(selector, Mapping) else {}


def _namespace_selector(policy: WebhookPolicy) -> dict[str, Any]:
    selector = _raw_selector(policy, "namespaceSelector")
    if policy.namespace:
        labels = dict(selector.get("matchLabels") or {})
        labels[NAMESPACE_NAME_LABEL] = policy.namespace
        selector = {**selector, "matchLabels": labels}
    return selector


def _shared(selectors: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The selector every policy has, else the empty (match-everything) one."""
    keys = {json.dumps(s, sort_keys=True) for s in selectors}
    return json.loads(keys.pop()) if len(keys) == 1 else {}


def _excluding(selector: dict[str, Any], excluded: Sequence[str]) -> dict[str, Any]:
    if not excluded:
        return selector
    expressions = list(selector.get("matchExpressions") or [])
    expressions.append({"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": sorted(set(excluded))})
    return {**selector, "matchExpressions": expressions}


def client_config_at(base: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The webhook ``clientConfig`` ``base`` (URL or Service) pointed at ``path``."""
    config = json.loads(json.dumps(dict(base)))
    if "url" in config:
        config["url"] = config["url"].rstrip("/") + path
    elif "service" in config:
        config["service"]["path"] = path
    return config


def owner_reference(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    """An ownerReference to a cluster-scoped object (no controller or blockOwnerDeletion: the garbage
    collector only has to delete the dependent once the owner is gone)."""
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}


def image_webhook_policies(images: Sequence[P], mutating: bool) -> list[P]:
    """The ImageValidatingPolicies of the validating image webhooks (all), or of the mutating ones (those that pin
    tags to digests)."""
    return [p for p in images if not mutating or p.spec.validation_configurations.mutate_digest]


def desired_webhook_configuration(policies: Sequence[WebhookPolicy], *, variants: Variants,
                                  client_config: Mapping[str, Any],
                                  timeout_seconds: int = 10, excluded_namespaces: Sequence[str] = ("kube-system",),
                                  mutating: bool = False, owner: Mapping[str, Any] | None = None,
                                  images: Sequence[WebhookPolicy] = ()) -> dict[str, Any] | None:
    """The configuration for ``policies`` (those vpol's webhook enforces; ``variants`` gives each policy's autogen
    variants, whose rules it covers too); None when there are none.

    ``mutating``: a MutatingWebhookConfiguration (``vpol-mutating``, webhooks ``<fp>.mutate.vpol.kyverno.io``
    at ``/mutate/<fp>``) for MutatingPolicies; its ``reinvocationPolicy`` is ``IfNeeded`` when any policy of
    the webhook asks for it. ``owner``: an ownerReference (:func:`owner_reference`) the configuration carries.
    ``images``: ImageValidatingPolicies, served by webhooks of their own (``<fp>.images.validate.vpol.kyverno.io``
    at ``/images/validate/<fp>``, and in the mutating configuration ``<fp>.images.mutate.vpol.kyverno.io`` at
    ``/images/mutate/<fp>`` for those that pin digests), as Kyverno serves them apart from its other policies:
    their requests wait on registries.
    """
    image_policies = image_webhook_policies(images, mutating)
    if not policies and not image_policies:
        return None
    webhooks = []
    groups: list[tuple[str, bool, list[WebhookPolicy]]] = []
    for failure_policy in FAILURE_POLICIES:
        groups.append((failure_policy, False, [p for p in policies if p.spec.failure_policy == failure_policy]))
    for failure_policy in FAILURE_POLICIES:
        groups.append((failure_policy, True, [p for p in image_policies if p.spec.failure_policy == failure_policy]))
    for failure_policy, for_images, group in groups:
        if not group:
            continue
        rules = sorted({rule for p in group for rule in _rules(p, variants)})
        if not rules:
            continue
        timeouts = [p.spec.webhook_timeout_seconds for p in group if p.spec.webhook_timeout_seconds]
        webhook: dict[str, Any] = {
            "name": webhook_name(failure_policy, mutating, for_images),
            "clientConfig": client_config_at(client_config, webhook_path(failure_policy, mutating, for_images)),
            "rules": [_rule_dict(r) for r in rules],
            "failurePolicy": failure_policy,
            "matchPolicy": "Equivalent",
            "namespaceSelector": _excluding(_shared([_namespace_selector(p) for p in group]), excluded_namespaces),
            "objectSelector": _shared([_raw_selector(p, "objectSelector") for p in group]),
            "sideEffects": "None",
            "timeoutSeconds": max(timeouts) if timeouts else timeout_seconds,
            "admissionReviewVersions": ["v1"],
        }
        if mutating:
            webhook["reinvocationPolicy"] = "IfNeeded" if any(
                getattr(p.spec, "reinvocation_policy", "Never") == "IfNeeded" for p in group) else "Never"
        webhooks.append(webhook)
    if not webhooks:
        return None
    metadata: dict[str, Any] = {"name": MUTATING_WEBHOOK_CONFIGURATION if mutating else WEBHOOK_CONFIGURATION,
                                "labels": {MANAGED_BY_LABEL: MANAGED_BY}}
    if owner is not None:
        metadata["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": API_VERSION,
        "kind": "MutatingWebhookConfiguration" if mutating else "ValidatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": webhooks,
    }

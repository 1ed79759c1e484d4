"""ImageValidatingPolicies in vpol's webhook configurations (pure): webhooks of their own per failurePolicy, the
mutating ones only for policies that pin digests, rules from the policy and its autogen variants, a namespaced
policy confined to its namespace, coverage keys of their own."""

from __future__ import annotations

import json
from typing import Any

from vpol.desired.webhook import desired_webhook_configuration, webhook_path
from vpol.desired.webhook_coverage import IMAGE_PREFIX, coverage_annotation, covered
from vpol.policies.image_validating.model import parse_image_validating_policy
from vpol.policies.registry import policy_variants

from tests.unit.image.test_policy import document, with_
from tests.unit.policies import make_policy

URL = {"url": "https://127.0.0.1:9443", "caBundle": "Q0E="}


def ivpol(name: str = "images", namespace: str | None = None, **changes: Any) -> Any:
    doc = document(with_(**changes), namespace=namespace,
                   kind="NamespacedImageValidatingPolicy" if namespace else "ImageValidatingPolicy")
    doc["metadata"]["name"] = name
    policy, problems = parse_image_validating_policy(doc)
    assert policy is not None, problems
    return policy


def hooks(config: dict[str, Any]) -> dict[str, Any]:
    return {w["name"]: w for w in config["webhooks"]}


def test_image_webhooks_beside_the_validating_policies_ones() -> None:
    vp = make_policy(name="vp", validations=[{"expression": "true"}],
                     rules=[{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                             "resources": ["configmaps"]}])
    config = desired_webhook_configuration(
        [vp], variants=policy_variants, client_config=URL,
                                           images=[ivpol(), ivpol("soft", failurePolicy="Ignore")])
    assert config is not None
    h = hooks(config)
    assert set(h) == {"fail.validate.vpol.kyverno.io", "fail.images.validate.vpol.kyverno.io",
                      "ignore.images.validate.vpol.kyverno.io"}
    images = h["fail.images.validate.vpol.kyverno.io"]
    assert images["clientConfig"]["url"] == "https://127.0.0.1:9443" + webhook_path("Fail", images=True) == \
        "https://127.0.0.1:9443/images/validate/fail"
    resources = sorted(r for rule in images["rules"] for r in rule["resources"])
    # The policy on Pods and its autogen variants' kinds.
    assert resources == ["cronjobs", "daemonsets", "deployments", "jobs", "pods", "replicasets", "statefulsets"]


def test_only_images_still_make_a_configuration_and_mutating_webhooks_pin_digests() -> None:
    pinned, unpinned = ivpol("pinned"), ivpol("plain", validationConfigurations={"mutateDigest": False})
    assert desired_webhook_configuration(
        [], variants=policy_variants, client_config=URL) is None
    validating = desired_webhook_configuration(
        [], variants=policy_variants, client_config=URL, images=[pinned, unpinned])
    assert validating is not None and set(hooks(validating)) == {"fail.images.validate.vpol.kyverno.io"}
    mutating = desired_webhook_configuration(
        [], variants=policy_variants, client_config=URL, images=[pinned, unpinned], mutating=True)
    assert mutating is not None and mutating["kind"] == "MutatingWebhookConfiguration"
    assert set(hooks(mutating)) == {"fail.images.mutate.vpol.kyverno.io"}
    assert desired_webhook_configuration(
        [], variants=policy_variants, client_config=URL, images=[unpinned], mutating=True) is None


def test_a_namespaced_policy_is_confined_and_timeouts_are_the_policies() -> None:
    config = desired_webhook_configuration(
        [], variants=policy_variants, client_config=URL, images=[
        ivpol("team", namespace="team-a", webhookConfiguration={"timeoutSeconds": 7})])
    assert config is not None
    [hook] = config["webhooks"]
    assert hook["timeoutSeconds"] == 7
    assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]} in \
        hook["namespaceSelector"]["matchExpressions"]
    assert hook["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "team-a"}
    assert all(rule["scope"] == "Namespaced" for rule in hook["rules"])


def test_coverage_keys_do_not_collide_with_a_validating_policy_of_the_same_name() -> None:
    vp = make_policy(name="images", validations=[{"expression": "true"}])
    annotation = coverage_annotation([vp], [ivpol("images")])
    data = json.loads(next(iter(annotation.values())))
    assert set(data) == {"images", IMAGE_PREFIX + "images"}
    assert covered({"metadata": {"annotations": annotation}}) == data

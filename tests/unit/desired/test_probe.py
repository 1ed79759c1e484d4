"""The enforcement probe objects (vpol.desired.probe): what they match, and how answers are recognised.

Whether the API server really answers them is shown end to end in tests/e2e/test_ready_enforced.py.
"""

from __future__ import annotations

import copy

from vpol.desired.probe import (
    MAP_PROBE_LABEL,
    SENTINEL,
    WEBHOOK_PROBE_LABEL,
    configuration_epoch,
    map_answered,
    map_probe_name,
    probe_webhook_name,
    probed_epoch,
    sentinel_map,
    sentinel_vap,
    vap_answered,
    vap_probe_name,
    webhook_answered,
    webhook_probe_answer,
    with_probe,
)

CONFIG = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "vpol-validating", "annotations": {"vpol.kyverno.io/policies": '{"a":1}'}},
    "webhooks": [{"name": "fail.validate.vpol.kyverno.io", "rules": [{"resources": ["pods"]}]}],
}
CLIENT = {"url": "https://127.0.0.1:9443/probe", "caBundle": "Q0E="}


def _rules(obj: dict) -> list[dict]:
    spec = obj["spec"]
    return (spec.get("matchConstraints") or spec.get("matchResources"))["resourceRules"]


def test_sentinels_match_only_the_probe_configmap_of_their_epoch() -> None:
    vap, binding = sentinel_vap("vpol-system", "e1")
    assert vap["metadata"]["name"] == SENTINEL and binding["spec"]["policyName"] == SENTINEL
    for obj in (vap, binding):
        (rule,) = _rules(obj)
        assert rule["resources"] == ["configmaps"] and rule["operations"] == ["CREATE"]
        assert rule["resourceNames"] == [vap_probe_name("e1")]
        selector = (obj["spec"].get("matchConstraints") or obj["spec"]["matchResources"])["namespaceSelector"]
        assert selector == {"matchLabels": {"kubernetes.io/metadata.name": "vpol-system"}}
    assert binding["spec"]["validationActions"] == ["Deny"]
    # A new epoch changes both objects (so both informers must have caught up for the probe to be answered).
    vap2, binding2 = sentinel_vap("vpol-system", "e2")
    assert vap2 != vap and binding2 != binding

    mp, mbinding = sentinel_map("vpol-system", "e1", "admissionregistration.k8s.io/v1")
    assert mp["kind"] == "MutatingAdmissionPolicy" and mbinding["kind"] == "MutatingAdmissionPolicyBinding"
    assert _rules(mp)[0]["resourceNames"] == [map_probe_name("e1")] == _rules(mbinding)[0]["resourceNames"]
    assert MAP_PROBE_LABEL in mp["spec"]["mutations"][0]["applyConfiguration"]["expression"]
    assert map_probe_name("e1") != vap_probe_name("e1")


def test_answers_are_recognised_only_for_their_epoch() -> None:
    assert vap_answered(f"admission webhook denied: ValidatingAdmissionPolicy '{SENTINEL}' with binding "
                        f"'{SENTINEL}-binding' denied request: vpol enforcement probe")
    assert not vap_answered("ValidatingAdmissionPolicy 'other' denied request: no")
    assert map_answered({"metadata": {"labels": {MAP_PROBE_LABEL: "e1"}}}, "e1")
    assert not map_answered({"metadata": {"labels": {MAP_PROBE_LABEL: "e0"}}}, "e1")
    assert not map_answered({"metadata": {}}, "e1")


def test_configuration_epoch_covers_everything_but_the_probe() -> None:
    config = with_probe(copy.deepcopy(CONFIG), CLIENT, "vpol-system", mutating=False)
    epoch = probed_epoch(config)
    assert epoch == configuration_epoch(CONFIG) == configuration_epoch(config)
    probe = config["webhooks"][-1]
    assert probe["name"] == probe_webhook_name(False) and probe["failurePolicy"] == "Ignore"
    assert probe["objectSelector"] == {"matchLabels": {WEBHOOK_PROBE_LABEL: epoch}}
    assert probe["clientConfig"] == CLIENT
    # Coverage (the annotation) and rules both change the epoch.
    changed = copy.deepcopy(CONFIG)
    changed["metadata"]["annotations"]["vpol.kyverno.io/policies"] = '{"a":2}'
    assert configuration_epoch(changed) != epoch
    changed = copy.deepcopy(CONFIG)
    changed["webhooks"][0]["rules"][0]["resources"] = ["pods", "deployments"]
    assert configuration_epoch(changed) != epoch
    assert probed_epoch(CONFIG) == "" and probed_epoch(None) == ""
    mutating = with_probe(copy.deepcopy(CONFIG), CLIENT, "vpol-system", mutating=True)
    assert mutating["webhooks"][-1]["name"] == probe_webhook_name(True)
    assert mutating["webhooks"][-1]["reinvocationPolicy"] == "Never"


def test_the_servers_answer_names_the_epoch_it_was_asked_with() -> None:
    request = {"uid": "u1", "object": {"metadata": {"labels": {WEBHOOK_PROBE_LABEL: "abc"}}}}
    answer = webhook_probe_answer(request)
    assert answer["uid"] == "u1" and answer["allowed"] is False
    assert webhook_answered(f'admission webhook "probe.validate.vpol.kyverno.io" denied the request: '
                            f'{answer["status"]["message"]}', "abc")
    assert not webhook_answered(answer["status"]["message"], "abd")


def test_a_refusal_by_another_policy_or_webhook_is_told_from_the_probes_own() -> None:
    from vpol.desired.probe import refused_by_another

    vap = ('configmaps "vpol-probe-v-1" is forbidden: ValidatingAdmissionPolicy \'require-team\' with binding '
           "'require-team-binding' denied request: a team label is required")
    assert refused_by_another(vap) == "require-team"
    map_error = "policy 'mpol-x' with binding 'mpol-x-binding' denied request: error applying patch: ..."
    assert refused_by_another(map_error) == "mpol-x"
    webhook = 'admission webhook "validate.kyverno.svc-fail" denied the request: Policy x failed: y'
    assert refused_by_another(webhook) == "validate.kyverno.svc-fail"
    # The probes' own answers, and what is no refusal at all.
    ours = ('configmaps "vpol-probe-v-1" is forbidden: ValidatingAdmissionPolicy \'vpol-enforcement-probe\' with '
            "binding 'vpol-enforcement-probe-binding' denied request: vpol enforcement probe")
    assert refused_by_another(ours) == ""
    assert refused_by_another('admission webhook "probe.validate.vpol.kyverno.io" denied the request: '
                              "vpol webhook probe 1a") == ""
    assert refused_by_another('configmaps is forbidden: User "system:serviceaccount:vpol-system:vpol" cannot '
                              'create resource "configmaps"') == ""

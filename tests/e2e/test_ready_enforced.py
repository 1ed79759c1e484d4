"""Ready means enforced: a request made at once after `kubectl wait --for=condition=Ready` is decided by the policy.

The API server loads generated VAPs/MAPs, their bindings and webhook
configurations asynchronously (informers, a one-second policy refresh), so a
policy whose objects merely exist may not be enforced yet. vpol writes
``AdmissionEnforced=True`` (and so ``Ready``) only after an enforcement probe
was answered (vpol.desired.probe). Here 20 policies are applied one after
another, each followed, with no sleep and no retry, by a request it must deny
or mutate, through all four routes: native VAP, vpol's validating webhook,
native MAP and vpol's mutating webhook. Each policy keys on its own marker, so
an earlier policy never answers for a later one.
"""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_operator import CM_RULE
from tests.e2e.vpol_fixtures import Policies, mutating_policies, operator, policies, vpol_installed, wait_for  # noqa: F401

POLICY_COUNT = 20
CM_CREATE = {**CM_RULE, "operations": ["CREATE"]}


def validating_spec(i: int, webhook: bool) -> dict[str, Any]:
    key = f"bad-{i}"
    # sha256 is a Kyverno library the API server lacks: that policy can only be enforced by vpol's webhook.
    extra = " || sha256('x') == ''" if webhook else ""
    return {"validationActions": ["Deny"], "matchConstraints": {"resourceRules": [CM_CREATE]},
            "validations": [{"expression": f"!has(object.data) || !('{key}' in object.data){extra}",
                             "message": f"policy {i} denies {key}"}]}


def mutating_spec(i: int, webhook: bool) -> dict[str, Any]:
    value = '"p" + string(size(sha256("x")))' if webhook else '"yes"'
    expression = f'Object{{metadata: Object.metadata{{labels: {{"ready-{i}": {value}}}}}}}'
    return {"matchConstraints": {"resourceRules": [CM_CREATE]}, "autogen": {"podControllers": {"controllers": []}},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}]}


def test_a_request_made_right_after_ready_is_enforced(operator: OperatorProcess, policies: Policies,
                                                      mutating_policies: Policies, cluster: Any,
                                                      namespace: str) -> None:
    routes = {"NativeVAP": 0, "Webhook": 0, "NativeMAP": 0, "WebhookMutating": 0}
    for i in range(POLICY_COUNT):
        route = i % 4
        mutating = route >= 2
        webhook = route % 2 == 1
        owner = mutating_policies if mutating else policies
        spec = mutating_spec(i, webhook) if mutating else validating_spec(i, webhook)
        name = owner.create(f"ready{i}", spec)
        short = "mpol" if mutating else "vpol"
        cluster.kubectl("wait", "--for=condition=Ready", f"{short}/{name}", "--timeout=90s", timeout=120)
        # At once, no retry: the policy must decide this very request.
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"req-{i}", "namespace": namespace},
              "data": {f"bad-{i}": "x"}}
        proc = cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(cm), check=False)
        status = owner.get(name)["status"]
        enforced = next(c for c in status["conditions"] if c["type"] == "AdmissionEnforced")
        if mutating:
            assert proc.returncode == 0, proc.stderr
            labels = json.loads(proc.stdout)["metadata"].get("labels") or {}
            assert labels.get(f"ready-{i}") == ("p64" if webhook else "yes"), (i, enforced, labels)
            assert enforced["reason"] == ("Webhook" if webhook else "NativeMAP"), enforced
            routes["WebhookMutating" if webhook else "NativeMAP"] += 1
        else:
            assert proc.returncode != 0, f"policy {i} ({enforced['reason']}) was Ready but admitted the request"
            assert f"policy {i} denies bad-{i}" in proc.stderr, proc.stderr
            assert enforced["reason"] == ("Webhook" if webhook else "NativeVAP"), enforced
            routes["Webhook" if webhook else "NativeVAP"] += 1
    assert all(n == POLICY_COUNT // 4 for n in routes.values()), routes


def test_the_sentinel_is_rewritten_and_answers_only_its_probe(operator: OperatorProcess, policies: Policies,
                                                              cluster: Any, namespace: str) -> None:
    """The probe objects exist, match only ConfigMaps in vpol's namespace, and deny nothing else."""
    name = policies.create("sentinel", validating_spec(99, webhook=False))
    policies.wait_condition(name, "Ready", "True")
    sentinel = policies.vap("vpol-enforcement-probe")
    binding = policies.binding("vpol-enforcement-probe-binding")
    assert sentinel is not None and binding is not None
    rules = sentinel["spec"]["matchConstraints"]["resourceRules"]
    assert [r["resources"] for r in rules] == [["configmaps"]]
    probe = rules[0]["resourceNames"][0]
    assert binding["spec"]["matchResources"]["resourceRules"][0]["resourceNames"] == [probe]
    # The same name in the test's namespace is not probed: admitted.
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": probe, "namespace": namespace}}
    cluster.kubectl("create", "-f", "-", "--dry-run=server", input=json.dumps(cm))


def test_a_cluster_policy_that_denies_the_probes_does_not_keep_policies_from_ready(
        operator: OperatorProcess, policies: Policies, mutating_policies: Policies, cluster: Any,
        unique_name: Any) -> None:
    """A policy of the cluster's own (not vpol's) that denies every ConfigMap in vpol's namespace, as one requiring
    a label on all ConfigMaps would: the API server reports its refusal first, hiding the sentinels' and the probe
    webhooks' answers. vpol then waits the API server's refresh interval instead of proving, so its policies still
    become Ready, on all four routes, and enforce."""
    admission = policies.admission
    name = unique_name("deny-cm")
    match = {"resourceRules": [CM_CREATE], "namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": "vpol-system"}}}
    admission.create_validating_admission_policy({"metadata": {"name": name}, "spec": {
        "failurePolicy": "Fail", "matchConstraints": match,
        "validations": [{"expression": "false", "message": "no ConfigMaps here"}]}})
    admission.create_validating_admission_policy_binding({"metadata": {"name": name}, "spec": {
        "policyName": name, "validationActions": ["Deny"]}})
    try:
        probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "vpol-system"}}
        wait_for("the cluster policy enforced", lambda: "no ConfigMaps here" in cluster.kubectl(
            "create", "-f", "-", "--dry-run=server", input=json.dumps(probe), check=False).stderr, 30)
        for i, (owner, webhook) in enumerate([(policies, False), (policies, True), (mutating_policies, False),
                                              (mutating_policies, True)]):
            spec = mutating_spec(100 + i, webhook) if owner is mutating_policies else validating_spec(100 + i, webhook)
            created = owner.create(f"hidden{i}", spec)
            owner.wait_condition(created, "Ready", "True", timeout=60)
        assert "refused by" in operator.log() and name in operator.log()
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)

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
from tests.e2e.vpol_fixtures import Policies, mutating_policies, operator, policies, vpol_installed  # noqa: F401

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

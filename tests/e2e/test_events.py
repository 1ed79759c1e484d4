"""PolicyViolation Events on the real API server: for requests vpol's webhook denies or audits, and for
background results (the operator runs as its ServiceAccount, which may create events)."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_operator import CM_RULE, create_cm
from tests.e2e.vpol_fixtures import Policies, operator, policies, vpol_installed, wait_for  # noqa: F401

# sha256 is Kyverno's: vpol's webhook enforces these policies (the API server cannot), so vpol sees the requests.
NEEDS_OWNER = "has(object.data) && 'owner' in object.data && sha256(object.data.owner) != ''"


def events_about(cluster: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    listed = client.EventsV1Api(cluster.api_client).list_namespaced_event(namespace)
    out = []
    for item in cluster.api_client.sanitize_for_serialization(listed)["items"]:
        if (item.get("regarding") or {}).get("name") == name and item.get("reason") == "PolicyViolation":
            out.append(item)
    return out


def policy_spec(actions: list[str], background: bool) -> dict[str, Any]:
    return {"validationActions": actions, "matchConstraints": {"resourceRules": [CM_RULE]},
            "evaluation": {"background": {"enabled": background}},
            "validations": [{"expression": NEEDS_OWNER, "message": "an owner is required"}]}


def test_a_denied_request_makes_an_event_on_the_policy(operator: OperatorProcess, policies: Policies, cluster: Any,
                                                       namespace: str) -> None:
    name = policies.create("deny", policy_spec(["Deny"], background=False))
    policies.wait_condition(name, "Ready", "True")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ownerless", "namespace": namespace}}
    proc = cluster.kubectl("create", "-f", "-", input=json.dumps(cm), check=False)
    assert proc.returncode != 0 and "an owner is required" in proc.stderr, proc.stderr
    found = wait_for("the policy's event", lambda: events_about(cluster, "default", name), 30)
    (event,) = found
    assert event["note"] == f"ConfigMap {namespace}/ownerless: fail (blocked); an owner is required"
    assert event["action"] == "Resource Blocked" and event["type"] == "Warning"
    assert event["reportingController"] == "vpol-admission"
    assert event["regarding"]["kind"] == "ValidatingPolicy" and event["regarding"]["uid"]
    assert event["related"]["kind"] == "ConfigMap" and event["related"]["name"] == "ownerless"
    # The denied object was never created: no event on it.
    assert not events_about(cluster, namespace, "ownerless")
    # Denied again: the same event is not sent twice.
    cluster.kubectl("create", "-f", "-", input=json.dumps(cm), check=False)
    name_in_other = {**cm, "metadata": {**cm["metadata"], "name": "ownerless-2"}}
    cluster.kubectl("create", "-f", "-", input=json.dumps(name_in_other), check=False)
    wait_for("the second object's event", lambda: len(events_about(cluster, "default", name)) == 2, 30)
    assert len(events_about(cluster, "default", name)) == 2


def test_audited_and_background_failures_make_events_on_both(operator: OperatorProcess, policies: Policies,
                                                             cluster: Any, namespace: str) -> None:
    create_cm(cluster, namespace, "existing", {"k": "v"})
    name = policies.create("audit", policy_spec(["Audit"], background=True))
    policies.wait_condition(name, "Ready", "True")
    # Background scan: the existing object's failure, on the resource and on the policy.
    on_resource = wait_for("the background event on the ConfigMap",
                           lambda: events_about(cluster, namespace, "existing"), 60)
    assert on_resource[0]["note"] == f"policy {name}/ fail: an owner is required"
    assert on_resource[0]["reportingController"] == "vpol-scan" and on_resource[0]["regarding"]["uid"]

    def policy_events() -> list[dict[str, Any]]:
        return [e for e in events_about(cluster, "default", name) if e["related"]["name"] == "existing"]

    (on_policy,) = wait_for("the background event on the policy", policy_events, 30)
    assert on_policy["note"] == f"ConfigMap {namespace}/existing: fail; an owner is required"
    assert on_policy["action"] == "Resource Passed"
    # Admission, audited (not denied): events on the policy and on the new object.
    create_cm(cluster, namespace, "audited", {"k": "v"})
    audited = wait_for("the admission event on the new ConfigMap",
                       lambda: [e for e in events_about(cluster, namespace, "audited")
                                if e["reportingController"] == "vpol-admission"], 30)
    assert audited[0]["note"] == f"policy {name}/ fail: an owner is required"

"""A PolicyException's ``spec.expiresAt``: in a cluster an expired exception exempts nothing (Kyverno leaves expired
exceptions out when it lists them, for its engine and its generated objects), and vpol stops applying one when it
expires, on every route: the generated VAP loses its matchCondition, vpol's webhook and background scans stop
exempting. An exception that has already expired is never applied.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from kubernetes import client

from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_operator import CM_RULE, create_cm, expect_denied
from tests.e2e.vpol_fixtures import Policies, operator, policies, vpol_installed, wait_for  # noqa: F401

#: Seconds an exception lives in the test (time for both policies to become Ready with it first).
LIFETIME = 25


def deny_spec(key: str, webhook: bool) -> dict[str, Any]:
    # sha256 is a Kyverno library the API server lacks: that policy can only be enforced by vpol's webhook.
    extra = " || sha256('x') == ''" if webhook else ""
    return {"validationActions": ["Deny"], "matchConstraints": {"resourceRules": [CM_RULE]},
            "validations": [{"expression": f"!has(object.data) || !('{key}' in object.data){extra}",
                             "message": f"no {key} key"}]}


def exception(name: str, namespace: str, policies: list[str], expires: datetime.datetime) -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"expiresAt": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "policyRefs": [{"name": p, "kind": "ValidatingPolicy"} for p in policies],
                     "matchConditions": [{"name": f"{name}-exempt",
                                          "expression": f"object.metadata.name.startsWith('{name}')"}]}}


def conditions(policies: Policies, vap: str) -> list[str]:
    obj = policies.vap(vap) or {}
    return [c["name"] for c in (obj.get("spec") or {}).get("matchConditions") or []]


def test_an_exception_stops_applying_when_it_expires(operator: OperatorProcess, policies: Policies, cluster: Any,
                                                     namespace: str) -> None:
    native = policies.create("native", deny_spec("native", webhook=False))
    webhook = policies.create("webhook", deny_spec("webhook", webhook=True))
    now = datetime.datetime.now(datetime.timezone.utc)
    api = client.CustomObjectsApi(cluster.api_client)
    for body in (exception("soon", namespace, [native, webhook], now + datetime.timedelta(seconds=LIFETIME)),
                 exception("past", namespace, [native, webhook], now - datetime.timedelta(seconds=1))):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
    for name in (native, webhook):
        policies.wait_condition(name, "Ready", "True")
    # An exception that has expired already is applied nowhere; the other one everywhere, until it expires.
    wait_for("the unexpired exception in the VAP", lambda: conditions(policies, f"vpol-{native}") == ["soon-exempt"],
             30)
    for key in ("native", "webhook"):
        assert create_cm(cluster, namespace, f"soon-{key}", {key: "x"}, dry_run=True)
        expect_denied(lambda: create_cm(cluster, namespace, f"past-{key}", {key: "x"}, dry_run=True), f"no {key} key")
    assert api.get_namespaced_custom_object("policies.kyverno.io", "v1", namespace, "policyexceptions", "soon")
    remaining = (now + datetime.timedelta(seconds=LIFETIME) - datetime.datetime.now(datetime.timezone.utc))
    assert remaining.total_seconds() > 0, "the policies took the exception's whole lifetime to become Ready"

    # Expired: the VAP loses the condition and denies; vpol's webhook denies too.
    wait_for("the expired exception out of the VAP", lambda: conditions(policies, f"vpol-{native}") == [],
             LIFETIME + 30)
    body = expect_denied(lambda: create_cm(cluster, namespace, "soon-a", {"native": "x"}, dry_run=True),
                         "no native key")
    assert f"vpol-{native}" in body
    body = expect_denied(lambda: create_cm(cluster, namespace, "soon-b", {"webhook": "x"}, dry_run=True),
                         f"Policy {webhook} failed: no webhook key")
    assert "fail.validate.vpol.kyverno.io" in body

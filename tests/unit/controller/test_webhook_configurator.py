"""The configuration writer compares only what it owns, and tells refused VAPs apart."""

from __future__ import annotations

from vpol.controller.admission.configurator import client_config, contains
from vpol.controller.admission.policies import vap_refused


def test_contains_ignores_server_defaults_but_sees_edits():
    desired = {"webhooks": [{"name": "w", "rules": [{"resources": ["pods"]}]}]}
    defaulted = {"webhooks": [{"name": "w", "rules": [{"resources": ["pods"], "scope": "*"}],
                               "matchPolicy": "Equivalent"}]}
    assert contains(defaulted, desired)
    assert not contains({"webhooks": [{"name": "w", "rules": []}]}, desired)
    assert not contains({"webhooks": [{"name": "w", "rules": [{"resources": ["pods", "x"]}]}]}, desired)
    assert not contains({"webhooks": defaulted["webhooks"] * 2}, desired)
    assert not contains({}, desired)


def test_client_config_by_url_or_service_carries_the_ca():
    by_url = client_config(url="https://127.0.0.1:9443", ca_pem=b"PEM")
    assert by_url == {"url": "https://127.0.0.1:9443", "caBundle": "UEVN"}
    svc = client_config(service={"namespace": "vpol-system", "name": "vpol-webhook", "port": 443}, ca_pem=b"PEM")
    assert svc["service"]["name"] == "vpol-webhook" and "url" not in svc


def test_vap_refused_only_for_the_current_generation():
    def body(generation, observed, reason="ApplyFailed"):
        return {"metadata": {"generation": generation}, "status": {"conditions": [
            {"type": "VAPGenerated", "status": "False", "reason": reason, "observedGeneration": observed}]}}
    assert vap_refused(body(2, 2))
    assert not vap_refused(body(3, 2))
    assert not vap_refused(body(2, 2, reason="NotEligible"))
    assert not vap_refused({"metadata": {"generation": 1}})


def test_a_status_write_does_not_change_the_webhook_policy_set():
    from tests.unit.policies import make_policy
    from vpol.controller.admission.policies import AdmissionPolicies

    changes = []
    admission = AdmissionPolicies(None, on_change=changes.append)  # type: ignore[arg-type]
    body = make_policy(name="p", validations=[{"expression": "sha256(object.metadata.name) != ''"}]).raw
    admission._on_policy("ADDED", body)
    assert len(changes) == 1 and "p" in admission.snapshot.policies
    admission._on_policy("MODIFIED", {**body, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert len(changes) == 1
    admission._on_policy("MODIFIED", {**body, "metadata": {**body["metadata"], "generation": 2}})
    assert len(changes) == 2
    admission._on_policy("DELETED", body)
    assert len(changes) == 3 and not admission.snapshot.policies

"""Desired policy status: conditions, readiness, stable lastTransitionTime, no-op detection."""

from __future__ import annotations

from vpol.desired.status import Findings, desired_status, status_changed


def conds(status):
    return {c["type"]: c for c in status["conditions"]}


def test_healthy_policy_is_ready_and_mirrors_conditions():
    s = desired_status(Findings(generation=3), None, now="2026-01-01T00:00:00Z")
    c = conds(s)
    assert s["conditionStatus"]["ready"] is True
    assert s["conditionStatus"]["conditions"] == s["conditions"]
    assert {k: v["status"] for k, v in c.items()} == {"Compiled": "True", "TypeChecked": "True",
                                                       "RBACPermissionsGranted": "True", "Ready": "True"}
    assert all(v["observedGeneration"] == 3 for v in c.values())


def test_compile_errors_block_readiness_type_warnings_do_not():
    s = desired_status(Findings(generation=1, compile_errors=["spec.validations[0].expression (1:5): boom"]), None)
    c = conds(s)
    assert c["Compiled"]["status"] == "False" and "spec.validations[0].expression (1:5)" in c["Compiled"]["message"]
    assert c["Ready"]["status"] == "False" and s["conditionStatus"]["ready"] is False
    s2 = desired_status(Findings(generation=1, type_warnings=[("spec.validations[0].expression", "w")]), None)
    assert conds(s2)["TypeChecked"]["status"] == "False" and conds(s2)["Ready"]["status"] == "True"
    assert s2["typeChecking"]["expressionWarnings"] == [{"fieldRef": "spec.validations[0].expression",
                                                         "warning": "w"}]


def test_missing_permissions_and_unenforced_admission_block_readiness():
    s = desired_status(Findings(generation=1, missing_permissions=["list apps/v1 deployments"]), None)
    assert "list apps/v1 deployments" in conds(s)["RBACPermissionsGranted"]["message"]
    assert conds(s)["Ready"]["status"] == "False"
    s = desired_status(Findings(generation=1, admission=(False, "WebhookDisabled", "not enforced"),
                                enforcement="None"), None)
    assert conds(s)["AdmissionEnforced"]["status"] == "False" and conds(s)["Ready"]["status"] == "False"
    assert "not enforced" in conds(s)["Ready"]["message"] or "AdmissionEnforced" in conds(s)["Ready"]["message"]
    assert s["enforcement"] == "None"


def test_vap_generation_failure_informs_but_the_webhook_path_keeps_the_policy_ready():
    s = desired_status(Findings(generation=1, vap=(False, "NotEligible", "skip generating: x"),
                                admission=(True, "Webhook", "enforced by vpol's admission webhook"),
                                enforcement="Webhook"), None)
    assert conds(s)["VAPGenerated"]["status"] == "False" and conds(s)["Ready"]["status"] == "True"
    assert conds(s)["AdmissionEnforced"]["reason"] == "Webhook"
    assert s["conditionStatus"]["message"] == "skip generating: x"
    assert s["enforcement"] == "Webhook"


def test_policies_outside_admission_have_no_admission_condition():
    s = desired_status(Findings(generation=1, admission=None, enforcement="NotApplicable"), None)
    assert "AdmissionEnforced" not in conds(s) and conds(s)["Ready"]["status"] == "True"
    assert s["enforcement"] == "NotApplicable"


def test_last_transition_time_changes_only_on_flip():
    first = desired_status(Findings(generation=1), None, now="2026-01-01T00:00:00Z")
    same = desired_status(Findings(generation=1), first, now="2026-02-02T00:00:00Z")
    assert not status_changed(first, same)
    broken = desired_status(Findings(generation=2, compile_errors=["x"]), first, now="2026-03-03T00:00:00Z")
    c = conds(broken)
    assert c["Compiled"]["lastTransitionTime"] == "2026-03-03T00:00:00Z"
    assert c["RBACPermissionsGranted"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert status_changed(first, broken)

"""Admission routes: native VAP, vpol's webhook, or nowhere; and the AdmissionEnforced condition they imply."""

from __future__ import annotations

import pytest

from tests.unit.policies import make_policy
from vpol.desired.enforcement import (
    GENERATION_ELIGIBLE,
    GENERATION_OPT_IN,
    NATIVE,
    NONE,
    NOT_APPLICABLE,
    PENDING,
    WEBHOOK,
    WebhookState,
)
from vpol.policies.validating.enforcement import admission_finding, route

PLAIN = [{"expression": "object.metadata.name != 'bad'"}]
KYVERNO_ONLY = [{"expression": "sha256(object.metadata.name) != ''"}]


def policy(validations=PLAIN, enabled=None, **spec):
    autogen = {} if enabled is None else {"autogen": {"validatingAdmissionPolicy": {"enabled": enabled}}}
    return make_policy(validations=validations, **autogen, **spec)


@pytest.mark.parametrize("mode,enabled,native", [
    (GENERATION_ELIGIBLE, None, True), (GENERATION_ELIGIBLE, True, True), (GENERATION_ELIGIBLE, False, False),
    (GENERATION_OPT_IN, None, False), (GENERATION_OPT_IN, True, True), (GENERATION_OPT_IN, False, False),
])
def test_generation_mode_and_explicit_choice(mode, enabled, native):
    way = route(policy(enabled=enabled), generation=mode)
    assert way.native is native
    assert way.webhook is not native  # whatever is not native, the webhook enforces
    assert not way.not_applicable


def test_kyverno_only_libraries_go_to_the_webhook_and_say_why():
    way = route(policy(KYVERNO_ONLY))
    assert way.native_wanted and not way.native and way.webhook
    assert "sha256" in way.ineligible


def test_json_mode_and_disabled_admission_are_not_applicable():
    json_policy = make_policy(validations=PLAIN, evaluation={"mode": "JSON"}, matchConstraints=None)
    for p in (json_policy, policy(evaluation={"admission": {"enabled": False}})):
        way = route(p)
        assert not way.webhook and not way.native and way.not_applicable
        assert admission_finding(way) == (None, NOT_APPLICABLE)


def test_a_refused_vap_hands_the_policy_to_the_webhook():
    way = route(policy(), vap_failed=True)
    assert way.native and way.webhook


def test_a_policy_that_does_not_compile_is_enforced_nowhere():
    way = route(policy(), compiles=False)
    assert not way.native and not way.webhook
    (ok, reason, _msg), path = admission_finding(way)
    assert (ok, reason, path) == (False, "CompilationFailed", NONE)


def test_findings_name_the_path():
    native = route(policy())
    (ok, reason, msg), path = admission_finding(native, native_objects=("vpol-p", "vpol-p-autogen-defaults"))
    assert (ok, reason, path) == (True, NATIVE, NATIVE) and "vpol-p-autogen-defaults" in msg

    hook = route(policy(KYVERNO_ONLY))
    state = WebhookState(covered=True, configuration="vpol-validating")
    (ok, reason, msg), path = admission_finding(hook, webhook=state)
    assert (ok, reason, path) == (True, WEBHOOK, WEBHOOK) and "vpol-validating" in msg and "sha256" in msg

    (ok, reason, _), path = admission_finding(hook, webhook=WebhookState(covered=False), generation=4)
    assert (ok, reason, path) == (False, "Pending", PENDING)
    (ok, reason, msg), path = admission_finding(hook, webhook=WebhookState(covered=True, pending="the probe"),
                                                generation=4)
    assert (ok, reason, path) == (False, "Pending", PENDING) and "the probe" in msg and "generation 4" in msg
    (ok, reason, msg), path = admission_finding(native, native_objects=("vpol-p",), native_pending="the probe")
    assert (ok, reason, path) == (False, "Pending", PENDING) and "vpol-p" in msg and "the probe" in msg
    (ok, reason, msg), path = admission_finding(hook, webhook=WebhookState(enabled=False))
    assert (ok, reason, path) == (False, "WebhookDisabled", NONE) and "--webhook=off" in msg
    (ok, reason, msg), path = admission_finding(hook, webhook=WebhookState(error="HTTP 403: forbidden"))
    assert (ok, reason, path) == (False, "WebhookNotConfigured", NONE) and "forbidden" in msg


def test_native_generation_that_failed_is_reported_through_the_webhook_path():
    way = route(policy(), vap_failed=True)
    (ok, reason, msg), path = admission_finding(way, native_error="the API server rejected it",
                                                webhook=WebhookState(covered=True))
    assert (ok, reason, path) == (True, WEBHOOK, WEBHOOK) and "rejected" in msg

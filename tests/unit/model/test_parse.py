"""The policy parser: defaults, and a problem with path and position for every bad field."""

from __future__ import annotations

import textwrap
from typing import Any

from vpol.model.documents import parse_documents
from vpol.model.parse import parse_exception
from vpol.model.policy import DEFAULT_POD_CONTROLLERS
from vpol.policies.validating.model import parse_policy

POLICY = textwrap.dedent("""\
    apiVersion: policies.kyverno.io/v1
    kind: ValidatingPolicy
    metadata:
      name: p
    spec:
      matchConstraints:
        resourceRules:
        - apiGroups: [""]
          apiVersions: [v1]
          operations: [CREATE]
          resources: [pods]
      validations:
      - expression: "true"
    """)


def parse(text: str):
    doc = parse_documents(text, "p.yaml")[0]
    return parse_policy(doc.data, doc)


def test_defaults_are_kyvernos():
    policy, problems = parse(POLICY)
    assert problems == []
    s = policy.spec
    assert s.validation_actions == ("Deny",)
    assert s.failure_policy == "Fail"
    assert s.evaluation.admission_enabled and s.evaluation.background_enabled
    assert s.evaluation.mode == "Kubernetes"
    assert s.autogen.vap_enabled is None  # unset: the operator's --vap-generation mode decides
    assert s.autogen.controllers() == DEFAULT_POD_CONTROLLERS


def test_empty_controller_list_means_none():
    policy, _ = parse(POLICY + "  autogen:\n    podControllers:\n      controllers: []\n")
    assert policy.spec.autogen.controllers() == ()


def test_deny_with_warn_is_rejected_with_path_and_position():
    policy, problems = parse(POLICY + "  validationActions: [Deny, Warn]\n")
    assert policy is None
    [p] = [p for p in problems if p.severity == "error"]
    assert p.path == "spec.validationActions"
    assert p.file == "p.yaml"
    assert p.position is not None and p.position.line == 14


def test_missing_resource_rules_in_kubernetes_mode():
    text = POLICY.replace("  matchConstraints:\n    resourceRules:\n    - apiGroups: [\"\"]\n"
                          "      apiVersions: [v1]\n      operations: [CREATE]\n      resources: [pods]\n", "")
    policy, problems = parse(text)
    assert policy is None
    assert any("at least one resource rule" in p.message for p in problems)


def test_json_mode_needs_no_match_constraints():
    text = POLICY.replace("  matchConstraints:\n    resourceRules:\n    - apiGroups: [\"\"]\n"
                          "      apiVersions: [v1]\n      operations: [CREATE]\n      resources: [pods]\n",
                          "  evaluation:\n    mode: JSON\n")
    policy, problems = parse(text)
    assert policy is not None and policy.json_mode


def test_wrong_types_and_duplicates_are_all_reported():
    text = POLICY + (
        "  failurePolicy: Sometimes\n"
        "  variables:\n"
        "  - {name: a, expression: '1'}\n"
        "  - {name: a, expression: '2'}\n"
        "  - {name: not-an-ident, expression: '3'}\n"
        "  matchConditions: nope\n"
    )
    policy, problems = parse(text)
    assert policy is None
    paths = {p.path for p in problems if p.severity == "error"}
    assert "spec.failurePolicy" in paths
    assert "spec.variables[1].name" in paths
    assert "spec.variables[2].name" in paths
    assert "spec.matchConditions" in paths


def test_unknown_field_is_a_warning_not_an_error():
    policy, problems = parse(POLICY + "  bogus: 1\n")
    assert policy is not None
    assert [(p.severity, p.path) for p in problems] == [("warning", "spec.bogus")]


def test_message_with_line_break_is_rejected():
    text = POLICY.replace('  - expression: "true"\n', '  - expression: "true"\n    message: "a\\nb"\n')
    policy, problems = parse(text)
    assert policy is None
    assert any(p.path == "spec.validations[0].message" for p in problems)


def test_wrong_api_version_and_kind():
    policy, problems = parse(POLICY.replace("policies.kyverno.io/v1", "policies.kyverno.io/v9"))
    assert policy is None
    assert any(p.path == "apiVersion" for p in problems)


def test_exception_parses_refs_and_conditions():
    doc = parse_documents(textwrap.dedent("""\
        apiVersion: policies.kyverno.io/v1alpha1
        kind: PolicyException
        metadata: {name: e, namespace: ns}
        spec:
          policyRefs: [{name: p, kind: ValidatingPolicy}]
          matchConditions: [{name: c, expression: "true"}]
        """), "e.yaml")[0]
    exc, problems = parse_exception(doc.data, doc)
    assert problems == []
    assert exc.namespace == "ns" and exc.policy_refs[0].name == "p"
    assert exc.match_conditions[0].expression == "true"


def test_an_exceptions_expiry_is_read_and_an_expired_exception_is_left_out() -> None:
    from vpol.model.parse import parse_exception
    from vpol.model.policy import active_exceptions

    def exc(name: str, expires: str | None) -> Any:
        spec: dict[str, Any] = {"policyRefs": [{"name": "p", "kind": "ValidatingPolicy"}]}
        if expires is not None:
            spec["expiresAt"] = expires
        return parse_exception({"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
                                "metadata": {"name": name, "namespace": "ns"}, "spec": spec})

    soon, problems = exc("soon", "2026-12-01T00:00:00Z")
    import datetime

    utc = datetime.timezone.utc
    assert soon is not None and not problems and soon.expires_at == datetime.datetime(2026, 12, 1, tzinfo=utc).timestamp()
    offset, _ = exc("offset", "2026-12-01T01:00:00+01:00")
    assert offset is not None and offset.expires_at == soon.expires_at
    never, _ = exc("never", None)
    assert never is not None and never.expires_at is None
    for bad in ("tomorrow", "2026-12-01", "2026-12-01T00:00:00"):
        parsed, problems = exc("bad", bad)
        assert parsed is None and problems[0].path == "spec.expiresAt", (bad, problems)
    # Expired after the moment, as Kyverno's IsExpired (now after expiresAt); the next expiry is told.
    active, upcoming = active_exceptions([soon, never], soon.expires_at - 1)
    assert active == [soon, never] and upcoming == soon.expires_at
    assert active_exceptions([soon, never], soon.expires_at) == ([soon, never], soon.expires_at)
    assert active_exceptions([soon, never], soon.expires_at + 1) == ([never], None)

"""Apply-time validation of vpol's kinds (vpol.policies.policy_validation, vpol.desired.policy_webhook).

The same problems as `vpol check` (its unit tests cover the checks themselves); here: which are refusals and
which are warnings, and the admission answer built from them. The real API server path is
tests/e2e/test_policy_validation.py.
"""

from __future__ import annotations

from typing import Any

from vpol.desired.policy_webhook import (
    POLICY_VALIDATION_CONFIGURATION,
    POLICY_VALIDATION_PATH,
    policy_validation_configuration,
    policy_validation_response,
)
from vpol.policies.policy_validation import is_validated_document, validate_document
from vpol.policies.registry import PLURALS

RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}


def vpol(spec: dict[str, Any], kind: str = "ValidatingPolicy", **md: Any) -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": kind, "metadata": {"name": "p", **md}, "spec": spec}


def test_compile_errors_are_refusals_with_path_and_position() -> None:
    verdict = validate_document(vpol({"matchConstraints": {"resourceRules": [RULE]},
                                      "validations": [{"expression": "true", "message": "ok"},
                                                      {"expression": "object.spec.containers.all(c, c.x ==",
                                                       "message": "bad"}]}))
    assert verdict.ref == "ValidatingPolicy/p"
    (error,) = verdict.errors
    assert error.path == "spec.validations[1].expression" and error.expression_position is not None
    assert "Syntax error" in error.render() and "^" in error.render()


def test_kyverno_rules_are_refusals() -> None:
    both = validate_document(vpol({"validationActions": ["Deny", "Warn"], "matchConstraints": {"resourceRules": [RULE]},
                                   "validations": [{"expression": "true"}]}))
    assert [e.path for e in both.errors] == ["spec.validationActions"]
    no_rules = validate_document(vpol({"matchConstraints": {}, "validations": [{"expression": "true"}]}))
    assert "spec.matchConstraints" in [e.path for e in no_rules.errors]


def test_type_findings_are_warnings_even_a_wrong_result() -> None:
    verdict = validate_document(vpol({"matchConstraints": {"resourceRules": [RULE]},
                                      "validations": [{"expression": "object.spec.nosuch == 1"}]}))
    assert not verdict.errors
    assert [w.path for w in verdict.warnings] == ["spec.validations[0].expression"]
    # Setting an atomic list cannot apply to any Pod: `vpol check` says error, apply-time validation warns.
    atomic = validate_document(vpol({"matchConstraints": {"resourceRules": [RULE]},
                                     "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                                         "expression": "Object{spec: Object.spec{tolerations: []}}"}}]},
                                    kind="MutatingPolicy"))
    assert not atomic.errors and any("atomic" in w.message for w in atomic.warnings), atomic.problems


def test_mutating_policies_and_exceptions_are_validated() -> None:
    mpol = validate_document(vpol({"matchConstraints": {"resourceRules": [RULE]},
                                   "mutations": [{"patchType": "ApplyConfiguration",
                                                  "applyConfiguration": {"expression": "Object{spec: nosuch}"}}]},
                                  kind="MutatingPolicy"))
    assert [e.path for e in mpol.errors] == ["spec.mutations[0].applyConfiguration.expression"]
    assert "undeclared reference to 'nosuch'" in mpol.errors[0].message
    exc = {"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
           "metadata": {"name": "e", "namespace": "ns"},
           "spec": {"policyRefs": [{"name": "p", "kind": "ValidatingPolicy"}],
                    "matchConditions": [{"name": "x", "expression": "object.metadata.name =="}]}}
    verdict = validate_document(exc)
    assert verdict.ref == "PolicyException/ns/e" and [e.path for e in verdict.errors] == \
        ["spec.matchConditions[0].expression"]
    assert is_validated_document(exc) and not is_validated_document({"apiVersion": "v1", "kind": "Pod"})


def test_the_answer_refuses_with_every_error_and_carries_warnings() -> None:
    refused = policy_validation_response("u", "ValidatingPolicy/p", ["error: a", "error: b"], ["warning: w"])
    assert refused["allowed"] is False and refused["status"]["code"] == 400
    assert refused["status"]["message"] == "ValidatingPolicy/p is invalid (2 errors):\nerror: a\nerror: b"
    assert refused["warnings"] == ["warning: w"]
    admitted = policy_validation_response("u", "ValidatingPolicy/p", [], ["w" * 5000])
    assert admitted["allowed"] is True and "status" not in admitted and len(admitted["warnings"][0]) == 1000
    # The API server drops warnings that are not one line: excerpts are left out of them.
    excerpted = policy_validation_response("u", "ValidatingPolicy/p", [], [
        "warning: spec.validations[0].expression: ERROR: <input>:1:7: undefined field 'spec'\n | object.spec\n"
        " | ......^"])
    assert excerpted["warnings"] == ["warning: spec.validations[0].expression: ERROR: <input>:1:7: undefined "
                                     "field 'spec'"]


def test_the_configuration_sends_only_vpols_kinds_and_never_blocks() -> None:
    config = policy_validation_configuration({"url": "https://127.0.0.1:9443"}, PLURALS, timeout_seconds=7)
    assert config["metadata"]["name"] == POLICY_VALIDATION_CONFIGURATION
    (webhook,) = config["webhooks"]
    assert webhook["failurePolicy"] == "Ignore" and webhook["timeoutSeconds"] == 7
    assert webhook["clientConfig"]["url"] == "https://127.0.0.1:9443" + POLICY_VALIDATION_PATH
    resources = {(r["apiGroups"][0], res) for r in webhook["rules"] for res in r["resources"]}
    assert ("policies.kyverno.io", "validatingpolicies") in resources
    assert ("kyverno.io", "globalcontextentries") in resources
    assert all("/" not in res for _g, res in resources)  # never the status subresource
    assert all(r["operations"] == ["CREATE", "UPDATE"] for r in webhook["rules"])


def test_namespaced_policies_may_not_use_global_context_or_http() -> None:
    exprs = ["globalContext.Get('e', '') != null", "http.Get('https://x').ok == true"]
    for kind in ("NamespacedValidatingPolicy", "NamespacedMutatingPolicy"):
        spec: dict[str, Any] = {"matchConstraints": {"resourceRules": [RULE]},
                                "variables": [{"name": f"v{i}", "expression": e} for i, e in enumerate(exprs)]}
        if kind == "NamespacedMutatingPolicy":
            spec["mutations"] = [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": "Object{metadata: Object.metadata{labels: {'a': 'b'}}}"}}]
        else:
            spec["validations"] = [{"expression": "true"}]
        verdict = validate_document(vpol(spec, kind=kind, namespace="team"))
        assert [(e.path, e.message) for e in verdict.errors] == [
            ("spec.variables[0].expression", "globalContext.* is not allowed in namespaced policies"),
            ("spec.variables[1].expression",
             "http.* is not allowed in namespaced policies; set --allowHTTPInNamespacedPolicies to enable")]
        assert all(e.expression_position is not None for e in verdict.errors)
    # Names in strings or after a dot do not count, and cluster-wide policies may use both.
    fine = validate_document(vpol({"matchConstraints": {"resourceRules": [RULE]},
                                   "validations": [{"expression": "object.metadata.name != 'http.x' && "
                                                                  "object.?http.orValue('') == ''"}]},
                                  kind="NamespacedValidatingPolicy", namespace="team"))
    assert not fine.errors, fine.errors
    cluster = validate_document(vpol({"matchConstraints": {"resourceRules": [RULE]},
                                      "validations": [{"expression": exprs[0]}]}))
    assert not cluster.errors, cluster.errors


def test_global_context_entries_are_validated_with_kyvernos_rules() -> None:
    both = {"apiVersion": "kyverno.io/v2", "kind": "GlobalContextEntry", "metadata": {"name": "e"},
            "spec": {"kubernetesResource": {"version": "v1", "resource": "configmaps"},
                     "apiCall": {"urlPath": "/api/v1/configmaps"}}}
    assert is_validated_document(both)
    verdict = validate_document(both)
    assert verdict.ref == "GlobalContextEntry/e" and verdict.errors, verdict.problems
    fine = {**both, "spec": {"kubernetesResource": {"version": "v1", "resource": "configmaps"}}}
    assert not validate_document(fine).errors


def test_the_webhooks_validation_fills_the_memos_the_operator_reads_next(monkeypatch) -> None:
    """Apply-time validation in the operator (cached=True) answers as the uncached path does, and leaves the spec's
    compile verdict and type warnings in the memos its watch, scanner and reconciler then read: the policy is
    compiled and type-checked once, not again by each of them."""
    from vpol.cel import typecheck
    from vpol.policies.validating import compile as compiler
    from vpol.cel.memo import BoundedMemo
    from vpol.model.discovery import builtin
    from vpol.policies.validating.model import parse_policy

    monkeypatch.setattr(compiler, "_VERDICTS", BoundedMemo(compiler.VERDICTS_KEPT))
    monkeypatch.setattr(typecheck, "_CHECKED", [(None, BoundedMemo(typecheck.CHECKED_KEPT))])
    calls: list[str] = []
    real_compile, real_check = compiler.compile_policy, typecheck.check_policy
    monkeypatch.setattr(compiler, "compile_policy", lambda p, **kw: (calls.append("compile"), real_compile(p, **kw))[1])
    monkeypatch.setattr(typecheck, "check_policy", lambda p, d=None, **kw: (calls.append("check"), real_check(p, d, **kw))[1])
    doc = vpol({"matchConstraints": {"resourceRules": [RULE]},
                "validations": [{"expression": "object.spec.nosuch == 1"}, {"expression": "object.x =="}]})
    discovery = builtin()
    uncached = validate_document(doc, discovery)
    calls.clear()
    cached = validate_document(doc, discovery, cached=True)
    assert [p.render() for p in cached.problems] == [p.render() for p in uncached.problems]
    assert [e.path for e in cached.errors] == ["spec.validations[1].expression"]
    assert [w.path for w in cached.warnings] == ["spec.validations[0].expression"]
    assert calls == ["compile", "check"]
    policy, _ = parse_policy(doc)
    assert policy is not None
    assert compiler.compile_verdict(policy).errors == tuple(cached.errors)
    assert typecheck.check_policy_cached(policy, discovery) and calls == ["compile", "check"]

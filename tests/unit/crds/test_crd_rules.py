"""The CRDs' x-kubernetes-validations: every rule compiles, and each does what its message says.

Rules are compiled with cel-expr-python with ``self``/``oldSelf`` as dyn and
evaluated on plain data, which is how the API server sees them (it types
``self`` from the schema; the rules use nothing that depends on that).
"""

from __future__ import annotations

from typing import Any

import pytest
from cel_expr_python import cel

from .crdlib import _ENV, load_crd, node, polex_crd, rule_checker, version_schema, vpol_crd, walk  # noqa: F401

RESERVED = ["true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function",
            "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"]


@pytest.mark.parametrize("name", ["validatingpolicies.yaml", "policyexceptions.yaml"])
def test_every_rule_compiles_to_bool(name: str) -> None:
    crd = load_crd(name)
    count = 0
    for version in crd["spec"]["versions"]:
        for path, sub in walk(version["schema"]["openAPIV3Schema"]):
            for rule in sub.get("x-kubernetes-validations") or ():
                expr = _ENV.compile(rule["rule"])  # raises on any error
                assert expr.return_type() == cel.Type.BOOL, f"{path}: {rule['rule']}"
                count += 1
    assert count > 0


def test_deny_and_warn_together_is_rejected(vpol_crd: dict[str, Any]) -> None:
    ok = rule_checker(node(version_schema(vpol_crd), "spec.validationActions"))
    assert ok(["Deny"]) and ok(["Warn"]) and ok(["Audit", "Warn"]) and ok(["Deny", "Audit"]) and ok([])
    assert not ok(["Deny", "Warn"])
    assert not ok(["Warn", "Audit", "Deny"])


def test_kubernetes_mode_needs_a_resource_rule(vpol_crd: dict[str, Any]) -> None:
    spec = node(version_schema(vpol_crd), "spec")
    assert spec["x-kubernetes-validations"][0]["message"] == "a matchConstraints with at least one resource rule is required"
    ok = rule_checker(spec)
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    assert ok({"matchConstraints": {"resourceRules": [rule]}})
    assert ok({"evaluation": {"mode": "Kubernetes"}, "matchConstraints": {"resourceRules": [rule]}})
    assert not ok({})
    assert not ok({"matchConstraints": {}})
    assert not ok({"matchConstraints": {"resourceRules": []}})
    assert not ok({"evaluation": {"mode": "Kubernetes"}, "matchConstraints": {"excludeResourceRules": [rule]}})
    assert not ok({"evaluation": {"background": {"enabled": False}}})
    # JSON payloads have no Kubernetes resources to match
    assert ok({"evaluation": {"mode": "JSON"}})


def test_variable_names_are_cel_identifiers(vpol_crd: dict[str, Any]) -> None:
    name_node = node(version_schema(vpol_crd), "spec.variables[].name")
    ok = rule_checker(name_node)
    for good in ("x", "_x", "isPod", "a1_b2", "NS"):
        assert ok(good), good
    for bad in ("1x", "my-var", "a.b", "", "a b", "ünïcode", *RESERVED):
        assert not ok(bad), bad


def test_variable_names_are_unique(vpol_crd: dict[str, Any]) -> None:
    variables = node(version_schema(vpol_crd), "spec.variables")
    ok = rule_checker(variables)
    assert ok([]) and ok([{"name": "a", "expression": "1"}, {"name": "b", "expression": "2"}])
    assert not ok([{"name": "a", "expression": "1"}, {"name": "b", "expression": "2"}, {"name": "a", "expression": "3"}])
    assert variables["maxItems"] <= 256  # keeps the O(n^2) rule inside the API server's cost budget


def test_match_condition_names_are_qualified_names(vpol_crd: dict[str, Any], polex_crd: dict[str, Any]) -> None:
    for crd in (vpol_crd, polex_crd):
        spec = node(version_schema(crd), "spec")
        ok = rule_checker(node(spec, "matchConditions[].name"))
        for good in ("exclude-leases", "my.name", "MyName", "123-abc", "a", "example.com/MyName", "a" * 63,
                     "x" * 253 + "/" + "y" * 63):
            assert ok(good), good
        for bad in ("", "-a", "a-", "a b", "a/b/c", "Example.com/x", "/x", "a" * 64, "x" * 254 + "/y", "a_"):
            assert not ok(bad), bad
        # uniqueness is structural: a list keyed by name
        mc = node(spec, "matchConditions")
        assert mc["x-kubernetes-list-type"] == "map" and mc["x-kubernetes-list-map-keys"] == ["name"]
        assert mc["maxItems"] == 64


def test_audit_annotation_keys(vpol_crd: dict[str, Any]) -> None:
    spec = node(version_schema(vpol_crd), "spec")
    ok_key = rule_checker(node(spec, "auditAnnotations[].key"))
    for good in ("high-replica-count", "a", "A.b_c-1", "a" * 63):
        assert ok_key(good), good
    for bad in ("", "-a", "a.", "x/y", "a b", "a" * 64):
        assert not ok_key(bad), bad
    ok_list = rule_checker(node(spec, "auditAnnotations"))
    one = {"key": "a", "valueExpression": "'x'"}
    assert ok_list([one, {"key": "b", "valueExpression": "'y'"}])
    assert not ok_list([one, {"key": "a", "valueExpression": "'y'"}])
    assert node(spec, "auditAnnotations")["maxItems"] == 20


def test_validation_messages_have_no_line_breaks(vpol_crd: dict[str, Any]) -> None:
    ok = rule_checker(node(version_schema(vpol_crd), "spec.validations[].message"))
    assert ok("replicas must be at most 5") and ok("")
    assert not ok("first line\nsecond line")
    assert not ok("carriage\rreturn")
    assert not ok("trailing newline\n")


def test_label_selector_keys_are_qualified_names(vpol_crd: dict[str, Any]) -> None:
    key = node(version_schema(vpol_crd), "spec.matchConstraints.objectSelector.matchExpressions[].key")
    ok = rule_checker(key)
    assert ok("app.kubernetes.io/name") and ok("team")
    assert not ok("bad key") and not ok("trailing-")

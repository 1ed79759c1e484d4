"""Compiling and type-checking mutations: typed Object literals, JSONPatch lists, atomic fields, positions."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from vpol.cel.compat import CHECKED, rewrite
from vpol.cel.compat.syntax import literals
from vpol.cel.typecheck import check_policy
from vpol.policies.mutating.compile import compile_mutating_policy
from vpol.policies.mutating.model import parse_mutating_policy


def _policy(*mutations: tuple[str, str], resources: str = "pods", group: str = "") -> Any:
    doc = {
        "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "MutatingPolicy", "metadata": {"name": "p"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [group], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": [resources]}]},
            "mutations": [{"patchType": kind, ("applyConfiguration" if kind == "ApplyConfiguration" else "jsonPatch"):
                           {"expression": expr}} for kind, expr in mutations],
        },
    }
    policy, problems = parse_mutating_policy(doc)
    assert policy is not None, problems
    return policy


def test_literals_become_map_literals_with_unescaped_keys() -> None:
    src = 'Object{metadata: Object.metadata{x__dash__y: "1", ?labels: optional.none()}}'
    assert rewrite(src, CHECKED).text == 'dyn({"metadata": dyn({"x-y": "1", ?"labels": optional.none()})})'
    assert [lit.name for lit in literals(src)] == [("Object",), ("Object", "metadata")]
    # Strings and comments are not literals.
    assert literals('"Object{a: 1}" // Object{b: 2}\n') == []


def test_syntax_error_positions_are_the_users() -> None:
    src = 'Object{metadata: Object.metadata{labels: {"a": "b"} + }}'
    compiled = compile_mutating_policy(_policy(("ApplyConfiguration", src)))
    (problem,) = compiled.errors()
    assert problem.path == "spec.mutations[0].applyConfiguration.expression"
    assert problem.expression_position is not None
    assert src[problem.expression_position.column - 1] == "}"
    assert src in problem.excerpt


@pytest.mark.parametrize(("expr", "needle"), [
    ('Object{spec: Object.spec{foo: 1}}', "undefined field 'foo'"),
    ('Object{spec: Object.spec{containers: [Object.spec.containers{name: 1}]}}', "expected type of field 'name'"),
    ('Object.spec{hostNetwork: false}', "must evaluate to an Object (apply configuration), not Object.spec"),
    ('Object{spec: Object.spec{tolerations: []}}', "may not mutate atomic arrays, maps or structs: .spec.tolerations"),
    ('Object{spec: Object.spec{containers: [Object.spec.containers{name: "a", args: ["x"]}]}}',
     "may not mutate atomic arrays, maps or structs: .spec.containers.args"),
])
def test_schema_checks_of_apply_configurations(expr: str, needle: str) -> None:
    policy = _policy(("ApplyConfiguration", expr))
    assert compile_mutating_policy(policy).ok
    (warning,) = check_policy(policy)
    assert needle in warning.warning
    assert warning.wrong_result  # an error in `vpol check`
    assert "vpolac" not in warning.warning


def test_valid_configurations_type_check_cleanly() -> None:
    policy = _policy(
        ("ApplyConfiguration", 'Object{metadata: Object.metadata{labels: {"a": "b"}}, spec: Object.spec{containers: '
                               'object.spec.containers.map(c, Object.spec.containers{name: c.name, securityContext: '
                               'Object.spec.containers.securityContext{runAsNonRoot: true}})}}'),
        ("ApplyConfiguration", 'Object{spec: Object.spec{securityContext: {"runAsNonRoot": true}}}'),
        ("JSONPatch", '[JSONPatch{op: "add", path: "/metadata/annotations/" + jsonpatch.escapeKey("a/b"), '
                      'value: "x"}]'))
    assert compile_mutating_policy(policy).ok
    assert check_policy(policy) == []


def test_literals_of_map_valued_fields_are_maps_as_in_kyverno() -> None:
    # Kyverno resolves every Object.* name dynamically: Object.metadata.labels{app: 'x'} builds the labels map.
    src = "Object{metadata: Object.metadata{labels: Object.metadata.labels{app: 'x'}, annotations: " \
          "Object.metadata.annotations{?note: optional.of('y')}}}"
    policy = _policy(("ApplyConfiguration", src))
    assert compile_mutating_policy(policy).ok
    assert check_policy(policy) == []
    # The API server builds them as maps too (so a native MAP, see test_webhook and tests/e2e/test_map_shapes.py).
    assert check_policy(policy, kubernetes_only=True) == []
    # Other issues of the same expression are reported where they are written.
    bad = "Object{metadata: Object.metadata{labels: Object.metadata.labels{app: 'x'}, nosuch: 1}}"
    (warning,) = check_policy(_policy(("ApplyConfiguration", bad)))
    column = bad.index("nosuch: ") + len("nosuch")  # cel points at the field's colon
    assert f"<input>:1:{column + 1}: undefined field 'nosuch'" in warning.warning
    assert f" | {bad}\n | {'.' * column}^" in warning.warning
    # A path the schema does not have stays an error.
    (warning,) = check_policy(_policy(("ApplyConfiguration", "Object{metadata: Object.metadata{labels: "
                                                             "Object.metadata.nosuch{a: 'b'}}}")))
    assert "undeclared reference to 'Object.metadata.nosuch'" in warning.warning


def test_json_patch_fields_and_result_type() -> None:
    policy = _policy(("JSONPatch", '[JSONPatch{op: "add", pat: "/x"}]'),
                     ("JSONPatch", 'JSONPatch{op: "add", path: "/x", value: 1}'))
    assert compile_mutating_policy(policy).ok  # literals are dyn until the kind's types are known
    warnings = {w.field_path: w for w in check_policy(policy)}
    assert "undefined field 'pat'" in warnings["spec.mutations[0].jsonPatch.expression"].warning
    assert "must evaluate to a list of JSONPatch, not JSONPatch" in \
        warnings["spec.mutations[1].jsonPatch.expression"].warning
    assert all(w.wrong_result for w in warnings.values())


def test_literals_of_one_type_unify_in_conditionals() -> None:
    policy = _policy(
        ("ApplyConfiguration", 'object.metadata.name == "x" ? Object{metadata: Object.metadata{labels: {"a": "b"}}} '
                               ': Object{spec: Object.spec{hostNetwork: false}}'),
        ("JSONPatch", '[1, 2].map(i, i > 1 ? JSONPatch{op: "add", path: "/metadata/labels", value: {}} : null)'
                      '.filter(p, p != null)'))
    assert compile_mutating_policy(policy).ok, compile_mutating_policy(policy).errors()
    assert check_policy(policy) == []


def test_patch_type_and_payload_must_agree() -> None:
    doc = yaml.safe_load("""
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: p}
spec:
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
  reinvocationPolicy: Sometimes
  mutations:
  - patchType: JSONPatch
    applyConfiguration: {expression: "Object{}"}
""")
    policy, problems = parse_mutating_policy(doc)
    assert policy is None
    paths = {p.path for p in problems if p.severity == "error"}
    assert {"spec.reinvocationPolicy", "spec.mutations[0].applyConfiguration", "spec.mutations[0].jsonPatch"} <= paths

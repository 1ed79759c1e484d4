"""Schema-aware type checking: which kinds, which expressions, and the API server's warning text."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.unit.policies import make_policy
from vpol.cel.typecheck import MAX_TYPES_TO_CHECK, TypeWarning, check, check_policy, issues_text, kinds_to_check
from vpol.model.discovery import ResourceInfo, builtin
from vpol.model.policy import Rule


def res(group: str, version: str, resource: str) -> ResourceInfo:
    info = builtin().resource(group, version, resource)
    assert info is not None
    return info


DEPLOYMENT = res("apps", "v1", "deployments")
POD = res("", "v1", "pods")


def v(i: int, src: str, what: str = "expression") -> tuple[str, str, str]:
    role = "validation" if what == "expression" else what
    return (f"spec.validations[{i}].{what}", src, role)


def caret(src: str, column: int) -> str:
    return f" | {src}\n | {'.' * (column - 1)}^"


# --- the warning text -------------------------------------------------------------------


def test_type_mismatch_warning_format_and_position() -> None:
    src = "object.spec.replicas + 'a' == 'b'"
    column = src.index("+") + 1  # cel-go reports the operator, 1-based
    warnings = check([v(0, src)], [], [DEPLOYMENT])
    assert warnings == [TypeWarning(
        "spec.validations[0].expression",
        f"apps/v1, Kind=Deployment: ERROR: <input>:1:{column}: found no matching overload for '_+_' "
        f"applied to '(int, string)'\n{caret(src, column)}\n",
    )]


def test_undefined_field_warning() -> None:
    src = "object.spec.foo == 1"
    column = src.index(".foo") + 1  # the select's dot
    [warning] = check([v(0, src)], [], [DEPLOYMENT])
    assert warning.warning == (
        f"apps/v1, Kind=Deployment: ERROR: <input>:1:{column}: undefined field 'foo'\n{caret(src, column)}\n"
    )


def test_several_kinds_sorted_and_joined_like_kubernetes() -> None:
    src = "object.spec.replicas > 1"
    [warning] = check([v(0, src)], [], [DEPLOYMENT, POD])  # Pod has no spec.replicas
    # one "<gvk>: <issues>\n" per failing kind, joined by "\n"; the core group prints as "/v1"
    assert warning.warning.startswith("/v1, Kind=Pod: ERROR: <input>:1:12: undefined field 'replicas'\n")
    assert "\n\n" not in warning.warning  # only Pod fails
    [both] = check([v(0, "object.spec.foo == 1")], [], [DEPLOYMENT, POD])
    parts = both.warning.split("\n\n")
    assert [p.split(":")[0] for p in parts] == ["/v1, Kind=Pod", "apps/v1, Kind=Deployment"]
    assert both.warning.endswith("^\n")


def test_correct_expressions_and_syntax_errors_give_nothing() -> None:
    exprs = [
        v(0, "object.spec.replicas <= 5"),
        v(1, "object.spec.template.spec.containers.all(c, c.image.startsWith('registry.example.com/'))"),
        v(2, "object.metadata.name.size() < 64 && object.metadata.namespace != 'kube-system'"),
        v(3, "has(object.spec.template.metadata.labels) && 'app' in object.spec.template.metadata.labels"),
        v(4, "object.spec.replicas >"),  # syntax error: the compiler's business
        v(5, "object.spec.foo +"),
        v(6, "1 + 'a'"),  # fails without schemas too
    ]
    assert check(exprs, [], [DEPLOYMENT]) == []


def test_multiple_errors_in_one_expression_no_cascades() -> None:
    src = "object.spec.foo == object.spec.bar.baz"
    [w] = check([v(0, src)], [], [DEPLOYMENT])
    assert w.warning.count("ERROR: ") == 2
    assert "'*error*'" not in w.warning
    assert "undefined field 'foo'" in w.warning and "undefined field 'bar'" in w.warning


def test_issues_text_matches_cel_go_wording() -> None:
    raw = ("INVALID_ARGUMENT: ERROR: <input>:1:12: undefined field 'foo' not found in struct 'vpol.schema.h1.Spec'\n"
           " | object.spec.foo.x + google.protobuf.Timestamp\n | ...........^\n"
           "ERROR: <input>:1:16: expression of type '*error*' cannot be the operand of a select operation\n"
           " | object.spec.foo.x + google.protobuf.Timestamp\n | ...............^\n"
           "ERROR: <input>:1:19: found no matching overload for '_+_' applied to '(google.protobuf.Timestamp, google.protobuf.Duration)'\n"
           " | object.spec.foo.x + google.protobuf.Timestamp\n | ..................^ [INVALID_ARGUMENT]")
    assert issues_text(raw) == (
        "ERROR: <input>:1:12: undefined field 'foo'\n"
        " | object.spec.foo.x + google.protobuf.Timestamp\n | ...........^\n"
        "ERROR: <input>:1:19: found no matching overload for '_+_' applied to '(timestamp, duration)'\n"
        " | object.spec.foo.x + google.protobuf.Timestamp\n | ..................^"
    )


def test_message_expression_and_other_roles() -> None:
    exprs = [
        v(0, "object.spec.replicas > 1"),
        v(0, "'too many: ' + object.spec.replicas", "messageExpression"),
        ("spec.matchConditions[0].expression", "object.spec.paused == 'yes'", "matchCondition"),
        ("spec.auditAnnotations[0].valueExpression", "object.spec.nope", "auditAnnotation"),
    ]
    got = [w.field_path for w in check(exprs, [], [DEPLOYMENT])]
    assert got == ["spec.validations[0].messageExpression", "spec.matchConditions[0].expression",
                   "spec.auditAnnotations[0].valueExpression"]


def test_preserve_unknown_fields_parts_are_not_reported() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "size": {"type": "integer"},
    }}}}
    widget = ResourceInfo("example.com", "v1", "widgets", "Widget", True)
    exprs = [v(0, "object.spec.config.anything.deeper[0] == 'x'"), v(1, "object.spec.size == 'big'")]
    warnings = check(exprs, [], [widget], lambda g, ver, k: schema if k == "Widget" else None)
    assert [w.field_path for w in warnings] == ["spec.validations[1].expression"]
    assert warnings[0].warning.startswith("example.com/v1, Kind=Widget: ")


def test_kinds_without_schema_are_skipped() -> None:
    assert check([v(0, "object.spec.foo == 1")], [], [DEPLOYMENT], lambda g, ver, k: None) == []


# --- variables --------------------------------------------------------------------------
# The cases of the API server's own type checker tests (typechecking_test.go), with a
# kind whose schema is {foo: integer}.

FOO_INT = {"type": "object", "properties": {"foo": {"type": "integer"}}}


def run_vars(variables: list[tuple[str, str]], expression: str, schema: dict[str, Any] = FOO_INT) -> list[TypeWarning]:
    exprs = [(f"spec.variables[{i}].expression", src, "variable") for i, (_, src) in enumerate(variables)]
    exprs.append(v(0, expression))
    return check(exprs, [n for n, _ in variables], [DEPLOYMENT], lambda g, ver, k: schema)


def test_variable_typed_from_its_result() -> None:
    assert run_vars([("works", "true")], "variables.works") == []
    [w] = run_vars([("name", "'something'")], "variables.name == object.foo")
    assert w.field_path == "spec.validations[0].expression"
    assert "found no matching overload for '_==_' applied to '(string, int)'" in w.warning


def test_variable_with_a_type_error_is_dyn_for_its_users() -> None:
    warnings = run_vars([("name", "object.foo == 'str'")], "variables.name == object.foo")
    # the validation is not reported (as in Kubernetes); the variable itself is, since we check it
    assert [w.field_path for w in warnings] == ["spec.variables[0].expression"]


def test_variable_holding_an_object_is_dyn() -> None:
    assert run_vars([("spec", "object.spec")], "variables.spec.whatever == 1", DEPLOYMENT_SCHEMA()) == []


def DEPLOYMENT_SCHEMA() -> dict[str, Any]:
    schema = builtin().schema("apps", "v1", "Deployment")
    assert schema is not None
    return dict(schema)


def test_variable_lists_maps_and_timestamps_keep_their_types() -> None:
    # The compiler types `variables` the same way (as the API server does), so a type error
    # through a variable is a compile error, not a warning; the type checker passes over it.
    from vpol.cel.compiler import compile_expression
    from vpol.cel.environment import EnvSpec
    from vpol.cel.variables import typed_variables_message

    def compile_error(var_type: str, src: str) -> str:
        spec = EnvSpec(variables_type=typed_variables_message([("v", var_type)]))
        prog, problems = compile_expression(src, "spec.validations[0].expression", "validation", spec)
        assert prog is None and problems
        return problems[0].message

    assert "'(int, string)'" in compile_error("list<int>", "variables.v[0] + 'a' == 'b'")
    assert "'(int, string)'" in compile_error("map<string, int>", "variables.v['a'] + 'a' == 'b'")
    assert "'(" in compile_error("timestamp", "variables.v + 1 == 2")
    assert run_vars([("t", "timestamp('2020-01-01T00:00:00Z')")], "variables.t + duration('1s') > variables.t") == []
    assert run_vars([("l", "[1, 2]")], "variables.l[0] + 'a' == 'b'") == []


def test_variables_see_earlier_variables_typed() -> None:
    warnings = run_vars([("a", "object.foo"), ("b", "variables.a + 'x'")], "variables.b == 'y'")
    assert [w.field_path for w in warnings] == ["spec.variables[1].expression"]
    assert "'(int, string)'" in warnings[0].warning


# --- which kinds --------------------------------------------------------------------------


def rule(groups: list[str], versions: list[str], resources: list[str]) -> Rule:
    return Rule(api_groups=tuple(groups), api_versions=tuple(versions), resources=tuple(resources))


def gvks(infos: list[ResourceInfo]) -> list[str]:
    return [i.gvk_string for i in infos]


def test_kinds_to_check_sorted_by_group_version_kind() -> None:
    got = kinds_to_check([rule(["apps", ""], ["v1"], ["pods", "deployments", "statefulsets"])])
    assert gvks(got) == ["/v1, Kind=Pod", "apps/v1, Kind=Deployment", "apps/v1, Kind=StatefulSet"]


def test_kinds_to_check_skips_wildcards_and_subresources() -> None:
    assert kinds_to_check([rule(["*"], ["v1"], ["pods"])]) == []
    assert kinds_to_check([rule([""], ["*"], ["pods"])]) == []
    assert kinds_to_check([rule([""], ["v1"], ["*"])]) == []
    assert kinds_to_check([rule([""], ["v1"], ["pods/status", "*/scale"])]) == []
    assert gvks(kinds_to_check([rule([""], ["v1"], ["*", "pods/log", "configmaps"])])) == ["/v1, Kind=ConfigMap"]
    # a wildcard rule does not stop the next one
    assert gvks(kinds_to_check([rule(["*"], ["*"], ["*"]), rule([""], ["v1"], ["pods"])])) == ["/v1, Kind=Pod"]


def test_kinds_to_check_ignores_unknown_resources() -> None:
    assert gvks(kinds_to_check([rule(["", "example.com"], ["v1"], ["pods", "widgets"])])) == ["/v1, Kind=Pod"]


def test_kinds_to_check_stops_at_ten() -> None:
    many = ["configmaps", "endpoints", "events", "limitranges", "namespaces", "nodes", "persistentvolumeclaims",
            "persistentvolumes", "pods", "podtemplates", "replicationcontrollers", "resourcequotas", "secrets"]
    got = kinds_to_check([rule([""], ["v1"], many)])
    assert len(got) == MAX_TYPES_TO_CHECK
    # resources are taken in sorted order, so the last three are left out
    assert "/v1, Kind=Secret" not in gvks(got) and "/v1, Kind=ConfigMap" in gvks(got)


# --- whole policies ---------------------------------------------------------------------------


def test_check_policy() -> None:
    policy = make_policy(
        """
        variables:
        - name: replicas
          expression: object.spec.replicas
        validations:
        - expression: variables.replicas <= 5
        - expression: "object.spec.replicas + 'x' == 'y'"
          messageExpression: "'replicas: ' + string(object.spec.replicas)"
        """,
        rules=[{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}],
    )
    warnings = check_policy(policy)
    assert [w.field_path for w in warnings] == ["spec.validations[1].expression"]
    assert warnings[0].warning.startswith("apps/v1, Kind=Deployment: ERROR: <input>:1:22: found no matching overload")
    only_variables = check_policy(policy, roles=("variable",))
    assert only_variables == []


def test_check_policy_json_mode_has_no_schemas() -> None:
    policy = make_policy(
        """
        evaluation: {mode: JSON}
        validations:
        - expression: "object.spec.replicas + 'x' == 'y'"
        """,
    )
    assert check_policy(policy) == []


def test_warm_check_is_fast() -> None:
    exprs = [v(i, src) for i, src in enumerate([
        "object.spec.containers.all(c, c.image.startsWith('r/'))",
        "object.spec.containers.all(c, !has(c.securityContext) || c.securityContext.privileged != true)",
        "!has(object.spec.hostNetwork) || object.spec.hostNetwork == false",
        "object.spec.containers.all(c, c.ports.all(p, p.containerPort != 22))",
        "object.metadata.labels['team'] != ''",
        "object.spec.volumes.all(vol, !has(vol.hostPath))",
        "object.spec.containers.all(c, has(c.resources.limits))",
        "size(object.spec.containers) < 10",
        "object.spec.foo == 1",
        "object.spec.containers[0].image + 1 == 2",
    ])]
    first = check(exprs, [], [POD])
    assert [w.field_path for w in first] == ["spec.validations[8].expression", "spec.validations[9].expression"]
    start = time.perf_counter()
    again = check(exprs, [], [POD])
    elapsed = time.perf_counter() - start
    assert again == first
    assert elapsed < 0.1, f"{elapsed * 1000:.1f} ms"


@pytest.mark.parametrize("src", ["object.spec.replicas + 'a' == 'b'", "object.spec.foo == 1"])
def test_warnings_never_raise_for_odd_input(src: str) -> None:
    weird = ResourceInfo("x", "v1", "things", "Thing", True)
    # broken schema: a dangling reference means "no schema", not a crash
    assert check([v(0, src)], [], [weird], lambda g, ver, k: {"$ref": "#/components/schemas/Missing"}) == []


def test_odd_variable_names_do_not_break_checking() -> None:
    for variables in ([("a", "1"), ("a", "'x'")], [("fooBar", "1"), ("foo_bar", "2")], [("my-var", "1")]):
        warnings = run_vars(variables, "object.foo + 'a' == 'b'")
        assert [w.field_path for w in warnings] == ["spec.validations[0].expression"], variables


def test_warnings_name_schema_types_without_internal_packages():
    from vpol.cel.typecheck import issues_text

    text = issues_text("INVALID_ARGUMENT: ERROR: <input>:1:27: found no matching overload for '_==_' applied to "
                       "'(vpol.schema.he43b09620efaddcf8c3a.Container, string)'\n | x\n | .^")
    assert "'(Container, string)'" in text and "vpol.schema" not in text


def test_a_result_of_the_wrong_type_under_the_schema_is_flagged():
    from tests.unit.policies import make_policy
    from vpol.cel.typecheck import check_policy

    policy = make_policy(matchConditions=[{"name": "labels", "expression": "object.metadata.?labels.orValue({})"}],
                         validations=[{"expression": "object.spec.containers.size() > 0"},
                                      {"expression": "object.spec.containers[0].name",
                                       "messageExpression": "object.spec.containers.size()"}])
    found = {w.field_path: w for w in check_policy(policy)}
    assert found["spec.matchConditions[0].expression"].wrong_result
    assert "must evaluate to bool, not map(string, string)" in found["spec.matchConditions[0].expression"].warning
    assert found["spec.validations[1].expression"].wrong_result  # a string where a bool is needed
    assert "must evaluate to bool, not string" in found["spec.validations[1].expression"].warning
    assert "spec.validations[0].expression" not in found


def test_or_value_on_what_is_not_an_optional_is_no_issue_as_in_kyverno() -> None:
    # Kyverno reads x.orValue(d) as a function of any x (vpol.cel.compat.OR_VALUE).
    assert check([v(0, "object.metadata.labels.orValue({}).app == 'x'")], [], [POD]) == []
    assert check([v(0, "object.spec.containers.all(c, c.resources.requests.orValue({}).cpu == '1')")],
                 [], [POD]) == []
    # Other issues in the same expression are still reported, at their place in the expression as written.
    src = "object.metadata.labels.orValue({}).app == 'x' && object.spec.nosuch.orValue(1) == 1"
    column = src.index("nosuch")  # cel reports the selection's dot, 1-based
    warnings = check([v(0, src)], [], [POD])
    assert warnings == [TypeWarning("spec.validations[0].expression",
                                    f"/v1, Kind=Pod: ERROR: <input>:1:{column}: undefined field 'nosuch'\n"
                                    f"{caret(src, column)}\n")]


def test_or_value_on_what_is_not_an_optional_is_an_issue_for_the_api_server() -> None:
    warnings = check([v(0, "object.metadata.labels.orValue({}).app == 'x'")], [], [POD], kubernetes_only=True)
    assert len(warnings) == 1 and "found no matching overload for 'orValue'" in warnings[0].warning

"""A policy evaluated as one fused program (vpol.policies.validating.fused) decides as its expressions one by one; the
fast
path is taken where it can be, and everything unusual is left to the expression-by-expression evaluation.
(tests/differential/test_fused.py compares the two on every suite and generated variations.)"""

from __future__ import annotations

import dataclasses
import json

import pytest

import vpol.policies.validating.engine as validating_engine
from tests.unit.engine.test_evaluate import resolve
from tests.unit.policies import make_policy, pod
from vpol.engine.evaluate import Result, SubjectData
from vpol.engine.subjects import subject_for
from vpol.policies.validating.engine import PolicyEngine
from vpol.policies.validating.fused import fused_program, fused_text


def both(policy, obj, operation="CREATE"):
    """(fused result, expression-by-expression result, the SubjectData of the fused run)."""
    subject = subject_for(obj, operation=operation, resolve=resolve)
    data = SubjectData(subject)
    fast = PolicyEngine(policy).evaluate(subject, data)
    slow = PolicyEngine(policy, fused=False).evaluate(subject)
    return fast, slow, data


def fields(result):
    return dataclasses.astuple(result) if result is not None else None


CHAINED = make_policy(
    matchConditions=[{"name": "labelled", "expression": "has(object.metadata.labels) // a comment at the end"}],
    variables=[{"name": "containers", "expression": "object.spec.containers // comment"},
               {"name": "names", "expression": "variables.containers.map(c, c.name)"}],
    validations=[{"expression": "size(variables.names) > 0"},
                 {"expression": "!('bad' in variables.names)", "messageExpression": "'bad: ' + variables.names[0]"},
                 {"expression": "variables.containers.all(c, c.image != 'evil')", "message": "evil"}])


def test_fused_program_holds_conditions_variables_and_validations():
    compiled = PolicyEngine(CHAINED).compiled
    assert fused_program(compiled) is not None
    assert fused_program(compiled) is fused_program(compiled)  # built once per compiled policy


@pytest.mark.parametrize("obj", [
    pod(labels={"a": "b"}),
    {**pod(labels={"a": "b"}), "spec": {"containers": [{"name": "bad", "image": "x"}]}},
    {**pod(labels={"a": "b"}), "spec": {"containers": [{"name": "c", "image": "evil"}]}},
    {**pod(labels={"a": "b"}), "spec": {"containers": []}},
    {**pod(), "metadata": {"name": "nolabels", "namespace": "default"}},
    {**pod(labels={"a": "b"}), "spec": {"containers": "not a list"}},
])
def test_fused_decides_as_one_by_one(obj):
    fast, slow, _data = both(CHAINED, obj)
    assert fields(fast) == fields(slow)


def test_the_fast_path_is_taken_and_needs_no_activation_of_its_own():
    fast, slow, data = both(CHAINED, pod(labels={"a": "b"}))
    assert (fast.result, slow.result) == ("pass", "pass")
    # Expression by expression, the variables' Activations are kept in SubjectData.activations; the fused
    # program evaluates on the subject's base Activation only.
    assert data.activations == {}


def test_a_failing_variable_nobody_reads_leaves_the_answer_to_the_lazy_evaluation():
    policy = make_policy(variables=[{"name": "bad", "expression": "object.spec.nothing.here"}],
                         validations=[{"expression": "true"}])
    fast, slow, _data = both(policy, pod())
    assert (fast.result, fields(fast)) == ("pass", fields(slow))


def test_a_false_condition_is_said_by_name():
    policy = make_policy(matchConditions=[{"name": "never", "expression": "false"}],
                         validations=[{"expression": "false"}])
    fast, slow, _data = both(policy, pod())
    assert (fast.result, fast.message) == ("skip", "matchCondition never is false")
    assert fields(fast) == fields(slow)


def test_the_first_false_validation_wins_even_when_a_later_one_would_fail_to_evaluate():
    policy = make_policy(validations=[{"expression": "true"}, {"expression": "false", "message": "second"},
                                      {"expression": "object.spec.nothing.here == 1"}])
    fast, slow, _data = both(policy, pod())
    assert (fast.result, fast.message, fast.validation) == ("fail", "second", 1)
    assert fields(fast) == fields(slow)


def test_non_bool_validation_is_the_same_error():
    policy = make_policy(validations=[{"expression": "dyn(object.metadata.name)"}])
    fast, slow, _data = both(policy, pod())
    assert fast.result == "error" and fields(fast) == fields(slow)


def test_ordering_between_int_and_double_is_built_unchecked_as_each_expression_is():
    policy = make_policy(variables=[{"name": "n", "expression": "size(object.spec.containers)"}],
                         validations=[{"expression": "1 < 2.5"}, {"expression": "variables.n < 0.5"}])
    assert fused_program(PolicyEngine(policy).compiled) is not None
    fast, slow, _data = both(policy, pod())
    assert (fast.result, fast.validation) == ("fail", 1) and fields(fast) == fields(slow)


def test_policies_with_audit_annotations_have_no_fused_form():
    policy = make_policy(validations=[{"expression": "true"}],
                         auditAnnotations=[{"key": "who", "valueExpression": "object.metadata.name"}])
    assert fused_text(PolicyEngine(policy).compiled) is None
    fast, slow, _data = both(policy, pod("web"))
    assert fast.properties == {"who": "web"} and fields(fast) == fields(slow)


def test_variables_keep_their_cel_values_as_in_cel_go():
    # An optional (or any value cel-expr-python cannot hand back to Python) passes from one expression to the
    # next, as cel-go's lazy variables do; expression by expression vpol cannot pass it on.
    policy = make_policy(variables=[{"name": "o", "expression": "object.metadata.?labels"}],
                         validations=[{"expression": "variables.o.hasValue()"}])
    fast, slow, _data = both(policy, pod(labels={"a": "b"}))
    assert fast.result == "pass"
    assert (slow.result, slow.message) == ("error", "error: expression produced an optional value, which vpol cannot pass on; "
                                                    "use .orValue(...) or .value()")


def test_rendered_rows_are_what_json_dumps_writes():
    for result in (Result("p\"ol", "fail", "line\nbreak é ☃ \u2028 \\", kind="Pod", namespace="ns", name="x"),
                   Result("p", "pass", "success", api_version="apps/v1"),
                   Result("p", "error", 5)):  # type: ignore[arg-type] - not a string: the generic encoder
        assert result.rendered() == (result.result, json.dumps(result.as_dict()))


def test_autogen_variants_are_compiled_when_a_resource_first_needs_them(monkeypatch):
    calls = []
    original = validating_engine.compile_policy
    monkeypatch.setattr(validating_engine, "compile_policy", lambda p: calls.append(p) or original(p))
    engine = PolicyEngine(make_policy(validations=[{"expression": "true"}]))
    assert len(calls) == 1  # the policy itself
    engine.evaluate(subject_for(pod(), resolve=resolve))
    assert len(calls) == 1
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
                  "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    result = engine.evaluate(subject_for(deployment, resolve=resolve))
    assert (result.result, result.autogen) == ("pass", "defaults") and len(calls) == 2
    engine.evaluate(subject_for(deployment, resolve=resolve))
    assert len(calls) == 2


def test_resource_names_are_decided_per_object():
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
            "resourceNames": ["one"]}
    engine = PolicyEngine(make_policy(rules=[rule], validations=[{"expression": "true"}]))
    assert engine.evaluate(subject_for(pod("two"), resolve=resolve)) is None
    assert engine.evaluate(subject_for(pod("one"), resolve=resolve)).result == "pass"
    assert engine.evaluate(subject_for(pod("two"), resolve=resolve)) is None

"""The compiler reports every error with field path, position and excerpt, and enforces the rules."""

from __future__ import annotations

from tests.unit.policies import make_policy
from vpol.cel.memo import BoundedMemo
from vpol.policies.validating.compile import compile_policy


def errors(policy):
    return compile_policy(policy).errors()


def test_valid_policy_compiles():
    c = compile_policy(make_policy(validations=[{"expression": "object.metadata.name != ''"}]))
    assert c.ok and len(c.validations) == 1


def test_syntax_error_has_path_position_and_caret():
    [e] = errors(make_policy(validations=[{"expression": "true"}, {"expression": "object.x =="}]))
    assert e.path == "spec.validations[1].expression"
    assert e.expression_position is not None and e.expression_position.line == 1
    assert "^" in e.excerpt


def test_every_error_is_reported_not_just_the_first():
    es = errors(make_policy(
        matchConditions=[{"name": "m", "expression": "1 +"}],
        validations=[{"expression": "1 + 'a'", "messageExpression": "object.("},
                     {"expression": "true", "messageExpression": "1"}],
        auditAnnotations=[{"key": "k", "valueExpression": "true"}],
    ))
    paths = sorted(e.path for e in es)
    assert paths == ["spec.auditAnnotations[0].valueExpression", "spec.matchConditions[0].expression",
                     "spec.validations[0].expression", "spec.validations[0].messageExpression",
                     "spec.validations[1].messageExpression"]


def test_result_types_are_enforced():
    es = errors(make_policy(validations=[{"expression": "'yes'"}],
                            matchConditions=[{"name": "m", "expression": "1"}]))
    msgs = {e.path: e.message for e in es}
    assert "must evaluate to bool" in msgs["spec.validations[0].expression"]
    assert "must evaluate to bool" in msgs["spec.matchConditions[0].expression"]


def test_audit_annotation_may_be_null_or_string():
    c = compile_policy(make_policy(validations=[{"expression": "true"}], auditAnnotations=[
        {"key": "a", "valueExpression": "null"}, {"key": "b", "valueExpression": "'x'"}]))
    assert c.ok


def test_variable_referring_to_a_later_variable_is_an_error():
    [e] = errors(make_policy(variables=[{"name": "a", "expression": "variables.b + 1"},
                                        {"name": "b", "expression": "1"}],
                             validations=[{"expression": "variables.a > 0"}]))
    assert e.path == "spec.variables[0].expression"
    assert "undeclared variable 'b'" in e.message
    assert e.expression_position.column == 10


def test_unknown_variable_in_validation_is_an_error():
    [e] = errors(make_policy(variables=[{"name": "a", "expression": "1"}],
                             validations=[{"expression": "variables.nope == 1"}]))
    assert e.path == "spec.validations[0].expression" and "'nope'" in e.message


def test_variable_types_flow_into_later_expressions():
    [e] = errors(make_policy(variables=[{"name": "n", "expression": "'text'"}],
                             validations=[{"expression": "variables.n + 1 > 0"}]))
    assert "no matching overload" in e.message


def test_deep_nesting_is_refused_without_crashing():
    [e] = errors(make_policy(validations=[{"expression": "(" * 500 + "true" + ")" * 500}]))
    assert "nests deeper" in e.message


def test_huge_expression_is_an_error_not_a_crash():
    src = " || ".join(["object.metadata.name == 'x'"] * 3000)  # ~90 kB
    c = compile_policy(make_policy(validations=[{"expression": src}]))
    assert c.ok or all(e.path == "spec.validations[0].expression" for e in c.errors())


def test_nesting_limit_errors_once_with_a_position():
    src = "object.metadata.name == 'x' || " + " + ".join(["1"] * 40) + " > 0"
    [e] = errors(make_policy(validations=[{"expression": src}]))
    assert "nests deeper than 32 levels" in e.message
    assert e.expression_position is not None and e.expression_position.column > 30
    assert src[e.expression_position.column - 1] == "+"
    parens = "(" * 40 + "true" + ")" * 40
    [e] = errors(make_policy(validations=[{"expression": parens}]))
    assert "nests deeper than 32 levels" in e.message and e.expression_position is not None
    assert errors(make_policy(validations=[{"expression": " + ".join(["1"] * 20) + " > 0"}])) == []


def test_match_conditions_of_a_validating_policy_cannot_read_variables() -> None:
    # Kyverno compiles a ValidatingPolicy's matchConditions before its variables (undefined field there).
    policy = make_policy(variables=[{"name": "isProd", "expression": "object.metadata.name == 'prod'"}],
                         matchConditions=[{"name": "prod-only", "expression": "true && variables.isProd"}],
                         validations=[{"expression": "true"}])
    (problem,) = compile_policy(policy).errors()
    assert problem.path == "spec.matchConditions[0].expression"
    assert "undefined field 'isProd'" in problem.message
    assert problem.expression_position is not None and problem.expression_position.column == 9
    # A MutatingPolicy's may (Kyverno compiles its variables first).
    from vpol.policies.mutating.compile import compile_mutating_policy
    from vpol.policies.mutating.model import parse_mutating_policy

    mpol, _ = parse_mutating_policy({
        "apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": "m"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["pods"]}]},
                 "variables": [{"name": "isProd", "expression": "object.metadata.name == 'prod'"}],
                 "matchConditions": [{"name": "prod-only", "expression": "variables.isProd"}],
                 "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                     "expression": "Object{metadata: Object.metadata{labels: {'a': 'b'}}}"}}]}})
    assert mpol is not None and compile_mutating_policy(mpol).ok


def test_ordering_between_numbers_of_different_types_compiles_and_evaluates() -> None:
    # cel-go's CrossTypeNumericComparisons (the API server and Kyverno enable it); cel-cpp's checker lacks it.
    from vpol.cel.compiler import compile_expression
    from vpol.cel.environment import EnvSpec, environment

    env = environment(EnvSpec())
    for src, expected in [("1 < 1.5", True), ("2u >= 1 && 1.5 <= 2", True), ("2.5 > 3", False),
                          ("quantity('1Gi').asApproximateFloat() > 1", True)]:
        prog, problems = compile_expression(src, "p", "validation", EnvSpec())
        assert prog is not None, problems
        assert prog.expression.eval(env.Activation(data={})).value() is expected
    # Other type errors are still errors, at their place.
    _prog, problems = compile_expression("1 < 1.5 && 1 < 'a'", "p", "validation", EnvSpec())
    assert [p.message for p in problems] == ["found no matching overload for '_<_' applied to '(int, string)'"]


def test_the_type_check_lets_numbers_of_different_types_be_ordered() -> None:
    from vpol.cel.typecheck import check
    from vpol.model.discovery import builtin

    deployments = builtin().resource("apps", "v1", "deployments")
    assert deployments is not None
    expressions = [("spec.validations[0].expression", "object.spec.replicas > 2.5", "validation")]
    assert check(expressions, [], [deployments]) == []


def test_a_verdict_is_computed_once_per_spec(monkeypatch):
    """compile_verdict answers the same spec (of any policy object carrying it) without compiling again, and gives
    compile_policy's verdict and errors; another spec, namespace or environment is compiled anew."""
    from vpol.policies.validating import compile as compiler

    calls = []
    real = compiler.compile_policy

    def counting(policy, **kw):
        calls.append(policy.name)
        return real(policy, **kw)

    monkeypatch.setattr(compiler, "compile_policy", counting)
    monkeypatch.setattr(compiler, "_VERDICTS", BoundedMemo(compiler.VERDICTS_KEPT))
    bad = [{"expression": "true"}, {"expression": "object.x =="}]
    first = compiler.compile_verdict(make_policy(name="a", validations=bad))
    again = compiler.compile_verdict(make_policy(name="b", validations=bad))  # another object, the same spec
    assert calls == ["a"] and again == first
    assert not first.ok and [e.path for e in first.errors] == ["spec.validations[1].expression"]
    assert [e.message for e in first.errors] == [e.message for e in errors(make_policy(validations=bad))]
    good = compiler.compile_verdict(make_policy(name="c", validations=[{"expression": "true"}]))
    assert good.ok and good.errors == () and calls == ["a", "c"]
    compiler.compile_verdict(make_policy(name="d", validations=[{"expression": "true"}]), kubernetes_only=True)
    assert calls == ["a", "c", "d"]


def test_verdicts_kept_are_bounded(monkeypatch):
    from vpol.policies.validating import compile as compiler

    monkeypatch.setattr(compiler, "_VERDICTS", BoundedMemo(3))
    for i in range(5):
        compiler.compile_verdict(make_policy(validations=[{"expression": f"{i} == {i}"}]))
    assert len(compiler._VERDICTS) == 3


def test_type_warnings_are_computed_once_per_spec_and_discovery(monkeypatch):
    """check_policy_cached gives check_policy's warnings, checking a spec once per discovery snapshot: another
    policy object with the same spec is answered from the cache, a new snapshot or another spec is checked."""
    from vpol.cel import typecheck
    from vpol.model.discovery import builtin

    calls = []
    real = typecheck.check_policy

    def counting(policy, discovery=None, **kw):
        calls.append(policy.name)
        return real(policy, discovery, **kw)

    monkeypatch.setattr(typecheck, "check_policy", counting)
    monkeypatch.setattr(typecheck, "_CHECKED", [(None, BoundedMemo(typecheck.CHECKED_KEPT))])
    validations = [{"expression": "object.spec.nodeName > 3"}]
    snapshot = builtin()
    first = typecheck.check_policy_cached(make_policy(name="a", validations=validations), snapshot)
    assert first and first == real(make_policy(name="a", validations=validations), snapshot)
    again = typecheck.check_policy_cached(make_policy(name="b", validations=validations), snapshot)
    assert again == first and calls == ["a"]
    typecheck.check_policy_cached(make_policy(name="c", validations=[{"expression": "true"}]), snapshot)
    assert calls == ["a", "c"]
    other = snapshot.with_extra(())  # another snapshot (immutable: a new object)
    typecheck.check_policy_cached(make_policy(name="d", validations=validations), other)
    assert calls == ["a", "c", "d"]


def test_a_verdict_skips_the_evaluation_rewrites_and_finds_the_same_problems():
    """compile_verdict (and the type checker's first pass) compile with evaluated=False: the programs are not
    rewritten for evaluation (cel-go's optional selections on scalars, eager bindings...), which never changes what
    is reported; every example policy and a few broken ones get the same problems either way."""
    import glob

    import yaml

    from vpol.policies.validating.model import parse_policy

    src = "object.?spec.?replicas.orValue(1) >= 1"
    guarded = compile_policy(make_policy(validations=[{"expression": src}]))
    plain = compile_policy(make_policy(validations=[{"expression": src}]), evaluated=False)
    assert "vpol_opt_" in guarded.validations[0][1].evaluated and plain.validations[0][1].evaluated == src
    policies = [make_policy(validations=[{"expression": "object.x =="}]),
                make_policy(validations=[{"expression": "[1, 'a'].size() > 0"}]),
                make_policy(validations=[{"expression": "object.?a.?b.orValue('') == 1 + 'x'"}])]
    for path in sorted(glob.glob("examples/**/*.yaml", recursive=True)):
        for doc in yaml.safe_load_all(open(path)):
            if isinstance(doc, dict) and doc.get("kind") in ("ValidatingPolicy", "NamespacedValidatingPolicy"):
                policy, _problems = parse_policy(doc)
                if policy is not None:
                    policies.append(policy)
    assert len(policies) > 20
    for policy in policies:
        assert [p.render() for p in compile_policy(policy, evaluated=False).problems] == \
            [p.render() for p in compile_policy(policy).problems], policy.name

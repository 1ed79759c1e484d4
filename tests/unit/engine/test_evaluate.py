"""Evaluation semantics: pass, fail, warn, error, skip; messages; variables; exceptions; autogen."""

from __future__ import annotations

from tests.unit.policies import make_policy, pod
from vpol.engine.evaluate import compile_exception
from vpol.engine.request import ResourceType
from vpol.engine.subjects import subject_for
from vpol.model.policy import NamedExpression, PolicyException, PolicyRef
from vpol.policies.validating.engine import PolicyEngine

PODS = ResourceType("", "v1", "pods", "Pod", True)


def resolve(api_version, kind):
    table = {("v1", "Pod"): PODS,
             ("apps/v1", "Deployment"): ResourceType("apps", "v1", "deployments", "Deployment", True),
             ("batch/v1", "CronJob"): ResourceType("batch", "v1", "cronjobs", "CronJob", True)}
    return table.get((api_version, kind))


def run(policy, obj, exceptions=(), operation="CREATE"):
    engine = PolicyEngine(policy, [compile_exception(e) for e in exceptions])
    return engine.evaluate(subject_for(obj, operation=operation, resolve=resolve))


NO_HOSTNET = [{"expression": "!has(object.spec.hostNetwork) || object.spec.hostNetwork == false",
               "message": "host network is not allowed"}]


def test_pass_and_fail_with_message():
    policy = make_policy(validations=NO_HOSTNET)
    assert run(policy, pod()).result == "pass"
    res = run(policy, pod(hostNetwork=True))
    assert (res.result, res.message, res.validation) == ("fail", "host network is not allowed", 0)


def test_failure_messages_are_worded_as_kyverno_words_them():
    # (tests/differential compares them with Kyverno's engine on the whole corpus)
    policy = make_policy(validations=[{"expression": "false", "message": "static",
                                       "messageExpression": "'pod ' + object.metadata.name"}])
    assert run(policy, pod("web")).message == "pod web"
    res = run(make_policy(validations=[{"expression": "true"}, {"expression": "1 > 2"}]), pod())
    assert (res.result, res.message) == ("fail", "CEL expression validation failed at index 1")
    # a messageExpression that fails says so instead of falling back to message (the API server falls back)
    res = run(make_policy(validations=[{"expression": "false", "message": "static",
                                        "messageExpression": "'n: ' + object.metadata.labels['missing']"}]), pod())
    assert res.result == "fail" and res.message.startswith("failed to evaluate message expression: ")
    # an empty messageExpression value: the default, not message
    res = run(make_policy(validations=[{"expression": "false", "message": "static", "messageExpression": "''"}]), pod())
    assert res.message == "CEL expression validation failed at index 0"


def test_first_false_validation_is_reported():
    policy = make_policy(validations=[{"expression": "true"}, {"expression": "false", "message": "second"},
                                      {"expression": "false", "message": "third"}])
    res = run(policy, pod())
    assert (res.message, res.validation) == ("second", 1)


def test_runtime_error_is_error_result():
    res = run(make_policy(validations=[{"expression": "object.spec.nope == 1"}]), pod())
    # Worded as Kyverno's engine words it (cel-go's error after "error: "), the validation's index beside it.
    assert (res.result, res.message, res.validation) == ("error", "error: no such key: nope", 0)


def test_no_match_gives_no_result():
    policy = make_policy(validations=NO_HOSTNET)
    assert run(policy, pod(), operation="DELETE") is None


def test_match_conditions_false_is_skip_and_errors_follow_failure_policy():
    skip = make_policy(validations=NO_HOSTNET, matchConditions=[{"name": "only-web",
                                                                 "expression": "object.metadata.name == 'web'"}])
    assert run(skip, pod("db")).result == "skip"
    assert run(skip, pod("web")).result == "pass"
    broken = [{"name": "broken", "expression": "object.metadata.nope == 'x'"}]
    assert run(make_policy(validations=NO_HOSTNET, matchConditions=broken), pod()).result == "error"
    assert run(make_policy(validations=NO_HOSTNET, matchConditions=broken, failurePolicy="Ignore"),
               pod()).result == "skip"


def test_variables_are_lazy_and_chain():
    policy = make_policy(
        variables=[{"name": "broken", "expression": "object.nope.nope"},
                   {"name": "containers", "expression": "object.spec.containers"},
                   {"name": "images", "expression": "variables.containers.map(c, c.image)"}],
        validations=[{"expression": "variables.images.all(i, i.contains(':'))", "message": "tag images"}])
    assert run(policy, pod()).result == "pass"  # the broken variable is never used
    uses_broken = make_policy(variables=[{"name": "broken", "expression": "object.nope.nope"}],
                              validations=[{"expression": "variables.broken == 1"}])
    res = run(uses_broken, pod())
    assert res.result == "error" and res.message == "error: no such key: nope"  # the variable's own error


def test_unscored_policy_turns_fail_into_warn():
    policy = make_policy(validations=NO_HOSTNET, annotations={"policies.kyverno.io/scored": "false"})
    assert run(policy, pod(hostNetwork=True)).result == "warn"


def test_audit_annotations_become_properties():
    policy = make_policy(validations=[{"expression": "true"}],
                         auditAnnotations=[{"key": "image", "valueExpression": "object.spec.containers[0].image"},
                                           {"key": "none", "valueExpression": "null"}])
    assert run(policy, pod()).properties == {"image": "nginx:1.25"}


def test_exception_exempts_and_report_result_pass():
    policy = make_policy(validations=NO_HOSTNET, name="no-hostnet")
    exc = PolicyException(name="e", namespace="default", policy_refs=(PolicyRef("no-hostnet"),),
                          match_conditions=(NamedExpression("ns", "object.metadata.name == 'special'"),))
    assert run(policy, pod("special", hostNetwork=True), [exc]).result == "skip"
    assert run(policy, pod("other", hostNetwork=True), [exc]).result == "fail"
    passing = PolicyException(**{**exc.__dict__, "report_result": "pass"})
    assert run(policy, pod("special", hostNetwork=True), [passing]).result == "pass"
    other = PolicyException(**{**exc.__dict__, "policy_refs": (PolicyRef("someone-else"),)})
    assert run(policy, pod("special", hostNetwork=True), [other]).result == "fail"


def test_partial_exception_feeds_the_exceptions_variable():
    policy = make_policy(name="images", validations=[{
        "expression": "object.spec.containers.all(c, c.image.startsWith('registry.local/') || "
                      "c.image in exceptions.allowedImages)"}])
    exc = PolicyException(name="e", policy_refs=(PolicyRef("images"),), allowed_images=("nginx:1.25",))
    assert run(policy, pod(), [exc]).result == "pass"
    assert run(policy, pod()).result == "fail"


def test_autogen_variants_evaluate_controllers():
    policy = make_policy(validations=NO_HOSTNET)
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
              "spec": {"template": {"metadata": {}, "spec": {"hostNetwork": True, "containers": []}}}}
    res = run(policy, deploy)
    assert (res.result, res.kind, res.autogen) == ("fail", "Deployment", "defaults")
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "default"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}}
    res = run(policy, cron)
    assert (res.result, res.autogen) == ("pass", "cronjobs")


def test_delete_evaluates_old_object():
    policy = make_policy(rules=[{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"],
                                 "resources": ["pods"]}],
                         # On DELETE the object is {} in Kyverno's engine (null in the API server's), oldObject the
                         # object deleted (checked against Kyverno's engine by tests/differential/suites/absent-objects).
                         validations=[{"expression": "oldObject.metadata.name != 'protected' && object == {}"}])
    assert run(policy, pod("protected"), operation="DELETE").result == "fail"
    assert run(policy, pod("free"), operation="DELETE").result == "pass"


def test_request_and_namespace_object_are_available():
    policy = make_policy(validations=[{"expression": "request.operation == 'CREATE' && "
                                                     "request.kind.kind == 'Pod' && "
                                                     "namespaceObject.metadata.name == object.metadata.namespace"}])
    team_a = {"team-a": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}}
    engine = PolicyEngine(policy)
    assert engine.evaluate(subject_for(pod(namespace="team-a"), resolve=resolve, namespaces=team_a)).result == "pass"
    # A namespace nobody described is null, as in Kyverno's CLI (checked by the Kyverno differential).
    null = make_policy(validations=[{"expression": "namespaceObject == null"}])
    assert run(null, pod(namespace="team-a")).result == "pass"



def test_variables_shared_between_policies_only_when_they_are_the_same():
    # Policies evaluated on one subject share SubjectData: a variable whose expression (and those of the
    # variables it reads) is the same is computed once; one that only looks the same is not.
    from vpol.engine.evaluate import SubjectData

    def policy(name, a, b="variables.a + '-x'"):
        return make_policy(name=name, variables=[{"name": "a", "expression": a}, {"name": "b", "expression": b}],
                           validations=[{"expression": "false", "messageExpression": "variables.b"}])

    subject = subject_for(pod("web"), resolve=resolve)
    data = SubjectData(subject)
    engines = [PolicyEngine(policy("one", "object.metadata.name")), PolicyEngine(policy("two", "'other'")),
               PolicyEngine(policy("three", "object.metadata.name"))]
    assert [e.evaluate(subject, data).message for e in engines] == ["web-x", "other-x", "web-x"]
    assert len(data.shared) == 4  # (a, b) of "one" and "three" once, those of "two" apart


def test_activations_shared_between_policies_only_when_their_values_are_the_same():
    # An Activation holds only the values an expression reads; one holding only shared values serves every
    # policy run on the subject that reads the same values (each Activation converts its values again).
    from vpol.engine.evaluate import SubjectData

    def policy(name, a):
        return make_policy(name=name, variables=[{"name": "a", "expression": a},
                                                 {"name": "b", "expression": "variables.a + '-' + request.operation"},
                                                 {"name": "unread", "expression": "object.metadata.name"}],
                           validations=[{"expression": "variables.b.startsWith(object.metadata.name)",
                                         "messageExpression": "variables.b"}])

    subject = subject_for(pod("web"), resolve=resolve)
    data = SubjectData(subject)
    # (Expression by expression: a policy's fused program, vpol.policies.validating.fused, needs no Activation of
    # its own.)
    engines = [PolicyEngine(policy(name, a), fused=False)
               for name, a in [("one", "object.metadata.name"), ("two", "'other'"), ("three", "object.metadata.name")]]
    results = [e.evaluate(subject, data) for e in engines]
    assert [(r.result, r.message) for r in results] == [("pass", "success"), ("fail", "other-CREATE"),
                                                        ("pass", "success")]
    # b's Activation (holding a) and the validation's (holding b, with object): once for "one" and "three",
    # once for "two"; "two" alone evaluates its messageExpression (holding b, without object).
    assert len(data.activations) == 5


def test_top_level_references_never_miss_a_name_the_expression_reads():
    from vpol.cel.compiler import top_level_references

    assert top_level_references("object.spec.containers.all(c, c.name != request.userInfo.username)") == \
        {"object", "request"}
    assert top_level_references("variables.x.exists(v, v in exceptions.allowedValues) || "
                                "image(oldObject.spec.image).registry() != ''") == \
        {"variables", "exceptions", "oldObject", "image"}  # image(): also the name of a library variable
    assert top_level_references("resource.Get('v1', 'configmaps', namespaceObject.metadata.name, 'c')") == \
        {"resource", "namespaceObject"}
    assert top_level_references("objects.size() + myobject + object_") == frozenset()


def test_results_survive_pickling_with_every_field():
    # (they cross from the evaluation workers to the CLI, webhook and scanner by pickling)
    import pickle

    from vpol.engine.evaluate import Result

    result = Result(policy="ns/p", result="fail", message="m", api_version="v1", kind="Pod", namespace="ns",
                    name="x", uid="u", validation=2, properties={"k": "v"}, autogen="cronjobs", exception="e")
    assert pickle.loads(pickle.dumps(result)) == result

"""Admission requests become subjects; results become one decision as the API server makes it for VAPs."""

from __future__ import annotations

from typing import Any

from tests.unit.policies import make_policy, pod
from vpol.engine.admission import (ALLOW, AUDIT, DENY, ERRORED, WARNED, decide, failure_response, review_response,
                                   subject_for_request)
from vpol.policies.validating.engine import PolicyEngine
from vpol.policies.validating.model import parse_policy

CHECK = [{"expression": "object.metadata.name != 'bad'", "messageExpression": "'name ' + object.metadata.name"}]


def request(obj, operation="CREATE", namespace="default", **extra):
    return {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": namespace,
            "operation": operation, "object": obj if operation != "DELETE" else None,
            "oldObject": obj if operation == "DELETE" else None,
            "userInfo": {"username": "alice", "groups": ["dev"]}, **extra}


def evaluate(policies, obj, **kw):
    subject = subject_for_request(request(obj, **kw), namespaced=True,
                                  namespace_object={"metadata": {"name": "default"}})
    results = [r for p in policies if (r := PolicyEngine(p).evaluate(subject)) is not None]
    return decide(results, {p.key: p for p in policies})


def test_request_fields_reach_the_subject():
    subject = subject_for_request(request(pod("x"), dryRun=True, subResource="status"), namespaced=True)
    assert subject.type.kind == "Pod" and subject.type.subresource == "status" and subject.dry_run
    assert subject.user_info["username"] == "alice" and subject.namespace == "default"
    gone = subject_for_request(request(pod("x"), operation="DELETE"))
    assert gone.object is None and gone.old_object is not None and gone.name == "x"


def test_deny_warn_and_audit_actions():
    deny = make_policy(name="deny", validations=CHECK)
    warn = make_policy(name="warn", validations=CHECK, validationActions=["Warn"])
    audit = make_policy(name="audit", validations=CHECK, validationActions=["Audit"])
    d = evaluate([deny, warn, audit], pod("bad"))
    assert not d.allowed and d.message == "Policy deny failed: name bad"
    assert d.warnings == ["Policy warn failed: name bad"]
    assert d.audit_annotations == {"audit.validation_failure": "name bad"}
    assert sorted(d.outcomes) == [("audit", AUDIT), ("deny", DENY), ("warn", WARNED)]
    ok = evaluate([deny, warn, audit], pod("good"))
    assert ok.allowed and not ok.warnings and sorted(o for _, o in ok.outcomes) == [ALLOW] * 3


def test_unscored_policies_still_deny_at_admission():
    p = make_policy(name="u", validations=CHECK, annotations={"policies.kyverno.io/scored": "false"})
    assert not evaluate([p], pod("bad")).allowed


def test_errors_follow_the_failure_policy():
    boom = [{"expression": "object.spec.nothere.x == 1"}]
    fail = make_policy(name="f", validations=boom)
    ignore = make_policy(name="i", validations=boom, failurePolicy="Ignore")
    d = evaluate([fail], pod("x"))
    assert not d.allowed and d.message.startswith("Policy f error:") and d.outcomes == [("f", ERRORED)]
    d = evaluate([ignore], pod("x"))
    assert d.allowed and d.outcomes == [("i", ERRORED)]


def test_passes_and_skips_allow_without_violations_or_annotations():
    passes = make_policy(name="p", validations=CHECK)
    skips = make_policy(name="s", validations=CHECK, matchConditions=[{"name": "never", "expression": "false"}])
    d = evaluate([passes, skips], pod("good"))
    assert d.allowed and d.outcomes == [("p", ALLOW), ("s", ALLOW)]
    assert not d.violations and not d.warnings and not d.audit_annotations and d.message == ""


def test_audit_annotations_of_the_policy_are_returned():
    p = make_policy(name="a", validations=[{"expression": "true"}],
                    auditAnnotations=[{"key": "who", "valueExpression": "request.userInfo.username"}])
    assert evaluate([p], pod("x")).audit_annotations == {"a.who": "alice"}


def test_review_responses():
    deny = make_policy(name="deny", validations=CHECK)
    body = review_response("u1", evaluate([deny], pod("bad")))
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == "u1" and body["response"]["allowed"] is False
    assert body["response"]["status"]["code"] == 403 and "name bad" in body["response"]["status"]["message"]
    assert failure_response("u2", "timed out", "Ignore")["response"]["allowed"] is True
    failed = failure_response("u2", "timed out", "Fail")["response"]
    assert failed["allowed"] is False and "timed out" in failed["status"]["message"]


def test_a_namespaced_policy_sees_only_its_own_namespace():
    from tests.unit.policies import make_policy as mk

    p = mk(name="n", validations=CHECK)
    p = type(p)(**{**p.__dict__, "namespace": "team", "kind": "NamespacedValidatingPolicy"})
    assert p.key == "team/n"
    here = subject_for_request(request(pod("bad", namespace="team"), namespace="team"), namespaced=True)
    there = subject_for_request(request(pod("bad", namespace="other"), namespace="other"), namespaced=True)
    result = PolicyEngine(p).evaluate(here)
    assert result is not None and result.result == "fail" and result.policy == "team/n"
    assert PolicyEngine(p).evaluate(there) is None
    d = decide([result], {p.key: p})
    assert not d.allowed and d.message == "Policy team/n failed: name bad"


def test_a_connect_request_is_about_the_pod_it_names():
    """`kubectl exec` is CONNECT pods/exec with a PodExecOptions object, which has no metadata: the request's name
    and namespace say which Pod, as the API server's matching and Kyverno's `request` use them (a namespaceSelector,
    a namespaced policy, `request.namespace`). vpol matched nothing there: a policy Ready and enforced by the
    webhook let every exec through (found on the test node, tests/e2e/test_helm_node.py)."""
    exec_request = {"uid": "u2", "kind": {"group": "", "version": "v1", "kind": "PodExecOptions"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "exec",
                    "name": "web", "namespace": "team-a", "operation": "CONNECT",
                    "userInfo": {"username": "alice"},
                    "object": {"apiVersion": "v1", "kind": "PodExecOptions", "command": ["sh"], "stdin": True}}
    subject = subject_for_request(exec_request, namespaced=True)
    assert (subject.namespace, subject.name) == ("team-a", "web")
    assert subject.admission_request()["namespace"] == "team-a" and subject.admission_request()["name"] == "web"
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT"], "resources": ["pods/exec"]}
    no_shell = [{"expression": "!object.command.exists(c, c == 'sh')",
                 "messageExpression": "'no shell in ' + request.namespace + '/' + request.name"}]
    selected = make_policy(name="selected", validations=no_shell, matchConstraints={
        "resourceRules": [rule], "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}})
    def namespaced_policy(name: str, namespace: str) -> Any:
        policy, problems = parse_policy({
            "apiVersion": "policies.kyverno.io/v1", "kind": "NamespacedValidatingPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"matchConstraints": {"resourceRules": [rule]}, "validations": no_shell}})
        assert policy is not None and policy.namespace == namespace, problems
        return policy

    namespaced, elsewhere = namespaced_policy("mine", "team-a"), namespaced_policy("theirs", "team-b")
    namespace = {"metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a"}}}
    for policy in (selected, namespaced):
        subject = subject_for_request(exec_request, namespaced=True, namespace_object=namespace)
        result = PolicyEngine(policy).evaluate(subject)
        assert result is not None and result.result == "fail" and result.message == "no shell in team-a/web", policy
    assert PolicyEngine(elsewhere).evaluate(subject_for_request(exec_request, namespaced=True,
                                                                namespace_object=namespace)) is None

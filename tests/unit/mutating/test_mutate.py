"""The mutation engine: order, autogen variants, matchConditions, errors, exceptions, reinvocation."""

from __future__ import annotations

from typing import Any

import yaml

from vpol.engine.evaluate import compile_exception
from vpol.engine.subjects import subject_for
from vpol.model.parse import parse_exception
from vpol.policies.mutating.engine import MutatingPolicyEngine, mutate_all
from vpol.policies.mutating.model import parse_mutating_policy


def _engine(text: str, **kw: Any) -> MutatingPolicyEngine:
    policy, problems = parse_mutating_policy(yaml.safe_load(text))
    assert policy is not None, problems
    return MutatingPolicyEngine(policy, **kw)


POD_POLICY = """
apiVersion: policies.kyverno.io/v1alpha1
kind: MutatingPolicy
metadata: {name: %(name)s}
spec:
  reinvocationPolicy: %(reinvocation)s
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
  matchConditions: [{name: c, expression: %(condition)s}]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: '%(expression)s'}
"""


def _pod_policy(name: str, expression: str, condition: str = "'true'", reinvocation: str = "Never") -> str:
    return POD_POLICY % {"name": name, "expression": expression, "condition": condition,
                         "reinvocation": reinvocation}


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
       "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
              "spec": {"template": {"metadata": {}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
CRONJOB = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "j", "namespace": "ns"},
           "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
               "containers": [{"name": "c", "image": "nginx"}]}}}}}}

NON_ROOT = ('Object{metadata: Object.metadata{labels: {"team": "x"}}, spec: Object.spec{containers: '
            'object.spec.containers.map(c, Object.spec.containers{name: c.name, securityContext: '
            'Object.spec.containers.securityContext{runAsNonRoot: true}})}}')


def test_pod_policy_mutates_pods_and_through_autogen_controllers() -> None:
    engine = _engine(_pod_policy("non-root", NON_ROOT))
    pod, (result,) = mutate_all([engine], subject_for(POD))
    assert result.result == "pass" and result.autogen == ""
    assert pod["metadata"]["labels"] == {"team": "x"}
    assert pod["spec"]["containers"][0]["securityContext"] == {"runAsNonRoot": True}
    deployment, (result,) = mutate_all([engine], subject_for(DEPLOYMENT))
    assert result.autogen == "defaults"
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"] == {"team": "x"} and "labels" not in deployment["metadata"]
    assert template["spec"]["containers"][0]["securityContext"] == {"runAsNonRoot": True}
    cronjob, (result,) = mutate_all([engine], subject_for(CRONJOB))
    assert result.autogen == "cronjobs"
    job_template = cronjob["spec"]["jobTemplate"]["spec"]["template"]
    assert job_template["spec"]["containers"][0]["securityContext"] == {"runAsNonRoot": True}
    assert POD["spec"]["containers"][0] == {"name": "c", "image": "nginx"}  # inputs untouched


def test_policies_apply_in_order_each_seeing_the_last_result() -> None:
    first = _engine(_pod_policy("a", 'Object{metadata: Object.metadata{labels: {"step": "1"}}}'))
    second = _engine(_pod_policy("b", 'Object{metadata: Object.metadata{labels: {"seen": object.metadata.labels.step}}}'))
    obj, results = mutate_all([first, second], subject_for(POD))
    assert obj["metadata"]["labels"] == {"step": "1", "seen": "1"}
    assert [r.policy for r in results] == ["a", "b"]


def test_false_condition_skips_and_error_keeps_the_object() -> None:
    skip = _engine(_pod_policy("s", 'Object{metadata: Object.metadata{labels: {"x": "y"}}}', condition="'false'"))
    broken = _engine(_pod_policy("e", 'Object{spec: Object.spec{tolerations: []}}'))
    obj, results = mutate_all([skip, broken], subject_for(POD))
    assert [r.result for r in results] == ["skip", "error"]
    assert "may not mutate atomic" in results[1].message
    assert obj == POD


def test_json_patch_test_failure_leaves_the_object() -> None:
    engine = _engine("""
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: j}
spec:
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
  autogen: {podControllers: {controllers: []}}
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "test", path: "/metadata/name", value: "other"},
                              JSONPatch{op: "add", path: "/metadata/labels", value: {"a": "b"}}]'}
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "add", path: "/metadata/annotations", value: {"k": "v"}}]'}
""")
    obj, (result,) = mutate_all([engine], subject_for(POD))
    assert result.result == "pass"
    assert "labels" not in obj["metadata"] and obj["metadata"]["annotations"] == {"k": "v"}
    assert mutate_all([engine], subject_for(DEPLOYMENT))[1] == []  # no autogen: not matched


def test_exception_skips_the_policy() -> None:
    exc, _ = parse_exception(yaml.safe_load("""
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: x, namespace: ns}
spec:
  policyRefs: [{name: non-root, kind: MutatingPolicy}]
  matchConditions: [{name: all, expression: 'true'}]
"""))
    assert exc is not None
    engine = _engine(_pod_policy("non-root", NON_ROOT), exceptions=[compile_exception(exc)])
    obj, (result,) = mutate_all([engine], subject_for(POD))
    assert result.result == "skip" and "policy exception" in result.message
    assert obj == POD


def test_if_needed_policies_run_again_after_a_later_change() -> None:
    # "copy" copies a label that "late" sets only after it: one reinvocation picks it up.
    copy_label = _engine(_pod_policy(
        "copy", 'Object{metadata: Object.metadata{labels: {"copy": object.metadata.?labels.?src.orValue("none")}}}',
        reinvocation="IfNeeded"))
    late = _engine(_pod_policy("late", 'Object{metadata: Object.metadata{labels: {"src": "late"}}}'))
    obj, results = mutate_all([copy_label, late], subject_for(POD))
    assert obj["metadata"]["labels"] == {"copy": "late", "src": "late"}
    never = _engine(_pod_policy(
        "copy", 'Object{metadata: Object.metadata{labels: {"copy": object.metadata.?labels.?src.orValue("none")}}}'))
    obj, _ = mutate_all([never, late], subject_for(POD))
    assert obj["metadata"]["labels"]["copy"] == "none"


def test_optional_selection_through_a_null_is_none_as_in_cel_go() -> None:
    engine = _engine(_pod_policy(
        "nullsafe", 'Object{metadata: Object.metadata{labels: {"ship": "yes"}}}',
        condition="\"object.metadata.?annotations[?'ship'].orValue('') == 'true' || true\""))
    pod = {**POD, "metadata": {**POD["metadata"], "annotations": None}}
    obj, (result,) = mutate_all([engine], subject_for(pod))
    assert result.result == "pass", result.message
    assert obj["metadata"]["labels"] == {"ship": "yes"}

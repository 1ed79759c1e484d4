"""Requests the webhook's serving process answers itself (vpol.policies.inline): the same answers as a worker's,
and only when their work is bounded within the limits; everything else is left to a worker."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.engine.test_sandbox_admit import NAMESPACE, POLICIES, review
from tests.unit.policies import make_policy, pod
from vpol.cli.inputs import load_policies
from vpol.policies.inline import InlineAdmission, InlineLimits
from vpol.policies.sandbox import AdmissionCall, SandboxedEvaluator

REPO = Path(__file__).resolve().parents[3]
PSS = load_policies([str(REPO / "examples" / "pod-security")]).policies


def deny(policies: list[Any]) -> list[Any]:
    """The policies with validationActions [Deny] (the examples audit)."""
    out = []
    for p in policies:
        raw = copy.deepcopy(p.raw)
        raw["spec"]["validationActions"] = ["Deny"]
        out.append(make_policy(name=p.name, **raw["spec"]))
    return out


def variations() -> list[dict[str, Any]]:
    """Pods and a Deployment: compliant, and breaking the Pod Security policies in different ways."""
    base = pod("web", securityContext={"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}})
    base["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["ALL"]}}
    out = [base]
    for change in ({"privileged": True}, {"capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]}},
                   {"runAsUser": 0}, {"seccompProfile": {"type": "Unconfined"}}):
        p = copy.deepcopy(base)
        p["spec"]["containers"][0]["securityContext"].update(change)
        out.append(p)
    p = copy.deepcopy(base)
    p["spec"]["hostNetwork"] = True
    p["spec"]["containers"].append({"name": "side", "image": "busybox:1", "ports": [{"containerPort": 80,
                                                                                   "hostPort": 80}]})
    p["metadata"]["annotations"] = {"container.apparmor.security.beta.kubernetes.io/side": "unconfined"}
    out.append(p)
    p = copy.deepcopy(base)
    p["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": "/etc"}}]
    out.append(p)
    return out


def deployment_review(pod_obj: dict[str, Any], uid: str) -> dict[str, Any]:
    """A Deployment running ``pod_obj``'s spec: answered by the policies' autogen variant, planned when met."""
    template = {"metadata": {"labels": {"app": "web"}}, "spec": pod_obj["spec"]}
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}}
    out = review(obj, uid=uid)
    out["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    out["request"]["resource"] = {"group": "apps", "version": "v1", "resource": "deployments"}
    return out


def worker_answer(policies: list[Any], body: bytes, call: AdmissionCall) -> dict[str, Any]:
    with SandboxedEvaluator(policies) as ev:
        ev.start()
        answer, error = asyncio.run(ev.admit(call, 10.0))
    assert error == "" and answer is not None
    return {"body": json.loads(answer.body), "outcomes": answer.outcomes, "violations": answer.violations}


@pytest.mark.parametrize("failure_policy", ["Fail", "Ignore"])
def test_inline_answers_are_the_workers(failure_policy: str) -> None:
    policies = deny(PSS) + POLICIES
    inline = InlineAdmission(policies, [])
    assert inline.covers(failure_policy)
    allowed = set()
    reviews = [review(obj, uid=f"u-{i}") for i, obj in enumerate(variations())]
    reviews += [deployment_review(obj, f"d-{i}") for i, obj in enumerate(variations()[:3])]
    for i, one in enumerate(reviews):
        body = json.dumps(one).encode()
        call = AdmissionCall(body, failure_policy, True, NAMESPACE)
        got = inline.admit(json.loads(body)["request"], len(body), call)
        assert got is not None, i
        assert {"body": json.loads(got.body), "outcomes": got.outcomes, "violations": got.violations} == \
            worker_answer(policies, body, call), i
        allowed.add(json.loads(got.body)["response"]["allowed"])
    # what the comparison covers: admitted and denied requests (Ignore: POLICIES' ignored-elsewhere denies all)
    assert allowed == ({True, False} if failure_policy == "Fail" else {False})


def test_large_requests_and_unplanned_policies_are_left_to_a_worker() -> None:
    policies = deny(PSS)
    small = InlineAdmission(policies, [], InlineLimits(max_body_bytes=100))
    obj = variations()[0]
    body = json.dumps(review(obj)).encode()
    call = AdmissionCall(body, "Fail", True, NAMESPACE)
    assert small.admit(json.loads(body)["request"], len(body), call) is None
    inline = InlineAdmission(policies, [])
    assert inline.admit(json.loads(body)["request"], len(body), call) is not None
    # 300 containers: every filter/map over them copies 45,000 elements, beyond the work limit
    many = copy.deepcopy(obj)
    many["spec"]["containers"] = [dict(obj["spec"]["containers"][0], name=f"c{i}") for i in range(300)]
    body = json.dumps(review(many)).encode()
    assert inline.admit(json.loads(body)["request"], len(body), AdmissionCall(body, "Fail", True, NAMESPACE)) is None
    # a policy whose work has no bound: its webhook's requests all go to a worker
    quadratic = make_policy(name="quadratic", validationActions=["Deny"], validations=[
        {"expression": "object.spec.containers.all(c, object.spec.containers.all(d, c == d || c.name != d.name))"}])
    mixed = InlineAdmission([*policies, quadratic], [])
    assert not mixed.covers("Fail")
    body = json.dumps(review(obj)).encode()
    assert mixed.admit(json.loads(body)["request"], len(body), AdmissionCall(body, "Fail", True, NAMESPACE)) is None
    # mutating requests are never answered inline
    call = AdmissionCall(body, "Fail", True, NAMESPACE, mutating=True)
    assert inline.admit(json.loads(body)["request"], len(body), call) is None


@pytest.mark.parametrize("expression", [
    "globalContext.Get('entry', '') != null",
    "http.Get('http://127.0.0.1:1/') != null",
    "resource.Get('v1', 'configmaps', 'default', 'x') != null",
    "object.spec.containers.all(c, image(c.image).registry() != '')",
])
def test_policies_reading_outside_the_request_are_never_answered_inline(expression: str) -> None:
    """The serving process has no global context and must not block on I/O: a policy reading either (or any
    function without a cost bound) leaves its webhook's requests to the workers."""
    bounded = make_policy(name="bounded", validations=[{"expression": "object.spec.containers.all(c, c.name != '')"}])
    reading = make_policy(name="reading", validations=[{"expression": expression}])
    assert InlineAdmission([bounded], []).covers("Fail")
    assert not InlineAdmission([bounded, reading], []).covers("Fail")

"""A worker answers a whole admission request (``SandboxedEvaluator.admit``), awaited on the event loop.

The answer must be the one the serving process would have built from the worker's results (the same
``decide`` and ``review_response`` as ``vpol apply``'s decisions), only the policies of the webhook's
failurePolicy decide, and a runaway request costs its worker the deadline, not the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import jsonpatch
import pytest

from tests.unit.policies import make_policy, pod
from vpol.engine.admission import decide, review_response, subject_for_request
from vpol.policies.mutating.model import parse_mutating_policy
from vpol.policies.sandbox import AdmissionCall, Limits, SandboxedEvaluator
from vpol.policies.validating.engine import PolicyEngine


def review(obj: dict[str, Any], uid: str = "u-1", operation: str = "CREATE") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": obj["metadata"]["namespace"],
        "operation": operation, "userInfo": {"username": "alice", "groups": ["devs"]}, "object": obj,
        "oldObject": None, "dryRun": False}}


NAMESPACE = {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "default", "labels": {"kubernetes.io/metadata.name": "default", "team": "a"}}}

POLICIES = [
    make_policy(name="deny-latest", validationActions=["Deny"], validations=[
        {"expression": "object.spec.containers.all(c, !c.image.endsWith(':latest'))",
         "messageExpression": "'image of ' + object.metadata.name + ' must be pinned'"}]),
    make_policy(name="warn-label", validationActions=["Warn"], validations=[
        {"expression": "has(object.metadata.labels.app)", "message": "an app label is expected"}]),
    make_policy(name="audit-team", validationActions=["Audit"], validations=[
        {"expression": "namespaceObject.metadata.labels.team == 'b'", "message": "team b only"}]),
    make_policy(name="ignored-elsewhere", validationActions=["Deny"], failurePolicy="Ignore", validations=[
        {"expression": "false", "message": "only the Ignore webhook evaluates me"}]),
]


def expected(obj: dict[str, Any], failure_policy: str) -> dict[str, Any]:
    """What the serving process built before the worker answered whole requests: decide() over the
    in-process engine's results for the policies of this failurePolicy."""
    chosen = {p.key: p for p in POLICIES if p.spec.failure_policy == failure_policy}
    subject = subject_for_request(review(obj)["request"], namespaced=True, namespace_object=NAMESPACE)
    results = [r for p in chosen.values() if (r := PolicyEngine(p).evaluate(subject)) is not None]
    return review_response("u-1", decide(results, chosen))


def admit(ev: SandboxedEvaluator, call: AdmissionCall, timeout: float = 10.0) -> Any:
    return asyncio.run(ev.admit(call, timeout))


@pytest.mark.parametrize("failure_policy", ["Fail", "Ignore"])
@pytest.mark.parametrize("image", ["nginx:latest", "nginx:1.25"])
def test_the_worker_answers_as_the_engine_decides(failure_policy: str, image: str) -> None:
    obj = pod("web")
    obj["spec"]["containers"][0]["image"] = image
    with SandboxedEvaluator(POLICIES) as ev:
        ev.start()
        answer, error = admit(ev, AdmissionCall(json.dumps(review(obj)).encode(), failure_policy, True, NAMESPACE))
    assert error == ""
    got = json.loads(answer.body)
    assert got == expected(obj, failure_policy)
    if failure_policy == "Fail":
        # what the comparison covers: a denial with the message, a warning and an audit annotation
        assert got["response"]["allowed"] is (image != "nginx:latest")
        assert got["response"]["warnings"] == ["Policy warn-label failed: an app label is expected"]
        assert got["response"]["auditAnnotations"] == {"audit-team.validation_failure": "team b only"}
        assert dict(answer.outcomes) == {"deny-latest": "deny" if image == "nginx:latest" else "allow",
                                         "warn-label": "warn", "audit-team": "audit"}
    else:
        assert got["response"]["allowed"] is False
        assert dict(answer.outcomes) == {"ignored-elsewhere": "deny"}
    assert answer.seconds > 0


def test_a_mutating_request_is_answered_with_a_json_patch() -> None:
    doc = {"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": "label"},
           "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                            "operations": ["CREATE"], "resources": ["pods"]}]},
                    "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                        "expression": 'Object{metadata: Object.metadata{labels: {"stamped": "yes"}}}'}}]}}
    policy, problems = parse_mutating_policy(doc)
    assert policy is not None, problems
    obj = pod("web")
    with SandboxedEvaluator([], mutating=[policy]) as ev:
        ev.start()
        answer, error = admit(ev, AdmissionCall(json.dumps(review(obj)).encode(), "Fail", True, NAMESPACE,
                                                mutating=True))
    assert error == ""
    response = json.loads(answer.body)["response"]
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    patched = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
    assert patched["metadata"]["labels"] == {"stamped": "yes"}
    assert answer.outcomes == (("label", "mutate"),)


def test_a_runaway_request_costs_its_worker_the_deadline_and_the_loop_keeps_running() -> None:
    slow = make_policy(name="slow", validations=[
        {"expression": "lists.range(9000).map(x, lists.range(9000).filter(y, y > x)).size() > 0"}])
    body = json.dumps(review(pod("web"))).encode()
    ticks: list[float] = []

    async def scenario(ev: SandboxedEvaluator) -> tuple[Any, str, float]:
        async def ticker() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.05)

        task = asyncio.create_task(ticker())
        started = time.monotonic()
        answer, error = await ev.admit(AdmissionCall(body, "Fail", True, NAMESPACE), 0.5)
        elapsed = time.monotonic() - started
        task.cancel()
        return answer, error, elapsed

    with SandboxedEvaluator([slow], limits=Limits(seconds_per_subject=0.5, memory_bytes=8 * 1024**3)) as ev:
        ev.start()
        killed = ev._proc.pid  # noqa: SLF001
        answer, error, elapsed = asyncio.run(scenario(ev))
        assert answer is None and "time limit of 0.5s" in error
        assert elapsed < 2 and ev.kills == 1
        # the event loop ran meanwhile (no blocking wait on the worker)
        assert len(ticks) >= 5
        # at once, while the killed process may still look alive: it is neither running nor asked again
        assert not ev.running
        answer, error = admit(ev, AdmissionCall(body, "Fail", True, NAMESPACE))
        assert answer is None and "not running" in error
        ev.start()  # what the serving pool does off the request path, right after the kill
        assert ev.running and ev._proc.pid != killed  # noqa: SLF001 - a new process, not the dying one


def test_a_worker_that_died_is_reported_not_waited_for() -> None:
    fine = make_policy(name="fine", validations=[{"expression": "true"}])
    body = json.dumps(review(pod("web"))).encode()
    with SandboxedEvaluator([fine]) as ev:
        ev.start()
        ev._proc.kill()  # noqa: SLF001 - a worker dying between requests
        ev._proc.join(5)  # noqa: SLF001
        started = time.monotonic()
        answer, error = admit(ev, AdmissionCall(body, "Fail", True, NAMESPACE), 5.0)
        assert answer is None and error
        assert time.monotonic() - started < 1
        ev.start()
        answer, error = admit(ev, AdmissionCall(body, "Fail", True, NAMESPACE), 5.0)
        assert error == "" and json.loads(answer.body)["response"]["allowed"] is True


def test_a_large_object_is_answered_like_a_small_one() -> None:
    """A body, and an answer path, far larger than a pipe holds: the exchange still completes and decides alike."""
    obj = pod("web")
    obj["metadata"]["annotations"] = {f"k{i}": "v" * 1000 for i in range(3000)}  # ~3 MiB
    obj["spec"]["containers"][0]["image"] = "nginx:latest"
    body = json.dumps(review(obj)).encode()
    assert len(body) > 2 * 1024**2
    with SandboxedEvaluator(POLICIES) as ev:
        ev.start()
        answer, error = admit(ev, AdmissionCall(body, "Fail", True, NAMESPACE))
    assert error == ""
    assert json.loads(answer.body) == expected(obj, "Fail")

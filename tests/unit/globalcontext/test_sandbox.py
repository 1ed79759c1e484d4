"""GlobalContextEntry data in the evaluation workers: what they hold follows the store, request by request."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.unit.policies import make_policy, pod
from vpol.cel.global_context import READY, RESOURCE, EntryState, api_call_state
from vpol.engine.global_context import GlobalContextStore
from vpol.engine.request import ResourceType
from vpol.engine.subjects import subject_for
from vpol.policies.sandbox import AdmissionCall, Limits, SandboxedEvaluator

PODS = ResourceType("", "v1", "pods", "Pod", True)

POLICY = make_policy(name="allowed-names", validations=[
    {"expression": "object.metadata.name in globalContext.Get('names', 'all')",
     "messageExpression": "'not one of ' + globalContext.Get('names', 'all').join(', ')"}])


def store_with(*names: str) -> GlobalContextStore:
    store = GlobalContextStore()
    store.set_state(EntryState("names", RESOURCE, READY, projections=(("all", "[].metadata.name"),)))
    store.replace_objects("names", {f"default/{n}": pod(n) for n in names})
    return store


def result(ev: SandboxedEvaluator, name: str) -> tuple[str, str]:
    [r] = ev.evaluate(subject_for(pod(name), resolve=lambda a, k: PODS))
    return r.result, r.message


def test_workers_see_the_store_and_its_changes() -> None:
    store = store_with("a")
    with SandboxedEvaluator([POLICY], limits=Limits(seconds_per_subject=10), global_context=store) as ev:
        assert result(ev, "a") == ("pass", "success")
        assert result(ev, "b") == ("fail", "not one of a")
        store.upsert("names", pod("b"))
        assert result(ev, "b") == ("pass", "success")
        store.remove("names", "default/a")
        assert result(ev, "a") == ("fail", "not one of b")
        # a worker that is replaced gets everything again
        ev._kill()
        assert result(ev, "b") == ("pass", "success")
        store.drop("names")
        status, message = result(ev, "b")  # an unknown entry is null: `in null` has no overload
        assert status == "error" and message == "error: no such overload"


def test_an_entry_that_failed_is_an_error_with_its_reason() -> None:
    store = store_with("a")
    store.set_state(EntryState("names", RESOURCE, "failed", error="failed to load global context entry \"names\": "
                                                                 "listing pods/v1: HTTP 403: forbidden"))
    with SandboxedEvaluator([POLICY], limits=Limits(seconds_per_subject=10), global_context=store) as ev:
        status, message = result(ev, "a")
        assert status == "error"
        assert "failed to get global reference: failed to load global context entry \"names\"" in message
        assert "HTTP 403" in message


def review(obj: dict[str, Any]) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "default",
        "operation": "CREATE", "userInfo": {"username": "x"}, "object": obj, "oldObject": None}}).encode()


def test_admission_requests_see_changes_between_requests() -> None:
    store = GlobalContextStore()
    store.set_state(api_call_state("names", {"all": ["a"]}, []))
    policy = make_policy(name="allowed", validations=[
        {"expression": "object.metadata.name in globalContext.Get('names', '').all", "message": "not allowed"}])

    async def run() -> list[bool]:
        allowed = []
        with SandboxedEvaluator([policy], limits=Limits(seconds_per_subject=10), global_context=store) as ev:
            await asyncio.to_thread(ev.start)
            for name, data in (("a", None), ("b", None), ("b", {"all": ["a", "b"]})):
                if data is not None:
                    store.set_state(api_call_state("names", data, []))
                answer, error = await ev.admit(AdmissionCall(review(pod(name)), "Fail", True), 10)
                assert answer is not None, error
                allowed.append(json.loads(answer.body)["response"]["allowed"])
        return allowed

    assert asyncio.run(run()) == [True, False, True]

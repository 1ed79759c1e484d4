"""GeneratingPolicies and DeletingPolicies evaluate in the bounded worker too (vpol.policies.sandbox): an expression
that
runs away costs its trigger (or object) an error within the deadline, a memory explosion is an error rather than the
operator's end, and the worker is replaced with the engines it held."""

from __future__ import annotations

import time

from tests.unit.lifecycle.builders import configmap, dpol, gpol, rules
from vpol.engine.request import ResourceType
from vpol.engine.subjects import subject_for
from vpol.model.discovery import builtin
from vpol.policies.deleting.engine import DeletingPolicyEngine
from vpol.policies.generating.engine import GeneratingPolicyEngine, KnownScopes
from vpol.policies.sandbox import Limits, SandboxedEvaluator

CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
SLOW = "lists.range(9000).map(x, lists.range(9000).filter(y, y > x)).size() > 0"
HOG = "lists.range(9000).map(x, lists.range(9000)).size() > 0"
COPY = ('generator.Apply(object.metadata.namespace, [{"apiVersion": "v1", "kind": "ConfigMap", '
        '"metadata": {"name": "copy-" + object.metadata.name}, "data": {"from": object.metadata.name}}])')


def trigger(name: str) -> object:
    return subject_for(configmap(name), operation="CREATE", resolve=lambda a, k: CONFIGMAPS)


def generating(name: str, condition: str) -> object:
    return gpol({"matchConstraints": rules(), "matchConditions": [{"name": "c", "expression": condition}],
                 "generate": [{"expression": COPY}]}, name=name)


def test_a_runaway_generation_is_an_error_of_its_trigger_and_the_worker_goes_on() -> None:
    slow, fine = generating("slow", f"{SLOW} || object.metadata.name == 'go'"), generating("fine", "true")
    scopes = KnownScopes.of(builtin().resources)
    with SandboxedEvaluator([], limits=Limits(seconds_per_subject=0.5, memory_bytes=8 * 1024**3)) as worker:
        worker.load("slow", "GeneratingPolicy", slow, [], scopes)
        worker.load("fine", "GeneratingPolicy", fine, [], scopes)
        started = time.monotonic()
        status, reason = worker.call("slow", "generate", [trigger("go")])
        assert (status, "time limit" in str(reason)) == ("killed", True), (status, reason)
        assert time.monotonic() - started < 20 and worker.kills == 1
        # A new worker, which loads the engines again: the same answers as this process's engine.
        status, [generation] = worker.call("fine", "generate", [trigger("settings")])
        local = GeneratingPolicyEngine(fine, namespaced=scopes).generate(trigger("settings"))  # type: ignore[arg-type]
        assert status == "ok" and local is not None and generation == local
        assert [d.object["metadata"]["name"] for d in generation.downstreams] == ["copy-settings"]


def test_a_memory_explosion_in_a_deleting_policy_is_an_error_not_a_crash() -> None:
    hog = dpol({"schedule": "*/1 * * * *", "matchConstraints": rules(operations=("*",)),
                "conditions": [{"name": "hog", "expression": HOG}]}, name="hog")
    keep = dpol({"schedule": "*/1 * * * *", "matchConstraints": rules(operations=("*",)),
                 "conditions": [{"name": "named", "expression": "object.metadata.name == 'old'"}]}, name="keep")
    with SandboxedEvaluator([], limits=Limits(seconds_per_subject=20.0, memory_bytes=600 * 1024**2)) as worker:
        worker.load("hog", "DeletingPolicy", hog, [])
        worker.load("keep", "DeletingPolicy", keep, [])
        # Under the worker's address-space cap the expression fails to allocate: the object's error (the engine
        # catches MemoryError), or the worker dies and a new one is started.
        status, answer = worker.call("hog", "evaluate", [trigger("old")])
        if status == "ok":
            [verdict] = answer
            assert verdict.result == "error" and "memory" in verdict.message, verdict
        else:
            assert status == "killed" and "memory" in str(answer), (status, answer)
        status, verdicts = worker.call("keep", "evaluate", [trigger("old"), trigger("new")])
        local = DeletingPolicyEngine(keep)
        assert status == "ok" and verdicts == [local.evaluate(trigger("old")), local.evaluate(trigger("new"))]  # type: ignore[arg-type]
        assert [v.result for v in verdicts] == ["pass", "fail"]


def test_an_engine_not_loaded_is_an_error() -> None:
    with SandboxedEvaluator([]) as worker:
        assert worker.call("nothing", "generate", []) == ("error", "no engine is loaded for nothing")


class CountingWorker:
    """Stands for the worker: answers each subject with a generation named after it; records every round trip."""

    def __init__(self, status: str = "ok"):
        self.status = status
        self.calls: list[list[str]] = []

    def load(self, *_args: object) -> None:
        pass

    def unload(self, _key: str) -> None:
        pass

    def call(self, key: str, method: str, subjects: list) -> tuple[str, object]:
        from vpol.engine.evaluate import Result
        from vpol.policies.generating.engine import Generation as Generated

        self.calls.append([s.name for s in subjects])
        if self.status != "ok":
            return self.status, "evaluation exceeded the time limit of 5s"
        return "ok", [Generated(Result(key, "pass", s.name)) for s in subjects]


def test_a_batch_of_triggers_is_one_round_trip_per_policy() -> None:
    """The triggers of one batch of changes are evaluated in one worker round trip per policy (a round trip each
    cost more than the generations), and each trigger's generation is then the worker's answer for it; a batch the
    worker does not answer is left to the triggers one at a time."""
    from kubernetes import client

    from vpol.controller.generation import Generation

    policy = generating("fine", "true")
    triggers = [trigger(f"cm-{i}") for i in range(3)]
    for status, expected_calls in (("ok", [["cm-0", "cm-1", "cm-2"]]),
                                   ("killed", [["cm-0", "cm-1", "cm-2"], ["cm-1"]])):
        worker = CountingWorker(status)
        generation = Generation(client.ApiClient(), resolve=lambda a, k: CONFIGMAPS, namespaces={},
                                discovery=builtin, store=lambda *a: None, reported=lambda uid, key: "",
                                worker=worker)  # type: ignore[arg-type]
        generation.set_policy(policy.key, policy)  # type: ignore[arg-type]
        generation._evaluate_ahead([policy], triggers)  # type: ignore[list-item]
        engine = generation._engine(policy)  # type: ignore[arg-type]
        answer = generation._evaluate(policy, engine, triggers[1])  # type: ignore[arg-type]
        assert worker.calls == expected_calls, status
        if status == "ok":
            assert answer is not None and answer.result.message == "cm-1"
        else:
            assert answer is not None and answer.result.result == "error" and "time limit" in answer.result.message

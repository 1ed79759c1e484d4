"""GeneratingPolicies and DeletingPolicies evaluate in the bounded worker too (vpol.engine.sandbox): an expression that
runs away costs its trigger (or object) an error within the deadline, a memory explosion is an error rather than the
operator's end, and the worker is replaced with the engines it held."""

from __future__ import annotations

import time

from tests.unit.lifecycle.builders import configmap, dpol, gpol, rules
from vpol.engine.generate import DeletingPolicyEngine, GeneratingPolicyEngine, KnownScopes
from vpol.engine.request import ResourceType
from vpol.engine.sandbox import Limits, SandboxedEvaluator
from vpol.engine.subjects import subject_for
from vpol.model.discovery import builtin

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

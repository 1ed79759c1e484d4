"""Runaway expressions yield an error result within the deadline; other policies still evaluate."""

from __future__ import annotations

import time

from tests.unit.policies import make_policy, pod
from vpol.engine.request import ResourceType
from vpol.engine.subjects import subject_for
from vpol.policies.sandbox import Limits, SandboxedEvaluator

PODS = ResourceType("", "v1", "pods", "Pod", True)


def subject(obj):
    return subject_for(obj, resolve=lambda a, k: PODS)


def test_runaway_expression_is_an_error_and_others_still_run():
    slow = make_policy(name="slow", validations=[
        {"expression": "lists.range(9000).map(x, lists.range(9000).filter(y, y > x)).size() > 0"}])
    fine = make_policy(name="fine", validations=[{"expression": "object.metadata.name == 'pod'"}])
    limits = Limits(seconds_per_subject=0.3, memory_bytes=8 * 1024**3)  # the iteration budget takes ~1 s
    with SandboxedEvaluator([slow, fine], limits=limits) as ev:
        started = time.monotonic()
        results = {r.policy: r for r in ev.evaluate(subject(pod()))}
        elapsed = time.monotonic() - started
        assert results["slow"].result == "error"
        assert "time limit" in results["slow"].message
        assert results["fine"].result == "pass"
        assert ev.kills >= 1
        # The worker is replaced and keeps serving.
        again = {r.policy: r.result for r in ev.evaluate(subject(pod("other")))}
        assert again == {"slow": "error", "fine": "fail"}
    # two deadlines plus worker restarts, far below the minutes a runaway would take
    assert elapsed < 30


def test_memory_explosion_is_an_error_not_a_crash():
    hog = make_policy(name="hog", validations=[
        {"expression": "lists.range(9000).map(x, lists.range(9000)).size() > 0"}])
    limits = Limits(seconds_per_subject=20.0, memory_bytes=600 * 1024**2)
    with SandboxedEvaluator([hog], limits=limits) as ev:
        [res] = ev.evaluate(subject(pod()))
        assert res.result == "error"
        assert "memory" in res.message


def test_normal_results_match_in_process_engine():
    from vpol.policies.validating.engine import PolicyEngine

    policies = [make_policy(name=f"p{i}", validations=[{"expression": f"object.metadata.name.size() > {i}"}])
                for i in range(3)]
    with SandboxedEvaluator(policies) as ev:
        got = [(r.policy, r.result) for r in ev.evaluate(subject(pod("abcd")))]
    want = [(p.name, PolicyEngine(p).evaluate(subject(pod("abcd"))).result) for p in policies]
    assert got == want


def test_batches_isolate_a_runaway_subject():
    policy = make_policy(name="size", validations=[
        {"expression": "lists.range(int(object.metadata.labels.n)).map(x, "
                       "lists.range(int(object.metadata.labels.n)).filter(y, y > x)).size() >= 0"}])
    limits = Limits(seconds_per_subject=1.0, memory_bytes=8 * 1024**3)
    pods = [pod(f"p{i}", labels={"n": "9000" if i == 2 else "3"}) for i in range(5)]
    with SandboxedEvaluator([policy], limits=limits) as ev:
        results = ev.evaluate_many([subject(p) for p in pods])
    assert [r[0].result for r in results] == ["pass", "pass", "error", "pass", "pass"]


def test_apply_many_renders_rows_in_the_worker_and_sends_no_unchanged_object_back():
    # `vpol apply` takes each validation result as (result, its JSON row) made in the worker, also for a
    # subject redone alone after its batch failed; the object comes back only when a MutatingPolicy applied.
    import json

    from vpol.policies.validating.engine import PolicyEngine

    size = make_policy(name="size", validations=[
        {"expression": "lists.range(int(object.metadata.labels.n)).map(x, "
                       "lists.range(int(object.metadata.labels.n)).filter(y, y > x)).size() >= 0"}])
    named = make_policy(name="named", validations=[{"expression": "object.metadata.name != 'p1'", "message": "no p1"}])
    limits = Limits(seconds_per_subject=1.0, memory_bytes=8 * 1024**3)
    pods = [pod(f"p{i}", labels={"n": "9000" if i == 2 else "3"}) for i in range(4)]
    with SandboxedEvaluator([size, named], limits=limits) as ev:
        applied = ev.apply_many([subject(p) for p in pods], rendered=True)
    for obj, (mutated, mutation_results, rows) in zip(pods, applied):
        assert mutated is None and mutation_results == []
        want = [PolicyEngine(p).evaluate(subject(obj)) for p in (size, named)]
        if obj["metadata"]["name"] == "p2":  # the runaway: an error (the deadline or the iteration budget)
            assert [r for r, _row in rows] == ["error", "pass"]
            assert "exceeded" in json.loads(rows[0][1])["message"]
            continue
        assert rows == [(w.result, json.dumps(w.as_dict())) for w in want]


def test_a_worker_forked_with_prebuilt_engines_uses_them_and_is_respawned_after_a_kill():
    # `vpol apply` forks its first workers with the engines it compiled (no imports, no compiling in them);
    # a worker killed by the deadline comes back spawned, compiling the policies itself.
    import os

    from vpol.policies.validating.engine import PolicyEngine

    slow = make_policy(name="slow", validations=[
        {"expression": "object.metadata.name != 'runaway' || "
                       "lists.range(9000).map(x, lists.range(9000).filter(y, y > x)).size() > 0"}])
    fine = make_policy(name="fine", validations=[{"expression": "object.metadata.name == 'pod'"}])
    engines = [PolicyEngine(slow), PolicyEngine(fine)]
    limits = Limits(seconds_per_subject=0.3, memory_bytes=8 * 1024**3)
    with SandboxedEvaluator([slow, fine], limits=limits, engines=(engines, [])) as ev:
        ev.start()
        assert ev._proc._popen.method == "fork"
        forked = ev._proc.pid
        assert {r.policy: r.result for r in ev.evaluate(subject(pod()))} == {"slow": "pass", "fine": "pass"}
        results = {r.policy: r for r in ev.evaluate(subject(pod("runaway")))}
        assert results["slow"].result == "error" and results["fine"].result == "fail"
        assert ev.kills >= 1
        assert {r.policy: r.result for r in ev.evaluate(subject(pod()))} == {"slow": "pass", "fine": "pass"}
        assert ev._proc.pid != forked and ev._proc._popen.method == "spawn" and ev._proc.pid != os.getpid()


def test_update_compiles_changed_policies_in_the_running_worker():
    """A policy set changed with update() is evaluated by the same worker process (no new process, imports and
    compiling of every policy); a changed policy is recompiled, a removed one no longer answers."""
    short = make_policy(name="short", validations=[{"expression": "object.metadata.name.size() < 5"}])
    named = make_policy(name="named", validations=[{"expression": "object.metadata.name == 'pod'"}])
    with SandboxedEvaluator([short]) as ev:
        ev.start()
        pid = ev._proc.pid
        assert [(r.policy, r.result) for r in ev.evaluate(subject(pod("abcdef")))] == [("short", "fail")]
        longer = make_policy(name="short", validations=[{"expression": "object.metadata.name.size() < 10"}])
        ev.update([longer, named])
        assert [(r.policy, r.result) for r in ev.evaluate(subject(pod("abcdef")))] == \
            [("short", "pass"), ("named", "fail")]
        ev.update([named])
        assert [(r.policy, r.result) for r in ev.evaluate(subject(pod()))] == [("named", "pass")]
        assert ev._proc.pid == pid and ev.kills == 0


def test_a_worker_started_without_waiting_is_waited_for_at_first_use():
    """start(wait=False) returns while the worker imports and compiles; an update or evaluation that follows
    first takes its "ready" (not as an answer), and a worker still starting answers no admission request."""
    import asyncio

    first = make_policy(name="first", validations=[{"expression": "object.metadata.name == 'pod'"}])
    second = make_policy(name="second", validations=[{"expression": "object.metadata.name != 'pod'"}])
    with SandboxedEvaluator([first]) as ev:
        ev.start(wait=False)
        assert ev.running and ev._starting
        answer, why = asyncio.run(ev.admit(None, 1.0))  # type: ignore[arg-type]
        assert answer is None and "starting" in why
        ev.update([first, second])
        assert not ev._starting
        assert {r.policy: r.result for r in ev.evaluate(subject(pod()))} == {"first": "pass", "second": "fail"}
    with SandboxedEvaluator([first]) as ev:
        ev.start(wait=False)
        assert [r.result for r in ev.evaluate(subject(pod()))] == ["pass"]
        ev.start(wait=False)  # running: kept
        assert [r.result for r in ev.evaluate(subject(pod("other")))] == ["fail"]


def test_a_worker_builds_fused_programs_when_it_loads_policies_not_at_the_first_subject(monkeypatch):
    """What the first subject of a policy built (its fused program) is built when the worker compiles it, also for
    a policy added to a running worker (_reload): a scan's first chunk or the first admission request after a
    policy arrives does not wait for it."""
    from vpol.policies.validating import fused
    from vpol.policies import sandbox
    from vpol.policies.validating.engine import PolicyEngine

    built: list[str] = []
    build = fused._build
    monkeypatch.setattr(fused, "_build", lambda compiled: built.append(compiled.policy.name) or build(compiled))
    named = make_policy(name="named", validations=[{"expression": "object.metadata.name == 'pod'"},
                                                   {"expression": "object.metadata.name.size() < 5"}])
    engine = PolicyEngine(named)
    assert built == []  # compiling alone builds none
    engine.prepare()
    assert built == ["named"] and engine.compiled.fused is not None and engine.compiled.fused[0] is not None
    assert engine.evaluate(subject(pod())).result == "pass"
    assert built == ["named"]  # the first subject built nothing more
    added = make_policy(name="added", validations=[{"expression": "object.metadata.name != 'pod'"}])
    engines = sandbox._reload([engine], [named, added], [])
    assert engines[0] is engine and built == ["named", "added"]
    assert engines[1].compiled.fused is not None

#!/usr/bin/env python3
"""GlobalContextEntry data in the evaluation workers: what one admission-like evaluation costs with it.

A store holds one kubernetesResource entry of N Deployments (default 1,000, with a `names` projection), as
the operator's controller fills it; a bounded evaluation worker (vpol.policies.sandbox, as the webhook's) runs
one policy per subject. Measured, per evaluation (median and p95 of the round trip to the worker):

* `projection, unchanged`: the policy reads the `names` projection; the data did not change (nothing sent);
* `projection, 1 change`: one Deployment changed before each evaluation (its delta is sent, the projection is
  computed again in the worker);
* `whole list, unchanged`: the policy reads globalContext.Get(entry, "") (every object) each time;
* `new worker`: a worker started after the data was loaded gets it whole before its first evaluation
  (one figure: that first evaluation).

Not a test: it asserts nothing and prints what it measures, with the machine and its load.

    python3 bench/global_context.py [--objects N] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "operator"))

from bench.common import machine  # noqa: E402
from tests.unit.policies import make_policy  # noqa: E402
from vpol.cel.global_context import READY, RESOURCE, EntryState  # noqa: E402
from vpol.engine.global_context import GlobalContextStore  # noqa: E402
from vpol.engine.request import ResourceType  # noqa: E402
from vpol.engine.subjects import subject_for  # noqa: E402
from vpol.policies.sandbox import Limits, SandboxedEvaluator

DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
RULE = {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}


def deployment(i: int, generation: int = 1) -> dict[str, Any]:
    name = f"app-{i}"
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": f"team-{i % 20}", "generation": generation,
                         "labels": {"app": name, "team": f"team-{i % 20}"}, "annotations": {"owner": "x" * 40}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "app", "image": f"registry.example/{name}:1.0",
                                                           "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}}},
            "status": {"replicas": 2, "readyReplicas": 2}}


def timed(ev: SandboxedEvaluator, subject: Any, before: Any = None, rounds: int = 50) -> list[float]:
    out = []
    for r in range(rounds):
        if before is not None:
            before(r)
        started = time.perf_counter()
        [result] = ev.evaluate(subject)
        out.append(time.perf_counter() - started)
        assert result.result in ("pass", "fail"), result.message
    return out


def row(label: str, samples: list[float]) -> None:
    samples = sorted(samples)
    p95 = samples[min(len(samples) - 1, int(len(samples) * 0.95))]
    print(f"{label:<28} {statistics.median(samples) * 1000:8.2f} ms {p95 * 1000:8.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    print(" ".join(f"{k}={v}" for k, v in machine().items()))
    store = GlobalContextStore()
    store.set_state(EntryState("deployments", RESOURCE, READY, projections=(("names", "[].metadata.name"),)))
    store.replace_objects("deployments", {f"team-{i % 20}/app-{i}": deployment(i) for i in range(args.objects)})
    subject = subject_for(deployment(10**6), resolve=lambda a, k: DEPLOYMENTS)
    by_projection = make_policy(name="unique", rules=[RULE], validations=[
        {"expression": "!(object.metadata.name in globalContext.Get('deployments', 'names'))"}])
    whole = make_policy(name="whole", rules=[RULE], validations=[
        {"expression": "!globalContext.Get('deployments', '').exists(d, d.metadata.name == object.metadata.name)"}])
    limits = Limits(seconds_per_subject=30, memory_bytes=2 * 1024**3)
    print(f"{args.objects} Deployments in one entry; {args.rounds} evaluations each\n")
    print(f"{'':<28} {'median':>11} {'p95':>11}")
    with SandboxedEvaluator([by_projection], limits=limits, global_context=store) as ev:
        started = time.perf_counter()
        ev.evaluate(subject)
        row("new worker (first request)", [time.perf_counter() - started])
        row("projection, unchanged", timed(ev, subject, rounds=args.rounds))
        row("projection, 1 change", timed(ev, subject, rounds=args.rounds,
                                          before=lambda r: store.upsert("deployments", deployment(r % 100, r + 2))))
    with SandboxedEvaluator([whole], limits=limits, global_context=store) as ev:
        ev.evaluate(subject)
        row("whole list, unchanged", timed(ev, subject, rounds=max(5, args.rounds // 5)))


if __name__ == "__main__":
    main()

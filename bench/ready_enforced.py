#!/usr/bin/env python3
"""Benchmark (not a test): is a policy enforced the moment it is Ready? (issue 24)

On a local control plane (or --kubeconfig), the operator as in the e2e tests. Policies are applied one after
another (50 by default), cycling through the four admission routes: native VAP, vpol's validating webhook,
native MAP, vpol's mutating webhook (Kyverno-only functions send a policy to the webhook). For each:

  create -> a watch sees Ready=True at the current generation -> at once, a server-side dry-run CREATE of a
  ConfigMap the policy must deny (or mutate) -> then, if it was not decided, the same request every
  --poll seconds until it is.

Reported per route: create -> Ready (p50/p99), Ready -> first enforced request (p50/p99: 0 when the first
request after Ready is enforced), and the count of requests admitted unenforced after Ready (target: 0).
With ``--load N``, N threads keep creating ConfigMaps in another namespace meanwhile (the API server and the
operator under load). ``--compare`` also runs a phase that does not wait for Ready and polls the request from
the create call on: create -> first enforced there is what the API server allows at best, so
(Ready - that) is the lag vpol's proof adds.

Usage: python3 bench/ready_enforced.py [--policies 50] [--load 4] [--compare] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BenchRun,
    cluster_arguments,
    install_vpol,
    ms,
    percentile,
    start_operator,
    table,
    wait_until,
)
from kubernetes import client  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from vpol.kube.dynamic import Watcher  # noqa: E402

GROUP, VERSION = "policies.kyverno.io", "v1"
NAMESPACE, LOAD_NAMESPACE = "bench-enforced", "bench-load"
ROUTES = ("NativeVAP", "Webhook", "NativeMAP", "WebhookMutating")
RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}


def body(route: str, name: str) -> tuple[str, dict[str, Any]]:
    """(plural, policy) for ``route``: denies data key bad-<name>, or labels the ConfigMap with <name>."""
    webhook = route.startswith("Webhook")
    match = {"resourceRules": [RULE], "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}}
    md = {"name": name, "labels": {"vpol-bench": "enforced"}}
    if route in ("NativeVAP", "Webhook"):
        extra = " || sha256('x') == ''" if webhook else ""
        return "validatingpolicies", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ValidatingPolicy", "metadata": md,
            "spec": {"matchConstraints": match, "evaluation": {"background": {"enabled": False}},
                     "validations": [{"expression": f"!has(object.data) || !('bad-{name}' in object.data){extra}",
                                      "message": f"denied by {name}"}]}}
    value = '"p" + string(size(sha256("x")))' if webhook else '"yes"'
    return "mutatingpolicies", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "MutatingPolicy", "metadata": md,
        "spec": {"matchConstraints": match, "autogen": {"podControllers": {"controllers": []}},
                 "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                     "expression": f'Object{{metadata: Object.metadata{{labels: {{"{name}": {value}}}}}}}'}}]}}


class ReadyWatch:
    """First time each policy (of both kinds) is seen Ready=True at its generation."""

    def __init__(self, api: client.ApiClient):
        self.ready_at: dict[str, float] = {}
        self.lock = threading.Lock()
        self.watchers = [Watcher(api, GROUP, VERSION, plural, self._on_event, kind=kind)
                         for plural, kind in (("validatingpolicies", "ValidatingPolicy"),
                                              ("mutatingpolicies", "MutatingPolicy"))]

    def start(self) -> None:
        for w in self.watchers:
            w.start()
            w.synced.wait(30)

    def stop(self) -> None:
        for w in self.watchers:
            w.stop()

    def _on_event(self, etype: str, obj: dict[str, Any]) -> None:
        md = obj.get("metadata") or {}
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready" and c.get("status") == "True" and \
                    c.get("observedGeneration") == md.get("generation"):
                with self.lock:
                    self.ready_at.setdefault(str(md.get("name")), time.monotonic())

    def ready(self, name: str) -> float | None:
        with self.lock:
            return self.ready_at.get(name)


def decided(core: Any, route: str, name: str) -> bool:
    """One dry-run request the policy must decide: True when it was (denied, or labelled)."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "req-"}, "data": {f"bad-{name}": "x"}}
    try:
        out = core.create_namespaced_config_map(NAMESPACE, cm, dry_run="All")
    except ApiException as exc:
        return route in ("NativeVAP", "Webhook") and f"denied by {name}" in (exc.body or "")
    labels = out.metadata.labels or {}
    return route in ("NativeMAP", "WebhookMutating") and bool(labels.get(name))


def load(core: Any, stop: threading.Event, counter: list[int]) -> None:
    while not stop.is_set():
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "load-"}, "data": {"k": "v"}}
        try:
            core.create_namespaced_config_map(LOAD_NAMESPACE, cm, dry_run="All")
            counter[0] += 1
        except ApiException:
            pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", type=int, default=50)
    parser.add_argument("--load", type=int, default=0, help="threads sending other requests meanwhile")
    parser.add_argument("--poll", type=float, default=0.02)
    parser.add_argument("--compare", action="store_true", help="also measure create -> enforced without Ready")
    parser.add_argument("--quick", action="store_true", help="--policies 12")
    cluster_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.policies = 12
    run = BenchRun.begin(args.workdir, "vpol-bench-enforced-", args.kubeconfig, args.kubectl)
    op = None
    stop_load = threading.Event()
    try:
        kube = run.cluster.kube
        install_vpol(kube)
        core: Any = client.CoreV1Api(kube.api_client)
        custom: Any = client.CustomObjectsApi(kube.api_client)
        for ns in (NAMESPACE, LOAD_NAMESPACE):
            try:
                core.create_namespace({"metadata": {"name": ns}})
            except ApiException as exc:
                if exc.status != 409:
                    raise
        op = start_operator(kube, run.work, args.operator_arg)
        watch = ReadyWatch(kube.api_client)
        watch.start()
        counter = [0]
        loaders = [threading.Thread(target=load, args=(core, stop_load, counter), daemon=True)
                   for _ in range(args.load)]
        for t in loaders:
            t.start()
        phases = ["ready"] + (["no-wait"] if args.compare else [])
        results: dict[tuple[str, str], dict[str, list[float]]] = {}
        admitted_after_ready = {r: 0 for r in ROUTES}
        started = time.monotonic()
        for phase in phases:
            for i in range(args.policies):
                route = ROUTES[i % len(ROUTES)]
                name = f"{phase}-{i}-{route.lower()}"
                plural, policy = body(route, name)
                custom.create_cluster_custom_object(GROUP, VERSION, plural, policy)
                created = time.monotonic()
                cell = results.setdefault((phase, route), {"ready": [], "enforced": []})
                if phase == "ready":
                    wait_until(lambda: watch.ready(name), 120, 0.005)
                    ready = watch.ready(name) or time.monotonic()
                    cell["ready"].append(ready - created)
                    first = True
                    while not decided(core, route, name):
                        if first:
                            admitted_after_ready[route] += 1
                            first = False
                        time.sleep(args.poll)
                    cell["enforced"].append(max(0.0, time.monotonic() - ready) if not first else 0.0)
                else:
                    while not decided(core, route, name):
                        time.sleep(args.poll)
                    cell["enforced"].append(time.monotonic() - created)
            print(f"phase {phase}: {args.policies} policies")
        elapsed = time.monotonic() - started
        stop_load.set()
        rows = []
        for (phase, route), cell in sorted(results.items()):
            if phase == "ready":
                rows.append([phase, route, str(len(cell["ready"])), ms(percentile(cell["ready"], 50)),
                             ms(percentile(cell["ready"], 99)), ms(percentile(cell["enforced"], 50)),
                             ms(percentile(cell["enforced"], 99)), str(admitted_after_ready[route])])
            else:
                rows.append([phase, route, str(len(cell["enforced"])), "-", "-",
                             f"create->enforced {ms(percentile(cell['enforced'], 50))}",
                             ms(percentile(cell["enforced"], 99)), "-"])
        print()
        print(table(rows, ["phase", "route", "policies", "create->Ready p50", "p99", "Ready->enforced p50", "p99",
                           "admitted after Ready"]))
        total = sum(admitted_after_ready.values())
        print(f"\nrequests admitted unenforced after Ready: {total} (target 0: {'PASS' if total == 0 else 'FAIL'})")
        if args.load:
            print(f"load: {counter[0]} other requests in {elapsed:.0f}s ({counter[0] / elapsed:.0f}/s, "
                  f"{args.load} threads)")
        watch.stop()
        print(run.end())
        return 0 if total == 0 else 1
    finally:
        stop_load.set()
        try:
            if op is not None:
                op.stop()
        finally:
            run.cluster.stop()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark (not a test): mutation of existing objects (issue 22).

On a local control plane (or --kubeconfig), --configmaps ConfigMaps (10,000 by default) exist in one namespace
before a MutatingPolicy with mutateExisting (a label on every ConfigMap of that namespace) is created; the
operator runs as in the e2e tests. Measured:

1. converge: the policy's create call -> every ConfigMap carries the label (a paged list every second), the
   writes (vpol_background_mutations_total{result="mutated"}), the operator's peak RSS (and its workers');
2. rescan: one more ConfigMap created (a trigger: every target is evaluated again) -> the pass done
   ({result="unchanged"} grew by the ConfigMaps), and the writes it made (target: 0), with every
   resourceVersion unchanged;
3. for scale, the time the same API server took to create the ConfigMaps (the write floor of this run).

Usage: python3 bench/mutate_existing.py [--configmaps 10000] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BenchRun,
    MemorySampler,
    cluster_arguments,
    ensure_namespaces,
    install_vpol,
    metric_sum,
    scrape,
    start_operator,
    table,
)
from kubernetes import client  # noqa: E402

from vpol.kube.dynamic import list_pages  # noqa: E402

NAMESPACE = "bench-mutate-existing"
POLICY = "bench-label-existing"


def policy() -> dict[str, Any]:
    return {
        "apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": POLICY},
        "spec": {
            "evaluation": {"mutateExisting": {"enabled": True}},
            "matchConstraints": {
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                   "resources": ["configmaps"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": 'Object{metadata: Object.metadata{labels: {"bench.vpol/mutated": "yes"}}}'}}],
        },
    }


def labelled(api: client.ApiClient) -> tuple[int, dict[str, str]]:
    """(ConfigMaps labelled, name -> resourceVersion of all)."""
    count, versions = 0, {}
    for items, _rv in list_pages(api, "", "v1", "configmaps", namespace=NAMESPACE):
        for item in items:
            md = item.get("metadata") or {}
            versions[md.get("name", "")] = md.get("resourceVersion", "")
            count += (md.get("labels") or {}).get("bench.vpol/mutated") == "yes"
    return count, versions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configmaps", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="--configmaps 1000")
    cluster_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.configmaps = 1000
    run = BenchRun.begin(args.workdir, "vpol-bench-mutate-existing-", args.kubeconfig, args.kubectl)
    op = sampler = None
    try:
        kube = run.cluster.kube
        install_vpol(kube)
        core: Any = client.CoreV1Api(kube.api_client)
        ensure_namespaces(kube, [NAMESPACE])
        t = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: core.create_namespaced_config_map(
                NAMESPACE, {"metadata": {"name": f"cm-{i}"}, "data": {"k": "v"}}), range(args.configmaps)))
        floor = time.monotonic() - t
        print(f"created {args.configmaps} ConfigMaps in {floor:.1f}s (the API server's write floor)")
        # The policy matches every ConfigMap of the namespace: the bench's and the one Kubernetes puts in every
        # namespace (kube-root-ca.crt).
        targets = len(labelled(kube.api_client)[1])
        op = start_operator(kube, run.work, args.operator_arg)
        assert op.proc is not None
        sampler = MemorySampler(op.proc.pid)
        sampler.start()
        custom: Any = client.CustomObjectsApi(kube.api_client)
        t = time.monotonic()
        custom.create_cluster_custom_object("policies.kyverno.io", "v1", "mutatingpolicies", policy())
        while True:
            count, _versions = labelled(kube.api_client)
            if count >= targets:
                break
            if time.monotonic() - t > 3600:
                raise SystemExit(f"not converged after an hour: {count}/{targets}")
            time.sleep(1)
        converge = time.monotonic() - t
        time.sleep(3)
        metrics = scrape(op)
        writes = metric_sum(metrics, "vpol_background_mutations_total", policy=POLICY, result="mutated")
        unchanged0 = metric_sum(metrics, "vpol_background_mutations_total", policy=POLICY, result="unchanged")
        _count, before = labelled(kube.api_client)

        t = time.monotonic()
        core.create_namespaced_config_map(NAMESPACE, {"metadata": {"name": "trigger"}, "data": {"k": "v"}})
        while metric_sum(scrape(op), "vpol_background_mutations_total", policy=POLICY, result="unchanged") < \
                unchanged0 + targets:
            if time.monotonic() - t > 1800:
                raise SystemExit("the rescan did not finish within 30 minutes")
            time.sleep(0.5)
        rescan = time.monotonic() - t
        metrics = scrape(op)
        rewrites = metric_sum(metrics, "vpol_background_mutations_total", policy=POLICY, result="mutated") - writes
        _count, after = labelled(kube.api_client)
        changed = sum(1 for name, rv in before.items() if after.get(name) != rv)
        peaks = sampler.stop()
        sampler = None
        print()
        print(table([
            ["ConfigMaps", f"{args.configmaps} (and kube-root-ca.crt: {targets} matched)"],
            ["API server's write floor (creating them)", f"{floor:.1f} s"],
            ["converge: policy created -> every ConfigMap mutated", f"{converge:.1f} s "
             f"({converge / floor:.2f}x the write floor)"],
            ["writes to converge (mutated)", f"{writes:.0f} ({writes / max(1, targets):.2f} per ConfigMap matched)"],
            ["rescan: a trigger -> every target evaluated again", f"{rescan:.1f} s"],
            ["writes of the rescan (target 0)", f"{rewrites:.0f}"],
            ["ConfigMaps whose resourceVersion changed in the rescan", str(changed)],
            ["operator peak RSS (VmHWM)", f"{peaks.operator_hwm_kib / 1024:.0f} MiB"],
            ["child processes (peak RSS)", peaks.children_summary()],
        ], ["measure", "value"]))
        print(run.end())
        return 0 if rewrites == 0 else 1
    finally:
        if sampler is not None:
            sampler.stop()
        try:
            if op is not None:
                op.stop()
        finally:
            run.cluster.stop()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark (not a test): ImageValidatingPolicy admission overhead and registry round trips (issue 40).

On a local control plane (or --kubeconfig), the operator running as in the e2e tests (background scans off: only
admission is measured), a local registry (tests/signing: go-containerregistry's, referrers API) holding --images
images signed with cosign (Sigstore bundles, a key) per way of enforcing. One ImageValidatingPolicy (Deny, the
cosign key), limited to the namespaces of the ways that enforce it. Phases, in one run:

  none     --pods server-side dry-run Pod creates, spread over the images, in a namespace no policy selects;
  vpol     the same requests where vpol's webhook enforces the policy: the first request for each image verifies
           it, the others are answered from the verification cache; then --replicas Pods of an image not verified
           yet, created at once as a ReplicaSet creates a Deployment's replicas (the local control plane runs no
           workload controllers): registry requests per admitted Pod (the target: one verification for all);
  kyverno  (--peer kyverno) the same on Kyverno's admission controller (bench/kyverno/peer.py, the peer of
           bench/admission.py --peer kyverno), reading the same registry with images of its own.

Latency is measured per request at the client (--clients concurrent clients); overhead is a phase's percentile
minus the same percentile without the policy. Registry requests are counted by the registry itself (its
/_requests), the same way for both; CPU per request is the enforcing process's (vpol: the operator and its
workers) over its phase. Targets with --peer: vpol/Kyverno <= 1.0 for overhead p50, p99 and CPU per request.

Usage: python3 bench/images.py [--images 20] [--pods 200] [--replicas 50] [--clients 4] [--peer kyverno] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BenchRun,
    cluster_arguments,
    cpu_seconds,
    descendants,
    ensure_namespaces,
    install_vpol,
    ms,
    percentile,
    print_results,
    start_operator,
    table,
)

from tests.signing.tools import RegistryProcess, Signer  # noqa: E402

NAMESPACE = "bench-images"
POLICY = "bench-signed-images"
#: Registry requests of one verification of a cosign bundle: the image's manifest, its referrers, the bundle's
#: manifest and blob.
VERIFICATION = 4


def policy(public: str, host: str, namespaces: list[str]) -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy", "metadata": {"name": POLICY},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE"], "resources": ["pods"]}],
                                          "namespaceSelector": {"matchExpressions": [{
                                              "key": "kubernetes.io/metadata.name", "operator": "In",
                                              "values": namespaces}]}},
                     "matchImageReferences": [{"glob": f"{host}/*"}],
                     "attestors": [{"name": "key", "cosign": {"key": {"data": public},
                                                              "ctlog": {"insecureIgnoreTlog": True}}}],
                     "evaluation": {"background": {"enabled": False}},
                     "webhookConfiguration": {"timeoutSeconds": 15},
                     "validations": [{"expression": "images.containers.map(i, verifyImageSignatures(i, "
                                                    "[attestors.key])).all(n, n > 0)",
                                      "message": "images must be signed"}]}}


def pod(name: str, namespace: str, image: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "app", "image": image}]}}


def dry_run_creates(core: Any, namespace: str, images: list[str], count: int, clients: int
                    ) -> tuple[list[float], int]:
    """Latencies of ``count`` dry-run Pod creates (images in turn), and how many were refused."""
    def one(i: int) -> tuple[float, bool]:
        started = time.perf_counter()
        try:
            core.create_namespaced_pod(namespace, pod(f"p{i}", namespace, images[i % len(images)]), dry_run="All")
            ok = True
        except Exception:  # noqa: BLE001 - a refusal is counted
            ok = False
        return time.perf_counter() - started, ok

    with ThreadPoolExecutor(max_workers=clients) as pool:
        answers = list(pool.map(one, range(count)))
    return [t for t, _ok in answers], sum(1 for _t, ok in answers if not ok)


def replicas(core: Any, namespace: str, image: str, count: int) -> tuple[float, int]:
    """``count`` Pods of ``image`` created at once (generateName, as a ReplicaSet creates them): the time until
    all are answered, and how many were admitted."""
    def one(_i: int) -> bool:
        body = pod("", namespace, image)
        body["metadata"] = {"generateName": "web-", "namespace": namespace, "labels": {"app": "web"}}
        try:
            core.create_namespaced_pod(namespace, body)
            return True
        except Exception:  # noqa: BLE001 - counted
            return False

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=count) as pool:
        admitted = sum(pool.map(one, range(count)))
    return time.monotonic() - started, admitted


def total(counts: dict[str, int]) -> int:
    return sum(v for k, v in counts.items() if k != "other")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=50)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--peer", choices=["kyverno"], help="the same load on Kyverno's admission controller too")
    parser.add_argument("--quick", action="store_true", help="--images 5 --pods 50 --replicas 10")
    cluster_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.images, args.pods, args.replicas = 5, 50, 10
    ways = ["vpol", *(["kyverno"] if args.peer else [])]
    namespaces = {"none": NAMESPACE + "-none", "vpol": NAMESPACE, "kyverno": NAMESPACE + "-kyverno"}
    binary = None
    if args.peer:
        from bench.kyverno.peer import build

        binary = build()  # before the cluster: a cold build takes minutes
    run = BenchRun.begin(args.workdir, "vpol-bench-images-", args.kubeconfig, args.kubectl)
    registry = RegistryProcess().start()
    op = peer = None
    try:
        kube = run.cluster.kube
        install_vpol(kube)
        ensure_namespaces(kube, sorted(namespaces.values()))
        signer = Signer(Path(tempfile.mkdtemp(prefix="cosign-", dir=run.work)))
        key, public = signer.key_pair("bench")
        images: dict[str, list[str]] = {}
        fresh: dict[str, str] = {}
        for way in ways:  # each its own images: each verifies them first
            images[way] = []
            for i in range(args.images + 1):
                repo = f"bench/{way}{i}"
                image = f"{registry.host}/{repo}@{signer.push_image(registry.host, repo)}"
                signer.sign(image, key)
                images[way].append(image)
            fresh[way] = images[way].pop()
        print(f"{len(ways) * (args.images + 1)} images pushed and signed in {registry.host}", flush=True)
        extra = ["--scan-interval", "0"]
        if args.peer:
            from bench.kyverno.peer import KyvernoPeer, only_namespaces

            peer = KyvernoPeer(kube, run.work, binary=binary,
                               webhook_namespace_selector=only_namespaces([namespaces["kyverno"]]))
            peer.install()
            extra += ["--webhook-exclude-namespaces", namespaces["kyverno"]]
        op = start_operator(kube, run.work, [*extra, *args.operator_arg])
        if peer is not None:
            peer.start()
        from kubernetes import client as k8s

        core = k8s.CoreV1Api(kube.api_client)
        kube.kubectl("apply", "-f", "-", input=json.dumps(policy(public, registry.host,
                                                                  [namespaces[w] for w in ways])))
        kube.kubectl("wait", "--for=condition=Ready", "--timeout=120s", f"imagevalidatingpolicy/{POLICY}")
        if peer is not None:
            time.sleep(5)  # Kyverno registers its image webhooks for the policy
        assert op.proc is not None
        pids = {"vpol": lambda: [op.proc.pid, *descendants(op.proc.pid)],  # type: ignore[union-attr]
                "kyverno": lambda: [peer.pid] if peer is not None else []}
        none, refused_none = dry_run_creates(core, namespaces["none"], images["vpol"], args.pods, args.clients)
        print(f"none: {args.pods} requests, {refused_none} refused", flush=True)
        results: dict[str, dict[str, Any]] = {}
        for way in ways:
            before, cpu0 = registry.requests(), sum(cpu_seconds(p) for p in pids[way]())
            latencies, refused = dry_run_creates(core, namespaces[way], images[way], args.pods, args.clients)
            cpu = sum(cpu_seconds(p) for p in pids[way]()) - cpu0
            middle = registry.requests()
            took, admitted = replicas(core, namespaces[way], fresh[way], args.replicas)
            after = registry.requests()
            results[way] = {"latencies": latencies, "refused": refused + args.replicas - admitted, "cpu": cpu,
                            "requests": total(middle) - total(before), "replica_requests": total(after) - total(middle),
                            "replicas_took": took}
            print(f"{way}: {args.pods} requests, {refused} refused, {results[way]['requests']} registry requests; "
                  f"{admitted} of {args.replicas} replicas admitted in {ms(took)}, "
                  f"{results[way]['replica_requests']} registry requests", flush=True)

        rows = [["none", str(len(none)), str(refused_none), ms(percentile(none, 50)), ms(percentile(none, 99)), "", "",
                 "", "", ""]]
        for way, r in results.items():
            lat = r["latencies"]
            rows.append([way, str(len(lat)), str(r["refused"]), ms(percentile(lat, 50)), ms(percentile(lat, 99)),
                         ms(percentile(lat, 50) - percentile(none, 50)), ms(percentile(lat, 99) - percentile(none, 99)),
                         f"{1000 * r['cpu'] / len(lat):.1f} ms", f"{r['requests'] / args.images:.1f}",
                         f"{r['replica_requests']} for {args.replicas} in {ms(r['replicas_took'])}"])
        print()
        print(table(rows, ["phase", "requests", "refused", "p50", "p99", "overhead p50", "overhead p99",
                           "CPU / request", "registry requests / image", "replicas: registry requests"]))
        print()
        v = results["vpol"]
        targets = [["one verification per image per cache lifetime",
                    f"{v['requests']} registry requests for {args.images} images (one verification: {VERIFICATION})",
                    "PASS" if v["requests"] <= VERIFICATION * args.images else "FAIL"],
                   ["a Deployment's replicas: one verification",
                    f"{v['replica_requests']} registry requests for {args.replicas} Pods",
                    "PASS" if v["replica_requests"] <= VERIFICATION else "FAIL"],
                   ["0 refusals of signed images", str(v["refused"]), "PASS" if v["refused"] == 0 else "FAIL"]]
        if "kyverno" in results:
            k = results["kyverno"]
            for name, mine, theirs in (
                    ("overhead p50 vpol/Kyverno <= 1.0", percentile(v["latencies"], 50) - percentile(none, 50),
                     percentile(k["latencies"], 50) - percentile(none, 50)),
                    ("overhead p99 vpol/Kyverno <= 1.0", percentile(v["latencies"], 99) - percentile(none, 99),
                     percentile(k["latencies"], 99) - percentile(none, 99)),
                    ("CPU per request vpol/Kyverno <= 1.0", v["cpu"], k["cpu"])):
                ratio = mine / theirs if theirs > 0 else float("inf")
                targets.append([name, f"{ratio:.2f} ({ms(mine) if 'CPU' not in name else f'{mine:.2f}s'} vs "
                                      f"{ms(theirs) if 'CPU' not in name else f'{theirs:.2f}s'})",
                                "PASS" if ratio <= 1.0 else "FAIL"])
            targets.append(["Kyverno refused no signed image", str(k["refused"]), "PASS" if k["refused"] == 0
                            else "FAIL"])
        print_results(None, targets, run)
        return 0
    finally:
        if op is not None:
            op.stop()
        if peer is not None:
            peer.stop()
        registry.stop()
        run.cluster.stop()


if __name__ == "__main__":
    sys.exit(main())

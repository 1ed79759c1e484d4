#!/usr/bin/env python3
"""Benchmark (not a test): ImageValidatingPolicy admission overhead and registry round trips (issue 40).

On a local control plane (or --kubeconfig), the operator running as in the e2e tests (background scans off: only
admission is measured), a local registry (tests/signing: go-containerregistry's, referrers API) holding --images
images signed with cosign (Sigstore bundles, a key). Phases, in one run:

  none     --pods server-side dry-run Pod creates, spread over the images, no image policy;
  webhook  the same requests with one ImageValidatingPolicy (Deny, the cosign key, every image of the registry):
           the first request for each image verifies it, the others are answered from the verification cache;
  replicas --replicas Pods of an image not verified yet, created at once as a ReplicaSet controller creates a
           Deployment's replicas (the local control plane runs no workload controllers): the time until every
           Pod is admitted, and the registry requests per admitted Pod (the target: one verification for all).

Latency is measured per request at the client (--clients concurrent clients); overhead is the webhook phase's
percentile minus the same percentile without the policy. Registry requests are the operator's
vpol_image_registry_requests_total; cache answers its vpol_image_verification_cache_total.

Not measured yet: Kyverno's admission controller with the same policy and registry (the peer the issue asks
for): bench/admission.py --peer kyverno runs it for ValidatingPolicies.

Usage: python3 bench/images.py [--images 20] [--pods 200] [--replicas 50] [--clients 4] [--quick]
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
    ensure_namespaces,
    install_vpol,
    metric_sum,
    ms,
    percentile,
    print_results,
    scrape,
    start_operator,
    table,
)

from tests.signing.tools import RegistryProcess, Signer  # noqa: E402

NAMESPACE = "bench-images"
POLICY = "bench-signed-images"
METRICS = ("vpol_image_registry_requests_total", "vpol_image_verification_cache_total")
#: Registry requests of one verification of a cosign bundle: the image's manifest, its referrers, the bundle's
#: manifest and blob.
VERIFICATION = 4


def policy(public: str, host: str) -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy", "metadata": {"name": POLICY},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE"], "resources": ["pods"]}],
                                          "namespaceSelector": {"matchLabels": {
                                              "kubernetes.io/metadata.name": NAMESPACE}}},
                     "matchImageReferences": [{"glob": f"{host}/*"}],
                     "attestors": [{"name": "key", "cosign": {"key": {"data": public},
                                                              "ctlog": {"insecureIgnoreTlog": True}}}],
                     "evaluation": {"background": {"enabled": False}},
                     "validations": [{"expression": "images.containers.map(i, verifyImageSignatures(i, "
                                                    "[attestors.key])).all(n, n > 0)",
                                      "message": "images must be signed"}]}}


def pod(name: str, image: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "app", "image": image}]}}


def dry_run_creates(core: Any, images: list[str], count: int, clients: int) -> tuple[list[float], int]:
    """Latencies of ``count`` dry-run Pod creates (images in turn), and how many were refused."""
    def one(i: int) -> tuple[float, bool]:
        started = time.perf_counter()
        try:
            core.create_namespaced_pod(NAMESPACE, pod(f"p{i}", images[i % len(images)]), dry_run="All")
            ok = True
        except Exception:  # noqa: BLE001 - a refusal is counted
            ok = False
        return time.perf_counter() - started, ok

    with ThreadPoolExecutor(max_workers=clients) as pool:
        answers = list(pool.map(one, range(count)))
    return [t for t, _ok in answers], sum(1 for _t, ok in answers if not ok)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=50)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="--images 5 --pods 50 --replicas 10")
    cluster_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.images, args.pods, args.replicas = 5, 50, 10
    run = BenchRun.begin(args.workdir, "vpol-bench-images-", args.kubeconfig, args.kubectl)
    registry = RegistryProcess().start()
    op = None
    try:
        kube = run.cluster.kube
        install_vpol(kube)
        ensure_namespaces(kube, [NAMESPACE])
        signer = Signer(Path(tempfile.mkdtemp(prefix="cosign-", dir=run.work)))
        key, public = signer.key_pair("bench")
        images = []
        for i in range(args.images + 1):
            image = f"{registry.host}/bench/app{i}@{signer.push_image(registry.host, f'bench/app{i}')}"
            signer.sign(image, key)
            images.append(image)
        fresh = images.pop()  # the Deployment's: verified first there
        print(f"{args.images + 1} images pushed and signed in {registry.host}", flush=True)
        op = start_operator(kube, run.work, ["--scan-interval", "0", *args.operator_arg])
        from kubernetes import client as k8s

        core = k8s.CoreV1Api(kube.api_client)
        none, refused_none = dry_run_creates(core, images, args.pods, args.clients)
        print(f"none: {args.pods} requests, {refused_none} refused", flush=True)

        kube.kubectl("apply", "-f", "-", input=json.dumps(policy(public, registry.host)))
        kube.kubectl("wait", "--for=condition=Ready", "--timeout=120s", f"imagevalidatingpolicy/{POLICY}")
        before = scrape(op, METRICS)
        webhook, refused = dry_run_creates(core, images, args.pods, args.clients)
        after = scrape(op, METRICS)
        registry_requests = metric_sum(after, METRICS[0]) - metric_sum(before, METRICS[0])
        hits = metric_sum(after, METRICS[1], result="hit") - metric_sum(before, METRICS[1], result="hit")
        misses = metric_sum(after, METRICS[1], result="miss") - metric_sum(before, METRICS[1], result="miss")
        print(f"webhook: {args.pods} requests, {refused} refused, {registry_requests:.0f} registry requests, "
              f"cache {hits:.0f} hits / {misses:.0f} misses", flush=True)

        before = scrape(op, METRICS)
        started = time.monotonic()

        def replica(_i: int) -> bool:
            body = pod("", fresh)
            body["metadata"] = {"generateName": "web-", "namespace": NAMESPACE, "labels": {"app": "web"}}
            try:
                core.create_namespaced_pod(NAMESPACE, body)
                return True
            except Exception:  # noqa: BLE001 - counted
                return False

        with ThreadPoolExecutor(max_workers=args.replicas) as pool:
            admitted = sum(pool.map(replica, range(args.replicas)))
        replicas_took = time.monotonic() - started
        refused += args.replicas - admitted
        after = scrape(op, METRICS)
        replica_requests = metric_sum(after, METRICS[0]) - metric_sum(before, METRICS[0])
        print(f"replicas: {admitted} of {args.replicas} Pods admitted in {ms(replicas_took)}, "
              f"{replica_requests:.0f} registry requests", flush=True)

        rows = [["phase", "requests", "refused", "p50", "p99", "overhead p50", "overhead p99",
                 "registry requests / Pod"]]
        for name, latencies, refusals, requests in (("none", none, refused_none, 0.0),
                                                    ("webhook", webhook, refused, registry_requests)):
            rows.append([name, str(len(latencies)), str(refusals), ms(percentile(latencies, 50)),
                         ms(percentile(latencies, 99)),
                         ms(percentile(latencies, 50) - percentile(none, 50)) if name != "none" else "",
                         ms(percentile(latencies, 99) - percentile(none, 99)) if name != "none" else "",
                         f"{requests / len(latencies):.2f}"])
        rows.append(["replicas", str(args.replicas), "", "", "", "", f"{ms(replicas_took)} to all Pods",
                     f"{replica_requests / args.replicas:.2f}"])
        print()
        print(table(rows[1:], rows[0]))
        print()
        # One verification of a cosign bundle reads the image's manifest, its referrers, the bundle's manifest
        # and the bundle: VERIFICATION requests.
        targets = [["one verification per image per cache lifetime",
                    f"{registry_requests:.0f} registry requests for {args.images} images "
                    f"({registry_requests / args.images:.1f} each; one verification: {VERIFICATION})",
                    "PASS" if registry_requests <= VERIFICATION * args.images else "FAIL"],
                   ["a Deployment's replicas: one verification",
                    f"{replica_requests:.0f} registry requests for {args.replicas} Pods",
                    "PASS" if replica_requests <= VERIFICATION else "FAIL"],
                   ["0 refusals of signed images", str(refused), "PASS" if refused == 0 else "FAIL"]]
        print_results(None, targets, run)
        return 0 if refused == 0 else 1
    finally:
        if op is not None:
            op.stop()
        registry.stop()
        run.cluster.stop()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""In-process profile of the admission webhook's request handling (issue 52): CPU per request and where it goes.

No cluster: the webhook server of the operator is built in this process and its request handler is called
directly, N times, on the AdmissionReview bodies the API server sends for bench/admission.py's load (a
server-side dry-run create of its compliant Pod). What is real and what stands in:

- the policies are bench/admission.py's (``pss_policies``: the 18 Pod Security policies of examples/pod-security
  with validationActions [Deny], limited to the bench namespace; ``--scenario conditions``: the first 10, each
  with the bench's matchCondition), handed as watch events to the operator's own AdmissionPolicies
  (vpol.controller.admission.policies: parse, compile verdict, route), whose snapshot the operator's own
  WebhookServer turns into its evaluator pool (its rebuild loop: inline compilation, workers left unstarted when
  every request can be answered inline, the garbage collector frozen, as in the operator);
- the namespace reaches the server's Namespaces through its watch callback, as the Namespace watch delivers it;
- each request is the server's ``_handle`` (the aiohttp handler of ``POST /validate/fail``) called with a
  stand-in for aiohttp's request that offers what the handler reads (path, headers, remote address, ``read()``
  returning the body): boundary checks and decoding (vpol.engine.review), metrics, the namespace lookup, the
  inline answer (vpol.policies.inline: work plans, evaluation, decision, JSON answer), metrics and the
  ``web.Response``. Not included: aiohttp's HTTP parsing and writing, TLS, the event loop's socket work;
- every body has its own uid, as the API server's do; the answers are checked (200, allowed) before anything
  is measured.

Reported: CPU per request (``time.process_time`` over N requests, after a warm-up), repeated ``--repeat``
times (median, min, max), and the process's resident memory (now and peak); then one cProfile run of N
requests: the top ``--top`` functions by cumulative and by own time. ``--path worker`` measures instead what an
evaluation worker does with a request (vpol.policies.sandbox's ``_admit``: decode, evaluate, decide, encode) with
engines built as a worker builds them, in this process (no pipe, no second process); ``--inline off`` is not
offered: that path's CPU is the worker's.

``--path http`` adds what the handler alone leaves out: the server listens as in the operator (TLS with a
serving certificate of vpol's own kind, on loopback) and ``--clients`` keep-alive HTTPS connections from a
separate process (http.client, so its CPU is not this process's) send the same bodies; the CPU per request is
then the serving process's whole share (aiohttp's HTTP parsing and writing, TLS, the event loop's socket work,
the handler), and the profile shows how it divides. Every path runs on the operator's own event loop
(``vpol.controller.run.new_event_loop``: uvloop's; asyncio's for a checkout that names none).

``--against DIR`` compares this checkout with another (DIR: its ``operator`` directory, e.g. a ``git worktree``
of the commit before a change): both harnesses start, each in its own process, and measure in turns of
--requests requests, alternating, --repeat turns each; printed: each one's median, min and max, and the ratio
this/against turn by turn. Turns matter on a shared machine: the CPU time of the same code changed here by up
to 1.7x from one minute to the next (another process on the other vCPU), more than the changes measured.

Usage: python3 bench/admission_profile.py [--scenario pss|conditions] [--requests 2000] [--repeat 5]
       [--path server|worker|http] [--clients 1] [--top 30] [--no-profile] [--sort cumulative,tottime]
       [--against OTHER_CHECKOUT/operator]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import http.client
import inspect
import io
import json
import logging
import multiprocessing as mp
import os
import platform
import pstats
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from admission import NAMESPACE, POD, pss_policies  # noqa: E402

from vpol.cel.backend import Backend  # noqa: E402
from vpol.controller import run as operator_run  # noqa: E402
from vpol.controller.admission.namespaces import Namespaces  # noqa: E402
from vpol.controller.admission.policies import AdmissionPolicies  # noqa: E402
from vpol.controller.admission.server import CertificateFiles, ServerOptions, WebhookServer  # noqa: E402
from vpol.desired.certificates import ServingCertificate, new_serving_certificate  # noqa: E402
from vpol.engine.evaluate import compile_exception
from vpol.model.discovery import builtin  # noqa: E402
from vpol.policies import sandbox  # noqa: E402
from vpol.policies.validating.engine import PolicyEngine

#: What the API server's ServiceAccount admission plugin and defaulting make of bench/admission.py's Pod before
#: the validating webhooks see it (a server-side dry run: BeforeCreate has named it and set its uid).
_ACCESS_VOLUME = "kube-api-access-x7k2p"


def admitted_pod(namespace: str) -> dict[str, Any]:
    """bench/admission.py's Pod as the API server sends it to a validating webhook (defaulted, named, with the
    ServiceAccount token volume and managedFields)."""
    pod = json.loads(json.dumps(POD))
    container = pod["spec"]["containers"][0]
    container.update({
        "resources": {}, "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "volumeMounts": [{"name": _ACCESS_VOLUME, "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
    })
    container["ports"] = [{"containerPort": 8080, "protocol": "TCP"}]
    pod["metadata"].update({
        "name": "bench-q8w2z", "namespace": namespace, "uid": "5f0c6a43-0d0e-4d67-9a8f-2f4b8f8f1c11",
        "creationTimestamp": "2026-12-06T05:22:00Z",
        "managedFields": [{
            "manager": "Python", "operation": "Update", "apiVersion": "v1", "time": "2026-12-06T05:22:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}}},
                         "f:spec": {"f:containers": {'k:{"name":"app"}': {
                             ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                             "f:ports": {".": {}, 'k:{"containerPort":8080,"protocol":"TCP"}': {
                                 ".": {}, "f:containerPort": {}, "f:protocol": {}}},
                             "f:resources": {}, "f:securityContext": {
                                 ".": {}, "f:allowPrivilegeEscalation": {}, "f:capabilities": {".": {}, "f:drop": {}},
                                 "f:runAsNonRoot": {}},
                             "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                             "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
                             "f:schedulerName": {}, "f:securityContext": {
                                 ".": {}, "f:runAsNonRoot": {}, "f:runAsUser": {}, "f:seccompProfile": {
                                     ".": {}, "f:type": {}}},
                             "f:terminationGracePeriodSeconds": {}}},
        }],
    })
    pod["spec"].update({
        "volumes": [{"name": _ACCESS_VOLUME, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                          "fieldPath": "metadata.namespace"}}]}},
        ]}}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default", "serviceAccount": "default", "schedulerName": "default-scheduler",
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
        ],
        "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
    })
    pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    return pod


def review_body(namespace: str, uid: str) -> bytes:
    """The AdmissionReview the API server sends vpol's validating webhook for a dry-run create of the Pod, as
    it encodes it (compact JSON)."""
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    request = {
        "uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "namespace": namespace, "operation": "CREATE",
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": admitted_pod(namespace), "oldObject": None, "dryRun": True,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "dryRun": ["All"]},
    }
    review = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}
    return json.dumps(review, separators=(",", ":")).encode()


def namespace_event(name: str) -> dict[str, Any]:
    """The Namespace as its watch delivers it."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": "0b5e2f8e-7d1a-4a43-8d5e-9c1f0e6f3a21", "resourceVersion": "412",
                         "creationTimestamp": "2026-12-06T05:20:00Z",
                         "labels": {"kubernetes.io/metadata.name": name}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


class _StandInRequest:
    """What WebhookServer's handler reads of an aiohttp request: path, headers, remote address and the body."""

    __slots__ = ("path", "headers", "remote", "_body")

    def __init__(self, path: str, body: bytes):
        self.path = path
        self.headers = {"Content-Type": "application/json"}
        self.remote = "127.0.0.1"
        self._body = body

    async def read(self) -> bytes:
        return self._body


async def started_server(scenario: str, certificate: ServingCertificate | None = None,
                         port: int = 0) -> WebhookServer:
    """The operator's WebhookServer with the bench policies loaded through its own watch callbacks, its pool
    built by its own rebuild loop; listening on loopback ``port`` with ``certificate``, else not at all (no
    certificate is ever offered)."""
    conditions = 10 if scenario == "conditions" else 0
    policies = AdmissionPolicies(None)  # type: ignore[arg-type]  # no API calls: events are handed to it
    synced = threading.Event()
    synced.set()
    # What `synced` reads: every watcher has listed once (no watcher runs here; the events below are the list).
    policies.watchers = [SimpleNamespace(synced=synced, unavailable=False)]  # type: ignore[list-item]
    for body in pss_policies(native=False, namespace=NAMESPACE, conditions=conditions):
        body["metadata"].update({"uid": str(uuid.uuid4()), "generation": 1, "resourceVersion": "1"})
        body.update({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy"})
        policies._on_policy("ADDED", body)
    namespaces = Namespaces(None)  # type: ignore[arg-type]
    namespaces._on_event("ADDED", namespace_event(NAMESPACE))
    discovery = builtin()
    server = WebhookServer(policies, namespaces, lambda: discovery, CertificateFiles(lambda: certificate),
                           backend=Backend(), options=ServerOptions(host="127.0.0.1", port=port))
    await server.start()
    deadline = time.monotonic() + 120
    while server._pool is None or server.serving_version < policies.snapshot.version or \
            (certificate is not None and not server.listening):
        if time.monotonic() > deadline:
            raise SystemExit("the webhook server did not build its pool within 120 s")
        await asyncio.sleep(0.05)
    pool = server._pool
    if pool.inline is None:
        raise SystemExit("the server did not compile the policies for inline answers")
    return server


def _check(status: int, body: bytes, uid: str) -> None:
    answer = json.loads(body)["response"]
    if status != 200 or answer.get("uid") != uid or answer.get("allowed") is not True:
        raise SystemExit(f"unexpected answer ({status}): {body[:400]!r}")


class ServerPath:
    """Requests through WebhookServer._handle (the path of POST /validate/fail)."""

    def __init__(self, server: WebhookServer, bodies: list[tuple[str, bytes]]):
        self.server = server
        self.requests = [_StandInRequest("/validate/fail", body) for _uid, body in bodies]
        self.uids = [uid for uid, _body in bodies]

    async def run(self, n: int, check: bool = False) -> None:
        handle, requests = self.server._handle, self.requests
        count = len(requests)
        for i in range(n):
            response = await handle(requests[i % count])  # type: ignore[arg-type]
            if check:
                assert response.body is not None
                _check(response.status, bytes(response.body), self.uids[i % count])  # type: ignore[arg-type]


class WorkerPath:
    """What an evaluation worker does with one request (sandbox._admit), with engines built as a worker builds
    them, in this process."""

    def __init__(self, server: WebhookServer, bodies: list[tuple[str, bytes]]):
        snapshot = server._pool.snapshot  # type: ignore[union-attr]
        policies = sorted(snapshot.policies.values(), key=lambda p: p.key)
        exceptions = [compile_exception(e) for e in snapshot.exceptions]
        self.engines = [sandbox._prepared(PolicyEngine(p, exceptions)) for p in policies]
        namespace = server.namespaces.cached(NAMESPACE)
        self.calls = [sandbox.AdmissionCall(body, "Fail", True, namespace, False) for _uid, body in bodies]
        self.uids = [uid for uid, _body in bodies]
        # What the worker keeps between requests, where its _admit takes it (older checkouts: nothing).
        self.kept: tuple[Any, ...] = ({},) if "webhooks" in inspect.signature(sandbox._admit).parameters else ()

    async def run(self, n: int, check: bool = False) -> None:
        engines, calls, kept = self.engines, self.calls, self.kept
        count = len(calls)
        for i in range(n):
            answer = sandbox._admit(engines, [], calls[i % count], *kept)
            if check:
                _check(200, answer.body, self.uids[i % count])


def _client(port: int, ca_file: str, bodies: list[tuple[str, bytes]], clients: int, jobs: Any, done: Any) -> None:
    """In a child process: ``clients`` keep-alive HTTPS connections, each sending the bodies in turn, one request
    at a time, for every job (a request count; None ends); ``done`` gets each job's answered count."""
    context = ssl.create_default_context(cafile=ca_file)
    connections = [http.client.HTTPSConnection("127.0.0.1", port, context=context) for _ in range(clients)]
    headers = {"Content-Type": "application/json"}

    def send(connection: http.client.HTTPSConnection, count: int, first: int) -> None:
        for i in range(first, first + count):
            uid, body = bodies[i % len(bodies)]
            connection.request("POST", "/validate/fail", body=body, headers=headers)
            response = connection.getresponse()
            _check(response.status, response.read(), uid)

    while (n := jobs.get()) is not None:
        shares = [n // clients + (1 if k < n % clients else 0) for k in range(clients)]
        threads = [threading.Thread(target=send, args=(c, share, k)) for k, (c, share) in
                   enumerate(zip(connections, shares))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.put(n)


class HttpPath:
    """Requests over HTTPS to the listening server, from a child process (see the module docstring)."""

    def __init__(self, bodies: list[tuple[str, bytes]], port: int, ca_file: str, clients: int):
        spawn = mp.get_context("spawn")
        self.jobs, self.done = spawn.Queue(), spawn.Queue()
        self.process = spawn.Process(target=_client, args=(port, ca_file, bodies, clients, self.jobs, self.done),
                                     daemon=True)
        self.process.start()

    async def run(self, n: int, check: bool = False) -> None:
        self.jobs.put(n)
        await asyncio.to_thread(self.done.get)

    def close(self) -> None:
        self.jobs.put(None)
        self.process.join(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def memory() -> str:
    """This process's resident memory now and at its peak (VmRSS, VmHWM)."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return f"RSS {int(status['VmRSS'].split()[0]) / 1024:.0f} MiB (peak {int(status['VmHWM'].split()[0]) / 1024:.0f})"


def cpu_per_request(loop: asyncio.AbstractEventLoop, path: Any, n: int) -> float:
    started = time.process_time()
    loop.run_until_complete(path.run(n))
    return (time.process_time() - started) / n


def compare(args: argparse.Namespace) -> int:
    """--against: this checkout's harness and the other's, each in a process of its own (PYTHONPATH: the other's
    ``operator`` directory), measured in turns of --requests requests, --repeat turns each."""
    def child(pythonpath: str) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": pythonpath}
        command = [sys.executable, str(Path(__file__).resolve()), "--driven", "--scenario", args.scenario,
                   "--path", args.path, "--clients", str(args.clients), "--warmup", str(args.warmup)]
        return subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                cwd=tempfile.gettempdir())

    this = str(Path(__file__).resolve().parents[1] / "operator")
    processes = {"against": child(str(Path(args.against).resolve())), "this": child(this)}
    for name, process in processes.items():
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("ready"):
            raise SystemExit(f"the {name} harness did not start ({line!r})")
        print(f"{name}: {line.strip().removeprefix('ready ')}")
    samples: dict[str, list[float]] = {name: [] for name in processes}
    for turn in range(args.repeat):
        for name in (processes if turn % 2 == 0 else reversed(processes)):
            process = processes[name]
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(f"{args.requests}\n")
            process.stdin.flush()
            samples[name].append(float(process.stdout.readline()))
    for process in processes.values():
        assert process.stdin is not None
        process.stdin.close()
        process.wait(60)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.repeat} turns of {args.requests} "
          f"requests each, alternating")
    for name, values in samples.items():
        print(f"{name:8s} CPU ms per request: median {statistics.median(values):.3f}, min {min(values):.3f}, "
              f"max {max(values):.3f}")
    ratios = sorted(t / a for t, a in zip(samples["this"], samples["against"]))
    print(f"this/against, turn by turn: median {statistics.median(ratios):.3f}, "
          f"min {ratios[0]:.3f}, max {ratios[-1]:.3f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=("pss", "conditions"), default="pss")
    parser.add_argument("--path", choices=("server", "worker", "http"), default="server")
    parser.add_argument("--clients", type=int, default=1, help="--path http: concurrent connections")
    parser.add_argument("--requests", type=int, default=2000, help="requests per measurement")
    parser.add_argument("--repeat", type=int, default=5, help="measurements (each --requests requests)")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sort", default="cumulative,tottime", help="pstats orders to print, comma-separated")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--against", metavar="OPERATOR_DIR",
                        help="compare with another checkout's operator/ directory, turn by turn")
    parser.add_argument("--driven", action="store_true", help=argparse.SUPPRESS)  # a child of --against
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.against:
        return compare(args)

    # The operator's own event loop (vpol.controller.run; asyncio's in checkouts that name none).
    loop = getattr(operator_run, "new_event_loop", asyncio.new_event_loop)()
    asyncio.set_event_loop(loop)
    certificate, port = None, 0
    if args.path == "http":
        certificate = new_serving_certificate([], ["127.0.0.1"], now=datetime.datetime.now(datetime.timezone.utc))
        port = _free_port()
    server = loop.run_until_complete(started_server(args.scenario, certificate, port))
    uids = [str(uuid.uuid4()) for _ in range(64)]
    bodies = [(uid, review_body(NAMESPACE, uid)) for uid in uids]
    path: Any
    if args.path == "http":
        assert certificate is not None
        ca = tempfile.NamedTemporaryFile(suffix=".pem", delete=False)
        ca.write(certificate.ca_pem)
        ca.close()
        path = HttpPath(bodies, port, ca.name, args.clients)
    else:
        path = ServerPath(server, bodies) if args.path == "server" else WorkerPath(server, bodies)
    loop.run_until_complete(path.run(len(bodies), check=True))
    loop.run_until_complete(path.run(args.warmup))

    pool = server._pool
    assert pool is not None
    clients = f" ({args.clients} clients)" if args.path == "http" else ""
    setting = (f"scenario {args.scenario}: {len(pool.snapshot.policies)} policies, path {args.path}{clients}, "
               f"body {len(bodies[0][1])} bytes")
    if args.driven:  # --against's child: "ready", then a CPU ms per request for each request count read
        print(f"ready {setting}, vpol from {Path(sys.modules['vpol'].__file__ or '').parent}, after warm-up "
              f"{memory()}", flush=True)
        for line in sys.stdin:
            print(f"{cpu_per_request(loop, path, int(line)) * 1000:.4f}", flush=True)
        samples: list[float] = []
        args.no_profile = True
    else:
        print(f"python {platform.python_version()}, {platform.machine()}, load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{setting}, {args.requests} requests x {args.repeat}")
        samples = [cpu_per_request(loop, path, args.requests) * 1000 for _ in range(args.repeat)]
        print("CPU ms per request: " + " ".join(f"{s:.3f}" for s in samples))
        print(f"median {statistics.median(samples):.3f} ms, min {min(samples):.3f}, max {max(samples):.3f}; "
              f"{memory()}")

    if not args.no_profile:
        profiler = cProfile.Profile()
        profiler.enable()
        loop.run_until_complete(path.run(args.requests))
        profiler.disable()
        for order in args.sort.split(","):
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out)
            stats.sort_stats(order.strip()).print_stats(args.top)
            print(f"\n--- top {args.top} by {order.strip()} ({args.requests} requests, under cProfile) ---")
            print("\n".join(line for line in out.getvalue().splitlines()
                            if line.strip() and not line.startswith(("   Ordered by", "   List reduced"))))
    if isinstance(path, HttpPath):
        path.close()
        os.unlink(ca.name)
    loop.run_until_complete(server.stop())
    loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

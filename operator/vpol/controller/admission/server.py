"""vpol's admission webhook server: AdmissionReviews in, decisions of the shared engine out.

Why aiohttp directly and not Kopf's admission machinery (``@kopf.on.validate``
with its managed ValidatingWebhookConfiguration): Kopf derives the webhook
rules from handlers registered at import time, one per handler, and manages
the configuration from whichever replica holds peering. vpol's rules come
from the policies at run time and change with them, one webhook per
failurePolicy, and every replica must serve. aiohttp is Kopf's own HTTP
library, so this adds no dependency.

Each request is evaluated by the same engine as ``vpol apply`` and the
background scans, in bounded worker processes (:mod:`vpol.engine.sandbox`):
the event loop never runs CEL, and a runaway expression costs one worker
its deadline (the failurePolicy of the webhook answers), while the other
workers keep serving. Workers are rebuilt off the request path when the
policies change.

Routes: ``POST /validate/fail`` and ``/validate/ignore`` (the webhooks of
policies with failurePolicy Fail and Ignore), ``POST /mutate/fail`` and
``/mutate/ignore`` (MutatingPolicies the API server cannot apply natively,
answered with a JSON patch), ``GET /healthz``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import queue
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from vpol.cel.backend import Backend
from vpol.controller import metrics
from vpol.controller.admission.namespaces import Namespaces
from vpol.controller.admission.policies import AdmissionPolicies, Snapshot
from vpol.desired.webhook import webhook_path
from vpol.engine.admission import decide, failure_response, mutation_response, review_response, subject_for_request
from vpol.engine.sandbox import Limits, SandboxedEvaluator
from vpol.model.discovery import Discovery

logger = logging.getLogger(__name__)

FAILURE_POLICIES = {webhook_path(fp): fp for fp in ("Fail", "Ignore")}
MUTATING_FAILURE_POLICIES = {webhook_path(fp, mutating=True): fp for fp in ("Fail", "Ignore")}


@dataclass(frozen=True)
class ServerOptions:
    host: str = "0.0.0.0"
    port: int = 9443
    #: Evaluation worker processes (concurrent requests being evaluated).
    workers: int = 2
    #: Longest time one request may take to evaluate (waiting for a worker included).
    eval_timeout: float = 3.0
    eval_memory_mib: int = 1024


class EvaluatorPool:
    """Bounded evaluators over one snapshot of the policies; each is used by one request at a time."""

    def __init__(self, snapshot: Snapshot, size: int, backend: Backend, limits: Limits):
        self.snapshot = snapshot
        self.limits = limits
        policies = sorted(snapshot.policies.values(), key=lambda p: p.key)
        # MutatingPolicies apply in name order (the API server's order among policies is unspecified).
        mutating = [snapshot.mutating[name] for name in sorted(snapshot.mutating)]
        self.evaluators = [SandboxedEvaluator(policies, snapshot.exceptions, backend, limits, mutating=mutating)
                           for _ in range(max(1, size))]
        self.idle: queue.Queue[SandboxedEvaluator] = queue.Queue()

    def start(self) -> None:
        """Start every worker (blocking: spawn and compile)."""
        for ev in self.evaluators:
            if self.snapshot.policies or self.snapshot.mutating:
                ev.start()
            self.idle.put(ev)

    def release(self, ev: SandboxedEvaluator, killed: bool) -> None:
        if not killed:
            self.idle.put(ev)
            return

        def restart() -> None:  # off the request path: spawn and compile take a second
            try:
                ev.start()
            except Exception as exc:  # noqa: BLE001 - the next use tries again
                logger.warning("restarting an admission evaluation worker failed: %s", exc)
            self.idle.put(ev)

        threading.Thread(target=restart, daemon=True, name="vpol-admission-restart").start()

    def close(self) -> None:
        for ev in self.evaluators:
            ev.close()


class CertificateFiles:
    """The serving certificate on disk (ssl wants files), reloaded into the server's context on change."""

    def __init__(self, current: Callable[[], Any]):
        self.current = current
        self.dir = tempfile.mkdtemp(prefix="vpol-webhook-")
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._loaded: bytes = b""

    def refresh(self) -> bool:
        """Load the current certificate if it changed; False when there is none yet."""
        bundle = self.current()
        if bundle is None:
            return bool(self._loaded)
        if bundle.cert_pem == self._loaded:
            return True
        cert, key = os.path.join(self.dir, "tls.crt"), os.path.join(self.dir, "tls.key")
        with open(cert, "wb") as f:
            f.write(bundle.cert_pem)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(bundle.key_pem)
        # New handshakes use the new pair; open connections keep theirs.
        self.context.load_cert_chain(cert, key)
        self._loaded = bundle.cert_pem
        logger.info("admission webhook serving certificate loaded")
        return True


class WebhookServer:
    def __init__(self, policies: AdmissionPolicies, namespaces: Namespaces, discovery: Callable[[], Discovery],
                 certificates: CertificateFiles, *, backend: Backend | None = None,
                 options: ServerOptions = ServerOptions()):
        self.policies = policies
        self.namespaces = namespaces
        self.discovery = discovery
        self.certificates = certificates
        self.backend = backend or Backend()
        self.options = options
        self.limits = Limits(seconds_per_subject=options.eval_timeout,
                             memory_bytes=options.eval_memory_mib * 1024**2)
        self._pool: EvaluatorPool | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=options.workers + 4,
                                                               thread_name_prefix="vpol-admission")
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        #: Snapshot version the serving pool was built from (for tests and /healthz).
        self.serving_version = -1
        #: Whether the TLS site accepts connections (it waits for the serving certificate first).
        self.listening = False

    # -- lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.policies.listen(self._on_change)
        self._changed.set()
        app = web.Application(client_max_size=8 * 1024**2)
        for path in FAILURE_POLICIES:
            app.router.add_post(path, self._handle)
        for path in MUTATING_FAILURE_POLICIES:
            app.router.add_post(path, self._handle_mutate)
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self._tasks.append(asyncio.create_task(self._rebuild_loop(), name="vpol-admission-rebuild"))
        # Serving waits for the certificate in the background: the rest of the operator starts meanwhile.
        self._tasks.append(asyncio.create_task(self._serve(), name="vpol-admission-serve"))

    async def _serve(self) -> None:
        assert self._runner is not None
        while True:
            try:
                if await asyncio.to_thread(self.certificates.refresh):
                    break
            except Exception as exc:  # noqa: BLE001 - an unusable certificate: keep waiting for a good one
                logger.warning("admission webhook certificate cannot be loaded: %s", exc)
            logger.info("admission webhook: waiting for the serving certificate")
            await asyncio.sleep(2)
        site = web.TCPSite(self._runner, self.options.host, self.options.port, ssl_context=self.certificates.context)
        await site.start()
        self.listening = True
        logger.info("admission webhook serving on %s:%d", self.options.host, self.options.port)
        await self._certificate_loop()

    def answering_version(self) -> int:
        """The snapshot version requests are answered with; -1 while nothing listens (no certificate yet):
        a webhook configuration must not send the API server here before that."""
        return self.serving_version if self.listening else -1

    async def stop(self) -> None:
        self.listening = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._pool is not None:
            await asyncio.to_thread(self._pool.close)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _on_change(self, _snapshot: Snapshot) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._changed.set)

    async def _rebuild_loop(self) -> None:
        while True:
            await self._changed.wait()
            await asyncio.sleep(0.2)  # gather a burst of policy changes into one rebuild
            self._changed.clear()
            snapshot = self.policies.snapshot
            if self._pool is not None and self._pool.snapshot.version == snapshot.version:
                continue
            pool = EvaluatorPool(snapshot, self.options.workers, self.backend, self.limits)
            try:
                await asyncio.to_thread(pool.start)
            except Exception as exc:  # noqa: BLE001 - keep serving with the old pool, try again
                logger.warning("admission: starting evaluation workers failed: %s", exc)
                await asyncio.to_thread(pool.close)
                await asyncio.sleep(2)
                self._changed.set()
                continue
            old, self._pool = self._pool, pool
            self.serving_version = snapshot.version
            metrics.ADMISSION_POLICIES.set(len(snapshot.policies))
            if old is not None:
                asyncio.get_running_loop().run_in_executor(None, _close_when_idle, old)

    async def _certificate_loop(self) -> None:
        while True:
            await asyncio.sleep(10)
            try:
                await asyncio.to_thread(self.certificates.refresh)
            except Exception as exc:  # noqa: BLE001 - keep the loaded certificate
                logger.warning("admission webhook: reloading the certificate failed: %s", exc)

    # -- requests

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.json_response({"serving": self._pool is not None, "version": self.serving_version})

    async def _handle(self, request: web.Request) -> web.Response:
        failure_policy = FAILURE_POLICIES[request.path]
        return await self._answer(request, failure_policy, failure_policy.lower(), self._evaluate)

    async def _handle_mutate(self, request: web.Request) -> web.Response:
        """MutatingPolicies the API server cannot apply natively, evaluated by the same bounded workers as
        validations (a runaway mutation costs a worker its deadline; the failurePolicy answers)."""
        failure_policy = MUTATING_FAILURE_POLICIES[request.path]
        return await self._answer(request, failure_policy, f"mutate-{failure_policy.lower()}", self._mutate)

    async def _answer(self, request: web.Request, failure_policy: str, webhook: str,
                      work: Callable[[EvaluatorPool, dict[str, Any], str, str], dict[str, Any]]) -> web.Response:
        """Read the AdmissionReview, run ``work`` in a thread (never on the event loop), answer; any failure is
        answered by the webhook's failurePolicy."""
        started = time.perf_counter()
        review = await _review(request, webhook)
        if isinstance(review, web.Response):
            return review
        req, uid = review
        pool = self._pool
        try:
            if pool is None:
                answer = failure_response(uid, "the webhook has not loaded its policies yet", failure_policy)
                metrics.ADMISSION_DECISIONS.labels("", "error").inc()
            else:
                answer = await asyncio.get_running_loop().run_in_executor(
                    self._executor, work, pool, req, uid, failure_policy)
        except Exception as exc:  # noqa: BLE001 - answer by failurePolicy, never crash the server
            logger.exception("admission request %s failed", uid)
            answer = failure_response(uid, str(exc), failure_policy)
            metrics.ADMISSION_DECISIONS.labels("", "error").inc()
        metrics.ADMISSION_LATENCY.labels(webhook).observe(time.perf_counter() - started)
        return web.json_response(answer)

    def _in_worker(self, pool: EvaluatorPool, call: Callable[[SandboxedEvaluator], tuple[Any, str]]
                   ) -> tuple[Any, str]:
        """``call`` on an idle worker of ``pool`` within the evaluation deadline: (outcome, "") or (None, why
        not). A worker whose call failed is replaced off the request path."""
        deadline = time.monotonic() + self.options.eval_timeout
        try:
            ev = pool.idle.get(timeout=self.options.eval_timeout)
        except queue.Empty:
            return None, "every evaluation worker is busy"
        outcome, error = None, ""
        try:
            if time.monotonic() >= deadline:
                error = "no evaluation worker became free in time"
            else:
                outcome, error = call(ev)
        finally:
            pool.release(ev, killed=outcome is None and bool(error))
        return outcome, error

    def _failed(self, uid: str, error: str, failure_policy: str) -> dict[str, Any]:
        logger.warning("admission request %s: %s", uid, error)
        metrics.ADMISSION_DECISIONS.labels("", "error").inc()
        return failure_response(uid, error, failure_policy)

    def _evaluate(self, pool: EvaluatorPool, req: dict[str, Any], uid: str, failure_policy: str) -> dict[str, Any]:
        """In a thread: build the subject, evaluate it in a worker, decide."""
        snapshot = pool.snapshot
        keys = [k for k, p in snapshot.policies.items() if p.spec.failure_policy == failure_policy]
        if not keys:
            return review_response(uid, decide([], {}))
        subject = subject_for_request(req, namespaced=self._namespaced(req))
        if subject.type.namespaced and subject.namespace:
            subject.namespace_object = self.namespaces.get(subject.namespace)
        started = time.perf_counter()
        results, error = self._in_worker(pool, lambda ev: ev.evaluate_once(subject, keys))
        if results is None:
            return self._failed(uid, error, failure_policy)
        elapsed = time.perf_counter() - started
        decision = decide(results, snapshot.policies)
        for key, outcome in decision.outcomes:
            metrics.ADMISSION_DECISIONS.labels(key, outcome).inc()
            metrics.ADMISSION_POLICY_LATENCY.labels(key).observe(elapsed / max(1, len(decision.outcomes)))
        return review_response(uid, decision)

    # -- mutations

    def _mutate(self, pool: EvaluatorPool, req: dict[str, Any], uid: str, failure_policy: str) -> dict[str, Any]:
        """In a thread: every MutatingPolicy of this webhook, in name order, each on the last one's result."""
        snapshot = pool.snapshot
        keys = [k for k, p in snapshot.mutating.items() if p.spec.failure_policy == failure_policy]
        subject = subject_for_request(req, namespaced=self._namespaced(req))
        if not keys:
            return mutation_response(uid, subject.object, subject.object, [], {})
        if subject.type.namespaced and subject.namespace:
            subject.namespace_object = self.namespaces.get(subject.namespace)
        outcome, error = self._in_worker(pool, lambda ev: ev.mutate_once(subject, keys))
        if outcome is None:
            return self._failed(uid, error, failure_policy)
        mutated, results = outcome
        for r in results:
            metrics.ADMISSION_DECISIONS.labels(r.policy, "mutate" if r.properties.get("changed") == "true"
                                               else ("error" if r.result == "error" else "allow")).inc()
        return mutation_response(uid, subject.object, mutated, results,
                                 {key: snapshot.mutating[key].spec.failure_policy for key in keys})

    def _namespaced(self, req: dict[str, Any]) -> bool | None:
        resource = req.get("resource") or {}
        group, version = str(resource.get("group") or ""), str(resource.get("version") or "")
        name = str(resource.get("resource") or "")
        if group == "" and name == "namespaces":
            return False
        try:
            info = self.discovery().resource(group, version, name)
        except Exception:  # noqa: BLE001 - fall back to the request's namespace
            info = None
        return None if info is None else info.namespaced


async def _review(request: web.Request, webhook: str) -> tuple[dict[str, Any], str] | web.Response:
    """The AdmissionReview's request and uid (counted in the metrics), or the 400 answer to a bad body."""
    try:
        review = await request.json()
        req = review["request"]
        uid = str(req.get("uid") or "")
    except (ValueError, KeyError, TypeError, AttributeError):
        return web.json_response({"message": "expected an admission.k8s.io/v1 AdmissionReview"}, status=400)
    kind = str((req.get("kind") or {}).get("kind") or "")
    metrics.ADMISSION_REQUESTS.labels(webhook, str(req.get("operation") or ""), kind).inc()
    return req, uid


def _close_when_idle(pool: EvaluatorPool, grace: float = 30.0) -> None:
    """Close a replaced pool once its in-flight requests have given their evaluators back."""
    deadline = time.monotonic() + grace
    while pool.idle.qsize() < len(pool.evaluators) and time.monotonic() < deadline:
        time.sleep(0.1)
    pool.close()


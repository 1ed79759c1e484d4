"""vpol's admission webhook server: AdmissionReviews in, decisions of the shared engine out.

Why aiohttp directly and not Kopf's admission machinery (``@kopf.on.validate``
with its managed ValidatingWebhookConfiguration): Kopf derives the webhook
rules from handlers registered at import time, one per handler, and manages
the configuration from whichever replica holds peering. vpol's rules come
from the policies at run time and change with them, one webhook per
failurePolicy, and every replica must serve. aiohttp is Kopf's own HTTP
library, so this adds no dependency.

Each request is evaluated by the same engine as ``vpol apply`` and the
background scans. A request whose work is bounded before it starts is
answered by the serving process itself (:mod:`vpol.policies.inline`: the
policies' comprehensions over the request's own lists, within a budget);
every other one in bounded worker processes (:mod:`vpol.policies.sandbox`),
where a runaway expression costs one worker its deadline (the failurePolicy
of the webhook answers), while the other workers keep serving. Workers are
rebuilt off the request path when the policies change.

The serving process does as little per request as it can, since every
request passes through its one event loop: it reads the body (checked and
decoded once), looks up the namespace, and either answers it inline (the
policies that apply evaluated in a few programs: vpol.policies.validating.engine.Batches)
or hands the body as received to an idle worker, which decodes it, evaluates,
decides and encodes the answer; the exchange is awaited on the loop itself (no
thread per request), and the metrics' labelled children are kept rather than
looked up per request or policy.

Every caller is treated as hostile (the port is reachable by whatever can reach the Service): a body passes
:mod:`vpol.engine.review` (size, encoding, nesting, the AdmissionReview's fields and types) before anything reads
it, else it is answered 400/413 with a one-line reason, counted and logged once without a traceback; an
unexpected failure is answered by the webhook's failurePolicy and logged as one line with an error id (the
traceback at debug level). The TLS listener takes TLS 1.2 or later without client renegotiation, optionally
verifies the API server's client certificate (``--webhook-client-ca``), limits header sizes, open connections,
handshake and idle time, and the time a body may take to arrive, so slow or many clients cannot exhaust it.

Routes: ``POST /validate/fail`` and ``/validate/ignore`` (the webhooks of
policies with failurePolicy Fail and Ignore), ``POST /mutate/fail`` and
``/mutate/ignore`` (MutatingPolicies the API server cannot apply natively,
answered with a JSON patch), ``POST /probe`` (the probe webhook of the
configurations, :mod:`vpol.desired.probe`: always a denial naming the epoch it
was asked with), ``GET /healthz``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import ssl
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from vpol.cel.backend import Backend, current, using
from vpol.controller import garbage, metrics
from vpol.controller.admission.images import ImageAdmission
from vpol.controller.admission.namespaces import Namespaces
from vpol.controller.admission.policies import AdmissionPolicies, Snapshot
from vpol.controller.registry_credentials import RegistryClients
from vpol.desired.events import SOURCE_ADMISSION, ObjectRef, Violation, violation_events
from vpol.desired.policy_webhook import POLICY_VALIDATION_PATH, policy_validation_response
from vpol.desired.probe import PROBE_PATH, webhook_probe_answer
from vpol.desired.webhook import webhook_path
from vpol.engine.admission import Decision, failure_response, review_response, subject_for_request
from vpol.engine.global_context import GlobalContextSource, reads_global_context
from vpol.engine.review import MAX_BODY_BYTES, TIMEOUT, TOO_LARGE, Refusal, Review, parse_review
from vpol.model.discovery import Discovery
from vpol.policies.inline import InlineAdmission, InlineLimits
from vpol.policies.policy_validation import is_validated_document, validate_document
from vpol.policies.sandbox import AdmissionAnswer, AdmissionCall, Limits, SandboxedEvaluator

logger = logging.getLogger(__name__)

FAILURE_POLICIES = {webhook_path(fp): fp for fp in ("Fail", "Ignore")}
#: The webhook port's readiness (the chart's readinessProbe, HTTPS): 200 once every policy is loaded, else 503.
READY_PATH = "/readyz"
#: Why a replica does not answer yet (a 429 to the API server, a 503 to the readiness probe).
NOT_LOADED = "the webhook has not loaded its policies yet"
#: Why a stopping replica is not ready (WebhookServer.stop).
DRAINING = "the webhook is stopping"
#: Longest a request waits for the workers of newer policies to be built (see WebhookServer._current_pool).
REBUILD_WAIT = 2.0
MUTATING_FAILURE_POLICIES = {webhook_path(fp, mutating=True): fp for fp in ("Fail", "Ignore")}
#: The image webhooks (ImageValidatingPolicies: vpol.controller.admission.images), by path: (failurePolicy, mutating).
IMAGE_PATHS = {webhook_path(fp, mutating, images=True): (fp, mutating)
               for fp in ("Fail", "Ignore") for mutating in (False, True)}


@dataclass(frozen=True)
class ServerOptions:
    host: str = "0.0.0.0"
    port: int = 9443
    #: Evaluation worker processes (concurrent requests being evaluated).
    workers: int = 2
    #: Longest time one request may take to evaluate (waiting for a worker included).
    eval_timeout: float = 3.0
    eval_memory_mib: int = 1024
    #: Requests the serving process answers itself when their work is bounded (vpol.policies.inline); None: never.
    inline: InlineLimits | None = InlineLimits()
    #: The image webhooks' timeout when a policy gives none (seconds; the API server's default, Kyverno's too).
    image_timeout: int = 10
    #: Open connections at most (beyond, a new one is closed at once); the API server keeps a few per replica.
    max_connections: int = 256
    #: Seconds a connection may stay idle between requests: longer than the API server keeps an idle webhook
    #: connection (90 s, Go's IdleConnTimeout, which client-go's transports keep), so the API server always closes
    #: first. A server that closes an idle connection as the API server starts writing a request on it fails that
    #: request with EOF (a POST is not retried once written), and the webhook's failurePolicy decides it. Kyverno's
    #: webhook server keeps them 5 minutes (IdleTimeout in its pkg/webhooks/server.go); so does this one.
    idle_seconds: float = 300.0
    #: Seconds a TLS handshake may take, and a body may take to arrive.
    handshake_seconds: float = 10.0
    read_seconds: float = 10.0
    #: Longest request line and header field (bytes).
    max_header_bytes: int = 8190
    #: Seconds a stopping server keeps serving before it closes (WebhookServer.stop: the drain).
    drain_seconds: float = 0.0


class EvaluatorPool:
    """Bounded evaluators over one snapshot of the policies; each is used by one request at a time.

    Built and used on the event loop; starting a worker (spawn and compile: a second or more) happens in a
    thread."""

    def __init__(self, snapshot: Snapshot, size: int, backend: Backend, limits: Limits,
                 global_context: GlobalContextSource | None = None, inline: InlineLimits | None = None):
        self.snapshot = snapshot
        self.limits = limits
        self._inline_limits = inline
        #: The policies compiled in the serving process, for the requests it answers itself (built by start()).
        self.inline: InlineAdmission | None = None
        policies = sorted(snapshot.policies.values(), key=lambda p: p.key)
        # MutatingPolicies apply in name order (the API server's order among policies is unspecified).
        mutating = [snapshot.mutating[name] for name in sorted(snapshot.mutating)]
        # Workers of policies that never read globalContext are sent none of its data.
        if not reads_global_context([*policies, *mutating]):
            global_context = None
        self.evaluators = [SandboxedEvaluator(policies, snapshot.exceptions, backend, limits, mutating=mutating,
                                              global_context=global_context)
                           for _ in range(max(1, size))]
        #: (failurePolicy, mutating) of the webhooks some policy of this snapshot answers.
        self._answering = {(p.spec.failure_policy, False) for p in policies} | \
            {(p.spec.failure_policy, True) for p in mutating}
        #: Workers nobody is using, and the requests waiting for one, first come first served: a freed worker
        #: goes to the longest waiting request, never to one that arrived later (with a queue that lets a new
        #: request take a freed worker first, a request can wait out its whole deadline under load). Among
        #: idle workers the one freed last serves first: its memory is still in the CPU's caches, and at low
        #: load one worker answers everything (measured: a quarter less worker CPU per request, one client).
        self._idle: collections.deque[SandboxedEvaluator] = collections.deque()
        self._waiting: collections.deque[asyncio.Future[SandboxedEvaluator]] = collections.deque()
        self._restarting: set[asyncio.Task[None]] = set()

    def answers(self, failure_policy: str, mutating: bool) -> bool:
        """Whether any policy of this snapshot answers that webhook (else a request is allowed at once: a
        configuration being updated may still send one, and no worker needs to start for it)."""
        return (failure_policy, mutating) in self._answering

    async def start(self) -> None:
        """Compile the policies for inline answers, and start the workers unless every request can be answered
        inline (then a worker starts when a request first needs one: a large request, say)."""
        policies = sorted(self.snapshot.policies.values(), key=lambda p: p.key)
        if self._inline_limits is not None and policies:
            try:
                self.inline = await asyncio.to_thread(InlineAdmission, policies, self.snapshot.exceptions,
                                                      self._inline_limits)
            except Exception as exc:  # noqa: BLE001 - the workers answer everything, as without inline answers
                logger.warning("admission: compiling the policies for inline answers failed: %s", exc)
        needed = bool(self.snapshot.mutating) or (bool(policies) and (
            self.inline is None or not all(self.inline.covers(fp) for fp, _m in self._answering if not _m)))
        for ev in self.evaluators:
            if needed:
                await asyncio.to_thread(ev.start)
            self._give(ev)

    async def acquire(self, timeout: float) -> SandboxedEvaluator | None:
        """An idle, running worker within ``timeout`` (None when none became free)."""
        deadline = time.monotonic() + timeout
        while True:
            while self._waiting and self._waiting[0].done():  # gave up waiting
                self._waiting.popleft()
            if self._idle and not self._waiting:
                ev = self._idle.pop()
            else:
                waiter: asyncio.Future[SandboxedEvaluator] = asyncio.get_running_loop().create_future()
                self._waiting.append(waiter)
                try:
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        ev = await waiter
                except (asyncio.TimeoutError, TimeoutError):
                    if waiter.done() and not waiter.cancelled():
                        self._give(waiter.result())  # handed over just as the time ran out: pass it on
                    return None
            if ev.running:
                return ev
            self.release(ev, killed=True)  # died while idle: replaced off the request path

    def _give(self, ev: SandboxedEvaluator) -> None:
        """``ev`` to the longest waiting request, or to the idle ones."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(ev)
                return
        self._idle.append(ev)

    def release(self, ev: SandboxedEvaluator, killed: bool) -> None:
        if not killed:
            self._give(ev)
            return

        async def restart() -> None:  # off the request path: spawn and compile take a second
            try:
                await asyncio.to_thread(ev.start)
            except Exception as exc:  # noqa: BLE001 - the next use tries again
                logger.warning("restarting an admission evaluation worker failed: %s", exc)
                await asyncio.sleep(1)
            self._give(ev)

        task = asyncio.get_running_loop().create_task(restart(), name="vpol-admission-restart")
        self._restarting.add(task)
        task.add_done_callback(self._restarting.discard)

    async def close_when_idle(self, grace: float = 30.0) -> None:
        """Close this (replaced) pool once its in-flight requests have given their workers back."""
        deadline = time.monotonic() + grace
        while len(self._idle) < len(self.evaluators) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        for ev in self.evaluators:
            ev.close()


class CertificateFiles:
    """The serving certificate on disk (ssl wants files), reloaded into the server's context on change.

    The context takes TLS 1.2 or later (the client's best, 1.3 when it offers it) and refuses client-initiated
    renegotiation; with ``client_ca`` it requires a client certificate signed by that CA (the API server presents
    one when its AdmissionConfiguration gives it a kubeconfig for this webhook)."""

    def __init__(self, current: Callable[[], Any], client_ca: str = ""):
        self.current = current
        self.dir = tempfile.mkdtemp(prefix="vpol-webhook-")
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.options |= ssl.OP_NO_RENEGOTIATION
        if client_ca:
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(cafile=client_ca)
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
                 options: ServerOptions = ServerOptions(), events: Any = None,
                 global_context: GlobalContextSource | None = None, registry_clients: RegistryClients | None = None):
        self.policies = policies
        #: Where PolicyViolation Events go (vpol.controller.events.EventRecorder; None: --events=off).
        self.events = events
        self.namespaces = namespaces
        self.discovery = discovery
        self.certificates = certificates
        #: The evaluation context of every policy this server evaluates (None: the process's default).
        self.backend = backend or current()
        self.options = options
        #: GlobalContextEntry data, sent to each evaluation worker as it changes.
        self.global_context = global_context
        self.limits = Limits(seconds_per_subject=options.eval_timeout,
                             memory_bytes=options.eval_memory_mib * 1024**2)
        self._pool: EvaluatorPool | None = None
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._closing: set[asyncio.Task[None]] = set()
        #: Snapshot version the serving pool was built from (for tests and /healthz).
        self.serving_version = -1
        #: Whether the TLS site accepts connections (it waits for the serving certificate first).
        self.listening = False
        #: Whether the server is stopping: every answer then closes its connection (WebhookServer.stop).
        self.draining = False
        self._listener: asyncio.AbstractServer | None = None
        #: Refusals logged per reason (one line per reason and LOG_EVERY seconds: a flood logs little).
        self._refusals_logged: dict[str, tuple[float, int]] = {}
        self.images = ImageAdmission(lambda: self.policies.snapshot, self._namespace_object,
                                     clients=registry_clients, timeout_seconds=options.image_timeout,
                                     backend=self.backend, limits=self.limits, global_context=global_context)

    # -- lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.policies.listen(self._on_change)
        self._changed.set()
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[self._unexpected])
        for path in FAILURE_POLICIES:
            app.router.add_post(path, self._handle)
        for path in MUTATING_FAILURE_POLICIES:
            app.router.add_post(path, self._handle_mutate)
        for path in IMAGE_PATHS:
            app.router.add_post(path, self._handle_images)
        app.router.add_post(PROBE_PATH, self._probe)
        app.router.add_post(POLICY_VALIDATION_PATH, self._validate_policy)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get(READY_PATH, self._readyz)
        # Bodies are decoded by vpol.engine.review, bounded after decompression too (aiohttp's own decoding has
        # no such bound and answers a bad gzip body with a 500).
        self._runner = web.AppRunner(app, access_log=None, auto_decompress=False,
                                     keepalive_timeout=self.options.idle_seconds,
                                     max_line_size=self.options.max_header_bytes,
                                     max_field_size=self.options.max_header_bytes)
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
        # Not aiohttp's TCPSite: it sets neither a TLS handshake timeout nor a bound on connections.
        assert self._loop is not None and self._runner.server is not None
        while True:
            try:
                self._listener = await self._loop.create_server(
                    _Bounded(self._runner.server, self.options.max_connections), self.options.host,
                    self.options.port, ssl=self.certificates.context,
                    ssl_handshake_timeout=self.options.handshake_seconds, backlog=128, reuse_address=True)
                break
            except OSError as exc:
                # A port another process holds: said, and tried again (this task ending would leave the operator
                # running with no webhook and nothing in its log).
                logger.warning("admission webhook cannot listen on %s:%d (%s); trying again in 2 s",
                               self.options.host, self.options.port, exc)
                await asyncio.sleep(2)
        self.listening = True
        logger.info("admission webhook serving on %s:%d", self.options.host, self.options.port)
        await self._certificate_loop()

    def answering_version(self) -> int:
        """The snapshot version requests are answered with; -1 while nothing listens (no certificate yet):
        a webhook configuration must not send the API server here before that."""
        return self.serving_version if self.listening else -1

    async def stop(self) -> None:
        """Drain, then close: connections, evaluation workers, the image webhooks' threads.

        Draining (options.drain_seconds, when serving): the server keeps accepting connections and answering for
        that long, but /readyz says 503 and every answer carries `Connection: close`. The API server pools its
        connections to a webhook by the Service's host name, so it keeps sending requests to a stopping replica
        on connections it already holds, whatever the Service's endpoints say; a connection closed by the server
        while the API server writes a request on it fails that request with EOF (Go's client retries a POST only
        when none of it was written), so closing kept-alive connections at once fails a request now and then
        under load. Each answer closing its own connection lets the API server close it instead, after reading
        the answer, and dial again (to a replica that is not stopping, once its endpoint is gone); connections
        accepted meanwhile (endpoints reach the API server's dialer a little late) are answered the same way.
        What is left after the drain (connections the API server did not use during it) is closed as before,
        requests in flight answered first."""
        if self.listening and self.options.drain_seconds > 0:
            self.draining = True
            logger.info("admission webhook: draining for %.1f s (every answer closes its connection)",
                        self.options.drain_seconds)
            await asyncio.sleep(self.options.drain_seconds)
        self.listening = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._pool is not None:
            await asyncio.to_thread(self._pool.close)
        self.images.close()

    def _on_change(self, _snapshot: Snapshot) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._changed.set)

    async def _rebuild_loop(self) -> None:
        while True:
            await self._changed.wait()
            await asyncio.sleep(0.2)  # gather a burst of policy changes into one rebuild
            self._changed.clear()
            if not self.policies.synced:
                # Not before every kind has been listed once: a pool of the policies seen so far would answer
                # without the others (a starting replica admitting what they deny). Checked again shortly.
                self._changed.set()
                continue
            snapshot = self.policies.snapshot
            if self._pool is not None and self._pool.snapshot.version == snapshot.version:
                continue
            pool = EvaluatorPool(snapshot, self.options.workers, self.backend, self.limits, self.global_context,
                                 self.options.inline)
            try:
                await pool.start()
            except Exception as exc:  # noqa: BLE001 - keep serving with the old pool, try again
                logger.warning("admission: starting evaluation workers failed: %s", exc)
                await asyncio.to_thread(pool.close)
                await asyncio.sleep(2)
                self._changed.set()
                continue
            old, self._pool = self._pool, pool
            if old is not None:
                old.inline = None  # its compiled policies (tens of MiB) go now; requests in flight hold theirs
            # The new policies are long-lived: out of the collector's scans (vpol.controller.garbage).
            garbage.settle()
            self.serving_version = snapshot.version
            metrics.ADMISSION_POLICIES.set(len(snapshot.policies))
            self.images.warm(snapshot)
            if old is not None:
                task = asyncio.create_task(old.close_when_idle(), name="vpol-admission-close")
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

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

    async def _readyz(self, _request: web.Request) -> web.Response:
        """What the chart's readiness probe reads: ready once this replica answers with every policy loaded, so
        that a starting one (a failover, a rollout) joins its Service's endpoints only then; until then the API
        server would get 429s from it and retry elsewhere. Not ready again while it drains (stop)."""
        if self.draining:
            return web.json_response({"ready": False, "reason": DRAINING}, status=503)
        if self._pool is None:
            return web.json_response({"ready": False, "reason": NOT_LOADED}, status=503)
        return web.json_response({"ready": True, "version": self.serving_version})

    @web.middleware
    async def _unexpected(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Any failure the handlers did not answer themselves: a 500 (the API server then applies the webhook's
        failurePolicy), one log line with an error id, the traceback at debug level."""
        try:
            response: web.StreamResponse = await handler(request)
            if self.draining:
                response.force_close()  # `Connection: close`: see stop()
            return response
        except web.HTTPException:
            raise
        except Exception as exc:  # noqa: BLE001 - the trust boundary never answers with a traceback
            error = self._internal_error(f"{request.method} {request.path}", exc)
            return web.json_response({"message": f"internal error {error}"}, status=500)

    def _internal_error(self, what: str, exc: BaseException) -> str:
        """Log an unexpected failure as one line naming an error id (the traceback at debug level); the id."""
        error = uuid.uuid4().hex[:12]
        metrics.ADMISSION_INTERNAL_ERRORS.inc()
        logger.warning("admission: %s failed (error %s): %s: %s", what, error, type(exc).__name__, str(exc)[:300])
        logger.debug("admission: error %s", error, exc_info=exc)
        return error

    async def _read(self, request: web.Request, webhook: str) -> Review | web.Response:
        """The request's AdmissionReview once it passed the boundary (vpol.engine.review), or the answer refusing
        it (400, 408 or 413, one line; counted and logged without a traceback)."""
        try:
            # A timeout scope rather than wait_for: no task, and no turn of the event loop, per request.
            async with asyncio.timeout(self.options.read_seconds):
                body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._refused(request, webhook, Refusal(413, TOO_LARGE, f"the body is larger than "
                                                                         f"{MAX_BODY_BYTES} bytes"))
        except TimeoutError:
            return self._refused(request, webhook, Refusal(408, TIMEOUT, f"the body did not arrive within "
                                                                        f"{self.options.read_seconds:.0f} s"))
        outcome = parse_review(body, request.headers.get("Content-Encoding", ""))
        if isinstance(outcome, Refusal):
            return self._refused(request, webhook, outcome)
        req = outcome.request
        metrics.admission_request(webhook, req["operation"], req["kind"]["kind"])
        return outcome

    def _refused(self, request: web.Request, webhook: str, refusal: Refusal) -> web.Response:
        metrics.ADMISSION_REJECTED.labels(refusal.reason).inc()
        now = time.monotonic()
        last, suppressed = self._refusals_logged.get(refusal.reason, (-LOG_EVERY, 0))
        if now - last >= LOG_EVERY:
            more = f" ({suppressed} more like it not logged)" if suppressed else ""
            logger.warning("admission: refused a request to %s from %s (%s): %s%s%s", webhook, request.remote,
                           refusal.reason, refusal.message, f"; uid {refusal.uid}" if refusal.uid else "", more)
            self._refusals_logged[refusal.reason] = (now, 0)
        else:
            self._refusals_logged[refusal.reason] = (last, suppressed + 1)
        return web.json_response(refusal.answer(), status=refusal.status)

    async def _probe(self, request: web.Request) -> web.Response:
        """The probe webhook: proves the API server calls this webhook with a configuration (no worker)."""
        review = await self._read(request, "probe")
        if isinstance(review, web.Response):
            return review
        answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "response": webhook_probe_answer(review.request)}
        return web.json_response(answer)

    async def _validate_policy(self, request: web.Request) -> web.Response:
        """vpol's own kinds at apply time: refused with `vpol check`'s messages when invalid, type-check warnings
        as admission warnings. Compiling runs in a thread; the answer never fails the request (on an internal
        error the object is admitted: the operator's status still reports it)."""
        review = await self._read(request, "policy")
        if isinstance(review, web.Response):
            return review
        req, uid = review.request, review.uid
        obj = req.get("object")
        response: dict[str, Any] = {"uid": uid, "allowed": True}
        if req["operation"] in ("CREATE", "UPDATE") and isinstance(obj, dict) and is_validated_document(obj):
            try:
                verdict = await asyncio.to_thread(validate_document, obj, self.discovery(), cached=True)
                response = policy_validation_response(uid, verdict.ref, [p.render() for p in verdict.errors],
                                                      [p.render() for p in verdict.warnings])
            except Exception as exc:  # noqa: BLE001 - never block a policy edit on vpol's own failure
                self._internal_error(f"validating {req.get('name')} (request {uid})", exc)
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                  "response": response})

    async def _handle(self, request: web.Request) -> web.Response:
        return await self._answer(request, FAILURE_POLICIES[request.path], mutating=False)

    async def _handle_mutate(self, request: web.Request) -> web.Response:
        """MutatingPolicies the API server cannot apply natively, evaluated by the same bounded workers as
        validations (a runaway mutation costs a worker its deadline; the failurePolicy answers)."""
        return await self._answer(request, MUTATING_FAILURE_POLICIES[request.path], mutating=True)

    async def _handle_images(self, request: web.Request) -> web.Response:
        """ImageValidatingPolicies: answered by the image webhooks' own threads, which wait on registries."""
        failure_policy, mutating = IMAGE_PATHS[request.path]
        review = await self._read(request, f"images-{'mutate' if mutating else 'validate'}-{failure_policy.lower()}")
        if isinstance(review, web.Response):
            return review
        body = await self.images.answer(review, failure_policy, mutating=mutating,
                                        namespaced=self._namespaced(review.request))
        return web.Response(body=body, content_type="application/json")

    def _namespace_object(self, name: str) -> dict[str, Any] | None:
        found = self.namespaces.cached(name)
        return found if found is not None else self.namespaces.get(name)

    async def _answer(self, request: web.Request, failure_policy: str, *, mutating: bool) -> web.Response:
        """Read the AdmissionReview, have it answered (inline when its work is bounded, else by a worker), send
        the answer; any failure is answered by the webhook's failurePolicy."""
        started = time.perf_counter()
        webhook = f"mutate-{failure_policy.lower()}" if mutating else failure_policy.lower()
        review = await self._read(request, webhook)
        if isinstance(review, web.Response):
            return review
        if self._pool is None:
            # A replica that has not loaded its policies yet (starting: a failover, a rollout, a scale-up) is no
            # answer: 429 with Retry-After is one the API server retries, at its Service's other endpoints, and
            # only when every try fails does the webhook's failurePolicy decide (a denial here would fail
            # requests another replica answers; an empty pool would admit what the policies deny).
            return web.json_response({"message": NOT_LOADED}, status=429,
                                     headers={"Retry-After": "1"})
        answer = await self.answer(review, failure_policy, mutating)
        self._after_answer(metrics.admission_latency, webhook, time.perf_counter() - started)
        return web.Response(body=answer, content_type="application/json")

    def _after_answer(self, record: Callable[..., None], *args: Any) -> None:
        """Run ``record(*args)`` (metrics, events) once the answer has gone: aiohttp writes the response in the
        same turn of the event loop the handler returns in, and a callback scheduled now runs in the next, so the
        API server does not wait for the bookkeeping (for the 18 Pod Security policies, 36 metric updates). A
        failure is logged, never raised: the request was answered."""
        def run() -> None:
            try:
                record(*args)
            except Exception as exc:  # noqa: BLE001 - bookkeeping never stops the server
                self._internal_error("recording an answered request", exc)
        asyncio.get_running_loop().call_soon(run)

    async def answer(self, review: Review, failure_policy: str, mutating: bool) -> bytes:
        """The AdmissionReview answering a request that passed the boundary."""
        req, uid, body = review.request, review.uid, review.body
        pool = self._pool
        try:
            if pool is not None and pool.snapshot.version < self.policies.snapshot.version:
                pool = await self._current_pool(pool)
            if pool is None:
                return self._failed(uid, NOT_LOADED, failure_policy)
            if not pool.answers(failure_policy, mutating):
                return json.dumps(review_response(uid, Decision())).encode()
            return await self._in_worker(pool, req, uid, body, failure_policy, mutating)
        except Exception as exc:  # noqa: BLE001 - answer by failurePolicy, never crash the server
            error = self._internal_error(f"request {uid}", exc)
            return self._failed(uid, f"internal error {error}", failure_policy)

    async def _current_pool(self, pool: EvaluatorPool) -> EvaluatorPool:
        """The pool of the newest policies, once it is built (at most REBUILD_WAIT seconds; else ``pool``).

        The replica that writes the webhook configuration writes rules for a policy only once its own server
        answers with it, but every replica serves: one still rebuilding its workers for a policy the
        configuration already covers would answer without it. Waiting for the rebuild keeps a policy that is
        Ready enforced on every replica."""
        wanted = self.policies.snapshot.version
        deadline = time.monotonic() + REBUILD_WAIT
        while time.monotonic() < deadline:
            current = self._pool
            if current is not None and current.snapshot.version >= wanted:
                return current
            await asyncio.sleep(0.02)
        return self._pool or pool

    async def _in_worker(self, pool: EvaluatorPool, req: dict[str, Any], uid: str, body: bytes,
                         failure_policy: str, mutating: bool) -> bytes:
        """The request answered by an idle worker of ``pool`` within the evaluation deadline (waiting for a
        worker included). A worker whose call failed is replaced off the request path."""
        deadline = time.monotonic() + self.options.eval_timeout
        subject = subject_for_request(req, namespaced=self._namespaced(req))
        namespace = None
        if subject.type.namespaced and subject.namespace:
            namespace = self.namespaces.cached(subject.namespace)
            if namespace is None:  # not delivered by the watch yet: read once, off the event loop
                namespace = await asyncio.to_thread(self.namespaces.get, subject.namespace)
        call = AdmissionCall(body, failure_policy, subject.type.namespaced, namespace, mutating)
        inline_admission = pool.inline
        if inline_admission is not None and not mutating:
            inline = self._inline(inline_admission, req, uid, call)
            if inline is not None:
                metrics.admission_evaluated("inline")
                return self._answered(pool, req, inline, mutating)
        ev = await pool.acquire(max(0.0, deadline - time.monotonic()))
        if ev is None:
            return self._failed(uid, "no evaluation worker became free in time", failure_policy)
        left = deadline - time.monotonic()
        if left <= 0:  # the worker came free just too late: it is not at fault
            pool.release(ev, killed=False)
            return self._failed(uid, "no evaluation worker became free in time", failure_policy)
        answer, error = await ev.admit(call, left)
        pool.release(ev, killed=answer is None)
        if answer is None:
            return self._failed(uid, error, failure_policy)
        metrics.admission_evaluated("worker")
        return self._answered(pool, req, answer, mutating)

    def _inline(self, inline: InlineAdmission, req: dict[str, Any], uid: str, call: AdmissionCall
                ) -> AdmissionAnswer | None:
        """The answer of the serving process itself, when the request's work is bounded (vpol.policies.inline); on
        the event loop (a few hundred microseconds). None: a worker answers it (also when this failed)."""
        try:
            with using(self.backend):
                return inline.admit(req, len(call.body), call)
        except Exception as exc:  # noqa: BLE001 - the worker answers it as it always did
            self._internal_error(f"request {uid}, answered inline (a worker answers it)", exc)
            return None

    def _answered(self, pool: EvaluatorPool, req: dict[str, Any], answer: AdmissionAnswer, mutating: bool) -> bytes:
        """An answer's body (inline or by a worker); its metrics and events are recorded once it has gone."""
        self._after_answer(self._account, pool.snapshot, req, answer, mutating)
        return answer.body

    def _account(self, snapshot: Snapshot, req: dict[str, Any], answer: AdmissionAnswer, mutating: bool) -> None:
        """Metrics and events of an answer."""
        metrics.admission_outcomes(answer.outcomes,
                                   None if mutating else answer.seconds / max(1, len(answer.outcomes)))
        if answer.violations and self.events is not None:
            self._record_violations(snapshot, req, answer.violations, blocked=not answer.allowed)

    def _record_violations(self, snapshot: Snapshot, req: dict[str, Any],
                           violations: tuple[tuple[str, str, str], ...], *, blocked: bool) -> None:
        """PolicyViolation Events for a request some policies failed (vpol.desired.events); none for dry runs and
        for objects without a name yet (generateName), as nothing can be named."""
        obj = req.get("object") or req.get("oldObject") or {}
        md = obj.get("metadata") or {}
        name = str(req.get("name") or md.get("name") or "")
        if req.get("dryRun") or not name:
            return
        kind = req.get("kind") or {}
        group, version = str(kind.get("group") or ""), str(kind.get("version") or "")
        resource = ObjectRef(f"{group}/{version}" if group else version, str(kind.get("kind") or ""), name,
                             str(req.get("namespace") or ""), str(md.get("uid") or ""))
        specs = []
        for key, result, message in violations:
            policy = snapshot.policies.get(key) or snapshot.mutating.get(key)
            if policy is None:
                continue
            ref = ObjectRef(policy.api_version, policy.kind, policy.name, policy.namespace, policy.uid)
            specs += violation_events(Violation(ref, resource, result, message), source=SOURCE_ADMISSION,
                                      blocked=blocked)
        self.events.record(specs)

    def _failed(self, uid: str, error: str, failure_policy: str) -> bytes:
        logger.warning("admission request %s: %s", uid, error)
        metrics.admission_decision("", "error")
        return json.dumps(failure_response(uid, error, failure_policy)).encode()

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


#: Seconds between two log lines about refused requests of one reason.
LOG_EVERY = 10.0


class _Bounded:
    """The server's protocol factory with at most ``limit`` open connections: beyond, a new connection is
    closed as soon as it is made (after its TLS handshake), so many clients, slow or idle, cannot take every file
    descriptor and the event loop's time from the API server's requests."""

    def __init__(self, server: web.Server, limit: int):
        self.server = server
        self.limit = limit
        self.closed = 0
        self._logged = -LOG_EVERY

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self.server.connections) < self.limit:
            return self.server()
        self.closed += 1
        metrics.ADMISSION_REJECTED.labels("connections").inc()
        if time.monotonic() - self._logged >= LOG_EVERY:
            self._logged = time.monotonic()
            logger.warning("admission: %d connections open, the limit: new ones are closed (%d so far)", self.limit,
                           self.closed)
        return _Closing()


class _Closing(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()

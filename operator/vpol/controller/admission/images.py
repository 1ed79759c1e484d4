"""The image webhooks: ImageValidatingPolicies at admission (docs/internals/image-validating.md, "How vpol runs them").

- ``/images/mutate/<fp>``: tags pinned to digests, for the policies with ``mutateDigest`` (the default): every
  container image of the object's pod spec that has no digest and that the policy's matchImageReferences select
  becomes ``<image>@<digest>``, the digest the registry resolves now; a tag that cannot be resolved follows the
  policy's failurePolicy;
- ``/images/validate/<fp>``: every matching policy evaluated (vpol.policies.image_validating.engine), ``required``
  decided
  across them, one decision as for ValidatingPolicies (``Policy NAME failed: MESSAGE`` for Deny, warnings for
  Warn; an error follows the policy's failurePolicy).

Each request is evaluated in an evaluation worker (vpol.policies.sandbox), with the memory cap of every other kind's
CEL and the request's own deadline, inside the webhook's timeout, since it waits on registries: a worker that
overruns it or its memory is killed (and started again), and the request answered by the failurePolicy. Requests
are handed to the workers by a thread pool of their own (the event loop and the CEL workers of the other policies
never wait on a registry). There are :data:`WORKERS` workers, started when the policies change, and a request goes
to the one its first image names (a hash): each image's verifications are cached in one worker
(vpol.engine.image_verification.VerificationCache), and the replicas of a Deployment admitted at once are verified
once, by the first of them, while the others wait for that worker.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import dataclasses
import json
import logging
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vpol.cel.backend import Backend, current
from vpol.controller import metrics
from vpol.controller.admission.policies import Snapshot
from vpol.controller.registry_credentials import RegistryClients
from vpol.engine.admission import decide, failure_response, review_response, subject_for_request
from vpol.engine.evaluate import Result
from vpol.engine.global_context import GlobalContextSource
from vpol.engine.request import Subject
from vpol.engine.review import Review
from vpol.oci.access import RegistryAccess
from vpol.policies.image_validating.engine import POD_SPEC_PATHS, default_images
from vpol.policies.image_validating.evaluation import Evaluated, Pinned, Tally, failed
from vpol.policies.sandbox import Limits, SandboxedEvaluator

logger = logging.getLogger(__name__)

#: Seconds kept between the end of image work and the webhook's timeout (the answer must still get back).
MARGIN_SECONDS = 1.0
#: Longest one registry request may take (several make up one verification).
REGISTRY_TIMEOUT = 4.0
#: How many evaluation workers answer the image webhooks (each a process of about 80 MiB).
WORKERS = 2
#: The key the policies are held under in each worker (one engine for the set: ``required`` is decided across a
#: request's policies).
WORKER_KEY = "ImageValidatingPolicy:admission"


@dataclass
class _Worker:
    """One evaluation worker, the (snapshot version, access) of the policies it holds, and the lock of the one
    request it answers at a time."""

    evaluator: SandboxedEvaluator
    loaded: tuple[int, dict[str, RegistryAccess]] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class ImageAdmission:
    """Answers the image webhooks from the current snapshot's ImageValidatingPolicies."""

    def __init__(self, snapshot: Callable[[], Snapshot], namespace_of: Callable[[str], Any], *,
                 clients: RegistryClients | None = None, workers: int = 8, timeout_seconds: int = 10,
                 backend: Backend | None = None, limits: Limits = Limits(),
                 global_context: GlobalContextSource | None = None, evaluation_workers: int = WORKERS):
        self.snapshot = snapshot
        #: What serves the policies' I/O libraries in the workers (None: this process's default).
        self.backend = backend
        self.limits = limits
        self.global_context = global_context
        self.namespace_of = namespace_of
        #: The registry access of each policy (its pull Secrets, allowInsecureRegistry).
        self.clients = clients or RegistryClients(None, "", timeout=REGISTRY_TIMEOUT)
        self.timeout_seconds = timeout_seconds
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vpol-images")
        #: The evaluation workers (each started at its first use, or by warm()).
        self._workers = [_Worker(SandboxedEvaluator([], (), backend or current(), limits,
                                                    global_context=global_context))
                         for _ in range(max(1, evaluation_workers))]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for worker in self._workers:
            worker.evaluator.close()

    async def answer(self, review: Review, failure_policy: str, *, mutating: bool, namespaced: bool | None) -> bytes:
        """The AdmissionReview answering ``review`` (always: any failure is answered by the failurePolicy)."""
        started = time.monotonic()
        snapshot = self.snapshot()
        policies = [p for p in snapshot.images.values() if p.spec.failure_policy == failure_policy]
        timeout = max([p.spec.webhook_timeout_seconds or self.timeout_seconds for p in policies],
                      default=self.timeout_seconds)
        deadline = started + max(1.0, timeout - MARGIN_SECONDS)
        try:
            subject = subject_for_request(review.request, namespaced=namespaced)
            if subject.type.namespaced and subject.namespace:
                namespace = await asyncio.to_thread(self.namespace_of, subject.namespace)
                if namespace is not None:
                    subject = _with_namespace(subject, namespace)
            work = self._mutate if mutating else self._validate
            future = asyncio.get_running_loop().run_in_executor(self._pool, work, review, subject, snapshot,
                                                                failure_policy, deadline)
            body = await asyncio.wait_for(future, timeout=max(0.1, deadline - time.monotonic() + 0.5))
        except asyncio.TimeoutError:
            body = self._failed(review.uid, "image verification did not finish in time", failure_policy)
        except Exception as exc:  # noqa: BLE001 - answered by the failurePolicy, never a crash
            logger.warning("image admission request %s failed: %s", review.uid, exc)
            body = self._failed(review.uid, f"image verification failed: {exc}", failure_policy)
        metrics.ADMISSION_LATENCY.labels(f"images-{'mutate' if mutating else 'validate'}-{failure_policy.lower()}"
                                         ).observe(time.monotonic() - started)
        return body

    def _failed(self, uid: str, message: str, failure_policy: str) -> bytes:
        metrics.admission_decision("", "error")
        return json.dumps(failure_response(uid, message, failure_policy)).encode()

    def warm(self, snapshot: Snapshot) -> list[concurrent.futures.Future[None]]:
        """Have the workers ready with ``snapshot``'s policies (started and compiled, in pool threads), so that the
        first requests after a change do not wait for that; nothing when there are no ImageValidatingPolicies."""
        if not snapshot.images:
            return []
        return [self._pool.submit(self._warm, worker, snapshot) for worker in self._workers]

    # -- the work (pool threads) ----------------------------------------------------------------------------

    def _warm(self, worker: _Worker, snapshot: Snapshot) -> None:
        with worker.lock:
            status, payload = self._holding(worker, snapshot).call(WORKER_KEY, "evaluate", [])
        if status != "ok":
            logger.warning("image admission: starting an evaluation worker failed: %s", payload)

    def _holding(self, worker: _Worker, snapshot: Snapshot) -> SandboxedEvaluator:
        """``worker``'s evaluator, holding ``snapshot``'s policies with their access as it is now (its lock held)."""
        policies = sorted(snapshot.images.values(), key=lambda p: p.key)
        access = self.clients.access(policies)
        if worker.loaded != (snapshot.version, access):
            worker.evaluator.load(WORKER_KEY, "ImageValidatingPolicy", policies, list(snapshot.exceptions), access)
            worker.loaded = (snapshot.version, access)
        return worker.evaluator

    def _chosen(self, subject: Subject) -> _Worker:
        """The worker of ``subject``'s first image (by name: every request naming it goes to the same worker)."""
        images = sorted(i for found in default_images(subject).values() for i in found)
        name = images[0] if images else f"{subject.namespace}/{subject.name}"
        return self._workers[zlib.crc32(name.encode()) % len(self._workers)]

    def _call(self, snapshot: Snapshot, method: str, subject: Subject, deadline: float, *args: Any) -> Any:
        """``method`` of the engine on ``subject`` in its worker, within ``deadline`` (the request's: waiting for the
        worker, CEL and registry reads together); raises RuntimeError saying why when the worker could not answer
        (busy until the deadline, killed past it or its memory cap, or failed)."""
        worker = self._chosen(subject)
        if not worker.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise RuntimeError("image verification did not finish in time (its worker was busy)")
        try:
            evaluator = self._holding(worker, snapshot)
            seconds = max(0.1, deadline - time.monotonic())
            status, payload = evaluator.call(WORKER_KEY, method, [subject], seconds, *args, limit=seconds)
        finally:
            worker.lock.release()
        if status != "ok":
            raise RuntimeError(str(payload))
        return payload[0]

    def _validate(self, review: Review, subject: Subject, snapshot: Snapshot, failure_policy: str,
                  deadline: float) -> bytes:
        policies = {k: p for k, p in snapshot.images.items() if p.spec.failure_policy == failure_policy}
        results: list[Result] = []
        if not policies:  # no policy of this webhook (a configuration being updated): nothing for a worker
            return json.dumps(review_response(review.uid, decide(results, policies))).encode()
        try:
            evaluated: Evaluated = self._call(snapshot, "evaluate", subject, deadline, sorted(policies))
            self._count(evaluated.tally)
            results = evaluated.results
        except RuntimeError as exc:
            results = failed(list(policies.values()), subject, f"image verification failed: {exc}")
        decision = decide(results, policies)
        for key, what in decision.outcomes:
            metrics.admission_decision(key, what)
        return json.dumps(review_response(review.uid, decision)).encode()

    def _mutate(self, review: Review, subject: Subject, snapshot: Snapshot, failure_policy: str,
                deadline: float) -> bytes:
        if not snapshot.images or (subject.type.group, subject.type.resource) not in POD_SPEC_PATHS or \
                subject.operation not in ("CREATE", "UPDATE"):
            return json.dumps(review_response(review.uid, decide([], {}))).encode()  # nothing to pin: no worker
        pinned: Pinned = self._call(snapshot, "pin", subject, deadline, failure_policy)
        self._count(pinned.tally)
        if pinned.errors:
            decision = decide([], {})
            decision.allowed = False
            decision.message = "failed to update digest: " + "; ".join(pinned.errors)
            return json.dumps(review_response(review.uid, decision)).encode()
        response: dict[str, Any] = {"uid": review.uid, "allowed": True}
        if pinned.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(pinned.patch).encode()).decode()
        return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "response": response}).encode()

    @staticmethod
    def _count(tally: Tally) -> None:
        metrics.image_registry_requests(tally.requests)
        if tally.hits:
            metrics.IMAGE_CACHE.labels("hit").inc(tally.hits)
        if tally.misses:
            metrics.IMAGE_CACHE.labels("miss").inc(tally.misses)


def _with_namespace(subject: Subject, namespace: Any) -> Subject:
    return dataclasses.replace(subject, namespace_object=namespace)

"""The image webhooks: ImageValidatingPolicies at admission (docs/internals/image-validating.md, "How vpol runs them").

- ``/images/mutate/<fp>``: tags pinned to digests, for the policies with ``mutateDigest`` (the default): every
  container image of the object's pod spec that has no digest and that the policy's matchImageReferences select
  becomes ``<image>@<digest>``, the digest the registry resolves now; a tag that cannot be resolved follows the
  policy's failurePolicy;
- ``/images/validate/<fp>``: every matching policy evaluated (vpol.policies.image_validating.engine), ``required``
  decided
  across them, one decision as for ValidatingPolicies (``Policy NAME failed: MESSAGE`` for Deny, warnings for
  Warn; an error follows the policy's failurePolicy).

Requests wait on registries, so they are answered by a thread pool of their own (the event loop and the CEL
workers of the other policies never wait on a registry), each within a deadline inside the webhook's timeout: a
registry that does not answer in time makes the request an error, answered by the failurePolicy. Successful
verifications are cached across requests (vpol.engine.image_verification.VerificationCache), so the replicas of a
Deployment cost one registry round trip.
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
from collections.abc import Callable, Mapping
from typing import Any

from vpol.cel.backend import Backend, current, using
from vpol.cel.libraries.kyverno import imageref
from vpol.controller import metrics
from vpol.controller.admission.policies import Snapshot
from vpol.controller.registry_credentials import RegistryClients
from vpol.engine.admission import decide, failure_response, review_response, subject_for_request
from vpol.engine.evaluate import compile_exception
from vpol.engine.image_verification import Outcomes, VerificationCache
from vpol.engine.registry_access import RegistryError
from vpol.engine.request import Subject
from vpol.engine.review import Review
from vpol.policies.image_validating.engine import POD_SPEC_PATHS, ImageOutcome, ImagePolicyEngine, apply_required

logger = logging.getLogger(__name__)

#: Seconds kept between the end of image work and the webhook's timeout (the answer must still get back).
MARGIN_SECONDS = 1.0
#: Longest one registry request may take (several make up one verification).
REGISTRY_TIMEOUT = 4.0


class ImageAdmission:
    """Answers the image webhooks from the current snapshot's ImageValidatingPolicies."""

    def __init__(self, snapshot: Callable[[], Snapshot], namespace_of: Callable[[str], Any], *,
                 clients: RegistryClients | None = None, workers: int = 8, timeout_seconds: int = 10,
                 backend: Backend | None = None):
        self.snapshot = snapshot
        #: What serves the policies' I/O libraries in the pool's threads (None: the process's default).
        self.backend = backend
        self.namespace_of = namespace_of
        #: The registry client of each policy (its pull Secrets, allowInsecureRegistry).
        self.clients = clients or RegistryClients(None, "", timeout=REGISTRY_TIMEOUT)
        self.cache = VerificationCache(
            on_lookup=lambda hit: metrics.IMAGE_CACHE.labels("hit" if hit else "miss").inc())
        self.timeout_seconds = timeout_seconds
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vpol-images")
        self._engines: tuple[int, dict[str, ImagePolicyEngine]] = (-1, {})
        self._lock = threading.Lock()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def engines(self) -> dict[str, ImagePolicyEngine]:
        """The engines of the current snapshot's policies (rebuilt when it changes)."""
        snapshot = self.snapshot()
        with self._lock:
            version, engines = self._engines
            if version != snapshot.version:
                exceptions = [compile_exception(e) for e in snapshot.exceptions]
                engines = {key: ImagePolicyEngine(policy, exceptions) for key, policy in snapshot.images.items()}
                self._engines = (snapshot.version, engines)
            return engines

    async def answer(self, review: Review, failure_policy: str, *, mutating: bool, namespaced: bool | None) -> bytes:
        """The AdmissionReview answering ``review`` (always: any failure is answered by the failurePolicy)."""
        started = time.monotonic()
        engines = {k: e for k, e in self.engines().items() if e.policy.spec.failure_policy == failure_policy}
        timeout = max([e.policy.spec.webhook_timeout_seconds or self.timeout_seconds for e in engines.values()],
                      default=self.timeout_seconds)
        deadline = started + max(1.0, timeout - MARGIN_SECONDS)
        try:
            subject = subject_for_request(review.request, namespaced=namespaced)
            if subject.type.namespaced and subject.namespace:
                namespace = await asyncio.to_thread(self.namespace_of, subject.namespace)
                if namespace is not None:
                    subject = _with_namespace(subject, namespace)
            work = self._mutate if mutating else self._validate
            future = asyncio.get_running_loop().run_in_executor(self._pool, work, review, subject, engines, deadline)
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

    # -- the work (pool threads) ----------------------------------------------------------------------------

    def _validate(self, review: Review, subject: Subject, engines: Mapping[str, ImagePolicyEngine],
                  deadline: float) -> bytes:
        verified = Outcomes()
        loaded: dict[str, Any] = {}
        outcomes: list[ImageOutcome] = []
        with using(self.backend or current()):
            for engine in engines.values():
                outcome = engine.evaluate(subject, registry=self.clients.for_policy(engine.policy),
                                          outcomes=verified, cache=self.cache, deadline=deadline, loaded=loaded)
                if outcome is not None:
                    outcomes.append(outcome)
        apply_required(outcomes, verified)
        decision = decide([o.result for o in outcomes], {k: e.policy for k, e in engines.items()})
        for key, what in decision.outcomes:
            metrics.admission_decision(key, what)
        return json.dumps(review_response(review.uid, decision)).encode()

    def _mutate(self, review: Review, subject: Subject, engines: Mapping[str, ImagePolicyEngine],
                deadline: float) -> bytes:
        path = POD_SPEC_PATHS.get((subject.type.group, subject.type.resource))
        obj = subject.object
        if path is None or not isinstance(obj, Mapping) or subject.operation not in ("CREATE", "UPDATE"):
            return json.dumps(review_response(review.uid, decide([], {}))).encode()
        spec: Any = obj
        for step in path:
            spec = spec.get(step) if isinstance(spec, Mapping) else None
        if not isinstance(spec, Mapping):
            return json.dumps(review_response(review.uid, decide([], {}))).encode()
        pinning = [e for e in engines.values() if e.policy.spec.validation_configurations.mutate_digest
                   and e.selects(subject)]
        patch: list[dict[str, Any]] = []
        errors: list[str] = []
        for field in ("containers", "initContainers", "ephemeralContainers"):
            for index, container in enumerate(spec.get(field) or []):
                image = container.get("image") if isinstance(container, Mapping) else None
                if not isinstance(image, str) or "@" in image:
                    continue
                wanting = [e for e in pinning if e.image_selected(image)]
                if not wanting:
                    continue
                try:
                    ref = imageref.parse(image)
                    registry = self.clients.for_policy(wanting[0].policy)
                    digest = registry.manifest(ref.registry, ref.repository, ref.tag, deadline).digest
                except (RegistryError, imageref.BadReference) as exc:
                    if any(e.policy.spec.failure_policy == "Fail" for e in wanting):
                        errors.append(f"failed to resolve digest for image {image}: {exc}")
                    continue
                pointer = "/" + "/".join([*path, field, str(index), "image"])
                patch.append({"op": "replace", "path": pointer, "value": f"{image}@{digest}"})
        if errors:
            decision = decide([], {})
            decision.allowed = False
            decision.message = "failed to update digest: " + "; ".join(errors)
            return json.dumps(review_response(review.uid, decision)).encode()
        response: dict[str, Any] = {"uid": review.uid, "allowed": True}
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "response": response}).encode()


def _with_namespace(subject: Subject, namespace: Any) -> Subject:
    return dataclasses.replace(subject, namespace_object=namespace)

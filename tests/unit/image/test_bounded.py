"""ImageValidatingPolicies evaluated in the bounded evaluation worker (vpol.policies.sandbox), as every other kind:
in background scans (vpol.controller.image_scans) and at admission (vpol.controller.admission.images), a policy
whose CEL runs out of memory or time costs its own result (or the request's answer by its failurePolicy), never the
process, and the worker is replaced."""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from typing import Any

from vpol.cel.backend import Backend
from vpol.controller.admission.images import ImageAdmission
from vpol.controller.admission.policies import Snapshot
from vpol.controller.image_scans import ImageScans
from vpol.engine.subjects import subject_for
from vpol.engine.review import Review, parse_review
from vpol.oci.access import RegistryAccess
from vpol.policies.image_validating.model import parse_image_validating_policy
from vpol.policies.sandbox import Limits, SandboxedEvaluator

KEY = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
HOG = "lists.range(9000).map(x, lists.range(9000)).size() > 0"


def _policy(name: str, expression: str, failure_policy: str = "Fail") -> Any:
    policy, problems = parse_image_validating_policy({
        "apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy", "metadata": {"name": name},
        "spec": {"failurePolicy": failure_policy,
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["pods"]}]},
                 # No image is selected: nothing is read from a registry, the validations run.
                 "matchImageReferences": [{"glob": "registry.invalid/*"}],
                 "attestors": [{"name": "signed", "cosign": {"key": {"data": KEY}}}],
                 "validationConfigurations": {"required": False, "mutateDigest": False},
                 "validations": [{"expression": expression, "message": f"{name} says no"}]}})
    assert policy is not None and not [p for p in problems if p.severity == "error"], problems
    return policy


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}


LIMITS = Limits(seconds_per_subject=20.0, memory_bytes=700 * 1024**2)


def test_a_scan_isolates_the_policy_that_runs_out_of_memory() -> None:
    worker = SandboxedEvaluator([], (), Backend(), LIMITS)
    try:
        scans = ImageScans(worker=worker)
        assert scans.set_policy("hog", _policy("hog", HOG))
        assert scans.set_policy("fine", _policy("fine", "object.metadata.name != 'denied'"))
        subjects = [subject_for(_pod(n), operation="CREATE") for n in ("allowed", "denied")]
        results = scans.evaluate_many(subjects)
        by = [{r.policy: (r.result, r.message) for r in found} for found in results]
        assert by[0]["fine"] == ("pass", "success") and by[1]["fine"][0] == "fail", by
        for found in by:
            assert found["hog"][0] == "error" and "memory" in found["hog"][1], found
        # The worker (killed, or out of memory for the one policy) still evaluates.
        assert [r.result for r in scans.evaluate(subjects[0], ["fine"])] == ["pass"]
    finally:
        worker.close()


def test_a_scan_evaluates_in_the_worker_process() -> None:
    """The policy reads the process it runs in: the worker's own, not the scanner's."""
    import os

    worker = SandboxedEvaluator([], (), Backend(), LIMITS)
    try:
        scans = ImageScans(worker=worker)
        scans.set_policy("pid", _policy("pid", f"object.metadata.name == 'p' && {os.getpid()} > 0"))
        (result,) = scans.evaluate(subject_for(_pod("p"), operation="CREATE"))
        assert result.result == "pass"
        assert worker.running and worker._proc.pid != os.getpid()
        assert "ImageValidatingPolicy:scans" in worker._held
    finally:
        worker.close()


def _review(pod: dict[str, Any]) -> Review:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
                        "namespace": "default", "name": pod["metadata"]["name"], "object": pod,
                        "userInfo": {"username": "someone"}}}
    review = parse_review(json.dumps(body).encode())
    assert isinstance(review, Review), review
    return review


def test_admission_answers_a_runaway_policy_by_its_failure_policy() -> None:
    hog, fine = _policy("hog", HOG, "Ignore"), _policy("fine", "object.metadata.name != 'denied'", "Fail")
    admission = ImageAdmission(lambda: Snapshot(images={"hog": hog, "fine": fine}, version=1), lambda _ns: None,
                               backend=Backend(), limits=LIMITS, timeout_seconds=10)
    try:
        async def ask(pod: str, failure_policy: str) -> dict[str, Any]:
            body = await admission.answer(_review(_pod(pod)), failure_policy, mutating=False, namespaced=True)
            return json.loads(body)["response"]  # type: ignore[no-any-return]

        # The Ignore webhook: the policy that runs out of memory is an error ignored; the request is allowed.
        assert asyncio.run(ask("allowed", "Ignore"))["allowed"] is True
        # The Fail webhook, in a worker replaced after the kill: the fine policy decides.
        assert asyncio.run(ask("allowed", "Fail"))["allowed"] is True
        denied = asyncio.run(ask("denied", "Fail"))
        assert denied["allowed"] is False and "fine says no" in denied["status"]["message"], denied
    finally:
        admission.close()


def test_admission_kills_a_worker_past_the_requests_deadline() -> None:
    slow = _policy("slow", "lists.range(9000).map(x, lists.range(9000).filter(y, y > x)).size() > 0", "Fail")
    slow.raw["spec"]["webhookConfiguration"] = {"timeoutSeconds": 2}
    slow, _problems = parse_image_validating_policy(slow.raw)
    snapshot = Snapshot(images={"slow": slow}, version=1)
    admission = ImageAdmission(lambda: snapshot, lambda _ns: None,
                               backend=Backend(), limits=Limits(seconds_per_subject=20.0, memory_bytes=8 * 1024**3))
    try:
        warming = admission.warm(snapshot)
        assert len(warming) == 2
        for future in warming:
            future.result(60)  # the workers are started and hold the policy: the request's second is all evaluation
        started = time.monotonic()
        body = asyncio.run(admission.answer(_review(_pod("p")), "Fail", mutating=False, namespaced=True))
        response = json.loads(body)["response"]
        # The worker's limit is the request's deadline; the webhook answers half a second past it at the latest.
        assert response["allowed"] is False and "time" in response["status"]["message"], response
        admission._pool.shutdown(wait=True)  # the pool thread has seen its worker killed
        (killed,) = [w for w in admission._workers if w.evaluator.kills]
        assert killed.evaluator.kills == 1 and not killed.evaluator.running, time.monotonic() - started
        (other,) = [w for w in admission._workers if w is not killed]
        assert other.evaluator.running  # the other worker, warmed, was not touched
    finally:
        admission.close()


def test_every_request_naming_an_image_goes_to_the_same_worker() -> None:
    """Each image's verifications and their cache live in one worker: the replicas of a Deployment, and every Pod
    running the image, are answered there."""
    admission = ImageAdmission(lambda: Snapshot(), lambda _ns: None, backend=Backend(), limits=LIMITS,
                               evaluation_workers=4)
    try:
        def pod(name: str, *images: str) -> Any:
            doc = _pod(name)
            doc["spec"]["containers"] = [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]
            return subject_for(doc, operation="CREATE")

        chosen = {id(admission._chosen(pod(f"p{i}", "registry.local/app:1", f"registry.local/z{i}:1"))) for i in range(20)}
        assert len(chosen) == 1  # the first image (by name) decides, whatever else the Pod runs
        spread = {id(admission._chosen(pod("p", f"registry.local/app{i}:1"))) for i in range(40)}
        assert len(spread) > 1  # different images are spread over the workers
    finally:
        admission.close()


def test_registry_access_crosses_to_a_worker_as_data() -> None:
    access = RegistryAccess.of([{"auths": {"registry.example": {"username": "u", "password": "p"}}}],
                               insecure=True, timeout=3.0)
    again = pickle.loads(pickle.dumps(access))
    assert again == access and hash(again) == hash(access)
    sent: list[str] = []
    client = again(sent.append)
    assert client.credentials.for_registry("registry.example") == ("u", "p")
    assert client.insecure and client.timeout == 3.0 and client.on_request is not None

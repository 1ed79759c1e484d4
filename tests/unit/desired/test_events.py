"""PolicyViolation Events: Kyverno's messages and objects (vpol.desired.events), and the bounded sender
(vpol.controller.events). The expected texts are what Kyverno 1.19.1's event code printed for the same inputs
(its pkg/event, run with a small Go program); the real API server path is tests/e2e/test_events.py."""

from __future__ import annotations

import threading
import time
from typing import Any

from vpol.controller.events import EventRecorder
from vpol.desired.events import (
    ACTION_BLOCKED,
    ACTION_PASSED,
    SOURCE_ADMISSION,
    SOURCE_SCAN,
    ObjectRef,
    Violation,
    event_name,
    event_object,
    violation_events,
)

POLICY = ObjectRef("policies.kyverno.io/v1", "ValidatingPolicy", "Check:Labels", "", "p-uid")
POD = ObjectRef("v1", "Pod", "nginx", "team-a", "")
FAIL = Violation(POLICY, POD, "fail", "label 'team' is required")


def test_admission_messages_are_kyvernos() -> None:
    (on_policy,) = violation_events(FAIL, source=SOURCE_ADMISSION, blocked=True)
    assert on_policy.note == "Pod team-a/nginx: fail (blocked); label 'team' is required"
    assert on_policy.action == ACTION_BLOCKED and on_policy.regarding == POLICY and on_policy.related == POD
    on_policy, on_resource = violation_events(FAIL, source=SOURCE_ADMISSION, blocked=False)
    assert on_policy.note == "Pod team-a/nginx: fail; label 'team' is required" and on_policy.action == ACTION_PASSED
    assert on_resource.note == "policy Check:Labels/ fail: label 'team' is required"
    assert on_resource.regarding == POD and on_resource.related is None and on_resource.action == ACTION_PASSED
    error = Violation(POLICY, POD, "error", "error: no such key: team")
    assert violation_events(error, source=SOURCE_ADMISSION, blocked=True)[0].note == \
        "Pod team-a/nginx: error (blocked); error: no such key: team"
    warned = Violation(POLICY, POD, "warn", "w")
    assert violation_events(warned, source=SOURCE_ADMISSION)[0].note == "Pod team-a/nginx: warning; w"


def test_background_events_come_resource_first_and_never_blocked() -> None:
    on_resource, on_policy = violation_events(FAIL, source=SOURCE_SCAN)
    assert on_resource.regarding == POD and on_policy.regarding == POLICY
    assert on_policy.note == "Pod team-a/nginx: fail; label 'team' is required"
    cluster_scoped = Violation(POLICY, ObjectRef("v1", "Namespace", "prod"), "fail", "m")
    assert violation_events(cluster_scoped, source=SOURCE_SCAN)[1].note == "Namespace prod: fail; m"


def test_event_objects() -> None:
    assert event_name("Check:Labels", 0x18EB9E4C7BB4D9D1) == "check-labels.18eb9e4c7bb4d9d1"
    assert event_name("-x-", 1) == "a-x-z.1"
    spec = violation_events(Violation(POLICY, POD, "fail", "x" * 2000), source=SOURCE_ADMISSION, blocked=True)[0]
    body = event_object(spec, instance="host", nanos=255, event_time="2026-11-26T00:00:00.000000Z")
    assert body["apiVersion"] == "events.k8s.io/v1" and body["metadata"] == {"name": "check-labels.ff",
                                                                              "namespace": "default"}
    assert body["reportingController"] == "vpol-admission" and body["reportingInstance"] == "vpol-admission-host"
    assert body["reason"] == "PolicyViolation" and body["type"] == "Warning"
    assert len(body["note"]) == 1024 and body["note"].endswith("...")
    assert body["related"] == {"apiVersion": "v1", "kind": "Pod", "name": "nginx", "namespace": "team-a"}
    on_resource = violation_events(FAIL, source=SOURCE_SCAN)[0]
    assert event_object(on_resource, instance="h", nanos=1, event_time="t")["metadata"]["namespace"] == "team-a"


class Sink:
    """Collects what the recorder sends (the API call itself is exercised in tests/e2e/test_events.py)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, namespace: str, body: dict[str, Any]) -> None:
        with self.lock:
            self.sent.append(body)


def test_repeats_are_sent_once() -> None:
    sink = Sink()
    recorder = EventRecorder(sink, per_second=1000, burst=1000)
    recorder.start()
    try:
        for _ in range(50):  # a client retrying the same denied request
            recorder.record(violation_events(FAIL, source=SOURCE_ADMISSION, blocked=True))
        other = Violation(POLICY, ObjectRef("v1", "Pod", "other", "team-a"), "fail", "label 'team' is required")
        recorder.record(violation_events(other, source=SOURCE_ADMISSION, blocked=True))
        deadline = time.monotonic() + 5
        while len(sink.sent) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
    finally:
        recorder.stop()
    assert sorted(b["note"] for b in sink.sent) == ["Pod team-a/nginx: fail (blocked); label 'team' is required",
                                                    "Pod team-a/other: fail (blocked); label 'team' is required"]


def test_ten_thousand_failing_objects_make_a_bounded_number_of_events() -> None:
    sink = Sink()
    recorder = EventRecorder(sink, per_second=50, burst=20, queue_size=100)
    recorder.start()
    started = time.monotonic()
    try:
        for i in range(10_000):
            pod = ObjectRef("v1", "Pod", f"pod-{i}", "team-a", f"uid-{i}")
            recorder.record(violation_events(Violation(POLICY, pod, "fail", "m"), source=SOURCE_SCAN))
        time.sleep(0.5)
    finally:
        recorder.stop()
    elapsed = time.monotonic() - started
    # Never more than the burst plus the rate over the time taken; the queue holds at most 100 more, the rest is
    # dropped (and counted).
    assert len(sink.sent) <= 20 + 50 * elapsed + 1, (len(sink.sent), elapsed)
    assert len(sink.sent) > 0 and recorder._queue.qsize() <= 100

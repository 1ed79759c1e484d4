"""The scanner gathers a burst of policy changes into one pass, also while its evaluation worker starts."""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes import client

from tests.unit.policies import make_policy
from vpol.controller import scan_events, scan_watches
from vpol.controller.scanner import Scanner
from vpol.controller.queue_keys import PolicyKey


class SlowStartEvaluator:
    """Stands for a worker process that takes a while to start (imports, compiling) on a busy machine."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started = False

    def start(self, *, wait: bool = True) -> None:
        if not self.started:
            self.started = True
            time.sleep(self.seconds)


def test_a_burst_that_ends_while_the_worker_starts_is_gathered_whole(monkeypatch) -> None:
    """16 policies arrive in a burst; the first starts the worker, which takes longer than the rest of the burst
    and the quiet after it: every policy is still in the batch (one pass, one write per resource), not only
    the ones read before the worker started."""
    monkeypatch.setattr(scan_events, "SETTLE_QUIET", 0.2)
    scanner = Scanner(client.ApiClient(), backend=None, discovery=None)  # type: ignore[arg-type]
    evaluator = SlowStartEvaluator(0.8)
    monkeypatch.setattr(scanner, "_evaluator_now", lambda: evaluator)
    policies = [make_policy(name=f"p{i:02d}", validations=[{"expression": "true"}]) for i in range(16)]

    def burst() -> None:
        for p in policies[1:]:
            scanner.hand_over(PolicyKey.of("ValidatingPolicy", p.name), p)
            time.sleep(0.01)

    scanner.hand_over(PolicyKey.of("ValidatingPolicy", policies[0].name), policies[0])
    first = scanner._events.get(1.0)
    sender = threading.Thread(target=burst)
    sender.start()
    batch: list[Any] = scanner._gather([first])
    sender.join()
    assert evaluator.started
    assert sorted(e[1] for e in batch if e[0] == "policy") == [p.name for p in policies]
    assert scanner._events.empty()


class SlowSpawnEvaluator:
    """Stands for a worker whose process takes a while to start (the parent waits until the child has exec'd)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.returned_at = 0.0

    def start(self, *, wait: bool = True) -> None:
        if not self.returned_at:  # started once; later calls find it running
            time.sleep(self.seconds)
            self.returned_at = time.monotonic()


def test_reports_are_read_back_while_the_worker_starts(monkeypatch) -> None:
    """Activation starts the evaluation worker without waiting for its process to start: the reports are read back
    meanwhile (a restart with nothing changed needs no evaluation for its first scan), and the first scan comes
    after both."""

    class Idle:
        def __init__(self, *_a: Any, **_k: Any) -> None:
            self.synced = threading.Event()
            self.synced.set()

        def start(self) -> None:
            pass

        def stop(self) -> None:
            pass

    monkeypatch.setattr(scan_watches, "Watcher", Idle)
    scanner = Scanner(client.ApiClient(), backend=None, discovery=None)  # type: ignore[arg-type]
    evaluator = SlowSpawnEvaluator(0.5)
    seen: dict[str, float] = {}
    monkeypatch.setattr(scanner, "_evaluator_now", lambda: evaluator)
    monkeypatch.setattr(scanner.watches, "watch_policies", lambda on_policy: None)
    monkeypatch.setattr(scanner, "_prime", lambda: scanner.expect([]))
    monkeypatch.setattr(scanner.store, "seed", lambda: seen.setdefault("seed", time.monotonic()))
    monkeypatch.setattr(scanner.store, "meta_changed", lambda: None)
    monkeypatch.setattr(scanner, "_full_scan", lambda only=None: seen.setdefault("scan", time.monotonic()))
    scanner._activate()
    assert seen["seed"] < evaluator.returned_at <= seen["scan"]

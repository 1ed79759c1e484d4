"""How a scan pass feeds its report writers: a small first chunk, then chunks that double up to CHUNK."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.unit.controller.test_scanner_writes import RecordingReports
from tests.unit.policies import make_policy
from vpol.controller import validation_scans
from vpol.controller.scanner import Scanner
from vpol.engine.evaluate import Result
from vpol.controller.queue_keys import PolicyKey

POLICY = make_policy(name="p", validations=[{"expression": "true"}])


class RecordingEvaluator:
    """Stands for the evaluation worker: one result per subject; records each round trip and how many report
    writes had been handed to the writers before it."""

    def __init__(self, scanner: Scanner):
        self.scanner = scanner
        self.rounds: list[tuple[int, int]] = []

    def evaluate_many(self, subjects: list[Any], _only: Any = None) -> list[list[Result]]:
        self.rounds.append((len(subjects), self.scanner.store.pending() + self.scanner.writes))
        return [[Result("p", "fail", "no")] for _ in subjects]


def config_maps(count: int) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": f"cm-{i}", "namespace": "ns", "uid": f"uid-{i}", "resourceVersion": "1"}}
            for i in range(count)]


def test_the_writers_get_the_first_reports_after_a_small_chunk_then_chunks_double() -> None:
    scanner = Scanner(client.ApiClient(), backend=None, discovery=None)  # type: ignore[arg-type]
    scanner.store.reports = RecordingReports()  # type: ignore[assignment]
    scanner.hand_over(PolicyKey.of("ValidatingPolicy", "p"), POLICY)
    evaluator = RecordingEvaluator(scanner)
    try:
        count = scanner.validation.scan_objects(config_maps(1000), None, evaluator)  # type: ignore[arg-type]
        scanner.store.drain()
    finally:
        scanner.stop()
    sizes = [size for size, _queued in evaluator.rounds]
    first = validation_scans.FIRST_CHUNK
    assert count == 1000 and sum(sizes) == 1000
    assert first < validation_scans.CHUNK
    assert sizes[0] == first
    # Each round trip doubles the one before, up to CHUNK; only the last may be a remainder.
    for before, after in zip(sizes, sizes[1:-1]):
        assert after == min(2 * before, validation_scans.CHUNK)
    assert validation_scans.CHUNK in sizes
    # The first chunk's reports went to the writers before the second round trip started.
    assert evaluator.rounds[1][1] == first
    assert scanner.writes == 1000 and len(scanner.store.reports.calls) == 1000  # type: ignore[attr-defined]

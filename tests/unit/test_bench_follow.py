"""The scan bench's polling of the operator: the per-policy result families are read rarely, and a phase is
still found complete at the poll where its last report was written (not later, never early)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import bench.scan as scan

POLICIES, REPORTS, PER_POLL = 16, 100, 5


class Clock:
    """The bench's time: advanced by its sleeps alone."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class ScriptedOperator:
    """An operator's /metrics over a scan that writes PER_POLL reports of POLICIES results per half second until
    REPORTS are written, then does nothing."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.start = clock, clock.now
        self.scrapes: list[tuple[str, ...]] = []

    def written(self) -> int:
        return min(REPORTS, int((self.clock.now - self.start) / 0.5) * PER_POLL)

    def metrics(self, names: Sequence[str] = ()) -> str:
        self.scrapes.append(tuple(names))
        w = self.written()
        lines = {
            "vpol_report_writes_total": f'vpol_report_writes_total{{action="apply"}} {w}',
            "vpol_scan_resources_total": f'vpol_scan_resources_total{{scan="full"}} {w}',
            "vpol_scan_duration_seconds_count": f'vpol_scan_duration_seconds_count{{scan="full"}} {int(w >= REPORTS)}',
            "vpol_scan_duration_seconds_sum": 'vpol_scan_duration_seconds_sum{scan="full"} 1.0',
            "vpol_evaluation_duration_seconds_sum": f"vpol_evaluation_duration_seconds_sum {w * 0.001}",
            "vpol_evaluation_duration_seconds_count": f"vpol_evaluation_duration_seconds_count {w}",
            # One series per policy, as the operator's families have one per policy and namespace.
            "vpol_report_results": "\n".join(f'vpol_report_results{{policy="p{i}",result="pass"}} {w}'
                                             for i in range(POLICIES)),
            "vpol_policy_results_total": "\n".join(f'vpol_policy_results_total{{policy="p{i}",result="pass"}} {w}'
                                                   for i in range(POLICIES)),
        }
        return "\n".join(lines[n] for n in names) + "\n"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(scan, "time", c)
    return c


def test_complete_at_the_poll_of_the_last_write_with_few_reads_of_the_results(clock: Clock) -> None:
    op = ScriptedOperator(clock)
    run = scan.follow(op, clock.now, REPORTS * POLICIES, REPORTS, timeout=60, quiet=2, label="t")
    last_write = REPORTS / PER_POLL * 0.5  # 10 s: the poll at which the 100th report is written
    assert run.wall_complete == pytest.approx(last_write)
    assert run.wall_quiet == pytest.approx(last_write)
    assert run.last is not None and run.last.full
    assert run.last.results_present == REPORTS * POLICIES and run.last.evaluations == REPORTS * POLICIES
    reads = [names for names in op.scrapes if "vpol_report_results" in names]
    # The first poll, once at 10 s (which is also when every report is written), and the quiet polls at the end
    # (2 s at two a second): 6 of the 25 polls, where every poll read them before.
    assert len([names for names in op.scrapes if "vpol_report_writes_total" in names]) == len(run.timeline)
    assert len(reads) <= 7 < len(run.timeline) // 2


def test_a_phase_that_starts_complete_is_complete_at_its_first_poll(clock: Clock) -> None:
    op = ScriptedOperator(clock)
    clock.now += 60  # everything written before the phase began (a restart reads its reports back)
    run = scan.follow(op, clock.now, REPORTS * POLICIES, REPORTS, timeout=60, quiet=2, label="t")
    assert run.wall_complete == 0.0
    assert run.first is not None and run.first.full and run.first.results_present == REPORTS * POLICIES

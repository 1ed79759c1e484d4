"""How the scanner writes a report: created when new, replaced at the version vpol last wrote, applied otherwise."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client

from tests.unit.policies import make_policy
from vpol.controller.report_store import WRITERS, WritingStopped
from vpol.controller.scanner import Scanner
from vpol.desired.report import PolicyMeta, ReportEntry, ResourceRef, report_for
from vpol.controller.queue_keys import PolicyKey


class RecordingReports:
    """Stands for vpol.kube.reports.Reports: records each write and answers as the API server would."""

    def __init__(self, existing: list[dict[str, Any]] | None = None):
        self.existing_reports = existing or []
        #: Reports someone else changed since: an update at vpol's version fails its precondition.
        self.stale: set[str] = set()
        self.calls: list[tuple[str, str, str]] = []
        self.version = 100
        self.served_elsewhere = False

    def existing(self, _selector: str) -> list[dict[str, Any]]:
        return self.existing_reports

    def _next(self) -> str:
        self.version += 1
        return str(self.version)

    def create(self, report: dict[str, Any]) -> str | None:
        self.calls.append(("create", report["metadata"]["name"], ""))
        return self._next()

    def update(self, report: dict[str, Any], version: str) -> str | None:
        self.calls.append(("update", report["metadata"]["name"], version))
        if report["metadata"]["name"] in self.stale:
            return None
        return self._next()

    def apply(self, report: dict[str, Any]) -> str:
        self.calls.append(("apply", report["metadata"]["name"], ""))
        self.stale.discard(report["metadata"]["name"])
        return self._next()

    def delete(self, name: str, namespace: str) -> None:
        self.calls.append(("delete", name, ""))


POLICY = make_policy(name="p", validations=[{"expression": "true"}])


def ref(uid: str) -> ResourceRef:
    return ResourceRef("v1", "ConfigMap", f"cm-{uid}", "ns", uid)


def entry(result: str) -> ReportEntry:
    return ReportEntry("p", result, "", (), 1)


def stored(uid: str, result: str, version: str, *managers: str) -> dict[str, Any]:
    body = report_for(ref(uid), {"p": entry(result)}, {"p": PolicyMeta()}, "k")
    body["metadata"]["resourceVersion"] = version
    body["metadata"]["managedFields"] = [{"manager": m, "operation": "Update"} for m in managers]
    return body


def scanner_with(reports: RecordingReports, leading: threading.Event | None = None) -> Scanner:
    scanner = Scanner(client.ApiClient(), backend=None, discovery=None, leading=leading)  # type: ignore[arg-type]
    scanner.store.reports = reports  # type: ignore[assignment]
    scanner.hand_over(PolicyKey.of("ValidatingPolicy", "p"), POLICY)
    return scanner


def write(scanner: Scanner, uid: str, result: str) -> None:
    w = scanner.store.store(ref(uid), [entry(result)], None, "k2")
    assert w is not None
    scanner.store.write(w)


def test_a_new_report_is_created_and_later_replaced_at_the_version_written() -> None:
    reports = RecordingReports()
    scanner = scanner_with(reports)
    write(scanner, "u1", "fail")
    write(scanner, "u1", "pass")
    write(scanner, "u1", "fail")
    assert reports.calls == [("create", "vpol-u1", ""), ("update", "vpol-u1", "101"), ("update", "vpol-u1", "102")]


def test_a_report_changed_by_someone_else_is_applied_and_then_updated_again() -> None:
    reports = RecordingReports()
    scanner = scanner_with(reports)
    write(scanner, "u1", "fail")
    reports.stale.add("vpol-u1")
    write(scanner, "u1", "pass")
    write(scanner, "u1", "fail")
    assert reports.calls == [("create", "vpol-u1", ""), ("update", "vpol-u1", "101"), ("apply", "vpol-u1", ""),
                             ("update", "vpol-u1", "102")]


def test_reports_read_back_at_start_are_replaced_only_when_vpol_alone_wrote_them() -> None:
    reports = RecordingReports([stored("ours", "fail", "7", "vpol"),
                                stored("shared", "fail", "8", "vpol", "kubectl-label")])
    scanner = scanner_with(reports)
    scanner.store.seed()
    write(scanner, "ours", "pass")
    write(scanner, "shared", "pass")
    assert reports.calls == [("update", "vpol-ours", "7"), ("apply", "vpol-shared", "")]


def test_a_report_read_back_with_another_severity_than_its_policys_is_written_again() -> None:
    """The policy's severity changed while no vpol ran: its results are the same, its reports are not."""
    rated = make_policy(name="p", validations=[{"expression": "true"}],
                        annotations={"policies.kyverno.io/severity": "high"})
    low = stored("low", "fail", "7", "vpol")
    low["results"][0]["severity"] = "low"
    high = stored("high", "fail", "8", "vpol")
    high["results"][0]["severity"] = "high"
    reports = RecordingReports([low, high])
    scanner = scanner_with(reports)
    scanner.hand_over(PolicyKey.of("ValidatingPolicy", "p"), rated)
    scanner.store.seed()
    assert scanner.store.store(ref("high"), [entry("fail")], None, "k") is None
    w = scanner.store.store(ref("low"), [entry("fail")], None, "k")
    assert w is not None
    scanner.store.write(w)
    assert reports.calls == [("update", "vpol-low", "7")]


def test_report_result_counts_follow_a_new_severity() -> None:
    """vpol_report_results counts a policy's results under its current severity and category only."""
    from vpol.controller import metrics

    reports = RecordingReports()
    scanner = scanner_with(reports)
    scanner.store.meta_changed()
    write(scanner, "u1", "fail")
    write(scanner, "u2", "fail")

    def series() -> dict[tuple[str, ...], float]:
        scanner.store.publish_counts()  # as each chunk of a scan does
        return {tuple(s.labels[k] for k in ("namespace", "result", "severity")): s.value
                for m in metrics.REPORT_RESULTS.collect() for s in m.samples if s.labels["policy"] == "p"}

    assert series() == {("ns", "fail", ""): 2}
    scanner.hand_over(PolicyKey.of("ValidatingPolicy", "p"), make_policy(name="p", validations=[{"expression": "true"}],
                                        annotations={"policies.kyverno.io/severity": "medium"}))
    scanner.store.meta_changed()
    assert series() == {("ns", "fail", "medium"): 2}
    # ...and the reports holding its results are written again, though the results did not change.
    calls = len(reports.calls)
    write(scanner, "u1", "fail")
    assert reports.calls[calls:] == [("update", "vpol-u1", "101")]
    metrics.REPORT_RESULTS.clear()


def test_a_gone_resources_report_is_left_to_the_garbage_collector_unless_another_server_serves_reports() -> None:
    """Its owner reference deletes it; behind reports-server (another API server) vpol deletes it too."""
    for elsewhere, wanted in ((False, []), (True, [("delete", "vpol-u1", "")])):
        reports = RecordingReports()
        reports.served_elsewhere = elsewhere
        scanner = scanner_with(reports)
        write(scanner, "u1", "fail")
        scanner.store.forget("u1")
        scanner.store.drain()
        scanner.store.forget("never-written")
        scanner.store.drain()
        assert reports.calls[1:] == wanted, elsewhere


class HeldCreates(RecordingReports):
    """Creates that wait until they are let go (a write in flight when the replica stops)."""

    def __init__(self) -> None:
        super().__init__()
        self.let_go = threading.Event()
        self.started = threading.Semaphore(0)

    def create(self, report: dict[str, Any]) -> str | None:
        self.started.release()
        assert self.let_go.wait(10)
        return super().create(report)


@pytest.mark.parametrize("how", ["stopped", "lease lost"])
def test_no_report_is_written_once_the_replica_stops_or_loses_the_lease(how: str) -> None:
    """A replica that stops (or loses the scanner Lease) with writes queued sends none of them, and the pass that
    hands over more ends: the replica that leads next reads the reports back and would otherwise see some written
    twice. Writes already in flight are waited for."""
    reports = HeldCreates()
    leading = threading.Event()
    leading.set()
    scanner = scanner_with(reports, leading)
    queued = [scanner.store.store(ref(f"u{i}"), [entry("fail")], None, "k") for i in range(WRITERS + 20)]
    scanner.store.flush([w for w in queued if w is not None])
    for _ in range(WRITERS):  # every writer thread holds one write in flight
        assert reports.started.acquire(timeout=10)
    if how == "stopped":
        scanner.stop()
    else:
        leading.clear()
    reports.let_go.set()
    scanner.store.drain()
    assert len(reports.calls) == WRITERS and scanner.store.writes == WRITERS, reports.calls
    more = scanner.store.store(ref("late"), [entry("fail")], None, "k")
    assert more is not None
    with pytest.raises(WritingStopped):
        scanner.store.flush([more])
    assert len(reports.calls) == WRITERS


def test_a_pass_ended_by_a_lost_lease_starts_over_from_the_reports_when_the_lease_is_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The Lease lost and taken back within a second: the writes the pass dropped are not remembered as done. The
    scans stop (the store cleared) and start again from the reports read back, as any new leader's do."""
    leading = threading.Event()
    leading.set()
    scanner = Scanner(client.ApiClient(), backend=None, discovery=None, leading=leading)  # type: ignore[arg-type]
    calls: list[str] = []

    def activate() -> None:
        calls.append("activate")
        scanner._active = True  # noqa: SLF001

    def step() -> None:
        calls.append("step")
        if calls.count("step") == 1:
            raise WritingStopped()  # the Lease was lost (and is back by the loop's next turn)
        scanner._stop_event.set()  # noqa: SLF001

    def deactivate() -> None:
        calls.append("deactivate")
        scanner._active = False  # noqa: SLF001

    monkeypatch.setattr(scanner, "_activate", activate)
    monkeypatch.setattr(scanner, "_step", step)
    monkeypatch.setattr(scanner, "_deactivate", deactivate)
    scanner.run()
    assert calls == ["activate", "step", "deactivate", "activate", "step", "deactivate"]

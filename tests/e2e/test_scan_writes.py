"""Background scans write each report once when several policies arrive together (issue 23).

A module of its own, so its operator (the module-scoped fixture) counts only this test's report writes.
"""

from __future__ import annotations

import time
from typing import Any

from tests.e2e.operator_process import OperatorProcess
from tests.e2e.test_scans import make_cm, owner_policy, report
from tests.e2e.vpol_fixtures import (  # noqa: F401 - fixtures
    Policies,
    operator,
    policies,
    vpol_installed,
    wait_for,
)

#: Policies applied one after another, with this pause between two applies: 20 of them take about
#: 6 s, as a GitOps sync or a client applying a directory object by object does.
POLICIES = 20
PAUSE = 0.3
RESOURCES = 6


def report_writes(op: OperatorProcess) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in op.metrics().splitlines()
               if line.startswith("vpol_report_writes_total{"))


def full_scan_done(op: OperatorProcess) -> bool:
    return any(line.startswith("vpol_scan_last_success_timestamp_seconds ") and float(line.split()[1]) > 0
               for line in op.metrics().splitlines())


def test_policies_applied_together_write_each_report_once(policies: Policies, cluster: Any, namespace: str,
                                                          operator: OperatorProcess) -> None:
    """Policies applied to a running operator within a few seconds are evaluated in one pass: every
    resource's report is written once, holding every policy's result (not once per group of policies
    whose reconciles happened to finish close together)."""
    uids = [make_cm(cluster, namespace, f"cm-{i}", {"x": str(i)}) for i in range(RESOURCES)]
    # The operator's start-up scan deletes the reports earlier modules left (their policies are gone): those
    # writes are its own, counted before this test's burst (a race here once counted 11 of them in).
    wait_for("the operator's start-up full scan", lambda: full_scan_done(operator), 60)
    before = report_writes(operator)
    names = []
    for i in range(POLICIES):
        names.append(policies.create(f"together-{i}", owner_policy()))
        time.sleep(PAUSE)

    def complete() -> bool:
        for uid in uids:
            results = (report(cluster, namespace, uid) or {}).get("results") or []
            if {x["policy"] for x in results} != set(names):
                return False
        return True

    wait_for("every report to hold every policy's result", complete, 180, 0.5)
    # Writes still queued in the operator would show up within its write timeout; none is expected.
    wait_for("the operator's write count to reach the number of reports",
             lambda: report_writes(operator) - before >= RESOURCES, 30)
    time.sleep(3)
    assert report_writes(operator) - before == RESOURCES, "a report was written more than once"
    # The same, seen from the reports: a report whose content changed after its creation has a later generation.
    assert [(report(cluster, namespace, uid) or {})["metadata"]["generation"] for uid in uids] == [1] * RESOURCES

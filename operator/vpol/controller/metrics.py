"""Prometheus metrics of the operator (served on ``--metrics-port`` at ``/metrics``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge, start_http_server

POLICIES = Gauge("vpol_policies", "ValidatingPolicies known to the operator, by readiness", ["ready"])
RECONCILES = Counter("vpol_reconciles_total", "Policy reconciles, by outcome", ["outcome"])
RECONCILE_ERRORS = Counter("vpol_reconcile_errors_total", "Policy reconciles that failed and were retried")
STATUS_WRITES = Counter("vpol_status_writes_total", "Status writes of ValidatingPolicies")
GENERATED_WRITES = Counter("vpol_generated_object_writes_total",
                           "Server-side applies and deletions of generated admission policies", ["action"])


def observe_reconcile(result: Any, ready: Mapping[str, bool]) -> None:
    RECONCILES.labels("ok").inc()
    if result.status_written:
        STATUS_WRITES.inc()
    GENERATED_WRITES.labels("apply").inc(len(result.applied))
    GENERATED_WRITES.labels("delete").inc(len(result.deleted))
    POLICIES.labels("true").set(sum(1 for v in ready.values() if v))
    POLICIES.labels("false").set(sum(1 for v in ready.values() if not v))


def serve(port: int) -> None:
    start_http_server(port)

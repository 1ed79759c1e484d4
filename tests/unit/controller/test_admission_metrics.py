"""The webhook's metric helpers (vpol.controller.metrics) count into the exported series, as .labels() would: the
children they keep are the registry's."""

from __future__ import annotations

from prometheus_client import REGISTRY

from vpol.controller import metrics


def _value(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_requests_outcomes_count_per_policy_and_share_its_time_unless_it_mutated() -> None:
    decisions = "vpol_admission_decisions_total"
    timings = "vpol_admission_policy_duration_seconds_count"
    before = {(p, d): _value(decisions, {"policy": p, "decision": d})
              for p in ("m-a", "m-b") for d in ("allow", "deny")}
    timed = {p: _value(timings, {"policy": p}) for p in ("m-a", "m-b")}
    total = _value("vpol_admission_policy_duration_seconds_sum", {"policy": "m-a"})
    metrics.admission_outcomes((("m-a", "allow"), ("m-b", "deny")), 0.002)
    metrics.admission_outcomes((("m-a", "allow"),), None)  # the mutating webhook: decisions only
    metrics.admission_outcomes((("m-a", "allow"), ("m-b", "deny")), 0.002)  # alike: the same series again
    assert _value(decisions, {"policy": "m-a", "decision": "allow"}) == before[("m-a", "allow")] + 3
    assert _value(decisions, {"policy": "m-b", "decision": "deny"}) == before[("m-b", "deny")] + 2
    assert _value(decisions, {"policy": "m-b", "decision": "allow"}) == before[("m-b", "allow")]
    assert _value(timings, {"policy": "m-a"}) == timed["m-a"] + 2
    assert _value(timings, {"policy": "m-b"}) == timed["m-b"] + 2
    assert abs(_value("vpol_admission_policy_duration_seconds_sum", {"policy": "m-a"}) - total - 0.004) < 1e-9
    # Kept children are the exported ones: .labels() elsewhere (tests, other callers) counts into the same series.
    metrics.ADMISSION_DECISIONS.labels("m-a", "allow").inc()
    metrics.admission_decision("m-a", "allow")
    assert _value(decisions, {"policy": "m-a", "decision": "allow"}) == before[("m-a", "allow")] + 5


def test_the_per_request_metrics_count_by_their_labels() -> None:
    requests = {"webhook": "fail", "operation": "CREATE", "resource_kind": "MetricsTestKind"}
    before = _value("vpol_admission_requests_total", requests)
    metrics.admission_request("fail", "CREATE", "MetricsTestKind")
    metrics.admission_request("fail", "CREATE", "MetricsTestKind")
    assert _value("vpol_admission_requests_total", requests) == before + 2
    count = _value("vpol_admission_duration_seconds_count", {"webhook": "metrics-test"})
    metrics.admission_latency("metrics-test", 0.004)
    assert _value("vpol_admission_duration_seconds_count", {"webhook": "metrics-test"}) == count + 1
    inline = _value("vpol_admission_evaluations_total", {"where": "inline"})
    metrics.admission_evaluated("inline")
    assert _value("vpol_admission_evaluations_total", {"where": "inline"}) == inline + 1

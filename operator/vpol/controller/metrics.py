"""Prometheus metrics of the operator (served on ``--metrics-port`` at ``/metrics``).

The series the dashboard and alerts (manifests/monitoring/) are built on:

- ``vpol_report_results{policy, namespace, result, severity, category}``:
  gauge of the results currently in PolicyReports (the violations series);
- ``vpol_policy_results_total{policy, result, resource_kind, resource_namespace}``:
  counter of evaluations;
- ``vpol_scan_duration_seconds{scan="full"|"incremental"}``,
  ``vpol_scan_resources_total{scan}``, ``vpol_scan_last_success_timestamp_seconds``;
- ``vpol_policies{ready}``, ``vpol_policy_info{policy, ready, actions, background, vap_generated}``;
- ``vpol_evaluation_duration_seconds``;
- ``vpol_reconcile_errors_total{kind}``, ``vpol_reconciles_total{outcome}``,
  ``vpol_status_writes_total``, ``vpol_generated_object_writes_total{action}``,
  ``vpol_report_writes_total{action}``;
- ``vpol_events_total{outcome}``: PolicyViolation Events sent, deduplicated, dropped or failed;
- ``vpol_background_mutations_total{policy, result}``: targets of mutateExisting (mutated, unchanged, skip, error).

Counters and histograms are served without their ``_created`` series (see :func:`serve`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics, start_http_server

POLICIES = Gauge("vpol_policies", "ValidatingPolicies known to the operator, by readiness", ["ready"])
POLICY_INFO = Gauge("vpol_policy_info", "One series per ValidatingPolicy describing it (value 1)",
                    ["policy", "ready", "actions", "background", "vap_generated"])
RECONCILES = Counter("vpol_reconciles_total", "Policy reconciles, by outcome", ["outcome"])
RECONCILE_ERRORS = Counter("vpol_reconcile_errors_total", "Reconciles or scans that failed and will be retried",
                           ["kind"])
STATUS_WRITES = Counter("vpol_status_writes_total", "Status writes of ValidatingPolicies")
GENERATED_WRITES = Counter("vpol_generated_object_writes_total",
                           "Server-side applies and deletions of generated admission policies", ["action"])

REPORT_RESULTS = Gauge("vpol_report_results", "Results currently in PolicyReports and ClusterPolicyReports",
                       ["policy", "namespace", "result", "severity", "category"])
POLICY_RESULTS = Counter("vpol_policy_results_total", "Background evaluations of a policy on a resource",
                         ["policy", "result", "resource_kind", "resource_namespace"])
SCAN_DURATION = Histogram("vpol_scan_duration_seconds", "Duration of background scans", ["scan"],
                          buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
SCAN_RESOURCES = Counter("vpol_scan_resources_total", "Resources evaluated by background scans", ["scan"])
SCAN_LAST_SUCCESS = Gauge("vpol_scan_last_success_timestamp_seconds", "When the last full scan finished")
EVALUATION_DURATION = Histogram("vpol_evaluation_duration_seconds",
                                "Time to evaluate every policy on one resource",
                                buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1, 10))
REPORT_WRITES = Counter("vpol_report_writes_total", "Writes of PolicyReports", ["action"])

ADMISSION_REQUESTS = Counter("vpol_admission_requests_total", "Admission requests received by vpol's webhook",
                             ["webhook", "operation", "resource_kind"])
ADMISSION_REJECTED = Counter("vpol_admission_rejected_requests_total",
                             "Requests to vpol's webhook refused before evaluation: not an AdmissionReview it answers "
                             "(too-large, encoding, not-json, too-deep, not-review, invalid-request), a body "
                             "that did not arrive in time (timeout), a connection beyond the limit (connections)",
                             ["reason"])
ADMISSION_INTERNAL_ERRORS = Counter("vpol_admission_internal_errors_total",
                                    "Unexpected failures while serving an admission request (answered by the "
                                    "failurePolicy; the log line names the error id)")
ADMISSION_DECISIONS = Counter("vpol_admission_decisions_total",
                              "Decisions of policies enforced by vpol's webhook (allow, deny, warn, audit, error)",
                              ["policy", "decision"])
ADMISSION_LATENCY = Histogram("vpol_admission_duration_seconds", "Time to answer an admission request",
                              ["webhook"], buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                                    5, 10))
IMAGE_CACHE = Counter("vpol_image_verification_cache_total",
                      "Image verifications of ImageValidatingPolicies at admission answered from the cache (hit) or "
                      "from the registry (miss)", ["result"])
IMAGE_REGISTRY_REQUESTS = Counter("vpol_image_registry_requests_total",
                                  "Requests ImageValidatingPolicies sent to registries (manifest, blob, referrer, "
                                  "token), at admission and in background scans", ["kind"])
ADMISSION_POLICY_LATENCY = Histogram("vpol_admission_policy_duration_seconds",
                                     "Evaluation time of an admission request, shared out evenly among the "
                                     "policies it evaluated (per policy)", ["policy"],
                                     buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1, 5))
ADMISSION_ENFORCED = Gauge("vpol_policy_admission_enforced",
                           "One series per policy: how admission requests are checked against it (value 1)",
                           ["policy", "path"])
LEADER_PROBLEM = Gauge("vpol_leader_election_problem",
                       "1 while this replica cannot even try to take the leader Lease (see /healthz and the log)")
DEPENDENCY_PROBLEM = Gauge("vpol_dependency_problem",
                           "1 while something the operator needs is missing (a CRD, a permission): see /healthz and "
                           "the log", ["dependency"])
ADMISSION_EVALUATIONS = Counter("vpol_admission_evaluations_total",
                                "Admission requests evaluated, by where: inline (by the serving process, their work "
                                "bounded beforehand) or worker (by an evaluation worker process)", ["where"])
ADMISSION_POLICIES = Gauge("vpol_admission_webhook_policies", "Policies this replica's webhook is serving")
BACKGROUND_MUTATIONS = Counter("vpol_background_mutations_total",
                               "Targets of mutateExisting evaluated, by policy and result (mutated, unchanged, skip, "
                               "error)", ["policy", "result"])
GENERATIONS = Counter("vpol_generations_total",
                      "Generations of a GeneratingPolicy for a trigger, by policy and outcome (pass, skip, error)",
                      ["policy", "outcome"])
GENERATED_OBJECTS = Counter("vpol_generated_objects_total",
                            "Writes of objects GeneratingPolicies generate, by policy and action (created, updated, "
                            "deleted)", ["policy", "action"])
DELETING_RUNS = Counter("vpol_deleting_policy_runs_total",
                        "Scheduled runs of DeletingPolicies, by policy and outcome (succeeded, failed, forbidden)",
                        ["policy", "outcome"])
DELETED_OBJECTS = Counter("vpol_deleted_objects_total", "Objects DeletingPolicies deleted, by policy and resource",
                          ["policy", "resource"])
DELETION_ERRORS = Counter("vpol_deletion_errors_total",
                          "Objects a DeletingPolicy could not evaluate or delete, by policy", ["policy"])
EVENTS = Counter("vpol_events_total", "PolicyViolation Events, by outcome (sent, deduplicated, dropped: the queue "
                 "was full, failed)", ["outcome"])


# A request counts once per policy it evaluated: the labelled children are kept here rather than looked up
# with .labels() each time (which takes a lock and builds a tuple key: a few microseconds, times every policy
# of every request), and so are those of the metrics every request counts once. Admission series are never
# removed, so a kept child stays the exported one.
_children: dict[tuple[Any, tuple[str, ...]], Any] = {}


def _child(metric: Any, *labels: str) -> Any:
    """``metric``'s child for ``labels``, kept in :data:`_children`."""
    child = _children.get((metric, labels))
    if child is None:
        child = _children[(metric, labels)] = metric.labels(*labels)
    return child


def image_registry_requests(requests: Mapping[str, int]) -> None:
    """Registry requests ImageValidatingPolicies sent (by kind: manifest, blob, referrer, token), as an evaluation
    worker tells them back."""
    for kind, n in requests.items():
        _child(IMAGE_REGISTRY_REQUESTS, kind).inc(n)


def admission_decision(policy: str, decision: str) -> None:
    _child(ADMISSION_DECISIONS, policy, decision).inc()


def admission_policy_latency(policy: str, seconds: float) -> None:
    _child(ADMISSION_POLICY_LATENCY, policy).observe(seconds)


#: Per request's outcomes (a tuple of (policy, decision)): the decision counters and latency histograms they
#: count into. Requests alike (every Pod a set of policies allows) have equal outcomes: one lookup instead of two
#: per policy (36 for the 18 Pod Security policies, about half of the ~70 us these metrics took per request).
_outcome_children: dict[tuple[tuple[str, str], ...], tuple[list[Any], list[Any]]] = {}
#: Distinct outcomes kept (beyond, the kept ones are dropped: a policy set changing often cannot grow it).
_OUTCOMES_KEPT = 1024


def admission_outcomes(outcomes: tuple[tuple[str, str], ...], seconds: float | None) -> None:
    """One answered request's decisions, (policy, decision) each, and with ``seconds`` each policy's share of
    its evaluation time: admission_decision and admission_policy_latency for each, in one call."""
    children = _outcome_children.get(outcomes)
    if children is None:
        if len(_outcome_children) >= _OUTCOMES_KEPT:
            _outcome_children.clear()
        children = _outcome_children[outcomes] = (
            [_child(ADMISSION_DECISIONS, policy, decision) for policy, decision in outcomes],
            [_child(ADMISSION_POLICY_LATENCY, policy) for policy, _decision in outcomes])
    for counter in children[0]:
        counter.inc()
    if seconds is not None:
        for histogram in children[1]:
            histogram.observe(seconds)


def admission_request(webhook: str, operation: str, kind: str) -> None:
    """A request to ``webhook`` passed the boundary (vpol_admission_requests_total)."""
    _child(ADMISSION_REQUESTS, webhook, operation, kind).inc()


def admission_latency(webhook: str, seconds: float) -> None:
    """A request to ``webhook`` was answered in ``seconds`` (vpol_admission_duration_seconds)."""
    _child(ADMISSION_LATENCY, webhook).observe(seconds)


def admission_evaluated(where: str) -> None:
    """A request was evaluated ``inline`` or by a ``worker`` (vpol_admission_evaluations_total)."""
    _child(ADMISSION_EVALUATIONS, where).inc()


# Counters with labels appear only once a label value is used; create the known
# ones up front so dashboards and alerts see zeros instead of nothing.
for _kind in ("policy", "scan"):
    RECONCILE_ERRORS.labels(_kind)
for _action in ("apply", "delete"):
    GENERATED_WRITES.labels(_action)
    REPORT_WRITES.labels(_action)
for _scan in ("full", "incremental"):
    SCAN_RESOURCES.labels(_scan)


def observe_reconcile(result: Any, ready: Mapping[str, bool]) -> None:
    RECONCILES.labels("ok").inc()
    if result.status_written:
        STATUS_WRITES.inc()
    GENERATED_WRITES.labels("apply").inc(len(result.applied))
    GENERATED_WRITES.labels("delete").inc(len(result.deleted))
    POLICIES.labels("true").set(sum(1 for v in ready.values() if v))
    POLICIES.labels("false").set(sum(1 for v in ready.values() if not v))


def set_policy_info(infos: Mapping[str, tuple[bool, str, bool, bool]]) -> None:
    """Replace the vpol_policy_info series: policy -> (ready, actions, background, vap_generated)."""
    POLICY_INFO.clear()
    for policy, (ready, actions, background, generated) in infos.items():
        POLICY_INFO.labels(policy, str(ready).lower(), actions, str(background).lower(),
                           str(generated).lower()).set(1)


def set_enforcement(paths: Mapping[str, str]) -> None:
    """Replace the vpol_policy_admission_enforced series: policy -> NativeVAP, Webhook, None or NotApplicable."""
    ADMISSION_ENFORCED.clear()
    for policy, path in paths.items():
        ADMISSION_ENFORCED.labels(policy, path).set(1)


def serve(port: int) -> None:
    """Serve /metrics on ``port``, without the ``<counter>_created`` series: prometheus_client adds one per labelled
    counter and histogram child (the creation time, which no query here uses), doubling what every scrape renders
    and Prometheus stores for the per-policy, per-namespace counters."""
    disable_created_metrics()
    start_http_server(port)

"""PolicyReports for background scan results (pure).

Kyverno's layout (../shared/NOTES.md section 5): one wgpolicyk8s.io/v1alpha2
``PolicyReport`` per namespaced resource (``ClusterPolicyReport`` for a
cluster-scoped one), owned by the resource so the garbage collector removes
it with the resource, ``scope`` naming the resource, the managed-by label, a
``summary`` of counts and one result per policy, with the fields Kyverno's
reports controller writes for a ValidatingPolicy (``pkg/utils/report`` of
Kyverno 1.19: ``source``, ``policy`` (``namespace/name`` for a namespaced
policy), ``result``, ``message``, ``scored``, ``severity`` and ``category``
from the policy's annotations, ``timestamp``, and the properties ``process``
and ``cel.validationIndex`` besides the audit annotations). Policy Reporter
reads these fields (tests/e2e/test_policy_reporter.py). Timestamps of
unchanged results are kept, so an unchanged scan yields an identical report
and no write.

Two things differ from Kyverno on purpose, so both can report on one cluster:
the ``source`` is ``vpol`` (Kyverno's is ``KyvernoValidatingPolicy``), and a
report is named ``vpol-<resource UID>`` (Kyverno names its own by the bare
UID: one name for both would make each overwrite the other's results).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vpol.engine.evaluate import ERROR, LOAD_FAILED, Result

REPORT_API_VERSION = "wgpolicyk8s.io/v1alpha2"
SOURCE = "vpol"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "vpol"
SUMMARY_KEYS = ("pass", "fail", "warn", "error", "skip")
#: The severities a report result may carry (the report CRD's enum); Kyverno writes none for any other
#: value of the ``policies.kyverno.io/severity`` annotation (``SeverityFromString``).
SEVERITIES = ("critical", "high", "medium", "low", "info")
#: Property naming the failing (or erroring) validation's index, as Kyverno's engine names it.
VALIDATION_INDEX = "cel.validationIndex"
#: Property Kyverno gives every result of a background-enabled policy: how it was produced.
PROCESS = "process"
BACKGROUND_SCAN = "background scan"
#: Property naming the PolicyExceptions that exempted the resource (Kyverno: their names, joined by ",").
EXCEPTIONS = "exceptions"
#: Properties that replace a result's message in Kyverno's reports (pkg/utils/report ToPolicyReportResult): the
#: one for the result's outcome (a fail turned warn by scored: false still reads failMessage), then ``message``
#: over any outcome. An audit annotation with such a key is one.
MESSAGE_PROPERTIES = {"pass": "passMessage", "fail": "failMessage", "warn": "failMessage", "error": "errorMessage",
                      "skip": "skipMessage"}
GENERIC_MESSAGE_PROPERTY = "message"
#: Kyverno's rule names for the results of a ValidatingPolicy that are not a validation's: an exemption, and a
#: policy that could not be evaluated before any validation (engineapi.RuleError("evaluation", ...)).
RULE_EXCEPTION, RULE_EVALUATION = "exception", "evaluation"
#: Report names: this prefix and the resource's UID.
NAME_PREFIX = "vpol-"


def report_name(uid: str) -> str:
    """The name of vpol's report about the resource with ``uid``."""
    return NAME_PREFIX + uid


def severity_of(annotation: str) -> str:
    """The report severity for a ``policies.kyverno.io/severity`` annotation: the value when it is one
    of :data:`SEVERITIES` (exactly, as Kyverno compares), else none."""
    return annotation if annotation in SEVERITIES else ""


@dataclass(frozen=True, slots=True)
class ResourceRef:
    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> "ResourceRef":
        md = obj.get("metadata") or {}
        return cls.make(obj.get("apiVersion"), obj.get("kind"), md.get("name"), md.get("namespace"), md.get("uid"))

    @classmethod
    def make(cls, api_version: Any, kind: Any, name: Any, namespace: Any, uid: Any) -> "ResourceRef":
        """From the fields as read from an object or a report's scope (None is ""). A scan holds one per resource
        (vpol.controller.report_store): the apiVersion, kind and namespace, which repeat, are interned (one string
        each instead of one per resource: 160 bytes less per resource)."""
        return cls(sys.intern(str(api_version or "")), sys.intern(str(kind or "")), str(name or ""),
                   sys.intern(str(namespace or "")), str(uid or ""))


@dataclass(frozen=True)
class PolicyMeta:
    """What a report result says about the policy besides the outcome."""

    severity: str = ""
    category: str = ""
    scored: bool = True

    @classmethod
    def of(cls, severity: str, category: str, scored: bool) -> "PolicyMeta":
        """From the policy's annotations: a severity outside :data:`SEVERITIES` is left out."""
        return cls(severity_of(severity), category, scored)

    def as_reported(self) -> "PolicyMeta":
        """What a report result written with this metadata says (see report_for and reported_meta)."""
        return PolicyMeta.of(self.severity, self.category, self.scored)


def reported_meta(item: Mapping[str, Any]) -> PolicyMeta:
    """The policy metadata a written report result carries (its severity, category and scored)."""
    return PolicyMeta(str(item.get("severity") or ""), str(item.get("category") or ""), bool(item.get("scored")))


@dataclass(frozen=True, slots=True)
class ReportEntry:
    """One policy's result on one resource, in the compact form kept in memory.

    A scan keeps one per (resource, policy): slots and interned strings keep
    that small (policy names, outcomes and most messages repeat).
    """

    policy: str
    result: str
    message: str
    properties: tuple[tuple[str, str], ...] = ()
    timestamp: int = 0
    #: Kyverno's rule name, for results that are not a validation's (RULE_EXCEPTION, RULE_EVALUATION); "" else.
    rule: str = ""

    @classmethod
    def of(cls, res: Result, now: int) -> "ReportEntry":
        """The report result of ``res`` as Kyverno's reports controller writes it: the validation's index, the
        exceptions and the autogen variant in its properties, and its message replaced by a property that says
        so (:data:`MESSAGE_PROPERTIES`)."""
        props = dict(res.properties)
        if res.validation is not None:
            props.setdefault(VALIDATION_INDEX, str(res.validation))
        if res.autogen:
            props.setdefault("autogen", res.autogen)
        if res.exception:
            props[EXCEPTIONS] = res.exception
        message = res.message
        if props:
            message = props.get(MESSAGE_PROPERTIES.get(res.result, "")) or message
            message = props.get(GENERIC_MESSAGE_PROPERTY) or message
        rule = RULE_EXCEPTION if res.exception else (
            RULE_EVALUATION if res.result == ERROR and res.message.startswith(LOAD_FAILED) else "")
        return cls(sys.intern(res.policy), sys.intern(res.result), sys.intern(message),
                   tuple(sorted((sys.intern(k), v) for k, v in props.items())), now, rule)

    def same_outcome(self, other: "ReportEntry") -> bool:
        return (self.policy, self.result, self.message, self.properties, self.rule) == \
            (other.policy, other.result, other.message, other.properties, other.rule)


@dataclass
class ResourceResults:
    ref: ResourceRef
    entries: dict[str, ReportEntry] = field(default_factory=dict)


def merge(previous: Mapping[str, ReportEntry], fresh: Iterable[ReportEntry],
          replace: Iterable[str] | None = None) -> dict[str, ReportEntry]:
    """New entries for a resource, keeping the old timestamp of any unchanged outcome.

    ``replace`` names the policies being re-evaluated (None: all of them);
    entries of other policies are kept as they are.
    """
    fresh_by = {e.policy: e for e in fresh}
    replaced = set(fresh_by) if replace is None else set(replace)
    out = {p: e for p, e in previous.items() if replace is not None and p not in replaced}
    for policy, entry in fresh_by.items():
        old = previous.get(policy)
        out[policy] = old if old is not None and old.same_outcome(entry) else entry
    return dict(sorted(out.items()))


#: A resource's results as kept in memory: one entry per policy, sorted by policy name.
Results = tuple[ReportEntry, ...]


class EntryPool:
    """Shares equal ``ReportEntry`` values and equal result tuples between resources.

    A scan keeps the results of every resource it covers. Most of them are
    equal (same policies, outcomes and messages, written in the same second),
    so sharing one object per distinct value keeps memory near a tuple of
    references per resource instead of a dict of entries per resource
    (measured: ~4 KiB per resource with 16 policies without sharing). The pool
    forgets everything once it holds ``limit`` values, so it cannot grow
    without bound; values handed out stay valid.
    """

    def __init__(self, limit: int = 20_000):
        self.limit = limit
        self._entries: dict[ReportEntry, ReportEntry] = {}
        self._results: dict[Results, Results] = {}

    def __len__(self) -> int:
        return len(self._entries) + len(self._results)

    def entry(self, entry: ReportEntry) -> ReportEntry:
        if len(self) >= self.limit:
            self.clear()
        return self._entries.setdefault(entry, entry)

    def results(self, entries: Iterable[ReportEntry]) -> Results:
        """The shared, policy-sorted tuple of ``entries`` (each entry shared as well)."""
        items = tuple(self.entry(e) for e in sorted(entries, key=lambda e: e.policy))
        return self._results.setdefault(items, items)

    def clear(self) -> None:
        self._entries.clear()
        self._results.clear()


def by_policy(results: Iterable[ReportEntry]) -> dict[str, ReportEntry]:
    return {e.policy: e for e in results}


def summary(entries: Iterable[ReportEntry]) -> dict[str, int]:
    counts = dict.fromkeys(SUMMARY_KEYS, 0)
    for e in entries:
        counts[e.result] = counts.get(e.result, 0) + 1
    return counts


#: Annotation recording what the results were computed from (object and namespace
#: resourceVersions, policy set), so an unchanged object need not be evaluated again,
#: even by a restarted operator.
SCAN_KEY_ANNOTATION = "vpol.kyverno.io/scan-key"


def report_for(ref: ResourceRef, entries: Mapping[str, ReportEntry],
               policies: Mapping[str, PolicyMeta], scan_key: str = "") -> dict[str, Any]:
    """The PolicyReport (or ClusterPolicyReport) object for one resource."""
    results = []
    for entry in entries.values():
        meta = policies.get(entry.policy, PolicyMeta())
        # Empty and false fields are left out, as Kyverno's API types do (message, scored, properties,
        # severity and category are `omitempty`); every field costs the API server at each write.
        item: dict[str, Any] = {
            "source": SOURCE,
            "policy": entry.policy,
            "result": entry.result,
            "timestamp": {"seconds": entry.timestamp, "nanos": 0},
        }
        if entry.message:
            item["message"] = entry.message
        if entry.rule:
            item["rule"] = entry.rule
        if meta.scored:
            item["scored"] = True
        if severity_of(meta.severity):
            item["severity"] = meta.severity
        if meta.category:
            item["category"] = meta.category
        # A result's own process (mutateExisting's may say "admission review") wins over the scan's.
        item["properties"] = {PROCESS: BACKGROUND_SCAN, **dict(entry.properties)}
        results.append(item)
    metadata: dict[str, Any] = {
        "name": report_name(ref.uid),
        "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        "ownerReferences": [{"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "uid": ref.uid}],
    }
    if ref.namespace:
        metadata["namespace"] = ref.namespace
    # Always set (empty when unknown), so every write sets the same fields and a
    # server-side apply after a create leaves no stale key behind.
    metadata["annotations"] = {SCAN_KEY_ANNOTATION: scan_key}
    scope = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "uid": ref.uid}
    if ref.namespace:
        scope["namespace"] = ref.namespace
    return {
        "apiVersion": REPORT_API_VERSION,
        "kind": "PolicyReport" if ref.namespace else "ClusterPolicyReport",
        "metadata": metadata,
        "scope": scope,
        "summary": summary(entries.values()),
        "results": results,
    }


def entries_from_report(report: Mapping[str, Any]) -> dict[str, ReportEntry]:
    """Read back what a report we wrote says (to resume without rewriting)."""
    out = {}
    for item in report.get("results") or []:
        if not isinstance(item, Mapping) or item.get("source") != SOURCE:
            continue
        # The writer adds process: background scan to every result that names no other (a generation's says
        # admission review, and is kept as it was held).
        props = {k: v for k, v in (item.get("properties") or {}).items()
                 if not (k == PROCESS and v == BACKGROUND_SCAN)}
        ts = (item.get("timestamp") or {}).get("seconds", 0)
        policy = sys.intern(str(item.get("policy", "")))
        out[policy] = ReportEntry(
            policy, sys.intern(str(item.get("result", ""))), sys.intern(str(item.get("message", ""))),
            tuple(sorted((sys.intern(str(k)), str(v)) for k, v in props.items())), int(ts or 0),
            sys.intern(str(item.get("rule") or "")))
    return dict(sorted(out.items()))


def now_seconds() -> int:
    return int(time.time())

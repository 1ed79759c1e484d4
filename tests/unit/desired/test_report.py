"""PolicyReports: Kyverno's layout, summary, stable timestamps, read-back for restarts."""

from __future__ import annotations

from vpol.desired.report import (
    SCAN_KEY_ANNOTATION,
    EntryPool,
    PolicyMeta,
    ReportEntry,
    ResourceRef,
    by_policy,
    entries_from_report,
    merge,
    report_for,
)
from vpol.engine.evaluate import Result

POD = ResourceRef("v1", "Pod", "web", "team-a", "uid-1")
NODE = ResourceRef("v1", "Node", "n1", "", "uid-2")


def entry(policy, result, message="m", ts=100):
    return ReportEntry(policy, result, message, (), ts)


def test_layout_is_kyvernos():
    entries = {"a": entry("a", "fail", "bad"), "b": entry("b", "pass", "success")}
    meta = {"a": PolicyMeta("high", "Pod Security", True), "b": PolicyMeta()}
    r = report_for(POD, entries, meta)
    assert r["apiVersion"] == "wgpolicyk8s.io/v1alpha2" and r["kind"] == "PolicyReport"
    assert r["metadata"]["name"] == "vpol-uid-1" and r["metadata"]["namespace"] == "team-a"
    assert r["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "vpol"}
    assert r["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "uid-1"}]
    assert r["scope"] == {"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "team-a", "uid": "uid-1"}
    assert r["summary"] == {"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0}
    first = r["results"][0]
    assert first == {"source": "vpol", "policy": "a", "result": "fail", "message": "bad", "scored": True,
                     "timestamp": {"seconds": 100, "nanos": 0}, "severity": "high", "category": "Pod Security",
                     "properties": {"process": "background scan"}}
    cluster = report_for(NODE, entries, meta)
    assert cluster["kind"] == "ClusterPolicyReport" and "namespace" not in cluster["metadata"]


def test_empty_and_false_fields_are_left_out_as_kyvernos_omitempty():
    entries = {"a": entry("a", "pass", ""), "b": entry("b", "fail", "bad")}
    r = report_for(POD, entries, {"a": PolicyMeta("", "", False), "b": PolicyMeta("", "", False)})
    assert r["results"][0] == {"source": "vpol", "policy": "a", "result": "pass",
                               "timestamp": {"seconds": 100, "nanos": 0},
                               "properties": {"process": "background scan"}}
    assert r["results"][1]["message"] == "bad" and "scored" not in r["results"][1]
    assert entries_from_report(r) == entries  # read back alike


def test_a_result_naming_its_own_process_reads_back_alike():
    # A generation's result says process: admission review (as Kyverno's background controller writes it); read
    # back at start-up it must be the entry held before, or every such report is rewritten after a restart.
    generated = ReportEntry("gen", "pass", "policy evaluated successfully",
                            (("generated-resources", "/v1, Kind=ConfigMap Name=c Namespace=n"),
                             ("process", "admission review")), 100)
    scanned = entry("val", "fail", "bad")
    r = report_for(POD, {"gen": generated, "val": scanned}, {})
    assert [res["properties"]["process"] for res in r["results"]] == ["admission review", "background scan"]
    assert entries_from_report(r) == {"gen": generated, "val": scanned}


def test_result_properties_carry_validation_index_and_audit_annotations():
    res = Result(policy="p", result="fail", message="x", validation=2, properties={"team": "a"})
    e = ReportEntry.of(res, 5)
    assert dict(e.properties) == {"team": "a", "cel.validationIndex": "2"}


def test_properties_replace_the_message_as_in_kyvernos_reports():
    # The outcome's own property first (a fail that scored: false turned into warn still reads failMessage), then
    # `message` over any outcome (Kyverno's pkg/utils/report ToPolicyReportResult).
    fail = Result(policy="p", result="fail", message="x", validation=0,
                  properties={"failMessage": "ask the platform team", "passMessage": "fine"})
    assert ReportEntry.of(fail, 5).message == "ask the platform team"
    warn = Result(policy="p", result="warn", message="x", validation=0, properties={"failMessage": "f"})
    assert ReportEntry.of(warn, 5).message == "f"
    passed = Result(policy="p", result="pass", message="success", properties={"failMessage": "f", "passMessage": ""})
    assert ReportEntry.of(passed, 5).message == "success"  # an empty override is none
    generic = Result(policy="p", result="pass", message="success", properties={"passMessage": "p", "message": "m"})
    assert ReportEntry.of(generic, 5).message == "m"
    assert dict(ReportEntry.of(generic, 5).properties) == {"passMessage": "p", "message": "m"}  # still reported


def test_exemptions_and_evaluation_failures_carry_kyvernos_rule_names():
    exempt = ReportEntry.of(Result(policy="p", result="skip", message="rule is skipped due to policy exception: "
                                   "ns/e", exception="e"), 5)
    assert exempt.rule == "exception" and dict(exempt.properties) == {"exceptions": "e"}
    failed = ReportEntry.of(Result(policy="p", result="error", message="failed to load context: no such key: x"), 5)
    assert failed.rule == "evaluation"
    plain = ReportEntry.of(Result(policy="p", result="error", message="error: no such key: x", validation=0), 5)
    assert plain.rule == ""
    report = report_for(POD, {"p": exempt}, {})
    assert report["results"][0]["rule"] == "exception" and "rule" not in report_for(POD, {"p": plain}, {})["results"][0]
    assert entries_from_report(report) == {"p": exempt}  # read back alike


def test_merge_keeps_timestamps_of_unchanged_outcomes_and_other_policies():
    old = {"a": entry("a", "pass", ts=1), "b": entry("b", "fail", ts=1)}
    fresh = [entry("a", "pass", ts=9)]
    merged = merge(old, fresh, replace=["a"])
    assert merged == old  # unchanged: identical, so no write
    changed = merge(old, [entry("a", "fail", ts=9)], replace=["a"])
    assert changed["a"].timestamp == 9 and changed["b"] is old["b"]
    full = merge(old, [entry("a", "pass", ts=9)], replace=None)
    assert set(full) == {"a"}  # a full evaluation drops policies that no longer apply


def test_entries_round_trip_through_a_report():
    entries = {"a": ReportEntry("a", "fail", "bad", (("cel.validationIndex", "0"),), 42)}
    report = report_for(POD, entries, {})
    assert entries_from_report(report) == entries


def test_entry_pool_shares_equal_entries_and_result_sets() -> None:
    pool = EntryPool()
    a = [ReportEntry("p2", "fail", "bad", (("cel.validationIndex", "0"),), 10), ReportEntry("p1", "pass", "", (), 10)]
    b = [ReportEntry("p1", "pass", "", (), 10), ReportEntry("p2", "fail", "bad", (("cel.validationIndex", "0"),), 10)]
    ra, rb = pool.results(a), pool.results(b)
    assert ra is rb
    assert [e.policy for e in ra] == ["p1", "p2"]
    other = pool.results([ReportEntry("p1", "pass", "", (), 11)])
    assert other is not ra and other[0] is not ra[0]
    # single entries are shared across different result sets
    mixed = pool.results([ReportEntry("p1", "pass", "", (), 10)])
    assert mixed[0] is ra[0]
    assert by_policy(ra) == {"p1": ra[0], "p2": ra[1]}


def test_entry_pool_is_bounded() -> None:
    pool = EntryPool(limit=10)
    kept = [pool.results([ReportEntry("p", "pass", "", (), t)]) for t in range(100)]
    assert len(pool) <= 10
    assert [k[0].timestamp for k in kept] == list(range(100))  # values handed out stay valid


def test_resource_refs_share_what_repeats() -> None:
    """A scan holds one ResourceRef per resource: those of objects decoded apart share one apiVersion, kind and
    namespace string, and a ref has no instance dictionary; read from an object or a report's scope alike."""
    import json

    def decoded(name: str) -> dict:
        return json.loads(json.dumps({"apiVersion": "apps/v1", "kind": "Deployment",
                                      "metadata": {"name": name, "namespace": "team-a", "uid": f"u-{name}"}}))

    a, b = ResourceRef.of(decoded("a")), ResourceRef.of(decoded("b"))
    scope = json.loads(json.dumps({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "team-a"}))
    c = ResourceRef.make(scope["apiVersion"], scope["kind"], "c", scope["namespace"], "u-c")
    for ref in (b, c):
        assert (ref.api_version, ref.kind, ref.namespace) == (a.api_version, a.kind, a.namespace)
        assert ref.api_version is a.api_version and ref.kind is a.kind and ref.namespace is a.namespace
    assert not hasattr(a, "__dict__")
    assert ResourceRef.make("v1", "Node", "n1", None, "u") == ResourceRef("v1", "Node", "n1", "", "u")


def test_every_report_carries_the_scan_key_annotation() -> None:
    ref = ResourceRef("v1", "Pod", "p", "ns", "u1")
    entries = {"p1": ReportEntry("p1", "pass", "", (), 1)}
    assert report_for(ref, entries, {}, "")["metadata"]["annotations"] == {SCAN_KEY_ANNOTATION: ""}
    assert report_for(ref, entries, {}, "1/2/h")["metadata"]["annotations"] == {SCAN_KEY_ANNOTATION: "1/2/h"}


def test_severities_are_kyvernos_five_or_none():
    """The report CRD allows five severities: any other annotation value is left out (as Kyverno's
    SeverityFromString does), instead of making every write of the report fail."""
    entries = {"a": entry("a", "fail", "bad")}
    for annotation, expected in (("critical", "critical"), ("info", "info"), ("High", None), ("urgent", None),
                                 ("", None)):
        meta = PolicyMeta.of(annotation, "", True)
        assert meta.severity == (expected or "")
        assert report_for(POD, entries, {"a": meta})["results"][0].get("severity") == expected
    # a PolicyMeta built without .of cannot slip an invalid one through either
    assert "severity" not in report_for(POD, entries, {"a": PolicyMeta("High")})["results"][0]

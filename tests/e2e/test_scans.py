"""Background scans end to end: reports for existing resources, event-driven updates, cleanup, metrics."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.e2e.operator_process import OperatorProcess
from tests.e2e.vpol_fixtures import (  # noqa: F401 - fixtures
    GROUP,
    PLURAL,
    VERSION,
    Policies,
    operator,
    policies,
    vpol_installed,
    wait_for,
)

CM_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}


def owner_policy(**extra: Any) -> dict[str, Any]:
    # Only the test's own ConfigMaps (every namespace also holds kube-root-ca.crt).
    spec = {
        "validationActions": ["Audit"],
        "matchConstraints": {"resourceRules": [CM_RULE], "objectSelector": {"matchLabels": {"vpol-test": "scan"}}},
        "validations": [{"expression": "has(object.data) && 'owner' in object.data",
                         "message": "an owner key is required"}],
    }
    spec.update(extra)
    return spec


def make_cm(cluster: Any, namespace: str, name: str, data: dict[str, str]) -> str:
    core = client.CoreV1Api(cluster.api_client)
    cm = core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, labels={"vpol-test": "scan"}), data=data))
    return str(cm.metadata.uid)


def report(cluster: Any, namespace: str, uid: str, name: str = "") -> dict[str, Any] | None:
    """vpol's report about the resource ``uid`` (``name``: another report)."""
    try:
        return client.CustomObjectsApi(cluster.api_client).get_namespaced_custom_object(
            "wgpolicyk8s.io", "v1alpha2", namespace, "policyreports", name or f"vpol-{uid}")
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def result_of(cluster: Any, namespace: str, uid: str, policy: str) -> dict[str, Any] | None:
    r = report(cluster, namespace, uid)
    return next((x for x in (r or {}).get("results") or [] if x["policy"] == policy), None)


def touch_until(what: str, touch: Callable[[int], Any], done: Callable[[], bool], timeout: float = 60) -> None:
    """Change an object (``touch(n)``, n counting up) until ``done()``: a rescan follows each change, so what
    the scan reads from elsewhere (a looked-up object, global context data) is seen without a full scan."""
    touches = iter(range(100_000))

    def touched() -> bool:
        touch(next(touches))
        time.sleep(1)
        return done()

    wait_for(what, touched, timeout, 1)


def gauge(op: OperatorProcess, policy: str, result: str) -> float:
    total = 0.0
    for line in op.metrics().splitlines():
        if line.startswith("vpol_report_results{") and f'policy="{policy}"' in line and f'result="{result}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_existing_resources_get_reports_and_follow_changes(policies: Policies, cluster: Any, namespace: str,
                                                            operator: OperatorProcess) -> None:
    bad = make_cm(cluster, namespace, "bad", {"x": "1"})
    good = make_cm(cluster, namespace, "good", {"owner": "me"})
    name = policies.create("scan", owner_policy())
    policies.wait_condition(name, "Ready", "True")

    fail = wait_for("a fail result for the bad ConfigMap", lambda: result_of(cluster, namespace, bad, name), 60)
    assert fail["result"] == "fail" and fail["message"] == "an owner key is required"
    assert fail["source"] == "vpol" and fail["scored"] is True
    assert result_of(cluster, namespace, good, name)["result"] == "pass"
    r = report(cluster, namespace, bad)
    assert r["scope"]["name"] == "bad" and r["scope"]["uid"] == bad
    assert r["metadata"]["ownerReferences"][0]["uid"] == bad
    assert r["summary"]["fail"] == 1
    wait_for("the gauge to count the failure", lambda: gauge(operator, name, "fail") == 1, 30)

    # Fixing the resource flips its result well before any periodic scan.
    core = client.CoreV1Api(cluster.api_client)
    core.patch_namespaced_config_map("bad", namespace, {"data": {"owner": "you"}})
    wait_for("the fixed ConfigMap to pass", lambda: (result_of(cluster, namespace, bad, name) or {}).get("result")
             == "pass", 60)
    wait_for("the gauge to follow", lambda: gauge(operator, name, "fail") == 0 and gauge(operator, name, "pass") == 2,
             30)

    # A new violating resource is reported within seconds.
    late = make_cm(cluster, namespace, "late", {})
    wait_for("a report for a new resource", lambda: (result_of(cluster, namespace, late, name) or {}).get("result")
             == "fail", 60)

    # Deleting a resource removes its report (owned by the resource).
    core.delete_namespaced_config_map("late", namespace)
    wait_for("the report of a deleted resource to go", lambda: report(cluster, namespace, late) is None, 60)

    # Deleting the policy removes its results.
    policies.api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    wait_for("the policy's results to go", lambda: result_of(cluster, namespace, good, name) is None, 60)
    wait_for("the gauge to drop", lambda: gauge(operator, name, "pass") == 0, 30)


def test_a_policy_labelled_reports_disabled_is_left_out_of_reports(policies: Policies, cluster: Any,
                                                                  namespace: str) -> None:
    """Kyverno's reports controller scans no policy labelled reports.kyverno.io/disabled (any value); vpol's
    scanner neither: its results go when the label comes and come back when it goes."""
    bad = make_cm(cluster, namespace, "bad", {"x": "1"})
    name = policies.create("unreported", owner_policy())
    policies.wait_condition(name, "Ready", "True")
    wait_for("a fail result", lambda: (result_of(cluster, namespace, bad, name) or {}).get("result") == "fail", 60)

    def label(value: str | None) -> None:
        policies.api.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, {
            "metadata": {"labels": {"reports.kyverno.io/disabled": value}}})

    label("")
    wait_for("the labelled policy's results to go", lambda: result_of(cluster, namespace, bad, name) is None, 60)
    # The generated ValidatingAdmissionPolicy carries the label too (not its binding), as Kyverno's builder does.
    admission = client.AdmissionregistrationV1Api(cluster.api_client)
    vap = wait_for("the label on the VAP", lambda: next(
        (v for v in admission.list_validating_admission_policy(label_selector=f"vpol.kyverno.io/policy={name}").items
         if (v.metadata.labels or {}).get("reports.kyverno.io/disabled") == "true"), None), 60)
    binding = admission.read_validating_admission_policy_binding(f"{vap.metadata.name}-binding")
    assert "reports.kyverno.io/disabled" not in (binding.metadata.labels or {})
    label(None)
    wait_for("its results to come back", lambda: (result_of(cluster, namespace, bad, name) or {}).get("result")
             == "fail", 60)


def test_false_match_conditions_leave_no_result(policies: Policies, cluster: Any, namespace: str) -> None:
    skipped = make_cm(cluster, namespace, "skipped", {"x": "1"})
    checked = make_cm(cluster, namespace, "checked", {"x": "1"})
    name = policies.create("mc", owner_policy(matchConditions=[
        {"name": "only-checked", "expression": "object.metadata.name == 'checked'"}]))
    wait_for("the checked one to be reported", lambda: result_of(cluster, namespace, checked, name), 60)
    assert result_of(cluster, namespace, skipped, name) is None


def test_runaway_expression_errors_on_one_resource_and_the_scan_goes_on(policies: Policies, cluster: Any,
                                                                         namespace: str) -> None:
    heavy = make_cm(cluster, namespace, "heavy", {"n": "9000"})
    light = make_cm(cluster, namespace, "light", {"n": "1"})
    runaway = ("lists.range(int(object.data.n)).map(x, lists.range(int(object.data.n)).filter(y, y > x))"
               ".size() >= 0")
    name = policies.create("runaway", owner_policy(validations=[{"expression": runaway}]))
    err = wait_for("an error result for the heavy ConfigMap", lambda: result_of(cluster, namespace, heavy, name),
                   120)
    assert err["result"] == "error", err
    assert re.search(r"time limit|memory", err["message"]), err["message"]
    ok = wait_for("the light ConfigMap's result", lambda: result_of(cluster, namespace, light, name), 60)
    assert ok["result"] == "pass"


def test_restart_rewrites_nothing_unchanged(policies: Policies, cluster: Any, namespace: str,
                                            operator: OperatorProcess) -> None:
    uid = make_cm(cluster, namespace, "stable", {"x": "1"})
    name = policies.create("restart", owner_policy())
    wait_for("a report", lambda: result_of(cluster, namespace, uid, name), 60)
    time.sleep(2)
    rv = report(cluster, namespace, uid)["metadata"]["resourceVersion"]
    operator.stop()
    operator.start()
    time.sleep(8)  # the new process seeds from existing reports and rescans everything
    assert report(cluster, namespace, uid)["metadata"]["resourceVersion"] == rv
    assert result_of(cluster, namespace, uid, name)["result"] == "fail"
    # ...and it did not even evaluate the unchanged ConfigMap again (the report records what
    # its results were computed from)
    evaluations = [line for line in operator.metrics().splitlines()
                   if line.startswith("vpol_policy_results_total{") and f'policy="{name}"' in line]
    assert evaluations == [], evaluations


def test_a_report_the_operator_does_not_know_is_taken_over(policies: Policies, cluster: Any, namespace: str) -> None:
    """A report that exists without our label (left by someone else) is not seeded; the first
    write for its resource (a create) meets it and applies over it instead."""
    uid = make_cm(cluster, namespace, "foreign", {"x": "1"})
    custom = client.CustomObjectsApi(cluster.api_client)
    custom.create_namespaced_custom_object("wgpolicyk8s.io", "v1alpha2", namespace, "policyreports", {
        "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
        "metadata": {"name": f"vpol-{uid}", "annotations": {"vpol.kyverno.io/scan-key": "stale"}},
        "results": [{"policy": "someone-else", "result": "pass", "source": "other"}],
    })
    name = policies.create("takeover", owner_policy())
    fail = wait_for("our result in the existing report", lambda: result_of(cluster, namespace, uid, name), 60)
    assert fail["result"] == "fail"
    r = report(cluster, namespace, uid)
    assert [x["policy"] for x in r["results"]] == [name]
    assert r["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "vpol"
    assert r["metadata"]["annotations"]["vpol.kyverno.io/scan-key"] != "stale"
    assert r["summary"]["fail"] == 1

    # Later writes replace what the first one set (no stale results, key or counts).
    client.CoreV1Api(cluster.api_client).patch_namespaced_config_map("foreign", namespace, {"data": {"owner": "x"}})
    wait_for("the fixed ConfigMap to pass", lambda: (result_of(cluster, namespace, uid, name) or {}).get("result")
             == "pass", 60)
    r = report(cluster, namespace, uid)
    assert [x["result"] for x in r["results"]] == ["pass"] and r["summary"]["fail"] == 0


def test_reports_are_updated_at_vpols_own_version_and_keep_what_others_added(policies: Policies, cluster: Any,
                                                                            namespace: str) -> None:
    """A changed report is replaced (PUT) at the resourceVersion of vpol's last write of it, the cheapest update
    for the API server; once someone else has changed the report, that precondition fails and the write is a
    server-side apply, which keeps their fields."""
    uid = make_cm(cluster, namespace, "versioned", {"x": "1"})
    name = policies.create("versioned", owner_policy())
    wait_for("a fail result", lambda: (result_of(cluster, namespace, uid, name) or {}).get("result") == "fail", 60)
    core = client.CoreV1Api(cluster.api_client)

    def managers() -> list[tuple[str, str]]:
        fields = report(cluster, namespace, uid)["metadata"]["managedFields"]
        return sorted((m["manager"], m["operation"]) for m in fields)

    core.patch_namespaced_config_map("versioned", namespace, {"data": {"owner": "me"}})
    wait_for("the pass result", lambda: (result_of(cluster, namespace, uid, name) or {}).get("result") == "pass", 60)
    # Created, then replaced: vpol's writes, none of them an apply.
    assert managers() == [("vpol", "Update")]

    custom = client.CustomObjectsApi(cluster.api_client)
    custom.patch_namespaced_custom_object("wgpolicyk8s.io", "v1alpha2", namespace, "policyreports", f"vpol-{uid}",
                                          {"metadata": {"labels": {"team": "payments"}}})
    core.patch_namespaced_config_map("versioned", namespace, {"data": {"owner": None}})
    wait_for("the fail result again",
             lambda: (result_of(cluster, namespace, uid, name) or {}).get("result") == "fail", 60)
    r = report(cluster, namespace, uid)
    assert r["metadata"]["labels"]["team"] == "payments", "someone else's label was lost"
    assert r["summary"].get("fail") == 1 and not r["summary"].get("pass")
    assert ("vpol", "Apply") in managers()


def test_a_new_severity_or_category_reaches_reports_and_metrics(policies: Policies, cluster: Any, namespace: str,
                                                               operator: OperatorProcess) -> None:
    """Changing only a policy's severity or category annotations changes no result, but every report holding its
    results says the new ones, and vpol_report_results counts them under the new labels only."""
    uid = make_cm(cluster, namespace, "rated", {"x": "1"})
    name = policies.create("rated", owner_policy())

    def annotate(severity: str, category: str) -> None:
        policies.api.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, {"metadata": {"annotations": {
            "policies.kyverno.io/severity": severity, "policies.kyverno.io/category": category}}})

    def series() -> set[tuple[str, str]]:
        out = set()
        for line in operator.metrics().splitlines():
            if line.startswith("vpol_report_results{") and f'policy="{name}"' in line and \
                    float(line.rsplit(" ", 1)[1]) > 0:
                labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
                out.add((labels["severity"], labels["category"]))
        return out

    annotate("low", "Testing")
    wait_for("a low-severity result", lambda: (result_of(cluster, namespace, uid, name) or {}).get("severity")
             == "low", 60)
    wait_for("the low series", lambda: series() == {("low", "Testing")}, 30)
    annotate("high", "Security")
    wait_for("the high-severity result", lambda: (result_of(cluster, namespace, uid, name) or {}).get("severity")
             == "high", 60)
    r = result_of(cluster, namespace, uid, name)
    assert (r["result"], r["category"]) == ("fail", "Security")
    wait_for("only the new series", lambda: series() == {("high", "Security")}, 30)


def test_metrics_carry_no_created_series(policies: Policies, cluster: Any, namespace: str,
                                        operator: OperatorProcess) -> None:
    """The operator's counters and histograms are served without prometheus_client's ``_created`` series (one more
    series per labelled child, which nothing reads)."""
    uid = make_cm(cluster, namespace, "counted", {"x": "1"})
    name = policies.create("counted", owner_policy())
    wait_for("a result", lambda: result_of(cluster, namespace, uid, name) is not None, 60)

    def served() -> set[str]:
        """The sample names served, once the counter and the histogram have children."""
        names = {re.split(r"[{ ]", line, maxsplit=1)[0] for line in operator.metrics().splitlines()
                 if line and not line.startswith("#")}
        return names if {"vpol_policy_results_total", "vpol_scan_duration_seconds_count"} <= names else set()

    names = wait_for("the policy's evaluations counted", served, 30)
    assert sorted(n for n in names if n.endswith("_created")) == []


def kyverno_report(uid: str, namespace: str, name: str, managed_by: str, source: str) -> dict[str, Any]:
    """A report as Kyverno's reports controller writes it for a resource: named by its bare UID."""
    return {
        "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
        "metadata": {"name": uid, "labels": {"app.kubernetes.io/managed-by": managed_by}},
        "scope": {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "namespace": namespace, "uid": uid},
        "summary": {"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0},
        "results": [{"policy": "require-labels", "result": "pass", "source": source, "scored": True,
                     "message": "success", "timestamp": {"seconds": 1, "nanos": 0}}],
    }


def test_kyvernos_report_about_the_same_resource_is_left_alone(policies: Policies, cluster: Any,
                                                                 namespace: str) -> None:
    """Kyverno names its report about a resource by the resource's UID; vpol's is vpol-<UID>, so both tools
    report on one cluster without overwriting each other (Policy Reporter shows both)."""
    uid = make_cm(cluster, namespace, "shared", {"x": "1"})
    custom = client.CustomObjectsApi(cluster.api_client)
    custom.create_namespaced_custom_object("wgpolicyk8s.io", "v1alpha2", namespace, "policyreports",
                                           kyverno_report(uid, namespace, "shared", "kyverno",
                                                          "KyvernoValidatingPolicy"))
    name = policies.create("beside-kyverno", owner_policy())
    wait_for("vpol's report", lambda: result_of(cluster, namespace, uid, name), 60)
    client.CoreV1Api(cluster.api_client).patch_namespaced_config_map("shared", namespace, {"data": {"owner": "x"}})
    wait_for("vpol's report to follow", lambda: (result_of(cluster, namespace, uid, name) or {}).get("result")
             == "pass", 60)
    theirs = report(cluster, namespace, uid, name=uid)
    assert theirs is not None and [r["source"] for r in theirs["results"]] == ["KyvernoValidatingPolicy"]
    assert theirs["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kyverno"}
    assert "managedFields" not in theirs["metadata"] or all(
        f["manager"] != "vpol" for f in theirs["metadata"]["managedFields"])


def test_a_report_an_older_vpol_named_by_the_uid_is_replaced(policies: Policies, cluster: Any, namespace: str,
                                                              operator: OperatorProcess) -> None:
    uid = make_cm(cluster, namespace, "legacy", {"x": "1"})
    name = policies.create("legacy", owner_policy())
    wait_for("vpol's report", lambda: result_of(cluster, namespace, uid, name), 60)
    operator.stop()
    custom = client.CustomObjectsApi(cluster.api_client)
    custom.delete_namespaced_custom_object("wgpolicyk8s.io", "v1alpha2", namespace, "policyreports", f"vpol-{uid}")
    legacy = kyverno_report(uid, namespace, "legacy", "vpol", "vpol")
    legacy["results"] = [{"policy": name, "result": "fail", "source": "vpol", "scored": True,
                          "message": "an owner key is required", "properties": {"validation": "0"},
                          "timestamp": {"seconds": 1, "nanos": 0}}]
    custom.create_namespaced_custom_object("wgpolicyk8s.io", "v1alpha2", namespace, "policyreports", legacy)
    operator.start()
    wait_for("the legacy report to go", lambda: report(cluster, namespace, uid, name=uid) is None, 60)
    result = wait_for("the result under vpol's name", lambda: result_of(cluster, namespace, uid, name), 60)
    assert result["result"] == "fail"
    assert result["properties"] == {"cel.validationIndex": "0", "process": "background scan"}


def test_kyverno_io_libraries_in_background_scans(policies: Policies, cluster: Any, namespace: str) -> None:
    """resource.Get reads the cluster; http.* is off unless allowlisted (globalContext: test_global_context.py)."""
    make_cm(cluster, namespace, "settings", {"required": "team"})
    target = make_cm(cluster, namespace, "target", {"team": "a"})
    lookup = ("resource.Get('v1', 'configmaps', object.metadata.namespace, 'settings').data.required "
              "in object.data")
    name = policies.create("lookup", owner_policy(
        validations=[{"expression": lookup, "message": "missing the required key"}],
        matchConditions=[{"name": "target-only", "expression": "object.metadata.name == 'target'"}]))
    wait_for("a pass through resource.Get", lambda: (result_of(cluster, namespace, target, name) or {}).get("result")
             == "pass", 60)
    client.CoreV1Api(cluster.api_client).patch_namespaced_config_map("settings", namespace,
                                                                     {"data": {"required": "owner"}})
    # The settings change is not an event on the target: a later evaluation of the target sees it
    # (lookups are cached for a few seconds), so touch the target until it does.
    touch_until("a fail after the looked-up object changed",
                lambda n: client.CoreV1Api(cluster.api_client).patch_namespaced_config_map(
                    "target", namespace, {"metadata": {"labels": {"touched": str(n)}}}),
                lambda: (result_of(cluster, namespace, target, name) or {}).get("result") == "fail")

    # An object that does not exist is null (Kyverno's answer to NotFound), not an error.
    absent = policies.create("absent", owner_policy(
        validations=[{"expression": "resource.Get('v1', 'configmaps', object.metadata.namespace, 'absent') == null"}],
        matchConditions=[{"name": "target-only", "expression": "object.metadata.name == 'target'"}]))
    res = wait_for("a result for a lookup of a missing object",
                   lambda: result_of(cluster, namespace, target, absent), 60)
    assert res["result"] == "pass", res

    http_policy = policies.create("http", owner_policy(
        validations=[{"expression": "http.Get('http://127.0.0.1:9/x').ok == true"}],
        matchConditions=[{"name": "target-only", "expression": "object.metadata.name == 'target'"}]))
    res = wait_for("an error for a disabled http call", lambda: result_of(cluster, namespace, target, http_policy), 60)
    assert res["result"] == "error" and "disabled" in res["message"], res


def test_the_scanner_hears_of_policy_changes_through_its_own_watch(policies: Policies, cluster: Any,
                                                                   namespace: str) -> None:
    """Policy changes reach background scans straight from the API server's watch, not only through the operator's
    Kopf handlers and reconciles (which reach it later under load, delaying the pass a burst of policies starts):
    a scanner of its own, with no operator process telling it anything, learns of a created, changed and deleted
    policy."""
    from vpol.controller.scanner import Scanner

    scanner = Scanner(cluster.api_client, backend=None, discovery=None)  # type: ignore[arg-type]
    scanner.watches.watch_policies(scanner._on_policy_object)
    try:
        for w in scanner.watches.policy_watchers():
            assert w.synced.wait(30), f"the scanner's watch of {w.gvr} did not start"
        name = policies.create("watched", owner_policy())
        wait_for("the scanner to hold the new policy", lambda: scanner.validation.get(name) is not None, 30, 0.1)
        changed = owner_policy(validations=[{"expression": "has(object.data)", "message": "data is required"}])
        policies.replace_spec(name, changed)
        wait_for("the scanner to hold the changed spec",
                 lambda: [v.expression for v in scanner.validation.named()[name].spec.validations] == ["has(object.data)"],
                 30, 0.1)
        policies.api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        wait_for("the scanner to drop the deleted policy", lambda: scanner.validation.get(name) is None, 30, 0.1)
    finally:
        scanner.watches.stop()

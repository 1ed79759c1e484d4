"""`vpol check`, `vpol apply` and `vpol test` with GeneratingPolicies and DeletingPolicies, on the differential
suites (tests/differential/suites/{generating,deleting,generating-namespaced}) and variations of them
(docs/internals/generating-and-deleting.md, "The CLI")."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from vpol.cli.main import main

REPO = Path(__file__).resolve().parents[3]
SUITES = REPO / "tests" / "differential" / "suites"
GENERATING, DELETING, NAMESPACED = SUITES / "generating", SUITES / "deleting", SUITES / "generating-namespaced"
Capture = pytest.CaptureFixture[str]


def copy_suite(suite: Path, tmp_path: Path) -> Path:
    target = tmp_path / suite.name
    shutil.copytree(suite, target)
    return target


def edit_yaml(path: Path, change: Any) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    change(docs)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


# --- vpol check ---------------------------------------------------------------------------------------------------


def test_check_accepts_the_suites_policies(capsys: Capture) -> None:
    paths = [str(s / "policies.yaml") for s in (GENERATING, DELETING, NAMESPACED)]
    assert main(["check", *paths]) == 0
    out = capsys.readouterr().out
    # 7 GeneratingPolicies, 4 DeletingPolicies, 2 NamespacedGeneratingPolicies.
    assert out.strip().splitlines()[-1] == "13 policies checked: 13 valid, 0 invalid (0 errors, 0 warnings)"


BROKEN = textwrap.dedent("""\
    apiVersion: policies.kyverno.io/v1
    kind: GeneratingPolicy
    metadata:
      name: bad-gen
    spec:
      matchConstraints:
        resourceRules:
          - apiGroups: [""]
            apiVersions: [v1]
            operations: [CREATE]
            resources: [namespaces]
      generate:
        - expression: 'generator.Apply([{"a": 1}])'
        - template:
            interpolate: cel
            value: |
              apiVersion: v1
              kind: ConfigMap
              metadata:
                name: pre-((object.metadata.name +))
    ---
    apiVersion: policies.kyverno.io/v1
    kind: DeletingPolicy
    metadata:
      name: bad-del
    spec:
      schedule: "* * *"
      matchConstraints:
        resourceRules:
          - apiGroups: [""]
            apiVersions: [v1]
            operations: ["*"]
            resources: [pods]
    ---
    apiVersion: policies.kyverno.io/v1
    kind: NamespacedGeneratingPolicy
    metadata:
      name: calls-out
      namespace: team
    spec:
      matchConstraints:
        resourceRules:
          - apiGroups: [""]
            apiVersions: [v1]
            operations: [CREATE]
            resources: [configmaps]
      generate:
        - expression: 'http.Get("https://example.com") != null'
    """)


def test_check_reports_every_refusal_where_it_is(tmp_path: Path, capsys: Capture) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    schedule = next(line for line in lines if "bad-del" in line)
    assert schedule.startswith(f"{path}:27:")  # the line of `schedule:`
    assert schedule.endswith(": error: DeletingPolicy/bad-del spec.schedule: schedule spec in the deletingPolicy is "
                             "not in proper cron format: missing field(s)")
    apply = next(line for line in lines if "spec.generate[0].expression" in line)
    assert apply.startswith(f"{path}:13:") and "GeneratingPolicy/bad-gen spec.generate[0].expression at 1:16: " \
                                                 "found no matching overload for 'Apply'" in apply
    template = next(line for line in lines if "spec.generate[1].template.value" in line)
    # Line 4 of the template (`  name: pre-((object.metadata.name +))`), column 37: the end of the expression
    # (which starts at column 15), where cel-go reports the missing operand.
    assert "GeneratingPolicy/bad-gen spec.generate[1].template.value at 4:37: invalid placeholder expression " \
           "'object.metadata.name +'" in template
    forbidden = next(line for line in lines if "calls-out" in line)
    assert "NamespacedGeneratingPolicy/team/calls-out spec.generate[0].expression" in forbidden
    assert forbidden.endswith("http.* is not allowed in namespaced policies; set --allowHTTPInNamespacedPolicies "
                              "to enable")
    assert lines[-1] == "3 policies checked: 0 valid, 3 invalid (4 errors, 0 warnings)"


# --- vpol test ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("suite", "agreed"), [
    # One row per generated object, else one per trigger (docs, "The CLI", comparison): generating has 12 results
    # and 18 rows (clone-shared-config and quota-template make 3 objects each), deleting 12 rows, the namespaced
    # suite 3 (team-defaults makes a LimitRange and, through Kyverno's CLI's fake context, a ClusterRole).
    (GENERATING, 18), (DELETING, 12), (NAMESPACED, 3),
])
def test_test_agrees_with_the_suites(suite: Path, agreed: int, capsys: Capture) -> None:
    assert main(["test", str(suite)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("OK ")
    assert out.splitlines()[-1] == f"{agreed} agreed, 0 disagreed, 0 unsupported (1 tests, 0 failed)"


def test_test_reports_a_wrong_deletion_result(tmp_path: Path, capsys: Capture) -> None:
    suite = copy_suite(DELETING, tmp_path)

    def change(docs: list[Any]) -> None:
        docs[0]["results"][0]["result"] = "fail"  # expired-test-pods would delete old-runner

    edit_yaml(suite / "kyverno-test.yaml", change)
    assert main(["test", str(suite)]) == 1
    out = capsys.readouterr().out
    assert "DISAGREE  expired-test-pods Pod old-runner: expected fail, got pass (resource matched)" in out
    assert out.splitlines()[-1] == "11 agreed, 1 disagreed, 0 unsupported (1 tests, 1 failed)"


def test_test_refuses_an_operation_for_a_deleting_policy(tmp_path: Path, capsys: Capture) -> None:
    suite = copy_suite(DELETING, tmp_path)

    def change(docs: list[Any]) -> None:
        docs[0]["results"] = [{"policy": "finished-jobs", "isDeletingPolicy": True, "kind": "Job",
                               "resources": ["nightly"], "operation": "CREATE", "result": "pass"}]

    edit_yaml(suite / "kyverno-test.yaml", change)
    assert main(["test", str(suite)]) == 1
    assert "operation is not supported for deleting policies" in capsys.readouterr().out


def test_test_compares_generated_objects(tmp_path: Path, capsys: Capture) -> None:
    suite = copy_suite(GENERATING, tmp_path)

    def change(docs: list[Any]) -> None:
        docs[0]["metadata"]["labels"]["tier"] = "changed"  # the NetworkPolicy default-deny makes in team-a

    edit_yaml(suite / "generated.yaml", change)
    assert main(["test", str(suite)]) == 1
    out = capsys.readouterr().out
    assert "DISAGREE  default-deny Namespace team-a -> NetworkPolicy/team-a/default-deny: expected pass, got pass" \
           in out
    assert "-    tier: changed" in out and "+    tier: baseline" in out
    # The same object, generated for kube-extra, still agrees.
    assert "DISAGREE  default-deny Namespace kube-extra" not in out


def test_test_ignores_generate_labels_and_empty_values(tmp_path: Path, capsys: Capture) -> None:
    suite = copy_suite(GENERATING, tmp_path)

    def change(docs: list[Any]) -> None:
        md = docs[0]["metadata"]
        md["labels"]["generate.kyverno.io/policy-name"] = "anything"
        md["labels"]["app.kubernetes.io/managed-by"] = "kyverno"
        md["annotations"] = {}
        docs[0]["spec"]["ingress"] = []

    edit_yaml(suite / "generated.yaml", change)
    assert main(["test", str(suite)]) == 0
    assert "0 disagreed" in capsys.readouterr().out


def test_test_needs_the_generated_object_in_the_file(tmp_path: Path, capsys: Capture) -> None:
    suite = copy_suite(GENERATING, tmp_path)
    edit_yaml(suite / "generated.yaml",
              lambda docs: docs.remove(next(d for d in docs if d["metadata"]["name"] == "readme")))
    assert main(["test", str(suite)]) == 1
    out = capsys.readouterr().out
    assert "quota-template Namespace team-a -> ConfigMap/default/readme" in out
    assert "resource with name readme not found" in out


def test_test_compares_the_result_of_a_generation_without_objects(tmp_path: Path, capsys: Capture) -> None:
    suite = copy_suite(GENERATING, tmp_path)

    def change(docs: list[Any]) -> None:
        for result in docs[0]["results"]:
            if result["policy"] == "labels-required" and result["resources"] == ["kube-extra"]:
                result["result"] = "pass"

    edit_yaml(suite / "kyverno-test.yaml", change)
    assert main(["test", str(suite)]) == 1
    assert "DISAGREE  labels-required Namespace kube-extra: expected pass, got error (failed to evaluate policy: " \
           "no such key: labels)" in capsys.readouterr().out


# --- vpol apply ---------------------------------------------------------------------------------------------------


def apply_json(capsys: Capture, *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    code = main(["apply", *argv, "-o", "json", "--no-progress"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def test_apply_generating_policies(capsys: Capture) -> None:
    code, rows, err = apply_json(capsys, "-p", str(GENERATING / "policies.yaml"), "-r",
                                 str(GENERATING / "resources.yaml"), "--context", str(GENERATING / "context.yaml"),
                                 "-e", str(GENERATING / "exceptions.yaml"))
    assert code == 1  # labels-required fails to evaluate on two triggers
    by = {(r["policy"], r["name"]): r for r in rows}
    deny = by[("default-deny", "team-a")]
    assert (deny["result"], deny["message"]) == ("pass", "policy evaluated successfully")
    [policy] = deny["generatedResources"]
    # As vpol's operator writes it: placed in the trigger's namespace, with Kyverno's labels.
    assert policy["metadata"]["namespace"] == "team-a"
    assert policy["metadata"]["labels"] == {
        "tier": "baseline", "app.kubernetes.io/managed-by": "kyverno",
        "generate.kyverno.io/policy-name": "default-deny", "generate.kyverno.io/trigger-name": "team-a",
        "generate.kyverno.io/trigger-namespace": "", "generate.kyverno.io/trigger-uid": "",
        "generate.kyverno.io/trigger-kind": "Namespace", "generate.kyverno.io/trigger-group": "",
        "generate.kyverno.io/trigger-version": "v1"}
    # In a cluster an exception applies to the policy it names only.
    assert by[("default-deny", "sandbox-1")]["result"] == "skip"
    assert by[("default-deny", "sandbox-1")]["generatedResources"] == []
    assert by[("clone-pull-secret", "sandbox-1")]["result"] == "pass"
    assert (by[("labels-required", "kube-extra")]["result"],
            by[("labels-required", "kube-extra")]["message"]) == ("error", "failed to evaluate policy: no such key: "
                                                                           "labels")
    clones = by[("clone-shared-config", "team-a")]["generatedResources"]
    assert sorted(c["metadata"]["name"] for c in clones) == ["ca-bundle", "private", "proxy"]
    # Not a trigger of clone-shared-config (its objectSelector).
    assert ("clone-shared-config", "kube-extra") not in by
    assert err.strip().splitlines()[-1] == "11 pass, 0 fail, 0 warn, 2 error, 1 skip"


def test_apply_prints_generated_objects_in_a_table(tmp_path: Path, capsys: Capture) -> None:
    policies = tmp_path / "policies.yaml"
    policies.write_text(yaml.safe_dump(next(d for d in yaml.safe_load_all((GENERATING / "policies.yaml").read_text())
                                            if d["metadata"]["name"] == "default-deny")))
    code = main(["apply", "-p", str(policies), "-r", str(GENERATING / "resources.yaml"), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("generated:\n")
    generated = [d for d in yaml.safe_load_all(out.split("POLICY ")[0].removeprefix("generated:\n")) if d]
    assert [(d["kind"], d["metadata"]["namespace"]) for d in generated] == [
        ("NetworkPolicy", "team-a"), ("NetworkPolicy", "sandbox-1"), ("NetworkPolicy", "kube-extra")]
    assert "default-deny  Namespace/team-a" in out and "PASS" in out


def test_apply_namespaced_generating_policies(capsys: Capture) -> None:
    code, rows, _err = apply_json(capsys, "-p", str(NAMESPACED / "policies.yaml"), "-r",
                                  str(NAMESPACED / "resources.yaml"))
    assert code == 1
    # Only the ConfigMap of the policies' namespace is a trigger.
    assert sorted((r["policy"], r["namespace"], r["name"]) for r in rows) == [
        ("team/team-defaults", "team", "settings"), ("team/team-secret", "team", "settings")]
    by = {r["policy"]: r for r in rows}
    assert by["team/team-secret"]["result"] == "pass"
    [secret] = by["team/team-secret"]["generatedResources"]
    assert (secret["kind"], secret["metadata"]["namespace"]) == ("Secret", "team")
    assert secret["metadata"]["labels"]["generate.kyverno.io/policy-name"] == "team-secret"
    defaults = by["team/team-defaults"]
    assert defaults["result"] == "error"
    assert defaults["message"] == ('failed to evaluate policy: cross-scope generation denied: a policy scoped to '
                                   'namespace "team" cannot generate cluster-scoped resource '
                                   'rbac.authorization.k8s.io/v1/ClusterRole')
    # The template's LimitRange came first: written before the failure.
    assert [o["kind"] for o in defaults["generatedResources"]] == ["LimitRange"]


def deleting_args(policies: Path | None = None) -> list[str]:
    return ["-p", str(policies or DELETING / "policies.yaml"), "-r", str(DELETING / "resources.yaml"),
            "-f", str(DELETING / "values.yaml"), "-e", str(DELETING / "exceptions.yaml")]


def test_apply_deleting_policies(capsys: Capture) -> None:
    code, rows, err = apply_json(capsys, *deleting_args())
    assert code == 1  # owner-annotation fails to evaluate on debug-shell
    got = {(r["policy"], r["name"]): (r["result"], r["message"]) for r in rows}
    assert all(r["deletion"] is True for r in rows)
    assert got == {
        ("expired-test-pods", "old-runner"): ("pass", "resource matched"),
        ("expired-test-pods", "fresh-runner"): ("fail", "resource did not match"),
        ("expired-test-pods", "debug-shell"): ("fail", "resource did not match"),  # the exception
        ("expired-test-pods", "api"): ("fail", "resource did not match"),  # a prod namespace
        ("owner-annotation", "old-runner"): ("pass", "resource matched"),
        ("owner-annotation", "fresh-runner"): ("fail", "resource did not match"),
        ("owner-annotation", "debug-shell"): ("error", "no such key: annotations"),
        ("owner-annotation", "api"): ("fail", "resource did not match"),
        ("finished-jobs", "nightly"): ("pass", "resource matched"),
        ("finished-jobs", "running"): ("fail", "resource did not match"),
        ("labelled-temporary", "scratch"): ("pass", "resource matched"),
        ("labelled-temporary", "preview"): ("pass", "resource matched"),
    }
    # keep-me is excluded, settings is not labelled temporary: no row. Deletions are not counted as results.
    assert err.strip().splitlines()[-1] == "0 pass, 0 fail, 0 warn, 0 error, 0 skip; 5 to delete, 6 kept"


def test_apply_keeping_objects_is_no_failure(tmp_path: Path, capsys: Capture) -> None:
    policies = tmp_path / "policies.yaml"
    docs = [d for d in yaml.safe_load_all((DELETING / "policies.yaml").read_text())
            if d["metadata"]["name"] != "owner-annotation"]
    policies.write_text(yaml.safe_dump_all(docs))
    code, rows, err = apply_json(capsys, *deleting_args(policies))
    assert code == 0
    assert "fail" in {r["result"] for r in rows} and "error" not in {r["result"] for r in rows}
    assert err.strip().endswith("; 4 to delete, 4 kept")

"""The vpol CLI end to end (in-process): exit codes, output formats, and clear errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vpol.cli.main import main

POLICY = textwrap.dedent("""\
    apiVersion: policies.kyverno.io/v1
    kind: ValidatingPolicy
    metadata:
      name: no-host-network
    spec:
      matchConstraints:
        resourceRules:
        - apiGroups: [""]
          apiVersions: [v1]
          operations: [CREATE, UPDATE]
          resources: [pods]
      validations:
      - expression: "!has(object.spec.hostNetwork) || object.spec.hostNetwork == false"
        message: host network is not allowed
    """)

RESOURCES = textwrap.dedent("""\
    apiVersion: v1
    kind: Pod
    metadata: {name: good, namespace: a}
    spec: {containers: [{name: c, image: nginx:1}]}
    ---
    apiVersion: v1
    kind: Pod
    metadata: {name: bad, namespace: a}
    spec: {hostNetwork: true, containers: [{name: c, image: nginx:1}]}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web, namespace: a}
    spec:
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec: {hostNetwork: true, containers: [{name: c, image: nginx:1}]}
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: unrelated, namespace: a}
    """)


def write(tmp: Path, name: str, text: str) -> str:
    p = tmp / name
    p.write_text(text)
    return str(p)


def test_apply_json_output_includes_autogen_results(tmp_path, capsys):
    code = main(["apply", "-p", write(tmp_path, "p.yaml", POLICY), "-r", write(tmp_path, "r.yaml", RESOURCES),
                 "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1  # a violation
    got = {(r["kind"], r["name"]): r["result"] for r in out}
    assert got == {("Pod", "good"): "pass", ("Pod", "bad"): "fail", ("Deployment", "web"): "fail"}
    bad = next(r for r in out if r["name"] == "bad")
    assert bad == {"policy": "no-host-network", "apiVersion": "v1", "kind": "Pod", "namespace": "a", "name": "bad",
                   "result": "fail", "message": "host network is not allowed"}


def test_apply_exit_zero_when_everything_passes(tmp_path, capsys):
    good = RESOURCES.split("---")[0]
    code = main(["apply", "-p", write(tmp_path, "p.yaml", POLICY), "-r", write(tmp_path, "r.yaml", good),
                 "-o", "yaml"])
    assert code == 0
    assert "result: pass" in capsys.readouterr().out


def test_apply_delete_operation(tmp_path, capsys):
    policy = POLICY.replace("operations: [CREATE, UPDATE]", "operations: [DELETE]").replace(
        '"!has(object.spec.hostNetwork) || object.spec.hostNetwork == false"',
        "oldObject.metadata.name != 'bad'")
    code = main(["apply", "-p", write(tmp_path, "p.yaml", policy), "-r", write(tmp_path, "r.yaml", RESOURCES),
                 "--operation", "DELETE", "-o", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and {r["name"]: r["result"] for r in out if r["kind"] == "Pod"} == {"good": "pass", "bad": "fail"}


def test_check_valid_and_invalid(tmp_path, capsys):
    assert main(["check", write(tmp_path, "ok.yaml", POLICY)]) == 0
    broken = POLICY.replace("object.spec.hostNetwork == false\"", "object.spec.hostNetwork ==\"")
    path = write(tmp_path, "broken.yaml", broken)
    assert main(["check", path]) == 1
    out = capsys.readouterr().out
    # file:line:col of the error inside the file, policy, field path, CEL position, caret
    assert f"{path}:13:" in out
    assert "ValidatingPolicy/no-host-network spec.validations[0].expression at 1:" in out
    assert "^" in out


def test_check_reports_type_warnings_without_failing(tmp_path, capsys):
    typo = POLICY.replace("object.spec.hostNetwork == false", "object.spec.hostNetwrok == false")
    assert main(["check", write(tmp_path, "w.yaml", typo)]) == 0
    out = capsys.readouterr().out
    assert "warning" in out and "/v1, Kind=Pod: ERROR:" in out and "hostNetwrok" in out


def test_check_directory_skips_non_policy_documents(tmp_path, capsys):
    write(tmp_path, "p.yaml", POLICY)
    write(tmp_path, "r.yaml", RESOURCES)
    assert main(["check", str(tmp_path)]) == 0


@pytest.mark.parametrize("text, fragment", [
    ("a: [1,\n", "invalid YAML"),
    ("apiVersion: policies.kyverno.io/v7\nkind: ValidatingPolicy\nmetadata: {name: x}\nspec: {}\n",
     "unsupported apiVersion"),
    ("apiVersion: policies.kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: x}\n", "unsupported policies.kyverno.io object"),
    ("apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: x}\n", "spec: required field is missing"),
    ("apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: x}\nspec:\n  validations: 3\n",
     "spec.validations: must be a list"),
])
def test_bad_input_is_a_clear_error_never_a_traceback(tmp_path, capsys, text, fragment):
    path = write(tmp_path, "bad.yaml", text)
    code = main(["check", path])
    captured = capsys.readouterr()
    text_out = captured.out + captured.err
    assert code in (1, 2)
    assert "Traceback" not in text_out
    assert path in text_out
    assert fragment in text_out


def test_missing_file_is_exit_2(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().out  # check says everything on stdout


def test_megabyte_expression_and_deep_nesting(tmp_path, capsys):
    huge = POLICY.replace('"!has(object.spec.hostNetwork) || object.spec.hostNetwork == false"',
                          '"' + " || ".join(["true"] * 250_000) + '"')
    assert len(huge) > 1_000_000
    assert main(["check", write(tmp_path, "huge.yaml", huge)]) == 1
    assert "characters long" in capsys.readouterr().out
    deep = POLICY.replace('"!has(object.spec.hostNetwork) || object.spec.hostNetwork == false"',
                          '"' + "[" * 300 + "1" + "]" * 300 + ' != null"')
    assert main(["check", write(tmp_path, "deep.yaml", deep)]) == 1
    assert "nests deeper" in capsys.readouterr().out


def test_runtime_explosion_is_an_error_result(tmp_path, capsys):
    boom = POLICY.replace('"!has(object.spec.hostNetwork) || object.spec.hostNetwork == false"',
                          '"lists.range(9000).map(x, lists.range(9000).filter(y, y > x)).size() > 0"')
    code = main(["apply", "-p", write(tmp_path, "p.yaml", boom), "-r", write(tmp_path, "r.yaml", RESOURCES),
                 "-o", "json", "--timeout", "0.3"])  # the iteration budget takes ~1 s: the deadline comes first
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert all(r["result"] == "error" for r in out) and "time limit" in out[0]["message"]


def test_test_command_reports_disagreement(tmp_path, capsys):
    write(tmp_path, "policy.yaml", POLICY)
    write(tmp_path, "resources.yaml", RESOURCES)
    test = textwrap.dedent("""\
        apiVersion: cli.kyverno.io/v1alpha1
        kind: Test
        metadata: {name: t}
        policies: [policy.yaml]
        resources: [resources.yaml]
        results:
        - {policy: no-host-network, kind: Pod, resources: [good], result: pass}
        - {policy: no-host-network, kind: Deployment, resources: [web], result: pass}
        """)
    write(tmp_path, "kyverno-test.yaml", test)
    assert main(["test", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "DISAGREE" in out and "expected pass, got fail" in out
    write(tmp_path, "kyverno-test.yaml", test.replace("resources: [web], result: pass", "resources: [web], result: fail"))
    assert main(["test", str(tmp_path)]) == 0


def test_generate_vap_prints_objects(tmp_path, capsys):
    assert main(["generate", "vap", write(tmp_path, "p.yaml", POLICY)]) == 0
    out = capsys.readouterr().out
    assert "kind: ValidatingAdmissionPolicy\n" in out and "name: vpol-no-host-network-autogen-cronjobs" in out


def test_namespaced_policy_applies_only_in_its_namespace(capsys):
    # Kyverno's CLI evaluates a NamespacedValidatingPolicy on every namespace; vpol, like Kyverno's webhook,
    # only on its own (the documented deviation of tests/differential/deviations.yaml)
    example = Path(__file__).resolve().parents[3] / "examples" / "namespaced"
    code = main(["apply", "-p", str(example / "policy.yaml"), "-r", str(example / "resources.yaml"), "-o", "json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 1
    assert {(r["namespace"], r["name"], r["result"]) for r in rows} == {("team-a", "labelled", "pass"),
                                                                       ("team-a", "unlabelled", "fail")}


def test_check_reports_global_context_entries_with_kyvernos_rules(tmp_path: Path) -> None:
    bad = tmp_path / "gce.yaml"
    bad.write_text("apiVersion: kyverno.io/v2\nkind: GlobalContextEntry\nmetadata: {name: e}\nspec:\n"
                   "  kubernetesResource: {version: v1, resource: configmaps}\n"
                   "  apiCall: {urlPath: /api/v1/configmaps}\n")
    proc = subprocess.run([sys.executable, "-m", "vpol.cli.main", "check", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and "GlobalContextEntry/e spec.kubernetesResource" in proc.stdout, proc.stdout
    bad.write_text("apiVersion: kyverno.io/v2\nkind: GlobalContextEntry\nmetadata: {name: e}\nspec:\n"
                   "  kubernetesResource: {version: v1, resource: configmaps}\n")
    proc = subprocess.run([sys.executable, "-m", "vpol.cli.main", "check", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 0 and "1 valid" in proc.stdout, proc.stdout + proc.stderr

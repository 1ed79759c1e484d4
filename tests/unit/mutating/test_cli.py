"""`vpol check/apply/test/generate map` with MutatingPolicies, on the examples (verified with Kyverno's CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vpol.cli.main import main

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples" / "mutating"


def test_examples_check_and_test_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLES)]) == 0
    assert main(["test", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert " 0 disagreed" in out and "FAILED" not in out


def test_test_compares_patched_resources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = next(p for p in sorted(EXAMPLES.iterdir()) if (p / "patched.yaml").exists())
    copy = tmp_path / folder.name
    subprocess.run(["cp", "-r", str(folder), str(copy)], check=True)
    patched = list(yaml.safe_load_all((copy / "patched.yaml").read_text()))
    for doc in patched:
        if doc:
            doc.setdefault("metadata", {}).setdefault("annotations", {})["changed-by-test"] = "yes"
    (copy / "patched.yaml").write_text(yaml.safe_dump_all(patched))
    assert main(["test", str(copy)]) == 1
    assert "differs from patchedResources" in capsys.readouterr().out


def test_apply_prints_mutated_resources_then_validates_them(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    policy = EXAMPLES / "set-run-as-non-root" / "policy.yaml"
    validating = tmp_path / "require-non-root.yaml"
    validating.write_text("""
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: require-non-root}
spec:
  matchConstraints: {resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
  validations:
  - expression: object.spec.containers.all(c, c.?securityContext.?runAsNonRoot.orValue(false) == true)
""")
    resource = tmp_path / "pod.yaml"
    resource.write_text("""
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: app, image: nginx:1.27}]
""")
    # Without the mutation the validating policy fails; with it, it sees the mutated Pod and passes.
    assert main(["apply", "-p", str(validating), "-r", str(resource), "-o", "json"]) == 1
    capsys.readouterr()
    assert main(["apply", "-p", str(policy), str(validating), "-r", str(resource), "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["result"] for r in rows] == ["pass", "pass"]
    mutated = rows[0]["patchedResource"]
    assert mutated["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] is True
    assert main(["apply", "-p", str(policy), "-r", str(resource), "--diff"]) == 0
    assert "+    securityContext:" in capsys.readouterr().out


def test_json_rows_carry_the_mutated_resource_even_without_a_namespace(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    policy = EXAMPLES / "set-run-as-non-root" / "policy.yaml"
    resource = tmp_path / "pods.yaml"
    resource.write_text("""
apiVersion: v1
kind: Pod
metadata: {name: no-namespace}
spec:
  containers: [{name: app, image: nginx:1.27}]
---
apiVersion: v1
kind: Pod
metadata: {name: no-namespace, namespace: other}
spec:
  containers: [{name: app, image: nginx:1.27, securityContext: {runAsNonRoot: false}}]
""")
    assert main(["apply", "-p", str(policy), "-r", str(resource), "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["namespace"], r["patchedResource"]["metadata"].get("namespace")) for r in rows] == \
        [("default", "default"), ("other", "other")]
    assert all(r["patchedResource"]["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] is True for r in rows)


def test_generate_map(capsys: pytest.CaptureFixture[str]) -> None:
    policy = EXAMPLES / "set-run-as-non-root" / "policy.yaml"
    assert main(["generate", "map", str(policy)]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
    name = yaml.safe_load(policy.read_text())["metadata"]["name"]
    assert ("MutatingAdmissionPolicy", f"mpol-{name}") in kinds
    assert ("MutatingAdmissionPolicyBinding", f"mpol-{name}-binding") in kinds
    assert ("MutatingAdmissionPolicy", f"mpol-{name}-autogen-defaults") in kinds
    first = docs[0]
    assert first["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert first["spec"]["mutations"] and first["spec"]["reinvocationPolicy"] in ("Never", "IfNeeded")


def test_crd_is_generated_from_the_validating_one() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "crds" / "generate-mutating.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    crd = next(d for d in yaml.safe_load_all((REPO / "crds" / "mutatingpolicies.yaml").read_text()) if d)
    assert [(v["name"], v["storage"]) for v in crd["spec"]["versions"]] == [
        ("v1", False), ("v1beta1", True), ("v1alpha1", False)]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {"mutations", "reinvocationPolicy", "matchConstraints", "variables"} <= set(spec)
    assert "validations" not in spec


def test_a_resource_missing_from_patched_resources_is_not_checked_unless_required(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = EXAMPLES / "add-default-team-label"
    copy = tmp_path / folder.name
    subprocess.run(["cp", "-r", str(folder), str(copy)], check=True)
    (copy / "patched.yaml").write_text("")  # nothing expected: every result would be "missing"
    test = yaml.safe_load((copy / "kyverno-test.yaml").read_text())
    for result in test["results"]:
        if "patchedResources" in result:
            result["failOnMissingResources"] = False
            result["result"] = "fail"  # a wrong expectation that Kyverno's CLI does not check either
    (copy / "kyverno-test.yaml").write_text(yaml.safe_dump(test))
    assert main(["test", str(copy)]) == 0
    capsys.readouterr()
    for result in test["results"]:
        if "patchedResources" in result:
            result["failOnMissingResources"] = True
    (copy / "kyverno-test.yaml").write_text(yaml.safe_dump(test))
    assert main(["test", str(copy)]) == 1
    assert "resource not found in patchedResources" in capsys.readouterr().out

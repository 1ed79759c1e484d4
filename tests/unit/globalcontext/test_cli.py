"""globalContext.Get offline: `vpol test` with a test file's globalContextEntries, `vpol apply` with entries."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from vpol.cli.main import main

POLICY = textwrap.dedent("""\
    apiVersion: policies.kyverno.io/v1
    kind: ValidatingPolicy
    metadata:
      name: unique-deployments
    spec:
      matchConstraints:
        resourceRules:
        - apiGroups: [apps]
          apiVersions: [v1]
          operations: [CREATE]
          resources: [deployments]
      variables:
      - name: taken
        expression: globalContext.Get("deployments", "names")
      validations:
      - expression: "!(object.metadata.name in variables.taken)"
        messageExpression: "'name taken; ' + string(size(variables.taken)) + ' deployments exist'"
    """)

NEW = textwrap.dedent("""\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: new, namespace: default}
    spec: {replicas: 1}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web, namespace: default}
    spec: {replicas: 1}
    """)

EXISTING = textwrap.dedent("""\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web, namespace: default}
    spec: {replicas: 2}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: api, namespace: other}
    spec: {replicas: 2}
    """)

ENTRY = textwrap.dedent("""\
    apiVersion: kyverno.io/v2
    kind: GlobalContextEntry
    metadata: {name: deployments}
    spec:
      kubernetesResource: {group: apps, version: v1, resource: deployments%s}
      projections:
      - name: names
        jmesPath: "[].metadata.name"
    """)


def write(tmp: Path, **files: str) -> None:
    for name, text in files.items():
        (tmp / name).write_text(text)


def kyverno_test_file(entries: list[dict[str, Any]], results: list[tuple[str, str]]) -> str:
    return json.dumps({
        "apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Test", "metadata": {"name": "gctx"},
        "policies": ["policy.yaml"], "resources": ["new.yaml"], "globalContextEntries": entries,
        "results": [{"policy": "unique-deployments", "resources": [r], "kind": "Deployment", "result": res}
                    for r, res in results]})


@pytest.mark.parametrize("entry", [
    {"name": "deployments", "resourceFiles": ["existing.yaml"],
     "projections": [{"name": "names", "path": "[].metadata.name"}]},
    {"name": "deployments", "data": {"names": ["web", "api"]}},
    {"name": "deployments", "data": {"all": {"names": ["web", "api"]}}, "fieldPath": "all"},
    {"name": "deployments", "resources": [{"metadata": {"name": "web"}}, {"metadata": {"name": "api"}}],
     "projections": [{"name": "names", "path": "[].metadata.name"}]},
])
def test_vpol_test_reads_the_test_files_global_context_entries(tmp_path: Path, entry: dict[str, Any],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, **{"policy.yaml": POLICY, "new.yaml": NEW, "existing.yaml": EXISTING,
                       "kyverno-test.yaml": kyverno_test_file([entry], [("new", "pass"), ("web", "fail")])})
    assert main(["test", str(tmp_path), "-v"]) == 0, capsys.readouterr().out
    # and a wrong expectation is caught (the data really decides)
    write(tmp_path, **{"kyverno-test.yaml": kyverno_test_file([entry], [("new", "fail")])})
    assert main(["test", str(tmp_path)]) == 1


def test_vpol_test_without_the_entry_reads_null(tmp_path: Path) -> None:
    write(tmp_path, **{"policy.yaml": POLICY, "new.yaml": NEW,
                       "kyverno-test.yaml": kyverno_test_file([], [("new", "error")])})
    assert main(["test", str(tmp_path)]) == 0


def test_vpol_test_refuses_invalid_entries_with_kyvernos_message(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, **{"policy.yaml": POLICY, "new.yaml": NEW, "kyverno-test.yaml": kyverno_test_file(
        [{"name": "deployments", "data": {"a": 1}, "resourceFiles": ["existing.yaml"]}], [("new", "pass")])})
    assert main(["test", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert 'globalContextEntries entry "deployments": data, resources, and resourceFiles are mutually exclusive' in \
        out.out + out.err


def rows(capsys: pytest.CaptureFixture[str]) -> dict[str, tuple[str, str]]:
    return {r["name"]: (r["result"], r["message"]) for r in json.loads(capsys.readouterr().out)}


def test_vpol_apply_with_a_global_context_entry_among_the_resources(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, **{"policy.yaml": POLICY, "new.yaml": NEW + "---\n" + ENTRY % "", "existing.yaml": EXISTING})
    code = main(["apply", "-p", str(tmp_path / "policy.yaml"), "-r", str(tmp_path / "new.yaml"),
                 "--cluster-resources", str(tmp_path / "existing.yaml"), "-o", "json", "--workers", "1"])
    out = rows(capsys)
    assert code == 1
    # the entry is not evaluated as a resource; it holds web (both), api and new
    assert out == {"new": ("fail", "name taken; 3 deployments exist"), "web": ("fail", "name taken; 3 deployments exist")}


def test_vpol_apply_entry_limited_to_a_namespace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, **{"policy.yaml": POLICY, "new.yaml": NEW, "existing.yaml": EXISTING,
                       "gce.yaml": ENTRY % ", namespace: other"})
    code = main(["apply", "-p", str(tmp_path / "policy.yaml"), "-r", str(tmp_path / "new.yaml"),
                 "--cluster-resources", str(tmp_path / "existing.yaml"), "--global-context", str(tmp_path / "gce.yaml"),
                 "-o", "json", "--workers", "1"])
    assert code == 0 and set(rows(capsys).values()) == {("pass", "success")}


def test_vpol_apply_with_mocked_entries_and_an_api_call_entry(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    mocks = {"globalContextEntries": [{"name": "deployments", "data": {"names": ["new"]}}]}
    call = textwrap.dedent("""\
        apiVersion: kyverno.io/v2
        kind: GlobalContextEntry
        metadata: {name: deployments}
        spec:
          apiCall: {urlPath: /apis/apps/v1/deployments}
        """)
    write(tmp_path, **{"policy.yaml": POLICY, "new.yaml": NEW, "mocks.yaml": json.dumps(mocks), "call.yaml": call})
    assert main(["apply", "-p", str(tmp_path / "policy.yaml"), "-r", str(tmp_path / "new.yaml"),
                 "--global-context", str(tmp_path / "mocks.yaml"), "-o", "json", "--workers", "1"]) == 1
    assert rows(capsys) == {"new": ("fail", "name taken; 1 deployments exist"), "web": ("pass", "success")}
    assert main(["apply", "-p", str(tmp_path / "policy.yaml"), "-r", str(tmp_path / "new.yaml"),
                 "--global-context", str(tmp_path / "call.yaml"), "-o", "json", "--workers", "1"]) == 1
    out = rows(capsys)
    assert {r for r, _m in out.values()} == {"error"}
    assert "calls an API (GET /apis/apps/v1/deployments), which is not done offline" in out["new"][1]


def test_vpol_apply_refuses_an_invalid_entry_with_its_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = ENTRY.replace("group: apps, version: v1", "version: v1beta1") % ""
    write(tmp_path, **{"policy.yaml": POLICY, "new.yaml": NEW, "gce.yaml": bad})
    assert main(["apply", "-p", str(tmp_path / "policy.yaml"), "-r", str(tmp_path / "new.yaml"),
                 "--global-context", str(tmp_path / "gce.yaml")]) == 2
    err = capsys.readouterr().err
    assert "gce.yaml" in err and "spec.kubernetesResource.group" in err and "A Resource entry requires a group" in err

"""``vpol check --strict``: the CI gate. A typo the type checker finds (a field no matched kind has) is a warning:
the check passes without --strict (exit 0) and fails with it (exit 1); errors fail either way; a clean policy
passes both; the summary says its numbers in the singular when they are one."""

from __future__ import annotations

from pathlib import Path

import pytest

from vpol.cli.main import main

POLICY = """apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: {name}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods]
  validations:
  - expression: "{expression}"
"""


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], expression: str, *flags: str) -> tuple[int, str]:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.format(name="p", expression=expression))
    code = main(["check", *flags, str(path)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("expression,plain,strict", [
    ("object.spec.containrs.all(c, c.name != '')", 0, 1),
    ("object.spec.containers.all(c, c.name != '')", 0, 0),
    ("object.spec.containers.all(c, c.name != ", 1, 1),
])
def test_strict_fails_on_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str], expression: str, plain: int,
                                  strict: int) -> None:
    code, out = check(tmp_path, capsys, expression)
    assert code == plain, out
    code, out = check(tmp_path, capsys, expression, "--strict")
    assert code == strict, out
    if expression.startswith("object.spec.containrs"):
        assert "undefined field 'containrs'" in out and "1 policy checked: 1 valid, 0 invalid (0 errors, 1 warning)" \
            in out and "--strict: 1 warning fails the check" in out


def test_a_legacy_kyverno_policy_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "legacy.yaml"
    path.write_text("apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata:\n  name: old\nspec:\n  rules: []\n")
    for argv in (["check", str(path)], ["apply", "--policy", str(path), "--resource", str(path)]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "no ValidatingPolicy" in err and "ImageValidatingPolicy" in err, err
        assert f"{path}: ClusterPolicy/old (kyverno.io/v1) is one of Kyverno's legacy policy kinds" in err, err


def test_test_says_what_is_missing_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(tmp_path / "nowhere")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert main(["test", str(tmp_path)]) == 2
    assert "no kyverno-test.yaml found under" in capsys.readouterr().err


def test_a_deleting_policys_table_says_delete_and_keep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy, resources = tmp_path / "p.yaml", tmp_path / "r.yaml"
    policy.write_text("""apiVersion: policies.kyverno.io/v1
kind: DeletingPolicy
metadata: {name: old-pods}
spec:
  schedule: "*/5 * * * *"
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: ["*"], resources: [pods]}]
  conditions: [{name: expired, expression: "object.metadata.?labels.expired.orValue('') == 'true'"}]
""")
    resources.write_text("""apiVersion: v1
kind: Pod
metadata: {name: old, namespace: default, labels: {expired: "true"}}
spec: {containers: [{name: a, image: nginx:1.27}]}
---
apiVersion: v1
kind: Pod
metadata: {name: fresh, namespace: default}
spec: {containers: [{name: a, image: nginx:1.27}]}
""")
    assert main(["apply", "-p", str(policy), "-r", str(resources)]) == 0
    captured = capsys.readouterr()
    rows = {line.split()[1]: line.split()[2] for line in captured.out.splitlines()[1:]}
    assert rows == {"Pod/default/old": "DELETE", "Pod/default/fresh": "KEEP"}, captured.out
    assert captured.err.strip().endswith("; 1 to delete, 1 kept") and "FAIL" not in captured.out

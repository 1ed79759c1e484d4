"""The CLI never drops or crashes on input: repeated flags, unreadable files, YAML bombs, hidden folders."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.unit.cli.test_cli import POLICY, RESOURCES
from vpol.cli.main import main


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def results(capsys: pytest.CaptureFixture[str]) -> list[dict[str, str]]:
    return list(json.loads(capsys.readouterr().out))


def test_repeated_and_multi_value_flags_accumulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p1 = write(tmp_path / "a.yaml", POLICY)
    p2 = write(tmp_path / "b.yaml", POLICY.replace("name: no-host-network", "name: no-host-network-2"))
    r1 = write(tmp_path / "x.yaml", RESOURCES)
    r2 = write(tmp_path / "y.yaml", RESOURCES.replace("name: good", "name: good2").replace("name: bad", "name: bad2"))
    main(["apply", "--policy", str(p1), str(p2), "--resource", str(r1), str(r2), "-o", "json"])
    together = results(capsys)
    main(["apply", "--policy", str(p1), "--policy", str(p2), "-r", str(r1), "-r", str(r2), "-o", "json"])
    repeated = results(capsys)
    main(["apply", "-p", str(p1), "-p", str(p2), "--resource", str(r1), "--resource", str(r2), "-o", "json"])
    short = results(capsys)
    assert together == repeated == short
    assert {(r["policy"], r["name"]) for r in together} >= {
        (p, n) for p in ("no-host-network", "no-host-network-2") for n in ("good", "bad", "good2", "bad2")}


def test_a_file_with_control_characters_is_reported_and_the_others_are_checked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(20):
        write(tmp_path / f"p{i:02}.yaml", POLICY.replace("name: no-host-network", f"name: p{i}"))
    (tmp_path / "p10.yaml").write_bytes(b"apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\n"
                                        b"metadata:\n  name: a\x00b\n")
    code = main(["check", str(tmp_path)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2
    assert "Traceback" not in text
    assert f"{tmp_path / 'p10.yaml'}:4:10: error: invalid YAML" in text
    assert "19 valid" in text


def test_alias_bombs_are_refused_quickly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    bomb = write(tmp_path / "bomb.yaml", "\n".join(lines) + "\n")
    assert len(bomb.read_bytes()) < 1000
    started = time.monotonic()
    code = main(["check", str(bomb)])
    out = capsys.readouterr()
    assert code == 2 and "aliases expand to more than" in out.out + out.err
    assert time.monotonic() - started < 30


def test_hidden_folders_are_skipped_unless_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "policy.yaml", POLICY)
    assert_file = write(tmp_path / ".chainsaw-test" / "assert.yaml",
                        "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: x}\n"
                        "status: {conditionStatus: {ready: true}}\n")
    assert main(["check", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert "1 valid" in out.out + out.err
    assert main(["check", str(assert_file.parent)]) != 0  # named explicitly: read, and reported
    capsys.readouterr()


def test_message_with_a_trailing_newline_is_accepted_inner_line_breaks_are_not(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folded = POLICY.replace("message: host network is not allowed", "message: >\n          host network is not allowed\n")
    assert main(["check", str(write(tmp_path / "folded.yaml", folded))]) == 0
    capsys.readouterr()
    literal = POLICY.replace("message: host network is not allowed",
                             "message: |\n          host network\n          is not allowed\n")
    assert main(["check", str(write(tmp_path / "literal.yaml", literal))]) == 1
    assert "must not contain line breaks" in capsys.readouterr().out


def test_a_policy_kind_without_our_apiversion_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "ok.yaml", POLICY)
    write(tmp_path / "noversion.yaml", POLICY.replace("apiVersion: policies.kyverno.io/v1\n", ""))
    write(tmp_path / "othergroup.yaml", POLICY.replace("policies.kyverno.io/v1", "example.com/v1"))
    assert main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr()
    text = out.out + out.err
    for name in ("noversion.yaml", "othergroup.yaml"):
        assert f"{tmp_path / name}" in text
    assert "v1beta1" in text  # the served versions are named


def test_non_string_scalars_are_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(tmp_path / "p.yaml", POLICY.replace("message: host network is not allowed", "message: 5"))
    assert main(["check", str(bad)]) == 1
    assert "spec.validations[0].message" in capsys.readouterr().out


def test_apply_without_resources_and_test_on_a_missing_path(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    policy = write(tmp_path / "p.yaml", POLICY)
    empty = write(tmp_path / "empty.yaml", "# nothing\n")
    assert main(["apply", "-p", str(policy), "-r", str(empty)]) == 1
    assert "no resource found" in capsys.readouterr().err
    assert main(["test", str(tmp_path / "nothere")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_two_policies_of_one_name_are_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "a.yaml", POLICY)
    write(tmp_path / "b.yaml", POLICY.replace("host network is not allowed", "another message"))
    assert main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'b.yaml'}:4:" in out and 'duplicate ValidatingPolicy "no-host-network"' in out
    assert str(tmp_path / "a.yaml") in out


@pytest.mark.parametrize("metadata,fragment", [
    ("metadata:\n  name: Bad_Name\n", "is not a valid name"),
    ("metadata:\n  name: ''\n", "metadata.name"),
    ("metadata:\n  name: ok\n  labels: {'bad key!': x}\n", "is not a valid key"),
    ("metadata:\n  name: ok\n  annotations: {'Example.COM/x': y}\n", "is not a valid key"),
    ("metadata:\n  name: ok\n  labels: {team: 'not a value'}\n", "is not a valid label value"),
])
def test_metadata_the_api_server_would_reject_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           metadata: str, fragment: str) -> None:
    bad = write(tmp_path / "p.yaml", POLICY.replace("metadata:\n  name: no-host-network\n", metadata))
    assert main(["check", str(bad)]) == 1
    assert fragment in capsys.readouterr().out


USERINFO_POLICY = """\
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: only-admins}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  matchConditions:
  - name: not-system
    expression: "!request.userInfo.username.startsWith('system:')"
  validations:
  - expression: "'admins' in request.userInfo.groups"
    message: only admins
"""
USER = """\
apiVersion: cli.kyverno.io/v1alpha1
kind: UserInfo
metadata: {name: user-info}
userInfo: {username: alice, groups: [admins]}
"""
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: default}\n"


def test_user_info_files_set_the_requesting_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy, user = write(tmp_path / "policy.yaml", USERINFO_POLICY), write(tmp_path / "user.yaml", USER)
    cm = write(tmp_path / "cm.yaml", CONFIGMAP)
    main(["apply", "-p", str(policy), "-r", str(cm), "-o", "json"])
    assert [r["result"] for r in results(capsys)] == ["error"]  # nobody: no username (Kyverno: no such key)
    main(["apply", "-p", str(policy), "-r", str(cm), "-u", str(user), "-o", "json"])
    assert [r["result"] for r in results(capsys)] == ["pass"]
    write(tmp_path / "kyverno-test.yaml", """\
apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: userinfo}
policies: [policy.yaml]
resources: [cm.yaml]
userinfo: user.yaml
results:
- {policy: only-admins, resources: [c], kind: ConfigMap, result: pass}
""")
    assert main(["test", str(tmp_path)]) == 0
    assert "1 agreed, 0 disagreed" in capsys.readouterr().out


def test_every_flag_of_every_command_has_help() -> None:
    import argparse

    from vpol.cli.main import build_parser

    parser = build_parser()
    missing = []

    def walk(p: argparse.ArgumentParser, where: str) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, f"{where} {name}")
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{where}: {'/'.join(action.option_strings) or action.dest}")

    walk(parser, "vpol")
    assert not missing, missing


def test_input_size_limit_is_adjustable(tmp_path, capsys) -> None:
    from vpol.cli.main import main
    from vpol.model import documents

    default = documents.MAX_DOCUMENT_BYTES
    big = tmp_path / "big.yaml"
    repo = Path(__file__).resolve().parents[3]
    big.write_text("# " + "x" * (2 * 1024 * 1024) + "\n" + (repo / "examples" / "quickstart" / "policy.yaml").read_text())
    try:
        assert main(["check", "--max-input-mib", "1", str(big)]) == 2
        assert "larger than 1 MiB" in capsys.readouterr().out
        assert main(["check", "--max-input-mib", "4", str(big)]) == 0
    finally:
        documents.MAX_DOCUMENT_BYTES = default

"""Kyverno's own CLI test suites for ValidatingPolicy, run through `vpol test`.

Every expected result of every suite must agree, except the `envoy-*` and
`http-*` suites, whose payload modes vpol does not support: those must be
reported as unsupported (never as a crash or a wrong result).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vpol.cli.kyverno_test import find_test_files, run_tests
from vpol.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "conformance" / "kyverno-cli"
UNSUPPORTED_PREFIXES = ("envoy-", "http-")


def _suites() -> list[Path]:
    if not CORPUS.is_dir():
        return [CORPUS]  # one case, which fails under CI and skips elsewhere (never an empty parameter set)
    return sorted(p.parent for p in find_test_files([str(CORPUS)]))


def _require_corpus() -> None:
    if not CORPUS.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"conformance corpus missing: {CORPUS}")
        pytest.skip(f"conformance corpus not found at {CORPUS}")


@pytest.mark.parametrize("suite", _suites(), ids=lambda p: p.name)
def test_suite(suite: Path) -> None:
    _require_corpus()
    outcomes = run_tests([str(suite)])
    assert outcomes, f"no test file in {suite}"
    checks = [c for o in outcomes for c in o.checks]
    assert checks, f"{suite.name}: no expectations were checked"
    if suite.name.startswith(UNSUPPORTED_PREFIXES):
        assert all(c.status == "unsupported" for c in checks), [c for c in checks if c.status != "unsupported"]
        return
    problems = [p.render() for o in outcomes for p in o.problems]
    assert not problems, problems
    wrong = [f"{c.policy} {c.kind} {c.resource}: expected {c.expected}, got {c.actual} ({c.message})"
             for c in checks if c.status != "agree"]
    assert not wrong, wrong


def test_every_test_file_of_the_corpus_is_found() -> None:
    _require_corpus()
    on_disk = sorted(Path(root) / name for root, _dirs, files in os.walk(CORPUS) for name in files
                     if name in ("kyverno-test.yaml", "kyverno-test.yml"))
    assert on_disk and find_test_files([str(CORPUS)]) == on_disk


def test_whole_corpus_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    _require_corpus()
    code = main(["test", str(CORPUS)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert " 0 disagreed" in out
    assert "unsupported" in out


def test_corpus_is_present_in_ci() -> None:
    _require_corpus()
    assert len(_suites()) >= 20

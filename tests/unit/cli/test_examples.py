"""The examples cover every kind vpol serves, pass `vpol check --strict` and `vpol test`, and their tests can fail:
each policy of the new kinds, broken on purpose, makes its example's test disagree."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

from vpol.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
#: Every kind vpol serves, each with an example (the ImageValidatingPolicies' ones need no registry: see their
#: comments).
KINDS = {"ValidatingPolicy", "NamespacedValidatingPolicy", "MutatingPolicy", "NamespacedMutatingPolicy",
         "GeneratingPolicy", "NamespacedGeneratingPolicy", "DeletingPolicy", "NamespacedDeletingPolicy",
         "ImageValidatingPolicy", "NamespacedImageValidatingPolicy"}


def kinds() -> Counter[str]:
    return Counter(d["kind"] for p in EXAMPLES.glob("**/policy.yaml") for d in yaml.safe_load_all(p.read_text()) if d)


def test_every_kind_has_an_example_that_checks_and_tests(capsys: pytest.CaptureFixture[str]) -> None:
    assert KINDS <= set(kinds()), KINDS - set(kinds())
    assert main(["check", "--strict", str(EXAMPLES)]) == 0, capsys.readouterr().out[-3000:]
    assert main(["test", str(EXAMPLES)]) == 0, capsys.readouterr().out[-3000:]


@pytest.mark.parametrize("example,old,new", [
    ("generating/default-deny-network-policy", "policyTypes: [Ingress, Egress]", "policyTypes: [Ingress]"),
    ("generating/namespaced-team-defaults", '"maxUnavailable": dyn(1)', '"maxUnavailable": dyn(2)'),
    ("deleting/finished-jobs", "> 0", "> 1"),
    ("deleting/namespaced-preview-environments", "== 'true'", "!= 'true'"),
    ("mutating/namespaced-team-label", '"example.com/team": "payments"', '"example.com/team": "billing"'),
    ("image-validating/internal-images-pinned", "verifyDigest: true", "verifyDigest: false"),
    ("image-validating/namespaced-team-images", "c.image.startsWith('registry.example.com/')) &&",
     "c.image.startsWith('registry.example.com/') || true) &&"),
])
def test_a_broken_policy_fails_its_example(tmp_path: Path, capsys: pytest.CaptureFixture[str], example: str,
                                           old: str, new: str) -> None:
    copy = tmp_path / "example"
    shutil.copytree(EXAMPLES / example, copy)
    policy = copy / "policy.yaml"
    text = policy.read_text()
    assert old in text
    policy.write_text(text.replace(old, new))
    assert main(["test", str(copy)]) == 1, capsys.readouterr().out

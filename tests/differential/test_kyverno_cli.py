"""`vpol test` decides Kyverno CLI test files as `kyverno test` does (Kyverno's own CLI, v1.19.1, built from its Go
module by bench/kyverno/build), for the kinds whose test semantics are the CLI's own: GeneratingPolicies (generated
objects compared with `generatedResource(s)`, their labels tidied) and DeletingPolicies.

Each expectation of a suite is run alone, once with each possible result (pass, fail, skip, error): both tools must
pass and fail the same checks, which pins the result each computes. Expectations that compare generated objects
are also run against a copy of their expected objects with one field changed (both must fail) and one with
`generate.kyverno.io/` labels added (both must ignore them).

Suites here: tests/differential/suites/{generating,generating-more,generating-cluster,deleting} and the examples of
these kinds and of ImageValidatingPolicies (examples/{generating,deleting,mutating,image-validating}/...) (generating-cluster
with cluster resources: Kyverno's CLI then generates through its cluster context). generating-namespaced is compared
with Kyverno's engine only (tests/differential/test_kyverno.py): Kyverno's CLI stops on a nil pointer for a
NamespacedGeneratingPolicy. Locally skipped without Go; under CI=true (or VPOL_REQUIRE_E2E=1) that is a failure.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import go_built
from vpol.cli.kyverno_test import run_tests

REPO = Path(__file__).resolve().parents[2]
SUITES = Path(__file__).with_name("suites")
CLI_SUITES = ("generating", "generating-more", "generating-cluster", "deleting")
#: The examples of these kinds that Kyverno's CLI runs (its 1.19 stops on NamespacedGeneratingPolicies).
EXAMPLES = ("generating/default-deny-network-policy", "deleting/finished-jobs",
            "deleting/namespaced-preview-environments", "mutating/namespaced-team-label",
            "image-validating/internal-images-pinned", "image-validating/namespaced-team-images")
RESULTS = ("pass", "fail", "skip", "error")


def kyverno_cli() -> str:
    return go_built(REPO / "bench" / "kyverno" / "build", "Kyverno's CLI", timeout=3000, args=["cli/kubectl-kyverno"])


def _kyverno_verdicts(binary: str, folder: Path) -> Counter[str]:
    """How many of `kyverno test`'s rows for ``folder`` passed and failed."""
    proc = subprocess.run([binary, "test", str(folder), "-o", "json", "--detailed-results", "--remove-color"],
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout
    start, end = out.find("\n["), out.rfind("]")
    assert start >= 0 and end > start, f"no result rows from kyverno test ({proc.returncode}):\n{out}\n{proc.stderr}"
    rows = json.loads(out[start:end + 1])
    return Counter("pass" if row["RESULT"] == "Pass" else "fail" for row in rows)


def _vpol_verdicts(folder: Path) -> Counter[str]:
    (outcome,) = run_tests([str(folder)])
    assert not outcome.problems, [p.render() for p in outcome.problems]
    return Counter("pass" if check.ok else "fail" for check in outcome.checks)


def _variant(suite: Path, into: Path, expectation: dict[str, Any], edit: Any = None) -> Path:
    """A copy of ``suite`` in ``into`` whose test holds ``expectation`` only; ``edit`` changes each object of its
    generatedResource file."""
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(suite, into)
    test_file = into / "kyverno-test.yaml"
    spec = yaml.safe_load(test_file.read_text())
    spec["results"] = [expectation]
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    if edit is not None:
        for name in [expectation.get("generatedResource"), *(expectation.get("generatedResources") or [])]:
            if name:
                path = into / name
                docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
                path.write_text(yaml.safe_dump_all([edit(copy.deepcopy(d)) for d in docs], sort_keys=False))
    return into


def _changed(obj: dict[str, Any]) -> dict[str, Any]:
    obj.setdefault("metadata", {}).setdefault("annotations", {})["changed"] = "by-the-test"
    return obj


def _with_generate_labels(obj: dict[str, Any]) -> dict[str, Any]:
    labels = obj.setdefault("metadata", {}).setdefault("labels", {})
    labels.update({"generate.kyverno.io/policy-name": "any", "generate.kyverno.io/trigger-uid": "0"})
    return obj


@pytest.mark.slow
@pytest.mark.parametrize("name", [*CLI_SUITES, *(f"examples/{e}" for e in EXAMPLES)])
def test_vpol_test_decides_like_kyverno_test(name: str, tmp_path: Path) -> None:
    binary = kyverno_cli()
    suite = REPO / name if name.startswith("examples/") else SUITES / name
    spec = yaml.safe_load((suite / "kyverno-test.yaml").read_text())
    compared, differences = 0, []
    for index, expectation in enumerate(spec["results"]):
        variants: list[tuple[str, dict[str, Any], Any]] = [
            (f"result {result}", {**expectation, "result": result}, None) for result in RESULTS]
        if expectation.get("generatedResource") or expectation.get("generatedResources"):
            variants += [("a field changed", expectation, _changed),
                         ("generate labels added", expectation, _with_generate_labels)]
        for label, variant, edit in variants:
            folder = _variant(suite, tmp_path / f"{index}", variant, edit)
            theirs, ours = _kyverno_verdicts(binary, folder), _vpol_verdicts(folder)
            compared += 1
            if theirs != ours:
                differences.append(f"{name} results[{index}] ({expectation['policy']}, {label}): "
                                   f"kyverno test {dict(theirs)}, vpol test {dict(ours)}")
    print(f"{compared} single-expectation tests compared")
    assert not differences, "\n".join(differences)

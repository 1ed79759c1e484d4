"""The suite's split between pytest-xdist's workers (tests/conftest.py): every end-to-end test on the shared control
plane is in one unit of work, and the unit that runs beside it uses none of that control plane's fixtures."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import E2E, OWN_CLUSTERS, work_unit

REPO = Path(__file__).resolve().parents[2]
#: The session fixtures of tests/e2e/conftest.py that are (or share) the one control plane of a worker.
SHARED = {"cluster", "own_cluster", "node_cluster", "local_clusters", "namespace", "installed_crds"}


def test_every_end_to_end_file_is_in_the_cluster_unit_but_the_benches() -> None:
    files = sorted((REPO / E2E).glob("test_*.py"))
    assert len(files) > 40
    for path in files:
        nodeid = f"{path.relative_to(REPO).as_posix()}::test_x[a::b]"
        expected = "benches" if path.relative_to(REPO).as_posix() in OWN_CLUSTERS else "cluster"
        assert work_unit(nodeid) == expected, path


def test_other_tests_are_units_of_their_files() -> None:
    for nodeid in ("tests/unit/kube/test_list_answer.py::test_x", "tests/faults/test_faults.py::test_y[z]",
                   "tests/e2e_like/test_a.py::test_b", "tests/differential/test_kyverno_cli.py::test[tests/e2e/x]"):
        assert work_unit(nodeid) is None, nodeid


def test_the_benches_unit_uses_no_fixture_of_the_shared_control_plane() -> None:
    for name in OWN_CLUSTERS:
        tree = ast.parse((REPO / name).read_text())
        tests = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")]
        assert tests, name
        for function in tests:
            used = {a.arg for a in function.args.args} & SHARED
            assert not used, (name, function.name, used)

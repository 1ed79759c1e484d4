"""The commands of README.md and docs/ that need more than the CLI run as written (tests/docs_blocks.py says how
a page marks its blocks; the offline ones run in tests/unit/docs):

- README.md's first command, in a clean copy of the repository, with a fresh virtual environment;
- every ``kubectl`` block of the pages, in page order, against a control plane of its own with vpol installed
  from crds/ and manifests/ and the operator running (as its ServiceAccount).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docs_blocks import REPO, blocks, check_ran, commands, kind_of
from tests.e2e.operator_process import OperatorProcess, sa_kubeconfig
from tests.e2e.vpol_fixtures import install_vpol

BLOCKS = blocks()
CLUSTER = [c for b in BLOCKS if kind_of(b) == "cluster" for c in commands(b)]


@pytest.mark.slow
def test_the_readme_first_command_in_a_clean_copy(tmp_path: Path) -> None:
    (block,) = [b for b in BLOCKS if b.path.name == "README.md" and b.run_by == "tests/e2e/test_docs_commands.py"]
    (command,) = commands(block)
    assert command.text.startswith("python3 -m venv "), command.text
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    copy = tmp_path / "vpol"
    for name in filter(None, files.stdout.split("\0")):
        source = REPO / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    # A shell without this test's virtual environment or vpol on the PATH: the command makes its own. Debian's own
    # Python first where there is one (the README promises that it works with it).
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if not (Path(p) / "vpol").exists())
    if Path("/usr/bin/python3").exists():
        path = os.pathsep.join(["/usr/bin", path])
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    proc = subprocess.run(["bash", "-c", command.text], cwd=copy, capture_output=True, text=True, timeout=900,
                          env=dict(env, PATH=path))
    check_ran(command, proc)
    assert (copy / ".venv" / "bin" / "vpol").exists(), proc.stdout[-2000:]
    if Path("/usr/bin/python3").exists():
        assert os.path.realpath(copy / ".venv" / "bin" / "python3").startswith("/usr/bin/"), "not Debian's Python"
    output = proc.stdout + proc.stderr
    assert "policies checked:" in output and "1 pass, 1 fail" in output, output[-3000:]


@pytest.fixture(scope="module")
def running(own_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    install_vpol(own_cluster)
    tmp = tmp_path_factory.mktemp("docs-operator")
    operator = OperatorProcess(sa_kubeconfig(own_cluster, tmp / "kubeconfig"), tmp / "operator.log").start()
    try:
        yield own_cluster
    finally:
        operator.stop()


@pytest.mark.slow
def test_cluster_commands_run_as_written(running: Any, tmp_path: Path) -> None:
    assert CLUSTER, "no kubectl block found in the docs"
    for entry in REPO.iterdir():
        if not entry.name.startswith("."):
            (tmp_path / entry.name).symlink_to(entry)
    env = dict(os.environ, KUBECONFIG=running.kubeconfig, PATH=os.pathsep.join([
        str(Path(running.kubectl_path).parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    for command in CLUSTER:
        proc = subprocess.run(["bash", "-c", command.text], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, env=env)
        check_ran(command, proc)

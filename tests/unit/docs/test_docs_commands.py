"""Every command of the README and docs runs as written (tests/docs_blocks.py says how a page marks its blocks):
the offline ones here, each ``vpol`` command run from the repository's top as a user would; every policy a page
shows passes ``vpol check --strict``; every other YAML block parses; every shell block is run by some test or
says why it cannot be."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.docs_blocks import REPO, Block, Command, blocks, check_ran, commands, kind_of

BLOCKS = blocks()
OFFLINE = [c for b in BLOCKS if kind_of(b) == "offline" for c in commands(b)]
YAML = [b for b in BLOCKS if kind_of(b) == "yaml"]


def _vpol_path() -> str:
    """PATH with the directory of this interpreter's ``vpol`` first (a virtual environment's bin, for instance)."""
    found = shutil.which("vpol", path=str(Path(sys.executable).parent)) or shutil.which("vpol")
    assert found, "the vpol command is not installed (python3 -m pip install -e .)"
    return os.pathsep.join([str(Path(found).parent), os.environ.get("PATH", "")])


def test_every_shell_block_is_run_or_says_why_not() -> None:
    assert OFFLINE, "no offline command found in the docs"
    unclassified = [f"{b.where}: {b.text.splitlines()[0]}" for b in BLOCKS if kind_of(b) == "unclassified"]
    assert not unclassified, "shell blocks no test runs (mark them <!-- not run: why --> or <!-- run by: PATH -->):" \
        "\n" + "\n".join(unclassified)
    for block in BLOCKS:
        if block.not_run is not None:
            assert len(block.not_run) > 10, f"{block.where}: say why the block is not run"
        if block.run_by is not None:
            runner = REPO / block.run_by
            assert runner.is_file(), f"{block.where}: {block.run_by} does not exist"
            assert block.path.name in runner.read_text(), f"{block.where}: {block.run_by} does not name {block.path.name}"


@pytest.mark.parametrize("command", OFFLINE, ids=[c.where for c in OFFLINE])
def test_offline_command_runs_as_written(command: Command, tmp_path: Path) -> None:
    # From a directory that looks like the repository's top (commands name examples/, docs/...), so that what a
    # command writes lands in tmp_path.
    for entry in REPO.iterdir():
        if not entry.name.startswith("."):
            (tmp_path / entry.name).symlink_to(entry)
    proc = subprocess.run(["bash", "-c", command.text], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PATH=_vpol_path()))
    check_ran(command, proc)


@pytest.mark.parametrize("block", YAML, ids=[b.where for b in YAML])
def test_yaml_blocks_parse_and_policies_check_strictly(block: Block, tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(block.text) if d is not None]
    assert docs, f"{block.where}: an empty YAML block"
    policies = [d for d in docs if isinstance(d, dict) and str(d.get("apiVersion", "")).startswith(
        "policies.kyverno.io/") and str(d.get("kind", "")).endswith("Policy")]
    if not policies:
        return
    path = tmp_path / "policy.yaml"
    path.write_text(block.text)
    proc = subprocess.run(["vpol", "check", "--strict", str(path)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PATH=_vpol_path()))
    assert proc.returncode == 0, f"{block.where}: vpol check --strict\n{proc.stdout}{proc.stderr}"

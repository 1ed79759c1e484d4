"""`tests/controlplane/cluster start DIR --node` refuses at once, in one line naming what is missing and its Debian
package, a host that lacks what the node runs (without the check the cluster started and its Pods never ran)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "controlplane" / "cluster"


def load_script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("vpol_cluster_script", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


cluster = load_script()
PROGRAMS = [program for _package, programs in cluster.NODE_PROGRAMS for program in programs]
CGROUP_MOUNT = "32 31 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"


def executable(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


@pytest.fixture
def host(tmp_path: Path) -> dict[str, object]:
    """A host that has everything, as node_prerequisites' arguments: every program in one PATH directory, the CNI
    plugins in their own, root, a cgroup hierarchy mounted."""
    for program in PROGRAMS:
        executable(tmp_path / "bin" / program)
    for plugin in cluster.NODE_CNI_PLUGINS:
        executable(tmp_path / "cni" / plugin)
    (tmp_path / "mountinfo").write_text("22 1 0:20 / / rw - overlay overlay rw\n" + CGROUP_MOUNT)
    return {"path": str(tmp_path / "bin"), "cni_dir": tmp_path / "cni", "euid": 0, "mountinfo": tmp_path / "mountinfo"}


def test_a_host_with_everything_passes(host: dict[str, object]) -> None:
    assert cluster.node_prerequisites(**host) == ""


def test_cgroup_v2_passes(host: dict[str, object]) -> None:
    Path(str(host["mountinfo"])).write_text("30 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    assert cluster.node_prerequisites(**host) == ""


def test_missing_cni_plugins_are_named_with_their_directory_and_package(host: dict[str, object]) -> None:
    cni = Path(str(host["cni_dir"]))
    shutil.rmtree(cni)
    cni.mkdir()
    assert cluster.node_prerequisites(**host) == (
        f"the node needs CNI plugins bridge, host-local, loopback in {cni} (Debian: containernetworking-plugins)")
    executable(cni / "bridge")
    (cni / "loopback").write_text("not executable")
    assert cluster.node_prerequisites(**host) == (
        f"the node needs CNI plugins host-local, loopback in {cni} (Debian: containernetworking-plugins)")


@pytest.mark.parametrize(("program", "package"), [(program, package) for package, programs in cluster.NODE_PROGRAMS
                                                  for program in programs])
def test_each_missing_program_is_named_with_its_package(host: dict[str, object], program: str, package: str
                                                        ) -> None:
    (Path(str(host["path"])) / program).unlink()
    assert cluster.node_prerequisites(**host) == f"the node needs {program} on PATH (Debian: {package})"


def test_not_root_and_no_cgroups(host: dict[str, object]) -> None:
    Path(str(host["mountinfo"])).write_text("22 1 0:20 / / rw - overlay overlay rw\n")
    host["euid"] = 1000
    assert cluster.node_prerequisites(**host) == (
        "the node needs root (it makes a bridge, iptables rules, mounts and cgroups); "
        "cgroups mounted under /sys/fs/cgroup")


def test_start_with_a_node_stops_at_once_with_one_line(tmp_path: Path) -> None:
    """The real command, on a PATH without the node's programs (nor Go: without the check it would stop on that,
    with another message and exit code): nothing is built or started, and stderr is one line."""
    empty = tmp_path / "empty"
    empty.mkdir()
    state = tmp_path / "state"
    proc = subprocess.run([sys.executable, str(SCRIPT), "start", str(state), "--node"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, env={**os.environ, "PATH": str(empty)})
    assert proc.returncode == cluster.EXIT_NO_NODE == 4, proc
    assert proc.stdout == "" and not state.exists()
    (line,) = proc.stderr.splitlines()
    assert line.startswith("[cluster] error: the node needs "), line
    for package, programs in cluster.NODE_PROGRAMS:
        assert f"{', '.join(programs)} on PATH (Debian: {package})" in line, line


def test_this_host_passes_when_it_has_the_node_packages() -> None:
    """No false refusal: a Debian host running as root with the packages the node uses installed (CI's, this
    machine's) passes the check."""
    packages = sorted({package for package, _programs in cluster.NODE_PROGRAMS} | {"containernetworking-plugins"})
    if os.geteuid() != 0 or shutil.which("dpkg-query") is None:
        pytest.skip("needs root on a Debian host")
    proc = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *packages],
                          capture_output=True, text=True, timeout=60)
    installed = {line.split()[0] for line in proc.stdout.splitlines() if line.endswith(" installed")}
    if installed != set(packages):
        pytest.skip(f"not installed here: {', '.join(sorted(set(packages) - installed))}")
    assert cluster.node_prerequisites() == ""

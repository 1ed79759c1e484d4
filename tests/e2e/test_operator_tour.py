"""The README's operator command (examples/operator-tour) runs as written: the project's control plane started,
the operator run against it, the examples applied, and what a user looks at printed; then everything stopped."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TOUR = REPO / "examples" / "operator-tour"


@pytest.mark.slow
def test_the_operator_tour_shows_every_step_and_leaves_nothing_running(controlplane_binary: Any) -> None:
    assert "examples/operator-tour" in (REPO / "README.md").read_text(), "the README no longer runs the tour"
    proc = subprocess.run([sys.executable, str(TOUR)], capture_output=True, text=True, timeout=900, cwd=REPO)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    # What a user looks at, each from the cluster or the operator, not from the script's own words.
    assert re.search(r"^Ready=True: ", out, re.M), out
    assert re.search(r"^validatingadmissionpolicy\.admissionregistration\.k8s\.io/vpol-quickstart-pinned-images\s",
                     out, re.M), out
    assert "ValidatingAdmissionPolicy 'vpol-quickstart-pinned-images' with binding" in out and "denied request" in out
    assert re.search(r"example\.com/team=unassigned", out), out
    assert re.search(r"^disallow-host-namespaces: .*hostNetwork", out, re.M), out
    assert re.search(r"^default-deny\s+<none>\s+\S+\s+.*generate\.kyverno\.io/policy-name=default-deny-network-policy",
                     out, re.M), out
    assert re.search(r'^vpol_report_results\{.*policy="disallow-host-namespaces",result="fail".*\} 1\.0$', out,
                     re.M), out
    state = re.search(r"--kubeconfig (\S+)/kubeconfig", out)
    assert state is not None, out
    # Torn down: its state directory is gone and no control plane or operator of it is left.
    assert not Path(state.group(1)).exists()
    left = subprocess.run(["pgrep", "-af", state.group(1)], capture_output=True, text=True).stdout
    assert not [line for line in left.splitlines() if "pgrep" not in line], left

"""`vpol run` against a bare cluster (no CRDs, no vpol namespace), as a new user starts it.

It must keep running, say once and in a sentence what is missing and how to
fix it, expose the same in /healthz and in metrics, never dump raw HTTP
responses into its log, and pick the dependencies up once they are installed.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.e2e.operator_process import REPO, OperatorProcess
from tests.e2e.vpol_fixtures import wait_for

#: Every policy kind's CRDs, both variants, and the others vpol reads and writes.
EXPECTED = {f"crd/{prefix}{kind}policies" for kind in ("validating", "mutating", "generating", "deleting",
                                                       "imagevalidating") for prefix in ("", "namespaced")} | \
    {"crd/policyexceptions", "crd/globalcontextentries", "crd/policyreports", "crd/clusterpolicyreports"}


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def test_a_bare_cluster_is_explained_once_and_picked_up_when_fixed(local_clusters: Any, tmp_path: Path) -> None:
    bare = local_clusters.start(tmp_path / "bare")
    op = OperatorProcess(Path(bare.kubeconfig), tmp_path / "operator.log", extra=("--webhook", "off")).start()
    try:
        def reported() -> dict[str, str] | None:
            health = json.loads(_get(f"http://127.0.0.1:{op.liveness_port}/healthz"))
            problems = health.get("dependencies") or {}
            return problems if EXPECTED <= set(problems) else None

        problems = wait_for("the missing CRDs in /healthz", reported, 60, 1)
        assert "kubectl apply --server-side -k crds/" in problems["crd/validatingpolicies"]
        assert "kubectl create -f crds/reports/" in problems["crd/policyreports"]
        metrics = _get(f"http://127.0.0.1:{op.metrics_port}/metrics")
        assert 'vpol_dependency_problem{dependency="crd/mutatingpolicies"} 1.0' in metrics
        time.sleep(3)
        log = op.log_path.read_text(errors="replace")
        for sentence in problems.values():
            assert log.count(sentence) == 1, sentence
        assert "HTTP response headers" not in log and "Traceback" not in log
        assert op.proc is not None and op.proc.poll() is None  # still running

        # Installing what was missing is picked up without a restart (checked every 10 s while something lacks).
        bare.kubectl("apply", "--server-side", "-k", str(REPO / "crds"))
        bare.kubectl("create", "-f", str(REPO / "crds" / "reports"))

        def fixed() -> bool:
            health = json.loads(_get(f"http://127.0.0.1:{op.liveness_port}/healthz"))
            return not (set(health.get("dependencies") or {}) & EXPECTED)

        wait_for("the CRDs to be picked up", fixed, 40, 1)
        assert "fixed: crd/validatingpolicies is available now" in op.log_path.read_text(errors="replace")
    finally:
        op.stop()
        local_clusters.stop(tmp_path / "bare")

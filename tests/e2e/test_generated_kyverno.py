"""vpol's generated admission policies are the objects Kyverno's own admission controller writes, read back from
the API server, as a user moving from Kyverno would compare them.

Kyverno's admission controller (``cmd/kyverno`` of Kyverno 1.19.1, run out of cluster as the benchmark's peer,
bench/kyverno/peer.py) runs with its generators on (``--generateValidatingAdmissionPolicy``,
``--generateMutatingAdmissionPolicy``) on a control plane of this module's own, and may write the policies' status
(its generator reads the pod-controller autogen configs there). The policies of
tests/differential/suites/native-objects, opted in, and their PolicyExceptions are applied; once Kyverno has
decided every policy, the VAPs, MAPs and bindings it wrote are read back and deleted, Kyverno is stopped, and vpol's
operator (in Kyverno's opt-in mode, as the chart's ServiceAccount) generates its own for the same policies: both
sets are compared field for field, vpol's documented differences applied (docs/kyverno-compatibility.md). This also
checks the Kyverno oracle's model of the generator in a cluster (tests/e2e/test_generated_differential.py): the
ownerReferences Kyverno writes, for one, come from its informers.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from bench.kyverno.peer import BUILD_SCRIPT, KyvernoPeer
from tests.e2e.conftest import KubeCluster, go_built, load_crds
from tests.e2e.operator_process import REPO, OperatorProcess, sa_kubeconfig
from tests.e2e.test_generated_differential import exceptions_unordered, opted_in, stored, with_vpols_differences
from tests.e2e.vpol_fixtures import install_operator_manifests, wait_for

SUITE = REPO / "tests" / "differential" / "suites" / "native-objects"
#: Seconds Kyverno's objects must stay unchanged before they are compared.
STABLE = 5.0
GENERATED = ("validatingadmissionpolicies", "validatingadmissionpolicybindings", "mutatingadmissionpolicies",
             "mutatingadmissionpolicybindings")


class GeneratingPeer(KyvernoPeer):
    """Kyverno's admission controller with its admission policy generators on, allowed everything (status too)."""

    def _rbac(self) -> list[dict[str, Any]]:
        docs = super()._rbac()
        docs[1]["rules"] = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                            {"nonResourceURLs": ["*"], "verbs": ["*"]}]
        return docs

    def command(self) -> list[str]:
        return [c for c in super().command() if not c.startswith("--generateValidatingAdmissionPolicy")] + [
            "--generateValidatingAdmissionPolicy=true", "--generateMutatingAdmissionPolicy=true"]


def _read_back(cluster: KubeCluster) -> dict[str, dict[str, Any]]:
    out = {}
    for resource in GENERATED:
        items = json.loads(cluster.kubectl("get", resource, "-o", "json").stdout)["items"]
        for item in items:
            out[item["metadata"]["name"]] = item
    return out


@pytest.mark.slow
def test_kyvernos_admission_controller_writes_what_vpol_generates(own_cluster: KubeCluster, tmp_path: Path) -> None:
    binary = Path(go_built(BUILD_SCRIPT, "Kyverno's admission controller (the benchmark peer)"))
    for crd in load_crds():  # vpol's CRDs first: Kyverno adds only those missing
        own_cluster.kubectl("apply", "--server-side", "--field-manager=vpol-e2e", "-f", "-", input=json.dumps(crd))
    docs = [opted_in(d, "") for d in yaml.safe_load_all((SUITE / "policies.yaml").read_text()) if d]
    for doc in docs:
        doc["metadata"].pop("uid")
    exceptions = [d for d in yaml.safe_load_all((SUITE / "exceptions.yaml").read_text()) if d]
    peer = GeneratingPeer(own_cluster, tmp_path, binary=binary)
    peer.install()
    peer.start()
    custom = client.CustomObjectsApi(own_cluster.api_client)
    try:
        for doc in [*exceptions, *docs]:
            own_cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))

        def decided() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]] | None:
            """The policies and Kyverno's objects, once every policy's status says Kyverno decided it and the
            objects have not changed for a few seconds (its status controller and its generator both write
            ``status.generated``, which may say false for a MAP it did write: the objects decide)."""
            bodies = [custom.get_cluster_custom_object("policies.kyverno.io", "v1",
                                                       d["kind"].lower().replace("policy", "policies"),
                                                       d["metadata"]["name"]) for d in docs]
            objects = _read_back(own_cluster)
            versions = sorted((n, o["metadata"]["resourceVersion"]) for n, o in objects.items())
            seen.append((time.monotonic(), versions))
            undecided = [b["metadata"]["name"] for b in bodies if "generated" not in (b.get("status") or {})]
            stable = [t for t, v in seen if v == versions]
            if undecided or not objects or time.monotonic() - min(stable) < STABLE:
                return None
            return bodies, objects

        seen: list[tuple[float, list[tuple[str, str]]]] = []
        try:
            bodies, theirs = wait_for("Kyverno's decision on every policy", decided, timeout=180, interval=1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{peer.log(80)}") from None
    finally:
        peer.stop()
    for resource in GENERATED:  # read back; vpol generates the same names
        own_cluster.kubectl("delete", resource, "--all", "--wait=true")

    # vpol's operator, in Kyverno's opt-in mode, on the same policies and exceptions.
    install_operator_manifests(own_cluster)
    operator = OperatorProcess(sa_kubeconfig(own_cluster, tmp_path / "kubeconfig"), tmp_path / "operator.log",
                               extra=("--vap-generation", "opt-in", "--scan-interval", "0")).start()
    try:
        def generated() -> dict[str, dict[str, Any]]:
            """vpol's objects generated from policies (not its enforcement probe's)."""
            return {n: o for n, o in _read_back(own_cluster).items()
                    if "vpol.kyverno.io/policy" in (o["metadata"].get("labels") or {})}

        wait_for("vpol's generated objects", lambda: set(generated()) >= set(theirs), timeout=120)
        time.sleep(STABLE)
        ours = generated()
    finally:
        operator.stop()
    # Pod-controller variants are vpol's own (none here: the suite's pod policy turns autogen off).
    assert set(ours) == set(theirs), (sorted(ours), sorted(theirs))
    by_name = {("vpol-" if b["kind"] == "ValidatingPolicy" else "mpol-") + b["metadata"]["name"]: b for b in bodies}
    for name in sorted(theirs):
        policy = by_name[name.removesuffix("-binding")]
        expected = exceptions_unordered(stored(with_vpols_differences(theirs[name], policy)), policy)
        assert exceptions_unordered(stored(ours[name]), policy) == expected, name
    assert len(theirs) >= 10, sorted(theirs)

"""ImageValidatingPolicy and NamespacedImageValidatingPolicy on the real control plane, before vpol verifies
images: the kinds are served (every version, short names, printer columns), a valid policy is compiled into its
status and says it is not enforced (Verifying=False, reason NotSupported, never Ready: a policy vpol does not
enforce must not look enforced), and a broken one is refused at `kubectl apply` with `vpol check`'s messages."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.operator_process import OperatorProcess, sa_kubeconfig
from tests.e2e.test_generate_delete import Kube
from tests.e2e.test_policy_validation import served_by, vpol_check
from tests.e2e.vpol_fixtures import vpol_installed, wait_for  # noqa: F401

GROUP = "policies.kyverno.io"
KEY = ("-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEzJ2Wzd6cGaiU2Ef8b2XIbdmz4Iu2\n"
       "I1rnOOs5l8v2jsjd+5IJYgcsNz+lXLb0rrPaptb0iIdd5iqzHDtyfXeKDw==\n-----END PUBLIC KEY-----\n")


def spec(validation: str = "images.containers.map(i, verifyImageSignatures(i, [attestors.signed])).all(n, n > 0)",
         **more: Any) -> dict[str, Any]:
    return {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]},
            "matchImageReferences": [{"glob": "registry.local/*"}],
            "attestors": [{"name": "signed", "cosign": {"key": {"data": KEY}, "ctlog": {"insecureIgnoreTlog": True}}}],
            "validations": [{"expression": validation, "message": "images must be signed"}], **more}


@pytest.fixture(scope="module")
def operator(vpol_installed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    tmp = tmp_path_factory.mktemp("operator-image")
    proc = OperatorProcess(sa_kubeconfig(vpol_installed, tmp / "kubeconfig"), tmp / "operator.log").start()
    yield proc
    proc.stop()


@pytest.fixture
def kube(operator: OperatorProcess, cluster: Any) -> Iterator[Kube]:
    k = Kube(cluster)
    yield k
    k.cleanup()


@pytest.mark.parametrize("kind,short,versions", [("ImageValidatingPolicy", "ivpol", ("v1", "v1beta1", "v1alpha1")),
                                                 ("NamespacedImageValidatingPolicy", "nivpol", ("v1", "v1beta1"))])
def test_a_valid_policy_is_compiled_and_says_it_is_not_enforced(
        kind: str, short: str, versions: tuple[str, ...], kube: Kube, cluster: Any, namespace: str,
        unique_name: Callable[..., str]) -> None:
    names = []
    for version in versions:
        metadata = {"name": unique_name("ivpol", version)}
        if kind.startswith("Namespaced"):
            metadata["namespace"] = namespace
        kube.apply({"apiVersion": f"{GROUP}/{version}", "kind": kind, "metadata": metadata, "spec": spec()})
        names.append(metadata["name"])
    where = namespace if kind.startswith("Namespaced") else ""
    for name in names:
        verifying = wait_for(f"{kind} {name}: Verifying", lambda: kube.condition(short, name, "Verifying", where))
        assert verifying["status"] == "False" and verifying["reason"] == "NotSupported", verifying
        assert "nothing enforces this policy" in verifying["message"]
        compiled = kube.condition(short, name, "Compiled", where)
        assert compiled is not None and compiled["status"] == "True", compiled
        ready = kube.condition(short, name, "Ready", where)
        assert ready is not None and ready["status"] == "False" and "Verifying is False" in ready["message"]
        body = kube.get(short, name, where)
        assert body is not None and body["status"]["conditionStatus"]["ready"] is False
    args = ["get", short, "-o", "json"] + (["-n", namespace] if where else [])
    listed = {i["metadata"]["name"] for i in json.loads(cluster.kubectl(*args).stdout)["items"]}
    assert set(names) <= listed
    columns = cluster.kubectl("get", short, names[0], *(["-n", namespace] if where else [])).stdout.split("\n")[0]
    assert columns.split() == ["NAME", "AGE", "READY"]


def test_a_broken_policy_becomes_not_compiled_when_the_webhook_is_bypassed(
        kube: Kube, cluster: Any, unique_name: Callable[..., str], operator: OperatorProcess) -> None:
    """A policy stored while the validation webhook was away (or before vpol ran) is still judged: Compiled=False
    with the error's field path."""
    name = unique_name("ivpol", "broken")
    doc = {"apiVersion": f"{GROUP}/v1", "kind": "ImageValidatingPolicy", "metadata": {"name": name},
           "spec": spec("images.containers")}
    operator.stop()
    try:
        cluster.kubectl("delete", "validatingwebhookconfiguration", "vpol-policy-validation", "--ignore-not-found")
        kube.apply(doc)
    finally:
        operator.start()
    compiled = wait_for("Compiled=False", lambda: (c := kube.condition("ivpol", name, "Compiled")) and
                        c["status"] == "False" and c, timeout=90)
    assert "spec.validations[0].expression" in compiled["message"]
    assert "must evaluate to bool" in compiled["message"]


INVALID = [
    ("ImageValidatingPolicy", spec(validation="images.containers.size()")),
    ("ImageValidatingPolicy", spec(matchImageReferences=[{"expression": "object.metadata.name == ref"}])),
    ("ImageValidatingPolicy", spec(attestors=[{"name": "roots", "notary": {"certs": {"expression": "variables.nope"}}}])),
    ("NamespacedImageValidatingPolicy", spec(validation="http.Get('https://example.com') != null")),
]


@pytest.mark.parametrize("kind,body", INVALID, ids=[f"{k}-{i}" for i, (k, _b) in enumerate(INVALID)])
def test_invalid_policies_are_refused_with_vpol_checks_messages(
        kind: str, body: dict[str, Any], operator: OperatorProcess, cluster: Any, namespace: str,
        unique_name: Callable[..., str], tmp_path: Path) -> None:
    wait_for("the policy validation webhook serving this operator", lambda: served_by(cluster, operator), 90)
    metadata = {"name": unique_name("bad", kind.lower())}
    if kind.startswith("Namespaced"):
        metadata["namespace"] = namespace
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": metadata, "spec": body}))
    expected = vpol_check(path)
    assert any(line.startswith("error: ") for line in expected), expected
    proc = cluster.kubectl("apply", "-f", str(path), check=False)
    assert proc.returncode != 0, f"{kind} admitted:\n{proc.stdout}"
    for line in expected:
        assert line in proc.stderr, (line, proc.stderr)

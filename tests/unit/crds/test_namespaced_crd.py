"""The NamespacedValidatingPolicy CRD is derived from the ValidatingPolicy one: same spec and status schema."""

from __future__ import annotations

import subprocess
import sys

from .crdlib import CRDS, load_crd, version_schema


def test_generated_file_is_up_to_date():
    proc = subprocess.run([sys.executable, str(CRDS / "generate-namespaced.py"), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


def test_same_schema_namespaced_scope_and_kyvernos_versions():
    vpol, nvpol = load_crd("validatingpolicies.yaml"), load_crd("namespacedvalidatingpolicies.yaml")
    assert nvpol["spec"]["scope"] == "Namespaced"
    assert nvpol["spec"]["names"]["kind"] == "NamespacedValidatingPolicy"
    assert nvpol["spec"]["names"]["shortNames"] == ["nvpol"]
    versions = {v["name"]: v for v in nvpol["spec"]["versions"]}
    assert set(versions) == {"v1", "v1beta1"} and versions["v1"]["storage"] is True
    for name in versions:
        mine, theirs = version_schema(nvpol, name), version_schema(vpol, name)
        assert mine["properties"]["spec"] == theirs["properties"]["spec"]
        assert mine["properties"]["status"] == theirs["properties"]["status"]
        assert versions[name]["additionalPrinterColumns"] == next(
            v for v in vpol["spec"]["versions"] if v["name"] == name)["additionalPrinterColumns"]
        assert versions[name]["subresources"] == {"status": {}}


def test_namespaced_mutating_policy_crd_is_the_mutating_one_namespaced():
    proc = subprocess.run([sys.executable, str(CRDS / "generate-mutating.py"), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    mpol, nmpol = load_crd("mutatingpolicies.yaml"), load_crd("namespacedmutatingpolicies.yaml")
    assert nmpol["spec"]["scope"] == "Namespaced" and mpol["spec"]["scope"] == "Cluster"
    assert nmpol["spec"]["names"]["kind"] == "NamespacedMutatingPolicy"
    assert nmpol["spec"]["names"]["shortNames"] == ["nmpol"]
    versions = {v["name"]: v for v in nmpol["spec"]["versions"]}
    assert set(versions) == {"v1", "v1beta1"} and versions["v1beta1"]["storage"] is True
    for name in versions:
        mine, theirs = version_schema(nmpol, name), version_schema(mpol, name)
        assert mine["properties"]["spec"] == theirs["properties"]["spec"]
        assert mine["properties"]["status"] == theirs["properties"]["status"]
        assert "expression" in mine["properties"]["spec"]["properties"]["targetMatchConstraints"]["properties"]

"""The CRDs of ImageValidatingPolicy and NamespacedImageValidatingPolicy, derived from the ValidatingPolicy CRD by
crds/generate-image.py: up to date, Kyverno's names, scope, versions, columns, required fields, defaults and one-of
rules, the frame shared with the ValidatingPolicy identical to its schema, and present in kustomize and the chart."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml

from .crdlib import CRDS, load_crd, node, version_schema, walk
from .test_lifecycle_crds import without_descriptions

IVPOL, NIVPOL = "imagevalidatingpolicies.yaml", "namespacedimagevalidatingpolicies.yaml"
EXPECTED = {
    IVPOL: ("ImageValidatingPolicy", "ivpol", "Cluster", ["v1", "v1beta1", "v1alpha1"]),
    NIVPOL: ("NamespacedImageValidatingPolicy", "nivpol", "Namespaced", ["v1", "v1beta1"]),
}


def spec_of(name: str, version: str = "v1") -> dict[str, Any]:
    return node(version_schema(load_crd(name), version), "spec")


def test_generated_files_are_up_to_date() -> None:
    proc = subprocess.run([sys.executable, str(CRDS / "generate-image.py"), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", [IVPOL, NIVPOL])
def test_names_scope_versions_columns(name: str) -> None:
    kind, short, scope, versions = EXPECTED[name]
    crd = load_crd(name)
    plural = name.removesuffix(".yaml")
    assert crd["metadata"]["name"] == f"{plural}.policies.kyverno.io"
    assert crd["spec"]["scope"] == scope
    assert crd["spec"]["names"] == {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                                    "singular": kind.lower(), "shortNames": [short], "categories": ["kyverno"]}
    assert [v["name"] for v in crd["spec"]["versions"]] == versions
    assert [v["name"] for v in crd["spec"]["versions"] if v["storage"]] == ["v1beta1"]
    first = crd["spec"]["versions"][0]
    for v in crd["spec"]["versions"]:
        assert v["served"] and v["subresources"] == {"status": {}}
        assert bool(v.get("deprecated")) == (v["name"] == "v1alpha1")
        assert v["schema"] == first["schema"]
        assert [(c["name"], c["type"], c["jsonPath"]) for c in v["additionalPrinterColumns"]] == [
            ("AGE", "date", ".metadata.creationTimestamp"), ("READY", "string", ".status.conditionStatus.ready")]


def test_the_namespaced_twin_has_the_same_spec_and_status() -> None:
    for version in ("v1", "v1beta1"):
        mine, theirs = version_schema(load_crd(NIVPOL), version), version_schema(load_crd(IVPOL), version)
        assert mine["properties"]["spec"] == theirs["properties"]["spec"]
        assert mine["properties"]["status"] == theirs["properties"]["status"]


def test_spec_fields_required_and_defaults() -> None:
    spec = spec_of(IVPOL)
    assert set(spec["properties"]) == {
        "matchConstraints", "failurePolicy", "auditAnnotations", "validationActions", "matchConditions",
        "variables", "validationConfigurations", "matchImageReferences", "credentials", "images", "attestors",
        "attestations", "validations", "webhookConfiguration", "evaluation", "autogen"}
    assert spec["required"] == ["attestors", "validations"]
    vc = node(spec, "validationConfigurations")
    assert vc["default"] == {}
    for key in ("mutateDigest", "verifyDigest", "required"):
        assert node(vc, key)["type"] == "boolean" and node(vc, key)["default"] is True
    assert node(spec, "matchImageReferences[]")["oneOf"] == [{"required": ["glob"]}, {"required": ["expression"]}]
    attestor = node(spec, "attestors[]")
    assert attestor["required"] == ["name"]
    assert attestor["oneOf"] == [{"required": ["cosign"]}, {"required": ["notary"]}]
    assert set(node(attestor, "cosign")["properties"]) == {"key", "keyless", "certificate", "source", "ctlog", "tuf",
                                                          "annotations", "trustedRoot"}
    assert node(attestor, "cosign.keyless")["required"] == ["identities"]
    for path in ("cosign.certificate.cert", "cosign.certificate.certChain", "cosign.trustedRoot", "notary.certs",
                 "notary.tsaCerts"):
        assert node(attestor, path)["oneOf"] == [{"required": ["value"]}, {"required": ["expression"]}], path
    pull = node(attestor, "cosign.source.PullSecrets")
    assert pull["x-kubernetes-list-map-keys"] == ["name"] and pull["items"]["properties"]["name"]["default"] == ""
    attestation = node(spec, "attestations[]")
    assert attestation["required"] == ["name"] and "oneOf" not in attestation
    assert node(attestation, "intoto")["required"] == ["type"] == node(attestation, "referrer")["required"]
    assert node(spec, "credentials.providers[]")["enum"] == ["default", "amazon", "azure", "google", "github"]
    assert node(spec, "images[]")["required"] == ["name", "expression"]
    assert set(node(spec, "autogen")["properties"]) == {"podControllers"}
    assert "enum" not in node(spec, "validations[].reason")


def test_the_shared_frame_is_the_validating_policys() -> None:
    vp = node(version_schema(load_crd("validatingpolicies.yaml")), "spec")
    spec = spec_of(IVPOL)
    for key in ("matchConstraints", "matchConditions", "variables", "failurePolicy", "validationActions",
                "auditAnnotations", "webhookConfiguration", "evaluation"):
        assert without_descriptions(node(spec, key)) == without_descriptions(node(vp, key)), key
    assert without_descriptions(node(spec, "validations[]")) == without_descriptions(node(vp, "validations[]"))


def test_every_node_is_typed_and_one_of_is_structural() -> None:
    for version in load_crd(IVPOL)["spec"]["versions"]:
        for path, sub in walk(version["schema"]["openAPIV3Schema"]):
            assert sub.get("type") or sub.get("x-kubernetes-preserve-unknown-fields"), path or "<root>"
            for one_of in sub.get("oneOf") or ():
                assert set(one_of) == {"required"}, path  # structural: no types inside oneOf


def test_kustomization_and_chart_carry_them() -> None:
    resources = yaml.safe_load((CRDS / "kustomization.yaml").read_text())["resources"]
    chart = CRDS.parent / "manifests" / "helm" / "vpol" / "crds"
    for name in (IVPOL, NIVPOL):
        assert name in resources
        assert (chart / name).read_text().endswith((CRDS / name).read_text())

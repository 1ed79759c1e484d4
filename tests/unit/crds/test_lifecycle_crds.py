"""The CRDs of the generating and deleting policies (gpol, ngpol, dpol, ndpol), derived from the ValidatingPolicy
CRD by crds/generate-lifecycle.py: up to date, Kyverno's names, scopes, versions and columns, the shared pieces
identical in structure to the ValidatingPolicy's, and the kind-specific fields with their required flags, enums,
defaults and the one CEL rule."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml
from cel_expr_python import cel

from .crdlib import _ENV, CRDS, load_crd, node, rule_checker, version_schema, walk

GPOL, NGPOL = "generatingpolicies.yaml", "namespacedgeneratingpolicies.yaml"
DPOL, NDPOL = "deletingpolicies.yaml", "namespaceddeletingpolicies.yaml"
ALL = [GPOL, NGPOL, DPOL, NDPOL]
#: file -> (kind, short name, scope, served versions in order)
EXPECTED = {
    GPOL: ("GeneratingPolicy", "gpol", "Cluster", ["v1", "v1beta1", "v1alpha1"]),
    NGPOL: ("NamespacedGeneratingPolicy", "ngpol", "Namespaced", ["v1", "v1beta1"]),
    DPOL: ("DeletingPolicy", "dpol", "Cluster", ["v1", "v1beta1", "v1alpha1"]),
    NDPOL: ("NamespacedDeletingPolicy", "ndpol", "Namespaced", ["v1", "v1beta1"]),
}
ONE_OF = "exactly one of expression or template must be set"


def without_descriptions(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: without_descriptions(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [without_descriptions(v) for v in schema]
    return schema


def spec_of(name: str, version: str = "v1") -> dict[str, Any]:
    return node(version_schema(load_crd(name), version), "spec")


def test_generated_files_are_up_to_date() -> None:
    proc = subprocess.run([sys.executable, str(CRDS / "generate-lifecycle.py"), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", ALL)
def test_names_scope_versions_and_storage(name: str) -> None:
    kind, short, scope, versions = EXPECTED[name]
    crd = load_crd(name)
    plural = name.removesuffix(".yaml")
    assert crd["metadata"]["name"] == f"{plural}.policies.kyverno.io"
    assert crd["metadata"]["labels"] == {"app.kubernetes.io/part-of": "vpol"}
    assert crd["spec"]["group"] == "policies.kyverno.io"
    assert crd["spec"]["scope"] == scope
    assert crd["spec"]["names"] == {"kind": kind, "listKind": f"{kind}List", "plural": plural,
                                    "singular": kind.lower(), "shortNames": [short], "categories": ["kyverno"]}
    assert [v["name"] for v in crd["spec"]["versions"]] == versions
    assert all(v["served"] for v in crd["spec"]["versions"])
    assert [v["name"] for v in crd["spec"]["versions"] if v["storage"]] == ["v1beta1"]
    for v in crd["spec"]["versions"]:
        assert v["subresources"] == {"status": {}}
        assert bool(v.get("deprecated")) == (v["name"] == "v1alpha1")
        if v.get("deprecated"):
            assert v["deprecationWarning"] == (f"policies.kyverno.io/v1alpha1 {kind} is deprecated; "
                                               "use policies.kyverno.io/v1")
        root = v["schema"]["openAPIV3Schema"]
        assert root["required"] == ["spec"]
        assert root["properties"]["kind"]["description"] == f"{kind}."
        assert root["properties"]["metadata"] == {"type": "object"}
    first = crd["spec"]["versions"][0]
    for v in crd["spec"]["versions"][1:]:
        assert v["schema"] == first["schema"] and v["additionalPrinterColumns"] == first["additionalPrinterColumns"]


@pytest.mark.parametrize("name", ALL)
def test_printer_columns(name: str) -> None:
    columns = load_crd(name)["spec"]["versions"][0]["additionalPrinterColumns"]
    age = {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    if name in (GPOL, NGPOL):
        assert columns == [age]
    else:
        assert [{k: c[k] for k in ("name", "type", "jsonPath")} for c in columns] == [
            age, {"name": "READY", "type": "string", "jsonPath": ".status.conditionStatus.ready"}]
        assert node(version_schema(load_crd(name)), "status.conditionStatus.ready")["type"] == "boolean"


@pytest.mark.parametrize(("namespaced", "cluster"), [(NGPOL, GPOL), (NDPOL, DPOL)])
def test_namespaced_twin_has_the_same_spec_and_status(namespaced: str, cluster: str) -> None:
    for version in ("v1", "v1beta1"):
        mine, theirs = version_schema(load_crd(namespaced), version), version_schema(load_crd(cluster), version)
        assert mine["properties"]["spec"] == theirs["properties"]["spec"]
        assert mine["properties"]["status"] == theirs["properties"]["status"]


@pytest.mark.parametrize("name", ALL)
def test_shared_pieces_are_the_validating_policys(name: str) -> None:
    vp = node(version_schema(load_crd("validatingpolicies.yaml")), "spec")
    spec = spec_of(name)
    pieces = {"matchConstraints": "matchConstraints", "variables": "variables"}
    if name in (GPOL, NGPOL):
        pieces |= {"matchConditions": "matchConditions", "auditAnnotations": "auditAnnotations",
                   "webhookConfiguration": "webhookConfiguration"}
    else:
        pieces |= {"conditions": "matchConditions"}
    for mine, theirs in pieces.items():
        assert without_descriptions(node(spec, mine)) == without_descriptions(node(vp, theirs)), mine
    vp_status = node(version_schema(load_crd("validatingpolicies.yaml")), "status")
    status = node(version_schema(load_crd(name)), "status")
    assert without_descriptions(node(status, "conditionStatus")) == without_descriptions(
        node(vp_status, "conditionStatus"))


def test_generating_policy_spec() -> None:
    spec = spec_of(GPOL)
    assert set(spec["properties"]) == {"matchConstraints", "matchConditions", "variables", "auditAnnotations",
                                       "webhookConfiguration", "evaluation", "generate", "useServerSideApply"}
    assert spec["required"] == ["generate"]
    assert "x-kubernetes-validations" not in spec
    generate = node(spec, "generate")
    assert generate["type"] == "array" and generate["minItems"] == 1
    item = generate["items"]
    assert set(item["properties"]) == {"expression", "template"} and "required" not in item
    assert item["properties"]["expression"]["type"] == "string"
    template = node(spec, "generate[].template")
    assert template["required"] == ["value"]
    assert node(template, "value") == {**node(template, "value"), "type": "string", "minLength": 1}
    interpolate = node(template, "interpolate")
    assert interpolate["enum"] == ["none", "cel"] and interpolate["default"] == "none"
    assert node(spec, "useServerSideApply")["type"] == "boolean"
    assert "default" not in node(spec, "useServerSideApply")


def test_generating_policy_evaluation_defaults() -> None:
    evaluation = node(spec_of(GPOL), "evaluation")
    assert set(evaluation["properties"]) == {"admission", "generateExisting", "synchronize",
                                             "orphanDownstreamOnPolicyDelete", "skipBackgroundRequests"}
    defaults = {"admission.enabled": True, "generateExisting.enabled": False, "synchronize.enabled": False,
                "orphanDownstreamOnPolicyDelete.enabled": False, "skipBackgroundRequests": True}
    for path, default in defaults.items():
        field = node(evaluation, path)
        assert field["type"] == "boolean" and field["default"] is default, path


def test_exactly_one_of_expression_or_template() -> None:
    item = node(spec_of(GPOL), "generate[]")
    [rule] = item["x-kubernetes-validations"]
    assert rule["message"] == ONE_OF
    ok = rule_checker(item)
    assert ok({"expression": "generator.Apply('default', [])"})
    assert ok({"template": {"value": "apiVersion: v1\nkind: ConfigMap\n"}})
    assert ok({"template": {"value": "x", "interpolate": "cel"}})
    assert not ok({"expression": "true", "template": {"value": "x"}})
    assert not ok({})


def test_deleting_policy_spec_and_status() -> None:
    spec = spec_of(DPOL)
    assert set(spec["properties"]) == {"matchConstraints", "conditions", "variables", "schedule",
                                       "deletionPropagationPolicy"}
    assert spec["required"] == ["schedule"]
    assert node(spec, "schedule")["type"] == "string"
    assert node(spec, "deletionPropagationPolicy")["enum"] == ["Foreground", "Background", "Orphan"]
    assert "default" not in node(spec, "deletionPropagationPolicy")
    conditions = node(spec, "conditions")
    assert conditions["x-kubernetes-list-type"] == "map" and conditions["x-kubernetes-list-map-keys"] == ["name"]
    assert conditions["items"]["required"] == ["expression", "name"]
    status = node(version_schema(load_crd(DPOL)), "status")
    assert set(status["properties"]) == {"conditionStatus", "conditions", "lastExecutionTime"}
    assert node(status, "lastExecutionTime") == {**node(status, "lastExecutionTime"), "type": "string",
                                                 "format": "date-time"}
    assert set(node(version_schema(load_crd(GPOL)), "status")["properties"]) == {"conditionStatus", "conditions"}


@pytest.mark.parametrize("name", ALL)
def test_structural_described_and_rules_compile(name: str) -> None:
    crd = load_crd(name)
    rules = 0
    for version in crd["spec"]["versions"]:
        for path, sub in walk(version["schema"]["openAPIV3Schema"]):
            assert sub.get("type") or sub.get("x-kubernetes-preserve-unknown-fields"), f"{path or '<root>'} has no type"
            if sub.get("type") == "array":
                assert isinstance(sub.get("items"), dict), path
            for forbidden in ("$ref", "definitions", "oneOf", "anyOf", "allOf", "not"):
                assert forbidden not in sub, path
            scalar_element = path.endswith(("[]", "{}")) and sub.get("type") != "object"
            if path not in ("", "metadata") and not scalar_element:
                assert sub.get("description"), f"{path} has no description"
            for rule in sub.get("x-kubernetes-validations") or ():
                assert "\n" not in rule["message"], path
                assert _ENV.compile(rule["rule"]).return_type() == cel.Type.BOOL, path
                rules += 1
    assert rules > 0


def test_kustomization_and_helm_chart_carry_them() -> None:
    resources = yaml.safe_load((CRDS / "kustomization.yaml").read_text())["resources"]
    chart = CRDS.parent / "manifests" / "helm" / "vpol" / "crds"
    for name in ALL:
        assert name in resources
        assert (chart / name).read_text().endswith((CRDS / name).read_text())

"""The CRDs: they parse, are structural, share one schema across versions, and accept the seed's fields."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from .crdlib import CRDS, SEEDS, load_crd, node, polex_crd, version_schema, vpol_crd, walk  # noqa: F401 (fixtures)

SEED = SEEDS / "001_8d8975718528a734.txt"
_FIELD = re.compile(
    r"^(?P<name>[A-Za-z][A-Za-z0-9]*) (?P<type>string|boolean|integer|number|object|\[\]object|\[\]string)"
    r"(?P<required> required)?$"
)
_CONSTRAINT = re.compile(r"^(?P<key>format|enum|pattern|maxLength|minLength|minimum|maximum): (?P<value>.+)$")


def parse_seed(text: str) -> list[dict[str, Any]]:
    """Field lines of the seed (``name type [required]``) with the constraint lines after them."""
    fields: list[dict[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        m = _FIELD.match(line)
        if m:
            fields.append({"name": m["name"], "type": m["type"], "required": bool(m["required"]), "constraints": {}})
            continue
        c = _CONSTRAINT.match(line)
        if c and fields:
            fields[-1]["constraints"][c["key"]] = c["value"]
    return fields


def _type_of(schema: dict[str, Any]) -> str:
    if schema.get("type") == "array":
        return "[]" + schema["items"]["type"]
    return schema["type"]


def place_seed_fields(schema: dict[str, Any], fields: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """Put every seed field into the schema tree.

    The seed lists fields depth first, siblings in alphabetical order, with no
    indentation. A field belongs to the innermost open object that has a
    property of that name coming after the previous sibling; if no open
    object has it, the schema lacks the field.
    """
    # frames: [object schema, last sibling name, path]
    frames: list[list[Any]] = [[schema, None, ""]]
    placed = []
    for f in fields:
        while frames:
            obj, last, path = frames[-1]
            props = obj.get("properties") or {}
            if f["name"] in props and (last is None or f["name"] > last):
                break
            frames.pop()
        assert frames, f"seed field {f['name']!r} has no place in the schema"
        frames[-1][1] = f["name"]
        parent, _, path = frames[-1]
        child = parent["properties"][f["name"]]
        child_path = f"{path}.{f['name']}" if path else f["name"]
        placed.append((child_path, f, child, parent))
        if f["type"] == "object":
            frames.append([child, None, child_path])
        elif f["type"] == "[]object":
            frames.append([child["items"], None, child_path + "[]"])
    return placed


def test_seed_parser_sees_every_field_line() -> None:
    fields = parse_seed(SEED.read_text())
    names = [f["name"] for f in fields]
    # spot checks against the seed text itself
    assert names[:5] == ["apiVersion", "kind", "metadata", "spec", "auditAnnotations"]
    assert names[-1] == "generated"
    assert len(fields) > 70


def test_every_seed_field_exists_with_its_type_required_flag_and_constraints(vpol_crd: dict[str, Any]) -> None:
    schema = version_schema(vpol_crd)
    placed = place_seed_fields(schema, parse_seed(SEED.read_text()))
    paths = {p for p, *_ in placed}
    for path, field, child, parent in placed:
        assert _type_of(child) == field["type"], path
        assert (field["name"] in (parent.get("required") or [])) == field["required"], f"required flag of {path}"
        for key, value in field["constraints"].items():
            if key == "enum":
                assert set(child["enum"]) == {v.strip() for v in value.split(",")}, path
            elif key in ("maxLength", "minLength", "minimum", "maximum"):
                assert child[key] == int(value), path
            else:
                assert child[key] == value, path
    # the seed's VAP-shaped sub-structures all landed where they belong
    for expected in (
        "spec.matchConstraints.resourceRules[].scope",
        "spec.matchConstraints.excludeResourceRules[].resourceNames",
        "spec.matchConstraints.namespaceSelector.matchExpressions[].values",
        "spec.matchConstraints.objectSelector.matchLabels",
        "spec.webhookConfiguration.timeoutSeconds",
        "spec.autogen.validatingAdmissionPolicy.enabled",
        "status.conditionStatus.conditions[].observedGeneration",
        "status.autogen.configs",
        "status.generated",
    ):
        assert expected in paths


def test_vap_validation_and_variable_shapes_from_the_vap_seed(vpol_crd: dict[str, Any]) -> None:
    # seed 000/003: the VAP spec pieces a ValidatingPolicy reuses (no paramKind in a ValidatingPolicy)
    spec = node(version_schema(vpol_crd), "spec")
    for name in ("auditAnnotations", "failurePolicy", "matchConditions", "matchConstraints", "validations", "variables"):
        assert name in spec["properties"]
    assert "paramKind" not in spec["properties"]
    assert set(node(spec, "validations[]")["properties"]) == {"expression", "message", "messageExpression", "reason"}
    assert node(spec, "validations[]")["required"] == ["expression"]


def test_structural(vpol_crd: dict[str, Any], polex_crd: dict[str, Any]) -> None:
    for crd in (vpol_crd, polex_crd):
        for version in crd["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            for path, sub in walk(schema):
                assert sub.get("type") or sub.get("x-kubernetes-preserve-unknown-fields") or sub.get(
                    "x-kubernetes-int-or-string"
                ), f"{crd['metadata']['name']} {version['name']}: {path or '<root>'} has no type"
                if sub.get("type") == "array":
                    assert isinstance(sub.get("items"), dict), f"{path}: array without items"
                assert not (sub.get("properties") and sub.get("additionalProperties")), path
                for forbidden in ("$ref", "definitions", "oneOf", "anyOf", "allOf", "not"):
                    assert forbidden not in sub, f"{path}: {forbidden} is not allowed in a structural schema"
            # metadata at the root may only be a plain object
            assert schema["properties"]["metadata"] == {"type": "object"}


def test_versions_share_one_schema(vpol_crd: dict[str, Any], polex_crd: dict[str, Any]) -> None:
    for crd in (vpol_crd, polex_crd):
        versions = crd["spec"]["versions"]
        assert [v["name"] for v in versions] == ["v1", "v1beta1", "v1alpha1"]
        assert all(v["served"] for v in versions)
        assert [v["name"] for v in versions if v["storage"]] == ["v1"]
        first = versions[0]["schema"]
        for v in versions[1:]:
            assert v["schema"] == first, v["name"]
            assert v.get("additionalPrinterColumns") == versions[0].get("additionalPrinterColumns")
            assert v.get("subresources") == versions[0].get("subresources")
        alpha = versions[2]
        assert alpha["deprecated"] is True and "deprecated" in alpha["deprecationWarning"]
        assert not versions[0].get("deprecated") and not versions[1].get("deprecated")


def test_names_scope_and_subresources(vpol_crd: dict[str, Any], polex_crd: dict[str, Any]) -> None:
    spec = vpol_crd["spec"]
    assert vpol_crd["metadata"]["name"] == "validatingpolicies.policies.kyverno.io"
    assert spec["group"] == "policies.kyverno.io"
    assert spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == "ValidatingPolicy"
    assert spec["names"]["shortNames"] == ["vpol"]
    assert spec["names"]["categories"] == ["kyverno"]
    assert spec["versions"][0]["subresources"] == {"status": {}}
    pspec = polex_crd["spec"]
    assert polex_crd["metadata"]["name"] == "policyexceptions.policies.kyverno.io"
    assert pspec["scope"] == "Namespaced"
    assert pspec["names"]["kind"] == "PolicyException"


def test_printer_columns(vpol_crd: dict[str, Any]) -> None:
    columns = {c["name"]: c for c in vpol_crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["Ready"]["jsonPath"] == ".status.conditionStatus.ready"
    assert columns["Actions"]["jsonPath"] == ".spec.validationActions"
    assert columns["Background"]["jsonPath"] == ".spec.evaluation.background.enabled"
    assert columns["VAP"]["jsonPath"] == ".status.generated"
    assert columns["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    schema = version_schema(vpol_crd)
    for c in columns.values():  # each column points at a declared field
        path = c["jsonPath"].lstrip(".")
        if path.startswith("metadata."):
            continue
        assert node(schema, path)


def test_status_declares_what_the_operator_writes(vpol_crd: dict[str, Any]) -> None:
    status = node(version_schema(vpol_crd), "status")
    assert node(status, "conditionStatus.ready")["type"] == "boolean"
    assert node(status, "conditionStatus.message")["type"] == "string"
    cond = node(status, "conditionStatus.conditions[]")
    assert set(cond["properties"]) == {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"}
    assert node(status, "conditions[]") == cond
    config = node(status, "autogen.configs")["additionalProperties"]
    assert set(node(config, "targets[]")["properties"]) == {"group", "version", "resource", "kind"}
    assert config["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] is True
    assert node(status, "generated")["type"] == "boolean"
    warning = node(status, "typeChecking.expressionWarnings[]")
    assert set(warning["properties"]) == {"fieldRef", "warning"}
    assert set(warning["required"]) == {"fieldRef", "warning"}


def test_policy_exception_fields(polex_crd: dict[str, Any]) -> None:
    spec = node(version_schema(polex_crd), "spec")
    assert set(spec["properties"]) == {"policyRefs", "matchConditions", "images", "allowedValues", "reportResult", "expiresAt"}
    assert spec["required"] == ["policyRefs"]
    refs = node(spec, "policyRefs[]")
    assert set(refs["properties"]) == {"name", "kind"} and set(refs["required"]) == {"name", "kind"}
    assert node(spec, "reportResult")["enum"] == ["skip", "pass"]
    assert node(spec, "matchConditions[]")["required"] == ["expression", "name"]


def test_descriptions_are_ours_and_present(vpol_crd: dict[str, Any]) -> None:
    seed_sentences = {s.strip() for s in re.split(r"(?<=\.)\s", SEED.read_text()) if len(s.strip()) > 40}
    schema = version_schema(vpol_crd)
    for path, sub in walk(schema):
        desc = sub.get("description", "")
        for sentence in re.split(r"(?<=\.)\s", desc):
            assert sentence.strip() not in seed_sentences, f"{path} copies the seed: {sentence!r}"
        # kubectl explain has something to say about every field; scalar list
        # items and map values are explained by their parent
        scalar_element = path.endswith(("[]", "{}")) and sub.get("type") != "object"
        if path not in ("", "metadata") and not scalar_element:
            assert desc, f"{path} has no description"


def test_kustomization_lists_the_crds() -> None:
    kustomization = yaml.safe_load((CRDS / "kustomization.yaml").read_text())
    assert {"validatingpolicies.yaml", "policyexceptions.yaml"} <= set(kustomization["resources"])
    for name in kustomization["resources"]:
        assert (CRDS / name).is_file(), name


@pytest.mark.parametrize("name", ["validatingpolicies.yaml", "policyexceptions.yaml"])
def test_rule_messages_are_single_lines_and_lists_with_rules_are_bounded(name: str) -> None:
    crd = load_crd(name)
    for path, sub in walk(version_schema(crd)):
        for rule in sub.get("x-kubernetes-validations") or ():
            assert "\n" not in rule["message"], path
            # the API server estimates rule cost from these bounds
            if sub.get("type") == "array":
                assert "maxItems" in sub, f"{path}: a rule iterates an unbounded list"
            if sub.get("type") == "string":
                assert "maxLength" in sub, f"{path}: a rule reads an unbounded string"


def test_every_deprecation_warning_names_its_own_kind() -> None:
    """A deprecated version's warning (what kubectl prints on each use of it) names the kind it is about, in crds/
    and in the chart's copies (a derived CRD once carried the ValidatingPolicy's)."""
    chart = CRDS.parent / "manifests" / "helm" / "vpol" / "crds"
    checked = 0
    for path in [*sorted(CRDS.glob("*.yaml")), *sorted(chart.glob("*.yaml"))]:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            kind = doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                if version.get("deprecated"):
                    warning = " ".join(str(version.get("deprecationWarning", "")).split())
                    assert f"/{version['name']} {kind} is deprecated" in warning, (path.name, warning)
                    checked += 1
    assert checked >= 12, checked

"""Our warnings against what the real kube-controller-manager v1.37.2 wrote for the same policies.

data/kcm-typechecking-v1.37.2.yaml holds two ValidatingAdmissionPolicies and
the ``status.typeChecking`` that kube-controller-manager's status controller
wrote for them (captured on the tests/controlplane cluster with crds/
applied). Every warning must be identical, except where we deliberately
type more leniently (see vpol.cel.schemas): Kubernetes drops untyped
Quantity values and exposes no fields of property-less objects (FieldsV1)
or of x-kubernetes-preserve-unknown-fields objects; we type those as dyn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from vpol.cel.typecheck import check, kinds_to_check
from vpol.model.discovery import builtin
from vpol.model.policy import Rule

ROOT = Path(__file__).resolve().parents[3]
DATA = yaml.safe_load((Path(__file__).parent / "data" / "kcm-typechecking-v1.37.2.yaml").read_text())

#: (case, fieldRef) -> the kinds Kubernetes warns about and we do not, and why.
LENIENT = {
    (0, "spec.validations[4].expression"): ("apps/v1, Kind=Deployment", "resources.limits holds Quantity values"),
    (0, "spec.validations[9].expression"): ("/v1, Kind=Pod", "resources.limits holds Quantity values"),
    (0, "spec.validations[10].expression"): ("*", "fieldsV1 is an object without properties"),
    (1, "spec.validations[7].expression"): ("policies.kyverno.io/v1, Kind=ValidatingPolicy",
                                               "autogen spec preserves unknown fields"),
}


def our_warnings(spec: dict[str, Any]) -> dict[str, str]:
    discovery = builtin().with_crds([yaml.safe_load((ROOT / "crds" / "validatingpolicies.yaml").read_text())])
    rules = [Rule(api_groups=tuple(r["apiGroups"]), api_versions=tuple(r["apiVersions"]), resources=tuple(r["resources"]))
             for r in spec["matchConstraints"]["resourceRules"]]
    exprs = [(f"spec.variables[{i}].expression", var["expression"], "variable") for i, var in enumerate(spec.get("variables", []))]
    for i, val in enumerate(spec["validations"]):
        exprs.append((f"spec.validations[{i}].expression", val["expression"], "validation"))
        if "messageExpression" in val:
            exprs.append((f"spec.validations[{i}].messageExpression", val["messageExpression"], "messageExpression"))
    names = [var["name"] for var in spec.get("variables", [])]
    warnings = check(exprs, names, kinds_to_check(rules, discovery), discovery.schema)
    # the API server checks validations only
    return {w.field_path: w.warning for w in warnings if w.field_path.startswith("spec.validations")}


def drop_kind(warning: str, kind: str) -> str | None:
    if kind == "*":
        return None
    parts = [p if p.endswith("\n") else p + "\n" for p in warning.rstrip("\n").split("\n\n")]
    kept = [p for p in parts if not p.startswith(kind + ":")]
    return "\n".join(kept) if kept else None


@pytest.mark.parametrize("case", range(len(DATA["cases"])))
def test_same_warnings_as_kube_controller_manager(case: int) -> None:
    spec = DATA["cases"][case]["spec"]
    theirs = {w["fieldRef"]: w["warning"] for w in DATA["cases"][case]["typeChecking"]["expressionWarnings"]}
    ours = our_warnings(spec)
    assert len(theirs) >= 7
    for path, warning in theirs.items():
        lenient = LENIENT.get((case, path))
        expected = drop_kind(warning, lenient[0]) if lenient else warning
        assert ours.get(path) == expected, path
    assert set(ours) <= set(theirs)

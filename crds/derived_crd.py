"""What the generators of derived CRDs (generate-namespaced.py, generate-mutating.py, generate-lifecycle.py,
generate-image.py) share: each derives
its CRD from validatingpolicies.yaml beside it, then writes it, or with ``--check`` says whether the file
on disk is what it would write."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

Schema = dict[str, Any]

STORAGE = "v1beta1"
NAMESPACED_VERSIONS = ("v1", "v1beta1")
AGE = {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
READY = {"name": "READY", "type": "string", "jsonPath": ".status.conditionStatus.ready",
         "description": "Whether the policy is ready"}

SOURCE = Path(__file__).resolve().parent / "validatingpolicies.yaml"


def render(derive: Callable[[dict[str, Any]], dict[str, Any]], header: str) -> str:
    (source,) = [d for d in yaml.safe_load_all(SOURCE.read_text()) if d]
    return header + "---\n" + yaml.safe_dump(derive(source), sort_keys=False, width=120)


Output = tuple[Callable[[dict[str, Any]], dict[str, Any]], Path, str]


def main(derive: Callable[[dict[str, Any]], dict[str, Any]], target: Path, header: str, script: str,
         more: tuple[Output, ...] = ()) -> int:
    """Write (or ``--check``) ``target`` and every further (derive, target, header) of ``more``."""
    stale = 0
    for each_derive, each_target, each_header in ((derive, target, header), *more):
        text = render(each_derive, each_header)
        if sys.argv[1:] == ["--check"]:
            if not each_target.exists() or each_target.read_text() != text:
                print(f"{each_target} is out of date: run {Path(script).name}", file=sys.stderr)
                stale += 1
            continue
        each_target.write_text(text)
    return 1 if stale else 0


# --- pieces shared with the ValidatingPolicy CRD (used by generate-lifecycle.py and generate-image.py) -------------------------------------------------------------

def shared(props: Schema, name: str, description: str) -> Schema:
    """A copy of the ValidatingPolicy's spec field ``name`` with this kind's description."""
    out: Schema = copy.deepcopy(props[name])
    out["description"] = description
    return out


def conditions(props: Schema, description: str, expression: str) -> Schema:
    """matchConditions' schema (a list keyed by name, at most 64) with this kind's wording."""
    out = shared(props, "matchConditions", description)
    out["items"]["properties"]["expression"]["description"] = expression
    return out


def match_constraints(props: Schema, description: str) -> Schema:
    return shared(props, "matchConstraints", description)


def variables(props: Schema, description: str) -> Schema:
    return shared(props, "variables", description)


def condition_status(vp_status: Schema) -> Schema:
    out: Schema = copy.deepcopy(vp_status["properties"]["conditionStatus"])
    out["description"] = "Readiness summary of the policy (the same shape for every policy kind)."
    out["properties"]["message"]["description"] = "A note about the policy's state; empty when there is none."
    out["properties"]["ready"]["description"] = "True when every condition is True."
    return out


def conditions_copy(vp_status: Schema) -> Schema:
    """status.conditions (a vpol addition, as on the other kinds: `kubectl wait --for=condition=Ready`)."""
    out: Schema = copy.deepcopy(vp_status["properties"]["conditions"])
    out["description"] = ("The conditions of status.conditionStatus.conditions, also here, where `kubectl wait "
                          "--for=condition=...` reads them.")
    return out


def ordered(schema: Any) -> Any:
    """The schema with description, then type, first in every node, as in the ValidatingPolicy CRD."""
    if isinstance(schema, list):
        return [ordered(each) for each in schema]
    if not isinstance(schema, dict):
        return schema
    first = [k for k in ("description", "type") if k in schema]
    return {k: ordered(schema[k]) for k in [*first, *(k for k in schema if k not in first)]}


def names(kind: str, short: str) -> Schema:
    plural = kind.lower().removesuffix("y") + "ies"
    return {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower(),
            "shortNames": [short], "categories": ["kyverno"]}


def derive(source: Schema, *, kind: str, short: str, namespaced: bool, description: str,
            spec: Callable[[Schema], Schema], status: Callable[[Schema], Schema],
            columns: list[Schema]) -> Schema:
    crd = copy.deepcopy(source)
    crd_names = names(kind, short)
    crd["metadata"]["name"] = f"{crd_names['plural']}.policies.kyverno.io"
    crd["spec"]["names"] = crd_names
    crd["spec"]["scope"] = "Namespaced" if namespaced else "Cluster"
    if namespaced:
        crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] in NAMESPACED_VERSIONS]
    for version in crd["spec"]["versions"]:
        version["storage"] = version["name"] == STORAGE
        if version.get("deprecated"):
            version["deprecationWarning"] = (f"policies.kyverno.io/{version['name']} {kind} is deprecated; use "
                                             "policies.kyverno.io/v1")
        root = version["schema"]["openAPIV3Schema"]
        root["description"] = description
        root["properties"]["kind"]["description"] = f"{kind}."
        root["properties"]["spec"] = ordered(spec(root["properties"]["spec"]))
        root["properties"]["status"] = ordered(status(root["properties"]["status"]))
        version["subresources"] = {"status": {}}
        version["additionalPrinterColumns"] = copy.deepcopy(columns)
    return crd



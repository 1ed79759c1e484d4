#!/usr/bin/env python3
"""Writes crds/namespacedvalidatingpolicies.yaml from crds/validatingpolicies.yaml.

A NamespacedValidatingPolicy has exactly the ValidatingPolicy's spec and
status (Kyverno's twin kind, limited to its own namespace), so its CRD is
derived, never edited by hand: names, scope and served versions change (v1
and v1beta1, as Kyverno serves the namespaced kinds), the schema does not.
tests/unit/crds checks that the file is what this script writes.

Usage: crds/generate-namespaced.py [--check]
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import derived_crd  # beside this script

HERE = Path(__file__).resolve().parent
TARGET = HERE / "namespacedvalidatingpolicies.yaml"
HEADER = """\
# NamespacedValidatingPolicy (policies.kyverno.io): a ValidatingPolicy limited to its own namespace.
# Served versions: v1 (storage), v1beta1. Generated from validatingpolicies.yaml by
# crds/generate-namespaced.py: do not edit by hand.
"""


def derive(source: dict) -> dict:
    crd = copy.deepcopy(source)
    crd["metadata"]["name"] = "namespacedvalidatingpolicies.policies.kyverno.io"
    crd["spec"]["names"] = {
        "kind": "NamespacedValidatingPolicy",
        "listKind": "NamespacedValidatingPolicyList",
        "plural": "namespacedvalidatingpolicies",
        "singular": "namespacedvalidatingpolicy",
        "shortNames": ["nvpol"],
        "categories": ["kyverno"],
    }
    crd["spec"]["scope"] = "Namespaced"
    crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] in ("v1", "v1beta1")]
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        schema["description"] = (
            "A NamespacedValidatingPolicy checks the objects of its own namespace with CEL expressions, in "
            "admission requests (through vpol's webhook) and in background scans. Same spec as a ValidatingPolicy.")
    return crd


if __name__ == "__main__":
    sys.exit(derived_crd.main(derive, TARGET, HEADER, __file__))

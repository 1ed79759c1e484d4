#!/usr/bin/env python3
"""Writes crds/mutatingpolicies.yaml and crds/namespacedmutatingpolicies.yaml from crds/validatingpolicies.yaml.

A MutatingPolicy shares the admission-policy frame of a ValidatingPolicy
(matchConstraints, matchConditions, variables, failurePolicy, evaluation,
autogen, webhookConfiguration, auditAnnotations) and has mutations instead of
validations (Kyverno's MutatingPolicy, NOTES.md section 10). Its CRD is
derived so that the shared parts never drift: those schemas are taken from
the ValidatingPolicy CRD, the mutation-specific fields are declared here.
Served versions are Kyverno's: v1, v1beta1 (storage) and v1alpha1
(deprecated). The NamespacedMutatingPolicy (Kyverno's twin kind, limited to
its own namespace) has exactly the same spec and status; it is served at v1 and
v1beta1 (storage), as Kyverno serves the namespaced kinds. tests/unit/crds
checks that the files are what this script writes.

Usage: crds/generate-mutating.py [--check]
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import derived_crd  # beside this script

HERE = Path(__file__).resolve().parent
TARGET = HERE / "mutatingpolicies.yaml"
HEADER = """\
# MutatingPolicy (policies.kyverno.io): cluster-scoped CEL mutation policies run by vpol.
# Served versions: v1, v1beta1 (storage), v1alpha1 (deprecated). Generated from validatingpolicies.yaml
# by crds/generate-mutating.py: do not edit by hand.
"""
NAMESPACED_TARGET = HERE / "namespacedmutatingpolicies.yaml"
NAMESPACED_HEADER = """\
# NamespacedMutatingPolicy (policies.kyverno.io): a MutatingPolicy limited to its own namespace.
# Served versions: v1, v1beta1 (storage). Generated from validatingpolicies.yaml by
# crds/generate-mutating.py: do not edit by hand.
"""

SHARED = ("matchConstraints", "matchConditions", "variables", "failurePolicy", "auditAnnotations",
          "webhookConfiguration")


def _expression(description: str) -> dict[str, Any]:
    return {"type": "object", "description": description, "required": ["expression"],
            "properties": {"expression": {"type": "string", "description": "The CEL expression."}}}


def _spec(vp_spec: dict[str, Any]) -> dict[str, Any]:
    props = vp_spec["properties"]
    out = {name: copy.deepcopy(props[name]) for name in SHARED}
    out["mutations"] = {
        "type": "array",
        "x-kubernetes-list-type": "atomic",
        "description": "The changes to make, applied in order, each to the result of the one before.",
        "items": {
            "type": "object",
            "required": ["patchType"],
            "properties": {
                "patchType": {"type": "string", "enum": ["ApplyConfiguration", "JSONPatch"],
                              "description": "ApplyConfiguration: a CEL Object{...} merged into the object with "
                                             "server-side apply semantics; JSONPatch: a CEL list of "
                                             "JSONPatch{op, path, value} applied in order."},
                "applyConfiguration": _expression(
                    "For patchType ApplyConfiguration: an expression building Object{...} (types named by schema "
                    "path, e.g. Object.spec.containers)."),
                "jsonPatch": _expression("For patchType JSONPatch: an expression building [JSONPatch{...}]."),
            },
        },
    }
    out["reinvocationPolicy"] = {
        "type": "string", "enum": ["Never", "IfNeeded"],
        "description": "IfNeeded: run the policy once more when a later mutation changed the object. "
                       "Defaults to Never."}
    evaluation = copy.deepcopy(props["evaluation"])
    evaluation["properties"]["mode"]["enum"] = ["Kubernetes"]
    evaluation["properties"]["mode"]["description"] = "Kubernetes, the only mode of a MutatingPolicy."
    evaluation["properties"]["mutateExisting"] = {
        "type": "object", "description": "Mutation of existing objects (the targets): when the policy is created "
                                         "or changed, on each matching trigger, and in background scans.",
        "properties": {"enabled": {"type": "boolean", "description": "Defaults to false."}}}
    evaluation["properties"]["useServerSideApply"] = {
        "type": "boolean", "description": "Merge apply configurations with server-side-apply semantics, atomic "
                                          "fields replaced whole. Defaults to false."}
    evaluation["properties"]["skipBackgroundRequests"] = {
        "type": "boolean", "description": "Changes made by the mutation of existing objects do not trigger it "
                                          "again. Defaults to true."}
    out["evaluation"] = evaluation
    autogen = copy.deepcopy(props["autogen"])
    autogen["properties"].pop("validatingAdmissionPolicy", None)
    autogen["properties"]["mutatingAdmissionPolicy"] = {
        "type": "object",
        "description": "Whether to also create a native MutatingAdmissionPolicy (and its binding) so the API "
                       "server applies the mutations without vpol in the request path.",
        "properties": {"enabled": {
            "type": "boolean",
            "description": "true: generate the MutatingAdmissionPolicy; false: never. Unset: the operator's "
                           "--vap-generation mode decides. No default, so unset and false differ."}}}
    out["autogen"] = autogen
    target = copy.deepcopy(props["matchConstraints"])
    target["description"] = ("The objects mutateExisting changes (default: what matchConstraints matches); "
                             "matchConstraints then matches the triggers.")
    target.setdefault("properties", {})["expression"] = {
        "type": "string", "description": "A CEL expression resolving the targets from the trigger: one object, "
                                         "or a map with an items list."}
    out["targetMatchConstraints"] = target
    conditions = copy.deepcopy(props["matchConditions"])
    conditions["description"] = "Conditions each target of mutateExisting must meet (object is the target)."
    out["targetMatchConditions"] = conditions
    spec = {k: v for k, v in vp_spec.items() if k not in ("properties", "required")}
    spec["description"] = "What the policy matches and how it changes the objects it matches."
    spec["properties"] = dict(sorted(out.items()))
    return spec


def derive(source: dict[str, Any]) -> dict[str, Any]:
    crd = copy.deepcopy(source)
    crd["metadata"]["name"] = "mutatingpolicies.policies.kyverno.io"
    crd["spec"]["names"] = {
        "kind": "MutatingPolicy",
        "listKind": "MutatingPolicyList",
        "plural": "mutatingpolicies",
        "singular": "mutatingpolicy",
        "shortNames": ["mpol"],
        "categories": ["kyverno"],
    }
    crd["spec"]["scope"] = "Cluster"
    for version in crd["spec"]["versions"]:
        version["storage"] = version["name"] == "v1beta1"
        if version.get("deprecated"):  # the source's warning names ValidatingPolicy
            version["deprecationWarning"] = (f"policies.kyverno.io/{version['name']} MutatingPolicy is deprecated; "
                                             "use policies.kyverno.io/v1")
        root = version["schema"]["openAPIV3Schema"]
        root["description"] = ("A MutatingPolicy changes Kubernetes objects with CEL expressions at admission "
                               "(as a native MutatingAdmissionPolicy, see `vpol generate map`) and in `vpol apply`.")
        root["properties"]["spec"] = _spec(root["properties"]["spec"])
        version["additionalPrinterColumns"] = [
            c for c in version.get("additionalPrinterColumns", [])
            if c["name"] in ("Ready", "Enforcement", "Age")]
        version["additionalPrinterColumns"].insert(1, {
            "name": "MAP", "type": "boolean", "jsonPath": ".status.generated",
            "description": "A MutatingAdmissionPolicy is generated."})
    return crd


def derive_namespaced(source: dict[str, Any]) -> dict[str, Any]:
    crd = derive(source)
    crd["metadata"]["name"] = "namespacedmutatingpolicies.policies.kyverno.io"
    crd["spec"]["names"] = {
        "kind": "NamespacedMutatingPolicy",
        "listKind": "NamespacedMutatingPolicyList",
        "plural": "namespacedmutatingpolicies",
        "singular": "namespacedmutatingpolicy",
        "shortNames": ["nmpol"],
        "categories": ["kyverno"],
    }
    crd["spec"]["scope"] = "Namespaced"
    crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] in ("v1", "v1beta1")]
    for version in crd["spec"]["versions"]:
        version["schema"]["openAPIV3Schema"]["description"] = (
            "A NamespacedMutatingPolicy changes the objects of its own namespace with CEL expressions, at admission "
            "and (mutateExisting) in the background. Same spec as a MutatingPolicy.")
    return crd


if __name__ == "__main__":
    sys.exit(derived_crd.main(derive, TARGET, HEADER, __file__,
                              more=((derive_namespaced, NAMESPACED_TARGET, NAMESPACED_HEADER),)))

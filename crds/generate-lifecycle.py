#!/usr/bin/env python3
"""Writes the CRDs of Kyverno's lifecycle policies from crds/validatingpolicies.yaml.

Four files: generatingpolicies.yaml, namespacedgeneratingpolicies.yaml,
deletingpolicies.yaml and namespaceddeletingpolicies.yaml.

A GeneratingPolicy creates (and optionally keeps in sync) objects when a
matching request (the trigger) is admitted; a DeletingPolicy deletes, on a
cron schedule, the existing objects it matches (docs/internals/generating-and-deleting.md
holds the facts read from Kyverno 1.19.1). Both reuse pieces of the
admission-policy frame of a ValidatingPolicy: matchConstraints,
matchConditions (a DeletingPolicy's `conditions` has the same shape),
variables, auditAnnotations, webhookConfiguration and the conditionStatus of
the status. Those schemas are taken from the ValidatingPolicy CRD so that
they never drift (only descriptions that would be wrong for these kinds are
reworded); the kind-specific fields are declared here. Kyverno's served
versions: v1, v1beta1 (storage) and v1alpha1 (deprecated) for the cluster
kinds, v1 and v1beta1 (storage) for the namespaced twins, which have exactly
the same spec and status. tests/unit/crds checks that the files are what this
script writes.

Usage: crds/generate-lifecycle.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import derived_crd  # beside this script

HERE = Path(__file__).resolve().parent
Schema = dict[str, Any]

GPOL_TARGET = HERE / "generatingpolicies.yaml"
GPOL_HEADER = """\
# GeneratingPolicy (policies.kyverno.io): cluster-scoped CEL policies creating objects from triggering requests.
# Served versions: v1, v1beta1 (storage), v1alpha1 (deprecated). Generated from validatingpolicies.yaml
# by crds/generate-lifecycle.py: do not edit by hand.
"""
NGPOL_TARGET = HERE / "namespacedgeneratingpolicies.yaml"
NGPOL_HEADER = """\
# NamespacedGeneratingPolicy (policies.kyverno.io): a GeneratingPolicy limited to its own namespace.
# Served versions: v1, v1beta1 (storage). Generated from validatingpolicies.yaml by
# crds/generate-lifecycle.py: do not edit by hand.
"""
DPOL_TARGET = HERE / "deletingpolicies.yaml"
DPOL_HEADER = """\
# DeletingPolicy (policies.kyverno.io): cluster-scoped CEL policies deleting matching objects on a cron schedule.
# Served versions: v1, v1beta1 (storage), v1alpha1 (deprecated). Generated from validatingpolicies.yaml
# by crds/generate-lifecycle.py: do not edit by hand.
"""
NDPOL_TARGET = HERE / "namespaceddeletingpolicies.yaml"
NDPOL_HEADER = """\
# NamespacedDeletingPolicy (policies.kyverno.io): a DeletingPolicy limited to its own namespace.
# Served versions: v1, v1beta1 (storage). Generated from validatingpolicies.yaml by
# crds/generate-lifecycle.py: do not edit by hand.
"""

#: The rule Kyverno puts on every generate[] item, and its message.
ONE_OF_RULE = "(has(self.expression) && !has(self.template)) || (!has(self.expression) && has(self.template))"
ONE_OF_MESSAGE = "exactly one of expression or template must be set"


# --- GeneratingPolicy ----------------------------------------------------------------------------------------

def _switch(description: str, enabled: str, default: bool) -> Schema:
    return {"type": "object", "description": description,
            "properties": {"enabled": {"type": "boolean", "default": default, "description": enabled}}}


def _gpol_evaluation() -> Schema:
    return {
        "type": "object",
        "description": "When the policy runs and what happens to the objects it generated.",
        "properties": {
            "admission": _switch(
                "Generation on admission requests.",
                "Run the policy for the API requests its matchConstraints select (the triggers). Defaults to true.",
                True),
            "generateExisting": _switch(
                "Generation for triggers that already exist.",
                "Also run the policy for the existing objects it matches, when the policy is created or changed "
                "and periodically afterwards. Defaults to false.",
                False),
            "synchronize": _switch(
                "Keeping generated objects in step with their policy and trigger.",
                "Watch the generated objects: edits and deletions of them are reverted, they are re-rendered when "
                "the trigger or the policy changes, and deleted when the trigger is deleted or stops matching. "
                "Defaults to false.",
                False),
            "orphanDownstreamOnPolicyDelete": _switch(
                "What deleting the policy does to the objects it generated and keeps in sync.",
                "true: leave them in place; false: delete the synchronized objects the policy created from data "
                "(clones of existing objects are left alone either way). Defaults to false.",
                False),
            "skipBackgroundRequests": {
                "type": "boolean", "default": True,
                "description": "Ignore requests made by the background controller itself, so that writing "
                               "generated objects does not trigger the policy again. Defaults to true; false runs "
                               "the policy on those requests too."},
        },
    }


def _generate() -> Schema:
    return {
        "type": "array",
        "minItems": 1,
        "x-kubernetes-list-type": "atomic",
        "description": "What to generate, in order; at least one entry. An entry that fails stops the evaluation "
                       "(objects written by earlier entries stay).",
        "items": {
            "type": "object",
            "description": "One generation step: either a CEL expression or a YAML template, never both.",
            "x-kubernetes-validations": [{"rule": ONE_OF_RULE, "message": ONE_OF_MESSAGE}],
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "A CEL expression of type bool whose value is ignored: it writes objects through "
                                   "generator.Apply (generator.Apply(namespace, [objects]) in a cluster policy, "
                                   "generator.Apply([objects]) in a namespaced one, confined to its namespace). An "
                                   "object with a list under items is expanded into its items."},
                "template": {
                    "type": "object",
                    "description": "The objects to generate written as YAML, with optional CEL placeholders.",
                    "required": ["value"],
                    "properties": {
                        "value": {
                            "type": "string", "minLength": 1,
                            "description": "YAML with one or more documents, each a mapping describing one object. "
                                           "The YAML is parsed first; placeholders are then evaluated inside scalar "
                                           "values. Each object goes to its own metadata.namespace (a namespaced "
                                           "policy fills in its namespace and refuses any other)."},
                        "interpolate": {
                            "type": "string", "enum": ["none", "cel"], "default": "none",
                            "description": "none (the default): plain YAML, (( ... )) kept as written. cel: each "
                                           "(( expr )) is evaluated; a scalar that is a single placeholder takes the "
                                           "value itself (map, list, number...), a placeholder inside other text "
                                           "must yield a scalar and is inserted as text; \\(( writes a literal ((."},
                    },
                },
            },
        },
    }


def _gpol_spec(vp_spec: Schema) -> Schema:
    props = vp_spec["properties"]
    out: Schema = {
        "matchConstraints": derived_crd.match_constraints(
            props, "Which requests trigger the policy (and, with generateExisting, which existing objects, "
                   "evaluated as CREATE requests); a request must satisfy every part."),
        "matchConditions": derived_crd.conditions(
            props, "CEL conditions a matched trigger must meet. All must be true; any false skips the policy; an "
                   "error (none false) makes the evaluation an error. At most 64, names unique.",
            "CEL expression returning bool, with object, oldObject, request, namespaceObject and exceptions "
            "available (variables are not yet bound)."),
        "variables": derived_crd.variables(
            props, "Named CEL expressions, each evaluated at most once, on first use, and reachable as "
                   "variables.<name> from later variables, generate entries, template placeholders and "
                   "auditAnnotations (not from matchConditions). At most 256, names unique."),
        "auditAnnotations": derived_crd.shared(
            props, "auditAnnotations",
            "Values computed after generation, recorded as properties of the trigger's report result (a key message "
            "or passMessage replaces the result's message). At most 20, keys unique."),
        "webhookConfiguration": derived_crd.shared(
            props, "webhookConfiguration", "Settings of the admission webhook that receives the triggers."),
        "evaluation": _gpol_evaluation(),
        "generate": _generate(),
        "useServerSideApply": {
            "type": "boolean",
            "description": "Write generated objects with server-side apply instead of create and update. Defaults "
                           "to false."},
    }
    out["webhookConfiguration"]["properties"]["timeoutSeconds"]["description"] = (
        "How long admission waits for the webhook, in seconds (1 to 30, default 10). Generation never blocks a "
        "request: the webhook always allows and the work is queued.")
    spec: Schema = {
        "type": "object",
        "description": "Which requests trigger the policy and which objects it generates for them.",
        "required": ["generate"],
        "properties": dict(sorted(out.items())),
    }
    return spec


def _gpol_status(vp_status: Schema) -> Schema:
    return {"type": "object", "description": "The policy's state, written by the controllers.",
            "properties": {"conditionStatus": derived_crd.condition_status(vp_status),
                           "conditions": derived_crd.conditions_copy(vp_status)}}


# --- DeletingPolicy ------------------------------------------------------------------------------------------

def _dpol_spec(vp_spec: Schema) -> Schema:
    props = vp_spec["properties"]
    out: Schema = {
        "matchConstraints": derived_crd.match_constraints(
            props, "Which existing objects each run lists and considers for deletion; an object must satisfy every "
                   "part. Operations play no part (all are accepted); resources are taken literally, without "
                   "wildcard or subresource expansion. Needed for the policy to delete anything."),
        "conditions": derived_crd.conditions(
            props, "CEL conditions an object matched by matchConstraints must meet to be deleted. All must be "
                   "true; any false keeps the object; an error (none false) fails the run. At most 64, names "
                   "unique.",
            "CEL expression returning bool, with object (the listed object), namespaceObject and the policy's "
            "variables available."),
        "variables": derived_crd.variables(
            props, "Named CEL expressions, each evaluated at most once per object, on first use, and reachable as "
                   "variables.<name> from later variables and from conditions. At most 256, names unique."),
        "schedule": {
            "type": "string",
            "description": "When the policy runs, in cron syntax: 5 fields (minute hour day-of-month month "
                           "day-of-week), 6 (plus year) or 7 (seconds first, then year), or an alias such as "
                           "@hourly or @daily, in the controller's time zone. A run happens at the first scheduled "
                           "time after the last one (status.lastExecutionTime) or after the policy's creation."},
        "deletionPropagationPolicy": {
            "type": "string", "enum": ["Foreground", "Background", "Orphan"],
            "description": "How the dependents of a deleted object are treated (the propagationPolicy of the "
                           "delete call). Unset: the API server's default for the kind."},
    }
    return {
        "type": "object",
        "description": "Which existing objects the policy deletes, and when.",
        "required": ["schedule"],
        "properties": dict(sorted(out.items())),
    }


def _dpol_status(vp_status: Schema) -> Schema:
    return {"type": "object", "description": "The policy's state, written by the controller that runs it.",
            "properties": {
                "conditionStatus": derived_crd.condition_status(vp_status),
                "conditions": derived_crd.conditions_copy(vp_status),
                "lastExecutionTime": {"type": "string", "format": "date-time",
                                      "description": "When the policy last ran successfully."},
            }}


# --- the CRDs ------------------------------------------------------------------------------------------------

def derive_gpol(source: Schema) -> Schema:
    return derived_crd.derive(
        source, kind="GeneratingPolicy", short="gpol", namespaced=False, spec=_gpol_spec, status=_gpol_status,
        columns=[derived_crd.AGE],
        description="A GeneratingPolicy creates Kubernetes objects with CEL when a request it matches (the trigger) "
                    "is admitted, or for existing triggers, and can keep them in sync afterwards.")


def derive_ngpol(source: Schema) -> Schema:
    return derived_crd.derive(
        source, kind="NamespacedGeneratingPolicy", short="ngpol", namespaced=True, spec=_gpol_spec,
        status=_gpol_status, columns=[derived_crd.AGE],
        description="A NamespacedGeneratingPolicy generates objects for the triggers of its own namespace, only "
                    "into that namespace. Same spec as a GeneratingPolicy.")


def derive_dpol(source: Schema) -> Schema:
    return derived_crd.derive(
        source, kind="DeletingPolicy", short="dpol", namespaced=False, spec=_dpol_spec, status=_dpol_status,
        columns=[derived_crd.AGE, derived_crd.READY],
        description="A DeletingPolicy deletes, on a cron schedule, the existing Kubernetes objects it matches and "
                    "whose CEL conditions hold.")


def derive_ndpol(source: Schema) -> Schema:
    return derived_crd.derive(
        source, kind="NamespacedDeletingPolicy", short="ndpol", namespaced=True, spec=_dpol_spec,
        status=_dpol_status, columns=[derived_crd.AGE, derived_crd.READY],
        description="A NamespacedDeletingPolicy deletes, on a cron schedule, the matching objects of its own "
                    "namespace. Same spec as a DeletingPolicy.")


if __name__ == "__main__":
    sys.exit(derived_crd.main(derive_gpol, GPOL_TARGET, GPOL_HEADER, __file__, more=(
        (derive_ngpol, NGPOL_TARGET, NGPOL_HEADER),
        (derive_dpol, DPOL_TARGET, DPOL_HEADER),
        (derive_ndpol, NDPOL_TARGET, NDPOL_HEADER),
    )))

"""The native MutatingAdmissionPolicy and binding a MutatingPolicy turns into (pure).

Kyverno's mapping (its admission policy generator, pkg/admissionpolicy): ``mpol-<policy>`` and
``mpol-<policy>-binding`` (the binding names only the policy), metadata as for ValidatingAdmissionPolicies
(vpol.desired.admission_policy: Kyverno's managed-by label, an ownerReference to the policy at v1beta1);
matchConditions after one negated condition per condition of each PolicyException (named as the condition), variables
and
mutations copied verbatim, failurePolicy copied; reinvocationPolicy ``Never`` unless the policy says
``IfNeeded``. None for a policy with ``evaluation.useServerSideApply`` (its merge replaces atomic fields, which
a MAP refuses), as in Kyverno.

Beyond Kyverno, as for ValidatingAdmissionPolicies (see vpol.desired.admission_policy and
docs/kyverno-compatibility.md): the whole matchConstraints is copied (Kyverno keeps only the
resource rules, so a namespace or object selector would be lost), and a pod
policy gets one MAP + binding per pod-controller autogen config
(``mpol-<policy>-autogen-defaults``, ``...-autogen-cronjobs``) where Kyverno
generates nothing at all.

Eligibility: admission evaluation enabled, every expression compiles with
only the libraries the API server has, no ``exceptions`` variable, and no
matchCondition that reads ``variables`` (the API server evaluates match
conditions before variables exist).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from vpol.cel.compiler import MUTATION_ROLES, variable_references
from vpol.cel.typecheck import check_policy
from vpol.desired.admission_policy import (
    VapPlan,
    exception_parts,
    generated_metadata,
    kubernetes_only_failure,
    kyverno_only_reading,
    pinned,
    pinning,
    qualified_conditions,
    spec_fields,
)
from vpol.model.policy import PolicyException
from vpol.policies.mutating.autogen import mutating_autogen_configs
from vpol.policies.mutating.compile import compile_mutating_policy
from vpol.policies.mutating.model import MutatingPolicy

#: The MutatingAdmissionPolicy version used when the cluster's is not known (GA since Kubernetes 1.36).
MAP_API_VERSION = "admissionregistration.k8s.io/v1"
#: Versions the API server may serve, preferred first.
MAP_API_VERSIONS = ("admissionregistration.k8s.io/v1", "admissionregistration.k8s.io/v1beta1",
                    "admissionregistration.k8s.io/v1alpha1")

_EXCEPTIONS_RX = re.compile(r"\bexceptions\.(allowedImages|allowedValues)\b")


def map_name(policy_name: str, config: str = "", namespace: str = "") -> str:
    base = f"nmpol-{namespace}.{policy_name}" if namespace else f"mpol-{policy_name}"
    return base + (f"-autogen-{config}" if config else "")


def map_ineligibility(policy: MutatingPolicy) -> str:
    """Why the API server could not run this policy natively ("" when it can)."""
    if not policy.spec.evaluation.admission_enabled:
        return "admission evaluation is disabled (spec.evaluation.admission.enabled=false)"
    if (why := pinning(policy)):
        return f"namespaced policy: {why}"
    if policy.targets_others:
        return "spec.targetMatchConstraints chooses other targets: requests are not mutated themselves"
    if policy.spec.evaluation.use_server_side_apply:
        return ("spec.evaluation.useServerSideApply merges with server-side-apply semantics, replacing atomic "
                "fields a MutatingAdmissionPolicy refuses to set")
    for i, condition in enumerate(policy.spec.match_conditions):
        if variable_references(condition.expression):
            return (f"spec.matchConditions[{i}].expression reads variables, which a MutatingAdmissionPolicy "
                    "evaluates only after its match conditions")
    if _EXCEPTIONS_RX.search(json.dumps(policy.raw.get("spec", {}))):
        return "the policy reads the exceptions variable, which only vpol provides"
    compiled = compile_mutating_policy(policy, kubernetes_only=True)
    if not compiled.ok:
        return kubernetes_only_failure(compiled.errors()[0], {p: src for p, src, _r in policy.expressions()})
    # Mutations the API server cannot type-check against the matched kinds' schemas (Kyverno's dynamic
    # `Object.metadata.labels{...}` literals, say) would fail every request there.
    for warning in check_policy(policy, roles=MUTATION_ROLES, kubernetes_only=True):
        if warning.wrong_result:
            first = warning.warning.strip().splitlines()[0]
            return f"{warning.field_path} does not type-check in the API server's environment: {first}"
    return kyverno_only_reading(policy.expressions())


def _pair(policy: MutatingPolicy, spec: dict[str, Any], name: str, exceptions: Sequence[PolicyException],
          api_version: str) -> list[dict[str, Any]]:
    conditions = exception_parts(policy, exceptions).conditions
    map_spec: dict[str, Any] = {"matchConstraints": pinned(spec, policy.namespace)["matchConstraints"]
                                if policy.namespace else spec["matchConstraints"]}
    match_conditions = qualified_conditions(conditions + list(spec.get("matchConditions") or []))
    if match_conditions:
        map_spec["matchConditions"] = match_conditions
    if spec.get("variables"):
        map_spec["variables"] = spec["variables"]
    map_spec["mutations"] = spec["mutations"]
    map_spec["failurePolicy"] = policy.spec.failure_policy
    map_spec["reinvocationPolicy"] = policy.spec.reinvocation_policy
    metadata = generated_metadata(name, policy, admission_policy=True)
    return [
        {"apiVersion": api_version, "kind": "MutatingAdmissionPolicy", "metadata": metadata, "spec": map_spec},
        {"apiVersion": api_version, "kind": "MutatingAdmissionPolicyBinding",
         "metadata": generated_metadata(f"{name}-binding", policy),
         "spec": {"policyName": name}},
    ]


def _clean(spec: dict[str, Any]) -> dict[str, Any]:
    return spec_fields(spec, ("matchConstraints", "matchConditions", "variables", "mutations"))


def desired_map_objects(policy: MutatingPolicy, *, exceptions: Sequence[PolicyException] = (),
                        force: bool = False, api_version: str = MAP_API_VERSION) -> VapPlan:
    """The MutatingAdmissionPolicies and bindings that should exist for ``policy``.

    Without ``force``, nothing is generated unless
    ``spec.autogen.mutatingAdmissionPolicy.enabled`` is true.
    """
    if not force and not policy.spec.autogen.map_enabled:
        return VapPlan(reason="MutatingAdmissionPolicy generation is not enabled "
                              "(spec.autogen.mutatingAdmissionPolicy.enabled)", eligible=False)
    why = map_ineligibility(policy)
    if why:
        return VapPlan(reason=f"skip generating MutatingAdmissionPolicy: {why}", eligible=False)
    objects = _pair(policy, _clean(policy.raw.get("spec", {})), map_name(policy.name, namespace=policy.namespace),
                    exceptions, api_version)
    for config, variant in mutating_autogen_configs(policy):
        objects.extend(_pair(policy, _clean(variant.raw.get("spec", {})),
                             map_name(policy.name, config, policy.namespace), exceptions, api_version))
    return VapPlan(objects=objects)


NATIVE, WEBHOOK, NOT_APPLICABLE = "native", "webhook", "not-applicable"


def wants_native_map(policy: MutatingPolicy, generation: str) -> bool:
    """Whether MutatingAdmissionPolicies are asked for (explicitly, or by the ``eligible`` generation mode)."""
    explicit = policy.spec.autogen.map_enabled
    return explicit if explicit is not None else generation == "eligible"


def mutating_route(policy: MutatingPolicy, *, generation: str, compiles: bool, map_refused: bool = False) -> str:
    """Where a MutatingPolicy is applied at admission: ``native`` (its MAPs), ``webhook`` (vpol's mutating
    webhook: Kyverno-only functions, opt-in mode without the opt-in, a MAP the API server refused) or
    ``not-applicable`` (admission disabled, or targetMatchConstraints choose other targets: the request only
    triggers their mutation, as in Kyverno). A policy that does not compile is applied nowhere: the reconciler
    says so, and the webhook leaves it out."""
    if not policy.spec.evaluation.admission_enabled or policy.targets_others:
        return NOT_APPLICABLE
    if compiles and not map_refused and wants_native_map(policy, generation) and not map_ineligibility(policy):
        return NATIVE
    return WEBHOOK

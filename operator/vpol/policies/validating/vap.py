"""The native ValidatingAdmissionPolicy and binding a ValidatingPolicy turns into (pure), over what every generated
admission policy shares (vpol.desired.admission_policy).

Kyverno's generator (pkg/admissionpolicy in Kyverno 1.19.1), object for object: ``vpol-<policy>`` and
``vpol-<policy>-binding``, labelled ``app.kubernetes.io/managed-by: kyverno`` (Kyverno's value, so tools and
scripts written for Kyverno's objects find vpol's; the VAP also ``reports.kyverno.io/disabled: "true"`` when the
policy has that label), owned by the policy (``policies.kyverno.io/v1beta1``, the version Kyverno's informers
deliver, no controller flag); the VAP copies matchConstraints, matchConditions, variables, validations and
auditAnnotations verbatim, the binding carries validationActions. A PolicyException adds, after the policy's own,
one matchCondition per condition of the exception, named as the condition and ``!(<expression>)``; its images and
values become the variables ``allowedImages`` / ``allowedValues`` (``['a', 'b']``) after the policy's variables,
and ``exceptions.allowedImages``/``allowedValues`` read them.

vpol's additions (documented in docs/kyverno-compatibility.md): the label ``vpol.kyverno.io/policy`` (and the annotation
``vpol.kyverno.io/generated-digest`` at apply time) by which the operator finds its objects; failurePolicy is
copied (Kyverno leaves the API server's default, Fail, also for an Ignore policy); a pod policy with
pod-controller autogen also gets one VAP + binding per autogen config (``vpol-<policy>-autogen-defaults``,
``...-autogen-cronjobs``; Kyverno generates nothing for it). Where Kyverno's objects would be refused by the API
server or decide otherwise than its own engine, vpol's differ (see :func:`exception_parts`).

Eligibility: Kubernetes mode, and every expression compiles with only the libraries the API server has.

Beyond Kyverno, a NamespacedValidatingPolicy is generated too, pinned to its namespace
(vpol.desired.admission_policy says how, for VAPs and MAPs alike).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from vpol.desired.admission_policy import (
    EXCEPTIONS_RX,
    VAP_API_VERSION,
    VapPlan,
    exception_parts,
    exception_variables,
    generated_metadata,
    kubernetes_only_failure,
    kyverno_only_reading,
    pinned,
    pinning,
    qualified_conditions,
    rewrite_exceptions,
    spec_fields,
)
from vpol.model.policy import PolicyException
from vpol.policies.validating.autogen import autogen_configs
from vpol.policies.validating.compile import compile_verdict
from vpol.policies.validating.model import ValidatingPolicy


def vap_name(policy_name: str, config: str = "", namespace: str = "") -> str:
    base = f"nvpol-{namespace}.{policy_name}" if namespace else f"vpol-{policy_name}"
    return base + (f"-autogen-{config}" if config else "")


def ineligibility(policy: ValidatingPolicy) -> str:
    """Why the API server could not enforce this policy natively ("" when it can)."""
    if (why := pinning(policy)):
        return f"namespaced policy: {why}"
    if policy.json_mode:
        return "JSON mode policies are evaluated by vpol only"
    if not policy.spec.evaluation.admission_enabled:
        return "admission evaluation is disabled (spec.evaluation.admission.enabled=false)"
    compiled = compile_verdict(policy, kubernetes_only=True)
    if not compiled.ok:
        return kubernetes_only_failure(compiled.errors[0], dict((p, src) for p, src, _r in policy.expressions()))
    return kyverno_only_reading(policy.expressions())


def _pair(policy: ValidatingPolicy, spec: dict[str, Any], name: str,
          exceptions: Sequence[PolicyException]) -> list[dict[str, Any]]:
    parts = exception_parts(policy, exceptions)
    vap_spec: dict[str, Any] = {}
    if "matchConstraints" in spec:
        vap_spec["matchConstraints"] = pinned(spec, policy.namespace)["matchConstraints"] if policy.namespace \
            else spec["matchConstraints"]
    match_conditions = qualified_conditions(list(spec.get("matchConditions") or []) + parts.conditions)
    if match_conditions:
        vap_spec["matchConditions"] = match_conditions
    variables = exception_variables(spec, parts)
    if variables:
        vap_spec["variables"] = variables
    for key in ("validations", "auditAnnotations"):
        if spec.get(key):
            vap_spec[key] = spec[key]
    vap_spec["failurePolicy"] = policy.spec.failure_policy
    if EXCEPTIONS_RX.search(json.dumps(spec)):
        vap_spec = rewrite_exceptions(vap_spec)
    vap = {
        "apiVersion": VAP_API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": generated_metadata(name, policy, admission_policy=True),
        "spec": vap_spec,
    }
    binding = {
        "apiVersion": VAP_API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": generated_metadata(f"{name}-binding", policy),
        "spec": {"policyName": name, "validationActions": list(policy.spec.validation_actions)},
    }
    return [vap, binding]


def desired_objects(policy: ValidatingPolicy, *, exceptions: Sequence[PolicyException] = (),
                    force: bool = False) -> VapPlan:
    """The VAPs and bindings that should exist for ``policy``.

    Without ``force``, nothing is generated unless
    ``spec.autogen.validatingAdmissionPolicy.enabled`` is true.
    """
    if not force and not policy.spec.autogen.vap_enabled:
        return VapPlan(reason="ValidatingAdmissionPolicy generation is not enabled "
                              "(spec.autogen.validatingAdmissionPolicy.enabled)", eligible=False)
    why = ineligibility(policy)
    if why:
        return VapPlan(reason=f"skip generating ValidatingAdmissionPolicy: {why}", eligible=False)
    raw_spec = policy.raw.get("spec", {})
    objects = _pair(policy, _clean_spec(raw_spec), vap_name(policy.name, namespace=policy.namespace), exceptions)
    for config in autogen_configs(policy):
        objects.extend(_pair(policy, _clean_spec(config.spec), vap_name(policy.name, config.name, policy.namespace),
                             exceptions))
    return VapPlan(objects=objects)


def _clean_spec(spec: dict[str, Any]) -> dict[str, Any]:
    return spec_fields(spec, ("matchConstraints", "matchConditions", "variables", "validations", "auditAnnotations"))

"""The native ValidatingAdmissionPolicy and binding a ValidatingPolicy turns into (pure).

Kyverno's mapping (NOTES.md section 4): ``vpol-<policy>`` and
``vpol-<policy>-binding``, the managed-by label, a controller
ownerReference to the policy; matchConstraints, matchConditions,
variables, validations and auditAnnotations are copied; the binding
carries validationActions. PolicyExceptions become one negated
matchCondition each (``!(c1 && c2)``), and their allowed images/values
become variables that replace ``exceptions.allowedImages``/``allowedValues``.

Beyond Kyverno (documented in the README): failurePolicy is copied, and a
pod policy with pod-controller autogen also gets one VAP + binding per
autogen config (``vpol-<policy>-autogen-defaults``, ``...-autogen-cronjobs``).

Eligibility: Kubernetes mode, and every expression compiles with only the
libraries the API server has.

Beyond Kyverno (which always uses its webhook for them), a namespaced policy
(NamespacedValidatingPolicy, NamespacedMutatingPolicy) is generated too, **pinned
to its namespace** (see :func:`pinning`): its objects are named
``nvpol-<namespace>.<name>`` (``nmpol-...`` for MAPs: a namespace name has no
dot, so names never collide), carry the policy's namespace in a label instead of
an ownerReference (a cluster-scoped object cannot be owned by a namespaced one;
the reconciler removes them), and match only in the namespace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vpol.cel.compiler import compile_verdict
from vpol.cel.optional_selection import or_value_compat
from vpol.engine.autogen import autogen_configs
from vpol.model.mutating import MutatingPolicy
from vpol.model.policy import LABEL_REPORTS_DISABLED, PolicyException, ValidatingPolicy
from vpol.model.problems import Problem

VAP_API_VERSION = "admissionregistration.k8s.io/v1"
#: The policy kinds vpol generates native admission policies from (their identity is all the helpers read).
AnyPolicy = ValidatingPolicy | MutatingPolicy
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "vpol"
POLICY_LABEL = "vpol.kyverno.io/policy"
#: On objects generated for a namespaced policy: its namespace (POLICY_LABEL holds its name).
POLICY_NAMESPACE_LABEL = "vpol.kyverno.io/policy-namespace"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

_EXC_RX = re.compile(r"\bexceptions\.(allowedImages|allowedValues)\b")


@dataclass
class VapPlan:
    #: The objects to apply (VAPs and bindings), empty when none should exist.
    objects: list[dict[str, Any]] = field(default_factory=list)
    #: Why nothing (or less) is generated, when that is the case.
    reason: str = ""
    eligible: bool = True

    def names(self) -> list[str]:
        return [o["metadata"]["name"] for o in self.objects]


def vap_name(policy_name: str, config: str = "", namespace: str = "") -> str:
    base = f"nvpol-{namespace}.{policy_name}" if namespace else f"vpol-{policy_name}"
    return base + (f"-autogen-{config}" if config else "")


def generated_selector(key: str) -> str:
    """The label selector of the objects generated for the policy with key ``name`` or ``namespace/name``."""
    namespace, _, name = key.rpartition("/")
    if namespace:
        return f"{POLICY_LABEL}={name},{POLICY_NAMESPACE_LABEL}={namespace}"
    return f"{POLICY_LABEL}={name},!{POLICY_NAMESPACE_LABEL}"


def policy_key_of(labels: Mapping[str, str]) -> str:
    """The key of the policy a generated object's labels name ("" when none)."""
    name = labels.get(POLICY_LABEL, "")
    namespace = labels.get(POLICY_NAMESPACE_LABEL, "")
    return f"{namespace}/{name}" if name and namespace else name


def pinning(policy: AnyPolicy) -> str:
    """Why a namespaced policy cannot be pinned to its namespace natively ("" when it can, or for a cluster-wide
    policy).

    A binding confined with a namespaceSelector on ``kubernetes.io/metadata.name`` (a label the API server sets
    on every namespace and keeps equal to its name) matches only objects in that namespace, but only for
    namespaced kinds: a namespaceSelector does not limit cluster-scoped objects, and a Namespace is matched by
    its own labels. So every resource rule must name namespaced kinds only: ``scope: Namespaced``, or resources
    (no wildcard) the bundled discovery knows as namespaced (the same answer on every replica; custom resources
    stay on the webhook, where the engine confines the policy)."""
    if not policy.namespace:
        return ""
    from vpol.model.discovery import builtin

    discovery = builtin()
    constraints = policy.spec.match_constraints
    for rule in constraints.resource_rules if constraints else ():
        if rule.scope == "Namespaced":
            continue
        for group in rule.api_groups:
            for version in rule.api_versions:
                for resource in rule.resources:
                    base = resource.partition("/")[0]
                    info = None if "*" in (group, version, base) else discovery.resource(group, version, base)
                    if info is None or not info.namespaced:
                        return (f"its rules name {resource!r} ({group or 'core'}/{version}), which is not known to "
                                "be a namespaced kind: a namespaceSelector cannot confine it to the namespace")
    return ""


def pinned(spec: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``spec`` (a generated policy's) matching only in ``namespace``: the namespaceSelector also requires the
    namespace's name, and every rule says ``scope: Namespaced``."""
    match = json.loads(json.dumps(spec.get("matchConstraints") or {}))
    selector = dict(match.get("namespaceSelector") or {})
    expressions = list(selector.get("matchExpressions") or [])
    expressions.append({"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": [namespace]})
    selector["matchExpressions"] = expressions
    match["namespaceSelector"] = selector
    for key in ("resourceRules", "excludeResourceRules"):
        for rule in match.get(key) or []:
            if key == "resourceRules":
                rule["scope"] = "Namespaced"
    return {**spec, "matchConstraints": match}


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


def kyverno_only_reading(expressions: Sequence[tuple[str, str, str]]) -> str:
    """Why an expression that compiles for the API server would not decide there as vpol (and Kyverno) decide
    ("" when none): an ``orValue`` call on what may not be an optional, which Kyverno's environments read
    as the value itself (vpol.cel.optional_selection.or_value_compat) and the API server's cel-go (0.28 and
    later) rejects at run time, or ``request.object``, which only Kyverno's request holds: as a native VAP, a
    Fail policy would deny every request it matches."""
    for path, src, _role in expressions:
        if or_value_compat(src) != src:
            return (f"{path} calls orValue on a value that may not be an optional, or with a default that may "
                    "fail; Kyverno's CEL accepts that, the API server's does not")
        if _REQUEST_OBJECT_RX.search(src):
            return (f"{path} reads request.object or request.oldObject, which Kyverno's request has and the API "
                    "server's does not")
    return ""


#: ``request.object`` / ``request.oldObject`` (or ``request[?'object']``...): Kyverno's request type has them.
_REQUEST_OBJECT_RX = re.compile(r"\brequest\s*(\.\s*\??\s*|\[\s*\??\s*['\"])(object|oldObject)\b")


def kubernetes_only_failure(first: Problem, sources: dict[str, str]) -> str:
    """Why an expression does not compile with only the API server's libraries, in one sentence."""
    source = sources.get(first.path, "")
    if re.search(r"\bcel\.bind\s*\(", source):
        # Without the bindings extension the checker complains about the bound name, not about cel.bind.
        return f"{first.path} uses 'cel.bind', which the API server's CEL environment lacks (a Kyverno-only library)"
    m = re.search(r"undeclared reference to '([^']+)'|found no matching overload for '([^']+)'", first.message)
    if m:
        return (f"{first.path} uses '{m.group(1) or m.group(2)}', which the API server's CEL environment lacks "
                "(a Kyverno-only library)")
    return f"{first.path}: {first.message}"


def _owner(policy: AnyPolicy) -> dict[str, Any]:
    return {
        "apiVersion": policy.api_version,
        "kind": policy.kind,
        "name": policy.name,
        "uid": policy.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def generated_metadata(name: str, policy: AnyPolicy, *, admission_policy: bool = False) -> dict[str, Any]:
    """The metadata of an object generated from ``policy``; ``admission_policy``: a ValidatingAdmissionPolicy or
    MutatingAdmissionPolicy (not a binding), which carries the policy's ``reports.kyverno.io/disabled`` label as
    ``"true"``, as Kyverno's builder (pkg/admissionpolicy) labels it."""
    md: dict[str, Any] = {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY, POLICY_LABEL: policy.name}}
    if admission_policy and policy.reports_disabled:
        md["labels"][LABEL_REPORTS_DISABLED] = "true"
    if policy.namespace:
        # No ownerReference: a cluster-scoped object cannot be owned by a namespaced one (the reconciler deletes).
        md["labels"][POLICY_NAMESPACE_LABEL] = policy.namespace
    elif policy.uid:
        md["ownerReferences"] = [_owner(policy)]
    return md


def exception_parts(policy: AnyPolicy, exceptions: Sequence[PolicyException]) -> tuple[
        list[dict[str, str]], dict[str, list[str]]]:
    conditions: list[dict[str, str]] = []
    allowed: dict[str, list[str]] = {"allowedImages": [], "allowedValues": []}
    for exc in sorted((e for e in exceptions if e.applies_to(policy)), key=lambda e: (e.namespace, e.name)):
        if exc.allowed_images or exc.allowed_values:
            allowed["allowedImages"].extend(exc.allowed_images)
            allowed["allowedValues"].extend(exc.allowed_values)
            continue
        if not exc.match_conditions:
            continue
        expr = " && ".join(f"({mc.expression})" for mc in exc.match_conditions)
        name = f"exception-{exc.namespace}-{exc.name}" if exc.namespace else f"exception-{exc.name}"
        conditions.append({"name": name[:63], "expression": f"!({expr})"})
    return conditions, allowed


def _rewrite_exceptions(value: Any) -> Any:
    if isinstance(value, str):
        return _EXC_RX.sub(lambda m: f"variables.{m.group(1)}", value)
    if isinstance(value, list):
        return [_rewrite_exceptions(v) for v in value]
    if isinstance(value, dict):
        return {k: _rewrite_exceptions(v) for k, v in value.items()}
    return value


_UNQUALIFIED = re.compile(r"[^A-Za-z0-9_.-]+")


def qualified_conditions(conditions: Sequence[Any]) -> list[Any]:
    """matchConditions with names the API server accepts (a qualified name of at most 63 characters):
    other characters become "-", the ends are trimmed to letters or digits, and duplicates get a suffix."""
    out: list[Any] = []
    seen: set[str] = set()
    for condition in conditions:
        if not isinstance(condition, dict) or not isinstance(condition.get("name"), str):
            out.append(condition)
            continue
        name = _UNQUALIFIED.sub("-", condition["name"]).strip("-_.")[:63].strip("-_.") or "condition"
        base, n = name, 1
        while name in seen:
            n += 1
            name = f"{base[:60]}-{n}"
        seen.add(name)
        out.append({**condition, "name": name})
    return out


def _pair(policy: ValidatingPolicy, spec: dict[str, Any], name: str,
          exceptions: Sequence[PolicyException]) -> list[dict[str, Any]]:
    conditions, allowed = exception_parts(policy, exceptions)
    vap_spec: dict[str, Any] = {}
    if "matchConstraints" in spec:
        vap_spec["matchConstraints"] = pinned(spec, policy.namespace)["matchConstraints"] if policy.namespace \
            else spec["matchConstraints"]
    match_conditions = qualified_conditions(list(spec.get("matchConditions") or []) + conditions)
    if match_conditions:
        vap_spec["matchConditions"] = match_conditions
    variables = list(spec.get("variables") or [])
    uses_exceptions = _EXC_RX.search(json.dumps(spec)) is not None
    if uses_exceptions:
        variables = [
            {"name": "allowedImages", "expression": json.dumps(allowed["allowedImages"])},
            {"name": "allowedValues", "expression": json.dumps(allowed["allowedValues"])},
        ] + variables
    if variables:
        vap_spec["variables"] = variables
    for key in ("validations", "auditAnnotations"):
        if spec.get(key):
            vap_spec[key] = spec[key]
    vap_spec["failurePolicy"] = policy.spec.failure_policy
    if uses_exceptions:
        vap_spec = _rewrite_exceptions(vap_spec)
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


def spec_fields(spec: dict[str, Any], keep: tuple[str, ...]) -> dict[str, Any]:
    """The fields of a policy spec a generated admission policy carries (those set)."""
    return {k: v for k, v in spec.items() if k in keep and v is not None}


def _clean_spec(spec: dict[str, Any]) -> dict[str, Any]:
    return spec_fields(spec, ("matchConstraints", "matchConditions", "variables", "validations", "auditAnnotations"))

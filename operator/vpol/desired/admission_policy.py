"""What every native admission policy vpol generates from a policy shares (pure): the ValidatingAdmissionPolicies
of a ValidatingPolicy (vpol.policies.validating.vap) and the MutatingAdmissionPolicies of a MutatingPolicy
(vpol.policies.mutating.map), with their bindings.

Kyverno's generator (pkg/admissionpolicy in Kyverno 1.19.1): objects labelled ``app.kubernetes.io/managed-by:
kyverno`` (Kyverno's value, so tools and scripts written for Kyverno's objects find vpol's; the admission policy
also ``reports.kyverno.io/disabled: "true"`` when the policy has that label), owned by the policy
(``policies.kyverno.io/v1beta1``, the version Kyverno's informers deliver, no controller flag). A PolicyException
adds, after the policy's own, one matchCondition per condition of the exception, named as the condition and
``!(<expression>)``; its images and values become the variables ``allowedImages`` / ``allowedValues`` (``['a',
'b']``) after the policy's variables, and ``exceptions.allowedImages``/``allowedValues`` read them.

vpol's additions (documented in docs/kyverno-compatibility.md): the label ``vpol.kyverno.io/policy`` (and the
annotation ``vpol.kyverno.io/generated-digest`` at apply time) by which the operator finds its objects. Where
Kyverno's objects would be refused by the API server or decide otherwise than its own engine, vpol's differ (see
:func:`exception_parts`); what the API server's CEL cannot decide as vpol's keeps a policy on the webhook
(:func:`kyverno_only_reading`, :func:`kubernetes_only_failure`).

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
from typing import Any, Protocol

from vpol.cel.compat import OR_VALUE, rewrite, tokenize
from vpol.cel.compat.syntax import calls, member_references
from vpol.model.policy import LABEL_REPORTS_DISABLED, MatchResources, PolicyException
from vpol.model.problems import Problem

VAP_API_VERSION = "admissionregistration.k8s.io/v1"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
#: The managed-by value of vpol's own objects (reports, webhook configurations, the enforcement probe).
MANAGED_BY = "vpol"
#: The managed-by value of the admission policies generated from policies: Kyverno's, as its generator sets it.
GENERATED_MANAGED_BY = "kyverno"
#: The policies.kyverno.io version a generated object's ownerReference names, as Kyverno's generator writes it.
OWNER_API_VERSION = "policies.kyverno.io/v1beta1"
POLICY_LABEL = "vpol.kyverno.io/policy"
#: On objects generated for a namespaced policy: its namespace (POLICY_LABEL holds its name).
POLICY_NAMESPACE_LABEL = "vpol.kyverno.io/policy-namespace"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

EXCEPTIONS_RX = re.compile(r"\bexceptions\.(allowedImages|allowedValues)\b")


class _Constraints(Protocol):
    @property
    def match_constraints(self) -> MatchResources | None: ...


class SourcePolicy(Protocol):
    """What the helpers here read of the policy an admission policy is generated from (a ValidatingPolicy, a
    MutatingPolicy): its identity and its matchConstraints."""

    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def reports_disabled(self) -> bool: ...
    @property
    def spec(self) -> _Constraints: ...


@dataclass
class VapPlan:
    #: The objects to apply (VAPs and bindings), empty when none should exist.
    objects: list[dict[str, Any]] = field(default_factory=list)
    #: Why nothing (or less) is generated, when that is the case.
    reason: str = ""
    eligible: bool = True

    def names(self) -> list[str]:
        return [o["metadata"]["name"] for o in self.objects]


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


def pinning(policy: SourcePolicy) -> str:
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


def kyverno_only_reading(expressions: Sequence[tuple[str, str, str]]) -> str:
    """Why an expression that compiles for the API server would not decide there as vpol (and Kyverno) decide
    ("" when none): an ``orValue`` call on what may not be an optional, which Kyverno's environments read
    as the value itself (vpol.cel.compat.OR_VALUE) and the API server's cel-go (0.28 and
    later) rejects at run time, or ``request.object``, which only Kyverno's request holds: as a native VAP, a
    Fail policy would deny every request it matches."""
    for path, src, _role in expressions:
        if rewrite(src, (OR_VALUE,)).text != src:
            return (f"{path} calls orValue on a value that may not be an optional, or with a default that may "
                    "fail; Kyverno's CEL accepts that, the API server's does not")
        if _reads_request_object(src):
            return (f"{path} reads request.object or request.oldObject, which Kyverno's request has and the API "
                    "server's does not")
    return ""


def _reads_request_object(src: str) -> bool:
    """``request.object`` / ``request.oldObject`` (or ``request[?'object']``...): Kyverno's request type has them."""
    return any(name in ("object", "oldObject") for name, _at in member_references(tokenize(src), "request"))


def kubernetes_only_failure(first: Problem, sources: dict[str, str]) -> str:
    """Why an expression does not compile with only the API server's libraries, in one sentence."""
    source = sources.get(first.path, "")
    if calls(tokenize(source), "cel", "bind"):
        # Without the bindings extension the checker complains about the bound name, not about cel.bind.
        return f"{first.path} uses 'cel.bind', which the API server's CEL environment lacks (a Kyverno-only library)"
    m = re.search(r"undeclared reference to '([^']+)'|found no matching overload for '([^']+)'", first.message)
    if m:
        return (f"{first.path} uses '{m.group(1) or m.group(2)}', which the API server's CEL environment lacks "
                "(a Kyverno-only library)")
    return f"{first.path}: {first.message}"


def _owner(policy: SourcePolicy) -> dict[str, Any]:
    """Kyverno's ownerReference: the policy at v1beta1, neither controller nor blocking its deletion."""
    return {"apiVersion": OWNER_API_VERSION, "kind": policy.kind, "name": policy.name, "uid": policy.uid}


def generated_metadata(name: str, policy: SourcePolicy, *, admission_policy: bool = False) -> dict[str, Any]:
    """The metadata of an object generated from ``policy``; ``admission_policy``: a ValidatingAdmissionPolicy or
    MutatingAdmissionPolicy (not a binding), which carries the policy's ``reports.kyverno.io/disabled`` label as
    ``"true"``, as Kyverno's builder (pkg/admissionpolicy) labels it."""
    md: dict[str, Any] = {"name": name,
                          "labels": {MANAGED_BY_LABEL: GENERATED_MANAGED_BY, POLICY_LABEL: policy.name}}
    if admission_policy and policy.reports_disabled:
        md["labels"][LABEL_REPORTS_DISABLED] = "true"
    if policy.namespace:
        # No ownerReference: a cluster-scoped object cannot be owned by a namespaced one (the reconciler deletes).
        md["labels"][POLICY_NAMESPACE_LABEL] = policy.namespace
    elif policy.uid:
        md["ownerReferences"] = [_owner(policy)]
    return md


ALLOWED = ("allowedImages", "allowedValues")


@dataclass
class ExceptionParts:
    """What the PolicyExceptions of a policy add to its native admission policy."""

    #: Negated matchConditions of the exceptions that exempt whole requests, in exception order.
    conditions: list[dict[str, str]] = field(default_factory=list)
    #: ``allowedImages`` / ``allowedValues`` -> the variable's expression, for those the exceptions give.
    allowed: dict[str, str] = field(default_factory=dict)


def cel_string(value: str) -> str:
    """A CEL string literal of ``value``: Kyverno's ``'value'``, or a double-quoted escaped one when the value
    holds a quote, a backslash or a control character (Kyverno's would not parse)."""
    if "'" in value or "\\" in value or any(ord(c) < 0x20 for c in value):
        return json.dumps(value)
    return f"'{value}'"


def cel_list(values: Sequence[str]) -> str:
    """``['a', 'b']``, as Kyverno's generator writes the allowed images and values."""
    return "[" + ", ".join(cel_string(v) for v in values) + "]"


def exception_parts(policy: SourcePolicy, exceptions: Sequence[PolicyException]) -> ExceptionParts:
    """The exceptions of ``policy`` as Kyverno's generator turns them into the admission policy, ordered by
    namespace and name (Kyverno's follows its informer's, which is not stable).

    As Kyverno's: an exception that exempts whole requests adds each of its matchConditions negated,
    ``{name: <the condition's name>, expression: "!(<expression>)"}``; the images and values of the fine-grained
    ones become ``['a', 'b']`` list variables. Where Kyverno's objects would decide otherwise than its own engine
    (pkg/cel/policies/vpol/compiler), vpol's follow the engine: a fine-grained exception (images or values) with
    matchConditions only allows its images where its conditions hold (``(c1) && (c2) ? [...] : []``; Kyverno's
    generator negates the conditions, exempting those requests from every validation), and an exception without
    conditions that exempts everything is the matchCondition ``false`` named after it (Kyverno's adds nothing).
    Several fine-grained exceptions make one variable of each name together (Kyverno's declares the name once per
    exception, which the API server refuses)."""
    out = ExceptionParts()
    gated: dict[str, list[str]] = {name: [] for name in ALLOWED}
    plain: dict[str, list[str]] = {name: [] for name in ALLOWED}
    for exc in sorted((e for e in exceptions if e.applies_to(policy)), key=lambda e: (e.namespace, e.name)):
        given = {"allowedImages": exc.allowed_images, "allowedValues": exc.allowed_values}
        if any(given.values()):
            guard = " && ".join(f"({mc.expression})" for mc in exc.match_conditions)
            for name, values in given.items():
                if not values:
                    continue
                if guard:
                    gated[name].append(f"{guard} ? {cel_list(values)} : []")
                else:
                    plain[name].extend(values)
            continue
        if not exc.match_conditions:
            out.conditions.append({"name": exc.name, "expression": "false"})
            continue
        for mc in exc.match_conditions:
            out.conditions.append({"name": mc.name, "expression": f"!({mc.expression})"})
    for name in ALLOWED:
        parts = ([cel_list(plain[name])] if plain[name] else []) + gated[name]
        if parts:
            out.allowed[name] = " + ".join(f"({p})" for p in parts) if len(parts) > 1 else parts[0]
    return out


def rewrite_exceptions(value: Any) -> Any:
    if isinstance(value, str):
        return EXCEPTIONS_RX.sub(lambda m: f"variables.{m.group(1)}", value)
    if isinstance(value, list):
        return [rewrite_exceptions(v) for v in value]
    if isinstance(value, dict):
        return {k: rewrite_exceptions(v) for k, v in value.items()}
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


def exception_variables(spec: Mapping[str, Any], parts: ExceptionParts) -> list[dict[str, str]]:
    """The policy's variables with those of its exceptions: after them, as Kyverno's generator adds them, or
    before them when a variable of the policy reads ``exceptions.*`` (a variable may only read those before it).
    A name the policy reads but no exception gives is ``[]`` (Kyverno's would leave it undeclared)."""
    own = list(spec.get("variables") or [])
    read = {m.group(1) for m in EXCEPTIONS_RX.finditer(json.dumps(spec))}
    added = [{"name": name, "expression": parts.allowed.get(name, "[]")} for name in ALLOWED
             if name in parts.allowed or name in read]
    if EXCEPTIONS_RX.search(json.dumps(own)):
        return added + own
    return own + added


def spec_fields(spec: dict[str, Any], keep: tuple[str, ...]) -> dict[str, Any]:
    """The fields of a policy spec a generated admission policy carries (those set)."""
    return {k: v for k, v in spec.items() if k in keep and v is not None}

"""Mutation of existing objects (a MutatingPolicy's ``mutateExisting``): which objects are targets, and the request
they are mutated with (pure). The evaluation itself is the mutate path of :mod:`vpol.policies.mutating.engine`
(``MutatingPolicyEngine.mutate_target`` and ``resolve_targets``).

Kyverno 1.19.1's semantics (its background controller, ``pkg/background/mpol``; written down in
docs/mutate-existing.md):

- **Listed targets** (no ``targetMatchConstraints.expression``): the objects of ``targetMatchConstraints`` when
  it has resource rules, else of ``matchConstraints``; listed per group/version/resource of the rules (a
  ``res/sub`` resource lists ``res`` and writes the subresource), filtered by the namespace selector (a
  namespaced policy: its own namespace only), the object selector and ``resourceNames``. Exclusions, operations
  and ``matchPolicy`` do not filter targets.
- **Resolved targets** (an expression): evaluated on the trigger (see ``resolve_targets``).
- **Each target**: ``object`` is the target, ``oldObject`` and ``namespaceObject`` null, ``request`` the trigger's
  request (for a run started by the policy itself or a periodic scan: a synthetic UPDATE of the target);
  only ``targetMatchConditions`` are checked; nothing is written when nothing changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from fnmatch import fnmatchcase
from typing import Any

from vpol.engine.match import rule_matches, selectors_match
from vpol.engine.request import Subject
from vpol.model.discovery import Discovery, ResourceInfo
from vpol.model.policy import MatchResources, Rule
from vpol.policies.mutating.model import MutatingPolicy

#: A target's resource as listed: (group, version, resource, subresource).
TargetResource = tuple[str, str, str, str]


def target_constraints(policy: MutatingPolicy) -> MatchResources | None:
    """The constraints listed targets come from: targetMatchConstraints with resource rules (and no expression),
    else matchConstraints (Kyverno ignores a targetMatchConstraints of selectors only)."""
    target = policy.spec.target_match_constraints
    if target is not None and target.resource_rules and not policy.spec.target_expression:
        return target
    return policy.spec.match_constraints


def listed_resources(constraints: MatchResources | None) -> list[tuple[str, str, str, str]]:
    """Every (group, version, resource, subresource) the rules name, in order (wildcards left as written: the
    caller resolves them against discovery, or passes over what it cannot list)."""
    out: list[tuple[str, str, str, str]] = []
    for rule in (constraints.resource_rules if constraints else ()):
        for group in rule.api_groups:
            for version in rule.api_versions:
                for resource in rule.resources:
                    res, _, sub = resource.partition("/")
                    key = (group, version, res, sub)
                    if key not in out:
                        out.append(key)
    return out


def target_resources(policy: MutatingPolicy, discovery: Discovery) -> list[tuple[ResourceInfo, str]]:
    """The listable resources targets are listed from, with the subresource writes go to ("" for none). Names
    discovery cannot resolve, wildcards included, list nothing (Kyverno maps each combination to a kind and
    passes over what does not map)."""
    out: list[tuple[ResourceInfo, str]] = []
    for group, version, resource, sub in listed_resources(target_constraints(policy)):
        if "*" in (group, version, resource):
            continue
        info = discovery.resource(group, version, resource)
        if info is not None and (info, sub) not in out:
            out.append((info, sub))
    return out


def _any_operation(rule: Rule) -> Rule:
    return dataclasses.replace(rule, operations=("*",))


def selects_target(policy: MutatingPolicy, target: Subject) -> bool:
    """Whether a listed object is a target of ``policy``: its type is in the target rules (any operation), the
    selectors hold, its name is in ``resourceNames`` when those are given, and a namespaced policy's targets are
    in its namespace. (Exclusions do not filter targets, as in Kyverno.)"""
    constraints = target_constraints(policy)
    if constraints is None:
        return False
    if policy.namespace and not (target.type.namespaced and target.namespace == policy.namespace) and \
            not (target.type.kind == "Namespace" and target.type.group == ""):
        return False
    if not any(rule_matches(_any_operation(rule), target) for rule in constraints.resource_rules):
        return False
    return selectors_match(constraints, target)


def resolved_route(policy: MutatingPolicy, target: Subject) -> Subject:
    """A target an expression resolved, with the subresource it is written through: that of the first
    ``targetMatchConstraints`` rule naming its resource as ``res/sub`` (Kyverno's resolveTargetRoute: groups,
    versions and resources matched as globs, the first rule that names the resource decides)."""
    t = target.type
    constraints = policy.spec.target_match_constraints
    for rule in constraints.resource_rules if constraints else ():
        if not any(fnmatchcase(t.group, g) for g in rule.api_groups) or \
                not any(fnmatchcase(t.version, v) for v in rule.api_versions):
            continue
        for resource in rule.resources:
            base, _, sub = resource.partition("/")
            if fnmatchcase(t.resource, base):
                return dataclasses.replace(target, type=dataclasses.replace(t, subresource=sub))
    return target


def synthetic_request(target: Subject) -> dict[str, Any]:
    """The ``request`` of a target mutated without a trigger (the policy was created or changed, or a periodic
    scan): an UPDATE of the target itself, without userInfo or oldObject (Kyverno's)."""
    return dataclasses.replace(target, operation="UPDATE", old_object=None, user_info={},
                               request=None).admission_request()


def as_target(target: Subject, trigger_request: dict[str, Any] | None) -> Subject:
    """``target`` ready for ``mutate_target``: the trigger's request, or the synthetic one."""
    request = trigger_request if trigger_request is not None else synthetic_request(target)
    return dataclasses.replace(target, operation=str(request.get("operation") or "UPDATE"), old_object=None,
                               namespace_object=None, request=request)


def target_key(obj: dict[str, Any]) -> str:
    """``namespace/name`` (or ``name``) of an object: how resolved targets are named."""
    md = obj.get("metadata") or {}
    ns = str(md.get("namespace") or "")
    return f"{ns}/{md.get('name', '')}" if ns else str(md.get("name", ""))


def mutate_existing_policies(policies: Iterable[MutatingPolicy]) -> list[MutatingPolicy]:
    return [p for p in policies if p.spec.evaluation.mutate_existing_enabled]


def offline_runs(policies: Sequence[MutatingPolicy], triggers: Sequence[Subject], targets: Sequence[Subject], *,
                 resolve: Callable[[MutatingPolicy, Subject], Any],
                 mutate: Callable[[MutatingPolicy, Subject], tuple[Any, dict[str, Any]]]
                 ) -> list[tuple[MutatingPolicy, int, Any, dict[str, Any]]]:
    """mutateExisting offline, as Kyverno's CLI runs it: every trigger against every given target of each policy
    with mutateExisting (a target the policy's target rules select, or one its expression resolves from the
    trigger, by namespace/name; the trigger's matchConditions are not checked), each target mutated with the
    trigger's request. ``resolve(policy, trigger)`` gives the expression's Targets (evaluated without the
    matchConditions), ``mutate(policy, target)`` the (result, patched object) of ``mutate_target``.
    Returns (policy, index of the target, result, patched object) per run, in order."""
    out: list[tuple[MutatingPolicy, int, Any, dict[str, Any]]] = []
    for trigger in triggers:
        request = trigger.admission_request()
        for policy in mutate_existing_policies(policies):
            names = None
            if policy.spec.target_expression:
                names = {target_key(o) for o in resolve(policy, trigger).objects}
            for index, target in enumerate(targets):
                chosen = target_key(target.current) in names if names is not None else selects_target(policy, target)
                if chosen:
                    result, patched = mutate(policy, as_target(target, request))
                    out.append((policy, index, result, patched))
    return out

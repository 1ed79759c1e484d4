"""Which resources a policy (with its autogen variants) applies to, resolved through discovery.

Used for the RBAC check (the operator must be able to get/list/watch them), by background scans (what to list and
watch) and for the triggers of the policies that act on changes (mutateExisting, generation, deletion).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from vpol.model.discovery import Discovery, ResourceInfo
from vpol.model.policy import MatchResources


class _Constraints(Protocol):
    @property
    def match_constraints(self) -> MatchResources | None: ...


class Constrained(Protocol):
    """A policy of any kind, as far as its matchConstraints go."""

    @property
    def spec(self) -> _Constraints: ...


def matched_resources(variants: Sequence[Constrained], discovery: Discovery) -> list[ResourceInfo]:
    """Every top-level resource matched by the resourceRules of a policy's ``variants`` (the policy and its autogen
    variants, vpol.model.kind.PolicyKind.variants).

    Subresources are left out (they cannot be listed); wildcards expand to
    everything discovery knows. Sorted by group, version, resource.
    """
    found: dict[tuple[str, str, str], ResourceInfo] = {}
    for p in variants:
        m = p.spec.match_constraints
        if m is None:
            continue
        for rule in m.resource_rules:
            resources = tuple(r for r in rule.resources if "/" not in r or r == "*/*")
            resources = tuple("*" if r == "*/*" else r for r in resources)
            if not resources:
                continue
            for info in discovery.resolve(rule.api_groups, rule.api_versions, resources):
                if info.subresource:
                    continue
                found[(info.group, info.version, info.resource)] = info
    return [found[k] for k in sorted(found)]


def trigger_resources(policy: Constrained, discovery: Discovery) -> list[ResourceInfo]:
    """The resources whose changes can trigger the policy (its matchConstraints' rules; wildcards resolved): a
    MutatingPolicy's or GeneratingPolicy's triggers, a DeletingPolicy's candidates."""
    found: dict[tuple[str, str, str], ResourceInfo] = {}
    constraints = policy.spec.match_constraints
    for rule in constraints.resource_rules if constraints else ():
        resources = tuple(r for r in rule.resources if "/" not in r)
        for info in discovery.resolve(rule.api_groups, rule.api_versions, resources) if resources else ():
            if not info.subresource:
                found[(info.group, info.version, info.resource)] = info
    return [found[k] for k in sorted(found)]

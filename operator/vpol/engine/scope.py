"""Which resources a policy (with its autogen variants) applies to, resolved through discovery.

Used for the RBAC check (the operator must be able to get/list/watch them)
and by background scans (what to list and watch).
"""

from __future__ import annotations

from collections.abc import Sequence

from vpol.engine.kinds import kind_of
from vpol.model.discovery import Discovery, ResourceInfo
from vpol.model.image_validating import ImageValidatingPolicy
from vpol.model.policy import ValidatingPolicy


def matched_resources(policy: ValidatingPolicy | ImageValidatingPolicy, discovery: Discovery) -> list[ResourceInfo]:
    """Every top-level resource matched by the policy's resourceRules and its autogen variants.

    Subresources are left out (they cannot be listed); wildcards expand to
    everything discovery knows. Sorted by group, version, resource.
    """
    variants: Sequence[ValidatingPolicy | ImageValidatingPolicy] = kind_of(policy).variants(policy)
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

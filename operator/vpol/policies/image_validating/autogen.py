"""Pod-controller autogen of an ImageValidatingPolicy: its Deployment/Job/CronJob... variants, over the shared
configs and path rewrite of vpol.engine.autogen."""

from __future__ import annotations

import dataclasses

from vpol.engine.autogen import Target, variant_specs
from vpol.policies.image_validating.model import ImageValidatingPolicy, parse_image_validating_policy

# --- ImageValidatingPolicy ---------------------------------------------------------------------------
#
# Kyverno's rule (pkg/cel/policies/ivpol/autogen, docs/internals/image-validating.md "Autogen"): the eligibility of a
# ValidatingPolicy's with apiVersions exactly ["v1"]; the same two configs and the same textual rewrite of every
# expression (images, attestors and matchConditions included); the variants keep the policy's name.


def image_autogen_configs(policy: ImageValidatingPolicy) -> list[tuple[str, tuple[Target, ...], ImageValidatingPolicy]]:
    """(config name, targets, variant) of every autogen variant of an ImageValidatingPolicy."""
    m = policy.spec.match_constraints
    if m is None or policy.json_mode or len(m.resource_rules) != 1 or m.exclude_resource_rules or \
            (m.object_selector is not None and not m.object_selector.empty):
        return []
    rule = m.resource_rules[0]
    if rule.api_groups != ("",) or rule.api_versions != ("v1",) or rule.resources != ("pods",) or \
            rule.resource_names:
        return []
    out = []
    for name, targets, spec in variant_specs(policy.raw.get("spec", {}), policy.spec.autogen.controllers()):
        constraints = spec["matchConstraints"]
        constraints.pop("objectSelector", None)
        constraints.pop("matchPolicy", None)
        spec.setdefault("autogen", {})["podControllers"] = {"controllers": []}
        raw = {**policy.raw, "spec": spec}
        variant, _problems = parse_image_validating_policy(raw)
        if variant is not None:
            out.append((name, targets, dataclasses.replace(variant, uid=policy.uid, generation=policy.generation,
                                                           source=policy.source)))
    return out

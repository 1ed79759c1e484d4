"""Pod-controller autogen of a ValidatingPolicy: its Deployment/Job/CronJob... variants (Kyverno's rule, described
in vpol.engine.autogen, whose configs and path rewrite it uses) and their ``status.autogen``."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from vpol.engine.autogen import Target, variant_specs
from vpol.policies.validating.model import ValidatingPolicy, parse_policy


@dataclass(frozen=True)
class AutogenConfig:
    name: str  # "defaults" or "cronjobs"
    targets: tuple[Target, ...]
    #: The rewritten spec (as a dict, for status and VAP generation).
    spec: dict[str, Any]
    #: The rewritten policy, ready to compile and evaluate.
    policy: ValidatingPolicy


def can_autogen(policy: ValidatingPolicy) -> bool:
    m = policy.spec.match_constraints
    if m is None or policy.json_mode or len(m.resource_rules) != 1:
        return False
    if m.exclude_resource_rules or (m.object_selector is not None and not m.object_selector.empty):
        return False
    rule = m.resource_rules[0]
    return (
        rule.api_groups == ("",)
        and rule.api_versions in (("v1",), ("*",))
        and rule.resources == ("pods",)
        and not rule.resource_names
    )


def autogen_configs(policy: ValidatingPolicy) -> list[AutogenConfig]:
    """The autogen variants of ``policy`` (empty when it does not qualify)."""
    if not can_autogen(policy):
        return []
    out = []
    for name, targets, spec in variant_specs(policy.raw.get("spec", {}), policy.spec.autogen.controllers()):
        # The variant is a policy of its own; it never autogenerates again.
        variant_spec = copy.deepcopy(spec)
        variant_spec.setdefault("autogen", {})["podControllers"] = {"controllers": []}
        raw = {**policy.raw, "spec": variant_spec}
        variant, _problems = parse_policy(raw)
        if variant is None:
            continue
        variant = ValidatingPolicy(
            name=policy.name, spec=variant.spec, kind=policy.kind, api_version=policy.api_version,
            namespace=policy.namespace, uid=policy.uid, generation=policy.generation, labels=policy.labels,
            annotations=policy.annotations, raw=raw, source=policy.source, positions=policy.positions,
        )
        out.append(AutogenConfig(name, targets, spec, variant))
    return out


def status_configs(configs: list[AutogenConfig]) -> dict[str, Any]:
    """``status.autogen.configs`` in Kyverno's shape."""
    return {c.name: {"targets": [t.as_dict() for t in c.targets], "spec": c.spec} for c in configs}

"""Pod-controller autogen: the Deployment/Job/CronJob... variants of a pod policy.

Kyverno's rule (../shared/NOTES.md section 3): only a policy whose matchConstraints is
exactly one rule on core v1 ``pods`` (no resourceNames, no exclusions, no
objectSelector) gets variants. ``spec.autogen.podControllers.controllers``
absent means all of daemonsets, deployments, replicasets, statefulsets,
jobs, cronjobs; present and empty means none. Two configs result:

- ``defaults`` (every controller but cronjobs): ``object.spec`` becomes
  ``object.spec.template.spec`` and ``object.metadata`` becomes
  ``object.spec.template.metadata`` (same for ``oldObject``);
- ``cronjobs``: the same paths under ``spec.jobTemplate.spec.template``.

The rewrite is textual over every string of the spec, except that
``<object>.metadata.namespace`` stays (a pod template has no namespace).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vpol.cel.compat.syntax import literals
from vpol.model.image_validating import ImageValidatingPolicy, parse_image_validating_policy
from vpol.model.mutating import PATCH_APPLY_CONFIGURATION, MutatingPolicy
from vpol.model.parse import parse_mutating_policy, parse_policy
from vpol.model.policy import ValidatingPolicy

#: controller resource -> (group, version, kind)
CONTROLLERS: dict[str, tuple[str, str, str]] = {
    "daemonsets": ("apps", "v1", "DaemonSet"),
    "deployments": ("apps", "v1", "Deployment"),
    "replicasets": ("apps", "v1", "ReplicaSet"),
    "statefulsets": ("apps", "v1", "StatefulSet"),
    "jobs": ("batch", "v1", "Job"),
    "cronjobs": ("batch", "v1", "CronJob"),
}

_PREFIX = {
    "defaults": "spec.template",
    "cronjobs": "spec.jobTemplate.spec.template",
}

_PATH_RX = re.compile(r"\b(object|oldObject)\.(spec|metadata)\b(?!\.namespace\b)")


@dataclass(frozen=True)
class Target:
    group: str
    version: str
    resource: str
    kind: str

    def as_dict(self) -> dict[str, str]:
        return {"group": self.group, "version": self.version, "resource": self.resource, "kind": self.kind}


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


def rewrite_text(text: str, config: str) -> str:
    prefix = _PREFIX[config]
    return _PATH_RX.sub(lambda m: f"{m.group(1)}.{prefix}.{m.group(2)}", text)


def _rewrite(value: Any, config: str) -> Any:
    if isinstance(value, str):
        return rewrite_text(value, config)
    if isinstance(value, list):
        return [_rewrite(v, config) for v in value]
    if isinstance(value, dict):
        return {k: _rewrite(v, config) for k, v in value.items()}
    return value


def _rules(targets: tuple[Target, ...], template: dict[str, Any]) -> list[dict[str, Any]]:
    by_group: dict[tuple[str, str], list[str]] = {}
    for t in targets:
        by_group.setdefault((t.group, t.version), []).append(t.resource)
    rules = []
    for (group, version), resources in sorted(by_group.items()):
        rule = {k: copy.deepcopy(v) for k, v in template.items() if k not in ("apiGroups", "apiVersions", "resources")}
        rules.append({"apiGroups": [group], "apiVersions": [version], "resources": sorted(resources), **rule})
    return rules


def _config_targets(controllers: tuple[str, ...]) -> list[tuple[str, tuple[Target, ...]]]:
    """The autogen configs (``defaults``: every controller but cronjobs; ``cronjobs``) and their targets."""
    known = [c for c in controllers if c in CONTROLLERS]
    out = []
    for name, members in (("defaults", [c for c in known if c != "cronjobs"]),
                          ("cronjobs", [c for c in known if c == "cronjobs"])):
        if members:
            out.append((name, tuple(sorted((Target(CONTROLLERS[c][0], CONTROLLERS[c][1], c, CONTROLLERS[c][2])
                                            for c in members), key=lambda t: (t.group, t.resource)))))
    return out


def _variant_specs(policy: ValidatingPolicy | ImageValidatingPolicy
                   ) -> Iterator[tuple[str, tuple[Target, ...], dict[str, Any]]]:
    """(config name, targets, the spec rewritten for them, its resource rules the targets') of each autogen
    config of a policy that qualifies."""
    raw_spec = policy.raw.get("spec", {})
    rule_template = raw_spec.get("matchConstraints", {}).get("resourceRules", [{}])[0]
    for name, targets in _config_targets(policy.spec.autogen.controllers()):
        spec = _rewrite(copy.deepcopy(raw_spec), name)
        spec.setdefault("matchConstraints", {})["resourceRules"] = _rules(targets, rule_template)
        yield name, targets, spec


def autogen_configs(policy: ValidatingPolicy) -> list[AutogenConfig]:
    """The autogen variants of ``policy`` (empty when it does not qualify)."""
    if not can_autogen(policy):
        return []
    out = []
    for name, targets, spec in _variant_specs(policy):
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


# --- MutatingPolicy ---------------------------------------------------------------------------
#
# Kyverno's rule for mutating policies (pkg/cel/policies/mpol/autogen): the same eligibility, except
# that apiVersions must be exactly ["v1"]; matchConditions and applyConfiguration expressions are
# rewritten (``object.spec``/``Object.spec`` and ``.metadata.labels``/``.metadata.annotations`` move
# under the template), variables and JSON patches are not. Kyverno then wraps an expression that
# starts with ``Object{`` into the template's literals and leaves a nested ``Object.metadata{`` as it
# was, which the API server's type-name check refuses; vpol wraps every top-level ``Object{...}``
# literal and renames ``Object.metadata`` literals too, so such policies work on controllers (a
# documented deviation).

_MUTATING_PATH_RX = re.compile(r"\b(object|oldObject|Object)\.(spec\b|metadata\.(?:labels|annotations)\b)")
_OBJECT_META_LITERAL_RX = re.compile(r"\bObject\.metadata\b")

_WRAP = {
    "defaults": ("spec", "template"),
    "cronjobs": ("spec", "jobTemplate", "spec", "template"),
}


def can_autogen_mutating(policy: MutatingPolicy) -> bool:
    m = policy.spec.match_constraints
    if m is None or len(m.resource_rules) != 1 or m.exclude_resource_rules:
        return False
    if m.object_selector is not None and not m.object_selector.empty:
        return False
    rule = m.resource_rules[0]
    return rule.api_groups == ("",) and rule.api_versions == ("v1",) and rule.resources == ("pods",) \
        and not rule.resource_names


def _wrap_root_literals(text: str, config: str) -> str:
    """Every top-level ``Object{...}`` literal of ``text`` placed under the pod template."""
    path = _WRAP[config]
    edits: list[tuple[int, str]] = []
    for lit in literals(text):
        if lit.name != ("Object",) or lit.end < 0:
            continue
        opening, closing, name = "", "", "Object"
        for segment in path:
            name = f"{name}.{segment}"
            opening += f"{segment}: {name}{{"
            closing += "}"
        edits.append((lit.brace + 1, opening))
        edits.append((lit.end, closing))
    for offset, insert in sorted(edits, reverse=True):
        text = text[:offset] + insert + text[offset:]
    return text


def rewrite_mutation_text(text: str, config: str, *, literal: bool) -> str:
    """A matchCondition (``literal=False``) or applyConfiguration expression moved under the template."""
    prefix = _PREFIX[config]
    text = _MUTATING_PATH_RX.sub(lambda m: f"{m.group(1)}.{prefix}.{m.group(2)}", text)
    if literal:
        text = _OBJECT_META_LITERAL_RX.sub(f"Object.{prefix}.metadata", text)
        text = _wrap_root_literals(text, config)
    return text


def mutating_autogen_configs(policy: MutatingPolicy) -> list[tuple[str, MutatingPolicy]]:
    """The pod-controller variants of a MutatingPolicy: (config name, variant), none when it does not qualify."""
    if not can_autogen_mutating(policy):
        return []
    raw_spec = policy.raw.get("spec", {})
    rule_template = raw_spec.get("matchConstraints", {}).get("resourceRules", [{}])[0]
    out = []
    for name, targets in _config_targets(policy.spec.autogen.controllers()):
        spec = copy.deepcopy(raw_spec)
        constraints = {"resourceRules": _rules(targets, rule_template)}
        if "namespaceSelector" in (raw_spec.get("matchConstraints") or {}):
            constraints["namespaceSelector"] = copy.deepcopy(raw_spec["matchConstraints"]["namespaceSelector"])
        spec["matchConstraints"] = constraints
        for condition in spec.get("matchConditions") or []:
            if isinstance(condition, dict) and isinstance(condition.get("expression"), str):
                condition["expression"] = rewrite_mutation_text(condition["expression"], name, literal=False)
        for mutation in spec.get("mutations") or []:
            body = mutation.get("applyConfiguration") if isinstance(mutation, dict) else None
            if mutation.get("patchType") == PATCH_APPLY_CONFIGURATION and isinstance(body, dict) \
                    and isinstance(body.get("expression"), str):
                body["expression"] = rewrite_mutation_text(body["expression"], name, literal=True)
        spec.setdefault("autogen", {})["podControllers"] = {"controllers": []}
        variant, _problems = parse_mutating_policy({**policy.raw, "spec": spec})
        if variant is None:
            continue
        out.append((name, MutatingPolicy(
            name=policy.name, spec=variant.spec, api_version=policy.api_version, uid=policy.uid,
            generation=policy.generation, labels=policy.labels, annotations=policy.annotations,
            raw=variant.raw, source=policy.source, positions=policy.positions)))
    return out


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
    for name, targets, spec in _variant_specs(policy):
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

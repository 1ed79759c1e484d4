"""Pod-controller autogen of a MutatingPolicy: its Deployment/Job/CronJob... variants, over the shared configs
and path rewrite of vpol.engine.autogen."""

from __future__ import annotations

import copy
import re

from vpol.cel.compat.syntax import literals
from vpol.engine.autogen import PREFIX, config_targets, controller_rules
from vpol.policies.mutating.model import PATCH_APPLY_CONFIGURATION, MutatingPolicy, parse_mutating_policy

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
    prefix = PREFIX[config]
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
    for name, targets in config_targets(policy.spec.autogen.controllers()):
        spec = copy.deepcopy(raw_spec)
        constraints = {"resourceRules": controller_rules(targets, rule_template)}
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

"""Pod-controller autogen: the Deployment/Job/CronJob... variants of a pod policy, the configs and the path
rewrite every kind's autogen shares (vpol.policies.<kind>.autogen: ValidatingPolicy, MutatingPolicy,
ImageValidatingPolicy).

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
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


#: controller resource -> (group, version, kind)
CONTROLLERS: dict[str, tuple[str, str, str]] = {
    "daemonsets": ("apps", "v1", "DaemonSet"),
    "deployments": ("apps", "v1", "Deployment"),
    "replicasets": ("apps", "v1", "ReplicaSet"),
    "statefulsets": ("apps", "v1", "StatefulSet"),
    "jobs": ("batch", "v1", "Job"),
    "cronjobs": ("batch", "v1", "CronJob"),
}

PREFIX = {
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


def rewrite_text(text: str, config: str) -> str:
    prefix = PREFIX[config]
    return _PATH_RX.sub(lambda m: f"{m.group(1)}.{prefix}.{m.group(2)}", text)


def rewrite(value: Any, config: str) -> Any:
    if isinstance(value, str):
        return rewrite_text(value, config)
    if isinstance(value, list):
        return [rewrite(v, config) for v in value]
    if isinstance(value, dict):
        return {k: rewrite(v, config) for k, v in value.items()}
    return value


def controller_rules(targets: tuple[Target, ...], template: dict[str, Any]) -> list[dict[str, Any]]:
    by_group: dict[tuple[str, str], list[str]] = {}
    for t in targets:
        by_group.setdefault((t.group, t.version), []).append(t.resource)
    rules = []
    for (group, version), resources in sorted(by_group.items()):
        rule = {k: copy.deepcopy(v) for k, v in template.items() if k not in ("apiGroups", "apiVersions", "resources")}
        rules.append({"apiGroups": [group], "apiVersions": [version], "resources": sorted(resources), **rule})
    return rules


def config_targets(controllers: tuple[str, ...]) -> list[tuple[str, tuple[Target, ...]]]:
    """The autogen configs (``defaults``: every controller but cronjobs; ``cronjobs``) and their targets."""
    known = [c for c in controllers if c in CONTROLLERS]
    out = []
    for name, members in (("defaults", [c for c in known if c != "cronjobs"]),
                          ("cronjobs", [c for c in known if c == "cronjobs"])):
        if members:
            out.append((name, tuple(sorted((Target(CONTROLLERS[c][0], CONTROLLERS[c][1], c, CONTROLLERS[c][2])
                                            for c in members), key=lambda t: (t.group, t.resource)))))
    return out


def variant_specs(raw_spec: Mapping[str, Any], controllers: tuple[str, ...]
                  ) -> Iterator[tuple[str, tuple[Target, ...], dict[str, Any]]]:
    """(config name, targets, the spec rewritten for them, its resource rules the targets') of each autogen
    config of a policy that qualifies: ``raw_spec`` its spec as written, ``controllers`` its
    ``spec.autogen.podControllers.controllers``."""
    rule_template = raw_spec.get("matchConstraints", {}).get("resourceRules", [{}])[0]
    for name, targets in config_targets(controllers):
        spec = rewrite(copy.deepcopy(raw_spec), name)
        spec.setdefault("matchConstraints", {})["resourceRules"] = controller_rules(targets, rule_template)
        yield name, targets, spec

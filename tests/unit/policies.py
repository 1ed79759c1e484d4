"""Building test policies from short YAML snippets."""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

from vpol.policies.validating.model import ValidatingPolicy, parse_policy

POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}


def make_policy(spec_yaml: str = "", *, name: str = "p", rules: list[dict[str, Any]] | None = None,
                annotations: dict[str, str] | None = None, **spec: Any) -> ValidatingPolicy:
    body = yaml.safe_load(textwrap.dedent(spec_yaml)) if spec_yaml else {}
    body = {**body, **spec}
    body.setdefault("matchConstraints", {"resourceRules": rules or [POD_RULE]})
    data = {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": name, "annotations": annotations or {}}, "spec": body}
    policy, problems = parse_policy(data)
    assert policy is not None, [p.render() for p in problems]
    return policy


def pod(name: str = "pod", namespace: str = "default", labels: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}], **spec}}

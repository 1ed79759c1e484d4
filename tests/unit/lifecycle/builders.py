"""Small builders shared by the GeneratingPolicy / DeletingPolicy unit tests (documents in, typed objects out)."""

from __future__ import annotations

from typing import Any

from vpol.engine.evaluate import CompiledException, compile_exception
from vpol.model.parse import parse_exception
from vpol.policies.deleting.model import DeletingPolicy, parse_deleting_policy
from vpol.policies.generating.model import GeneratingPolicy, parse_generating_policy

GROUP_VERSION = "policies.kyverno.io/v1"


def rules(resources: str = "configmaps", operations: tuple[str, ...] = ("CREATE",), group: str = "",
          **extra: Any) -> dict[str, Any]:
    """A matchConstraints with one resource rule."""
    return {"resourceRules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": list(operations),
                               "resources": [resources]}], **extra}


def document(kind: str, spec: Any, *, name: str = "p", namespace: str | None = None,
             api_version: str = GROUP_VERSION) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def gpol(spec: dict[str, Any], *, namespace: str | None = None, name: str = "p") -> GeneratingPolicy:
    """A (Namespaced)GeneratingPolicy that must parse (matchConstraints defaults to CREATE of configmaps)."""
    kind = "NamespacedGeneratingPolicy" if namespace else "GeneratingPolicy"
    policy, problems = parse_generating_policy(document(kind, {"matchConstraints": rules(), **spec}, name=name,
                                                        namespace=namespace))
    assert policy is not None, problems
    return policy


def dpol(spec: dict[str, Any], *, namespace: str | None = None, name: str = "d") -> DeletingPolicy:
    """A (Namespaced)DeletingPolicy that must parse (schedule and matchConstraints default to every minute and
    pods, any operation)."""
    kind = "NamespacedDeletingPolicy" if namespace else "DeletingPolicy"
    full = {"schedule": "* * * * *", "matchConstraints": rules("pods", ("*",)), **spec}
    policy, problems = parse_deleting_policy(document(kind, full, name=name, namespace=namespace))
    assert policy is not None, problems
    return policy


def exception(name: str, conditions: list[str], *, policy: str, kind: str, namespace: str = "default",
              labels: dict[str, str] | None = None, **spec: Any) -> CompiledException:
    """A compiled PolicyException naming ``policy`` of ``kind`` (must parse and compile)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    doc = {"apiVersion": GROUP_VERSION, "kind": "PolicyException", "metadata": metadata,
           "spec": {"policyRefs": [{"name": policy, "kind": kind}],
                    "matchConditions": [{"name": f"c{i}", "expression": c} for i, c in enumerate(conditions)],
                    **spec}}
    parsed, problems = parse_exception(doc)
    assert parsed is not None, problems
    compiled = compile_exception(parsed)
    assert not compiled.problems, compiled.problems
    return compiled


def configmap(name: str = "settings", namespace: str = "team", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace, **extra}}


def namespace_object(name: str, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, **metadata}}


def pod(name: str = "p", namespace: str = "team", **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, **metadata},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}

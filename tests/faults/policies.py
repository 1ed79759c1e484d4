"""ValidatingPolicy bodies for the fault tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

VALID = "object.metadata.name != 'forbidden'"

#: The ``create_policy`` fixture: ``await create_policy(name, expression=VALID)``.
CreatePolicy = Callable[..., Awaitable[dict[str, Any]]]


def policy_body(name: str, expression: str = VALID, *, background: bool = True) -> dict[str, Any]:
    """A cluster-scoped policy on ConfigMaps, without VAP generation (kmock has no server-side apply)."""
    return {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": name},
        "spec": {
            "evaluation": {"background": {"enabled": background}},
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["configmaps"]}]},
            "validations": [{"expression": expression, "message": "not allowed"}],
        },
    }

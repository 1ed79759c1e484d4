"""ValidatingPolicy bodies for the fault tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

VALID = "object.metadata.name != 'forbidden'"

#: The ``create_policy`` fixture: ``await create_policy(name, expression=VALID)``.
CreatePolicy = Callable[..., Awaitable[dict[str, Any]]]


def policy_body(name: str, expression: str = VALID, *, background: bool = True) -> dict[str, Any]:
    """A cluster-scoped, background-only policy on ConfigMaps.

    kmock has no server-side apply, so neither a generated VAP nor vpol's webhook
    configuration can be written there: the policies leave admission out
    (``evaluation.admission.enabled: false``), which needs neither, and the
    operator runs with ``--webhook off``. Admission enforcement is tested on the
    real control plane (tests/e2e/test_admission*.py).
    """
    return {
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": name},
        "spec": {
            "evaluation": {"background": {"enabled": background}, "admission": {"enabled": False}},
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["configmaps"]}]},
            "validations": [{"expression": expression, "message": "not allowed"}],
        },
    }

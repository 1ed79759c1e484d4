"""Waiting (bounded) for a policy's status in the emulator to reach a state, and reading its conditions."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.faults.apiserver import POLICIES, VpolApiServer
from tests.faults.operator_process import Operator

#: Upper bound of every wait in the fault tests (seconds).
WAIT = 20.0


def condition(policy: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in ((policy or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def expect_condition(policy: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    found = condition(policy, kind)
    assert found is not None, f"no {kind} condition in {(policy or {}).get('status')!r}"
    return found


def is_ready(policy: dict[str, Any] | None) -> bool:
    """Ready=True for the policy's current generation, in both places the operator writes it."""
    if not policy:
        return False
    generation = policy["metadata"].get("generation")
    ready = condition(policy, "Ready")
    kyverno = (policy.get("status") or {}).get("conditionStatus") or {}
    return bool(ready and ready["status"] == "True" and ready["observedGeneration"] == generation
                and kyverno.get("ready") is True)


async def wait_policy(api: VpolApiServer, name: str, predicate: Callable[[dict[str, Any] | None], bool],
                      timeout: float, operator: Operator | None = None) -> dict[str, Any]:
    """The stored policy once ``predicate`` holds; fails after ``timeout`` s (or when the operator dies)."""
    last: dict[str, Any] | None = None
    try:
        async with asyncio.timeout(timeout):
            while True:
                last = api.get_object(POLICIES, name)
                if predicate(last):
                    assert last is not None
                    return last
                if operator is not None:
                    assert operator.alive, f"the operator exited with {operator.returncode}"
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"policy {name} did not converge within {timeout}s; last: "
                             f"{(last or {}).get('status')!r}") from None

"""The status vpol writes on a GlobalContextEntry (pure).

Kyverno's API types define it (api/kyverno/v2/global_context_entry_status.go): a ``Ready`` condition, reason
``Succeeded`` when True and ``Failed`` when False, and ``lastRefreshTime``, the last time the data was loaded
successfully. Kyverno 1.19 itself writes only ``lastRefreshTime``, after each successful API call; vpol writes
both, for both kinds of entries (a kubernetesResource entry is refreshed when its objects are listed: its
first list, and any relist after its watch broke), so ``kubectl wait --for=condition=Ready gctxentry/NAME``
works and a failure is visible with its reason.

The message says where the data comes from, not how much there is: a count would change the status on every
watched change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vpol.desired.status import Condition, _truncate, condition_dicts, status_changed

READY = "Ready"
SUCCEEDED = "Succeeded"
FAILED = "Failed"


def entry_status(*, ready: bool, message: str, generation: int, last_refresh: str,
                 previous: Mapping[str, Any] | None, now: str | None = None) -> dict[str, Any]:
    """The entry's whole status (``lastRefreshTime`` "" leaves what is there)."""
    previous = previous or {}
    condition = Condition(READY, ready, SUCCEEDED if ready else FAILED, _truncate(message))
    status: dict[str, Any] = {
        "conditions": condition_dicts([condition], previous.get("conditions") or [], generation, now),
    }
    refreshed = last_refresh or previous.get("lastRefreshTime")
    if refreshed:
        status["lastRefreshTime"] = refreshed
    return status


__all__ = ["READY", "SUCCEEDED", "FAILED", "entry_status", "status_changed"]

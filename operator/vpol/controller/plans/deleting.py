"""The plan of a DeletingPolicy or NamespacedDeletingPolicy.

A valid policy is handed to the background work, which deletes what it matches on its schedule
(vpol.controller.deletion). Its status says when it runs next (``Scheduled``) and whether the operator may list and
delete every matched resource (``RBACPermissionsGranted``: an operator without those rights deletes nothing).
"""

from __future__ import annotations

from typing import Any

from vpol.controller.deletion import candidates, due_at
from vpol.controller.plans.lifecycle import LifecyclePlan
from vpol.controller.queue_keys import PolicyKey
from vpol.desired.status import Findings
from vpol.policies.deleting.model import DeletingPolicy

SCHEDULED = "Scheduled"


class DeletingPlan(LifecyclePlan):
    def decide(self, key: PolicyKey, body: dict[str, Any], findings: Findings) -> str:
        self._deleting(key, body, findings)
        return ""

    def _deleting(self, key: PolicyKey, body: dict[str, Any], findings: Findings) -> None:
        policy, errors = self.parsed(key, body, findings)
        findings.rbac_message = "the operator may list and delete every matched resource"
        last_execution = str((body.get("status") or {}).get("lastExecutionTime") or "")
        if policy is None or errors:
            self.hand_over(key, None)
            findings.extra = [(SCHEDULED, False, "CompilationFailed", "nothing is deleted: the policy is invalid",
                               False)]
            return
        self.hand_over(key, policy, last_execution=last_execution)
        discovery = self.ctx.discovery.get()
        resources = candidates(policy, discovery)
        findings.missing_permissions = self.missing(resources, resources, ("delete",))
        if self.runner is None:
            findings.extra = [(SCHEDULED, False, "ScansDisabled", "nothing is deleted: the operator runs with "
                                                                  "--scan-interval=0 (no background work)", False)]
            return
        due = self.runner.deletion.next_run(policy.key) or due_at(policy, last_execution)
        kinds = ", ".join(sorted({i.kind for i in resources})) or "nothing (no matched resource is known)"
        if due is None:
            findings.extra = [(SCHEDULED, False, "NoFutureRun", f"the schedule {policy.spec.schedule!r} names no "
                                                                f"future time", False)]
        else:
            when = due.strftime("%Y-%m-%dT%H:%M:%SZ")
            findings.extra = [(SCHEDULED, True, "Scheduled", f"deletes matching {kinds} on {policy.spec.schedule!r};"
                                                             f" next run at {when}", False)]

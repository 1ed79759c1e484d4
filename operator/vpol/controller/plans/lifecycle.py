"""What the plans of the kinds without native admission objects share (GeneratingPolicy, DeletingPolicy,
ImageValidatingPolicy): their findings start alike, their status is vpol.desired.status.lifecycle_status, and they
say which libraries and permissions the operator lacks for them the same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vpol.cel.library_use import unserved_libraries
from vpol.controller.plan_context import ReconcileContext, ReconcileResult, Runner
from vpol.controller.queue_keys import PolicyKey
from vpol.desired.status import Findings, lifecycle_status
from vpol.model.discovery import ResourceInfo


class LifecyclePlan:
    def __init__(self, context: ReconcileContext):
        self.ctx = context

    def status(self, findings: Findings, current: Mapping[str, Any]) -> dict[str, Any]:
        return lifecycle_status(findings, current)

    @property
    def runner(self) -> Runner | None:
        return self.ctx.runner

    def hand_over(self, key: PolicyKey, policy: Any, *, gone: bool = False, **details: Any) -> None:
        """Hand the background work the policy (None: invalid, or ``gone``: deleted), with the kind's own
        ``details``."""
        if self.runner is not None:
            self.runner.hand_over(key, policy, gone=gone, **details)

    def decide(self, key: PolicyKey, body: dict[str, Any], findings: Findings) -> str:
        """The kind's findings of the policy ``body`` (handed over as they decide); its admission route in one word
        ("": none)."""
        raise NotImplementedError

    def gone(self, key: PolicyKey) -> ReconcileResult:
        if self.runner is not None:
            self.ctx.exceptions()
        self.hand_over(key, None, gone=True)
        return ReconcileResult(key)

    def plan(self, key: PolicyKey, body: dict[str, Any]) -> tuple[ReconcileResult, Findings]:
        result, findings = self.start(key, body)
        result.enforcement = self.decide(key, body, findings) or result.enforcement
        return result, findings

    def start(self, key: PolicyKey, body: dict[str, Any]) -> tuple[ReconcileResult, Findings]:
        """The result and findings every such policy starts from (the cluster's exceptions handed to the background
        work first: a PolicyException's event queues the policies it names, and generation, deletion and image
        scans must see it then, even where no ValidatingPolicy is reconciled to hand them over)."""
        if self.runner is not None:
            self.ctx.exceptions()
        generation = int((body.get("metadata") or {}).get("generation") or 0)
        findings = Findings(generation=generation, background_enabled=True,
                            type_check_note="expressions type-check (objects are typed dyn, as in Kyverno; they are "
                                            "not checked against the matched kinds' schemas)")
        return ReconcileResult(key, enforcement="NotApplicable"), findings

    def parsed(self, key: PolicyKey, body: dict[str, Any], findings: Findings) -> tuple[Any, list[str]]:
        """The policy parsed (None: it does not parse) and its errors, parsing or compiling (the kind's, from the
        registry), which are also the findings' compile errors; the libraries it calls that this operator cannot
        serve go into the findings too."""
        kind = key.policy_kind
        policy, problems = kind.parse(body)
        self.libraries(findings, policy)
        errors = [p.short() for p in problems if p.severity == "error"]
        if policy is not None and not errors:
            errors = [p.short() for p in kind.compile_problems(policy) if p.severity == "error"]
        findings.compile_errors = errors
        return policy, errors

    def libraries(self, findings: Findings, policy: Any) -> None:
        """What the policy calls that this operator cannot serve (vpol.cel.library_use) goes into its status."""
        if policy is not None:
            findings.unserved_libraries = unserved_libraries(policy.expressions(), http_enabled=self.ctx.http_enabled)

    def missing(self, reads: Sequence[ResourceInfo], writes: Sequence[ResourceInfo],
                write_verbs: Sequence[str]) -> list[str]:
        """The permissions the operator lacks: get, list and watch of ``reads``, ``write_verbs`` of ``writes``."""
        if self.ctx.access is None:
            return []
        gvrs = lambda infos: sorted({(i.group, i.version, i.resource) for i in infos})  # noqa: E731
        return self.ctx.access.missing(gvrs(reads)) + self.ctx.access.missing(gvrs(writes), verbs=write_verbs)

"""What the scanner (vpol.controller.scanner) asks of every path of background work, the same way for each.

The paths: validation scans (ValidatingPolicies, vpol.controller.validation_scans), image scans
(ImageValidatingPolicies, vpol.controller.image_scans), mutation of existing objects
(vpol.controller.background_mutation), generation (vpol.controller.generation) and scheduled deletion
(vpol.controller.deletion). Each is a :class:`BackgroundRunner`: the kind of policy its plan hands it
(:meth:`BackgroundRunner.hand_over`), its policies and what its results say of them in the reports, the resources it
watches and since which resourceVersion, what it does with a batch of changed objects, what a full scan does, and
what is due now. The scanner loops over them; what a path does not do is the default of :class:`RunnerDefaults`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from vpol.controller.scan_events import Batch
from vpol.controller.scan_watches import GVR
from vpol.desired.report import PolicyMeta
from vpol.model.discovery import Discovery, ResourceInfo


@dataclass(frozen=True)
class Handed:
    """What handing a policy to a runner changed, for the scanner to act on."""

    #: Its policies changed: the reports' policy metadata is computed again.
    changed: bool = False
    #: The scanner waits until such changes stop coming before it scans (a burst of policies applied together is
    #: scanned once, not once per policy).
    settle: bool = False
    #: What the scanner's loop does about it (vpol.controller.scan_events), None: nothing.
    event: tuple[Any, ...] | None = None


class BackgroundRunner(Protocol):
    #: The policy kind (its cluster-wide name in vpol.policies.registry, for both variants) whose policies its plan hands
    #: it; "" for none.
    kind: ClassVar[str]
    #: Its results are in the reports: the first scan after a start waits until every policy of its kind that
    #: existed then was handed over (else it takes their results for stale and writes those reports again).
    reports_results: ClassVar[bool]

    def hand_over(self, key: str, policy: Any | None, **details: Any) -> Handed:
        """A policy of its kind by policy key (``name`` or ``namespace/name``) as its plan found it: valid, or None
        (invalid, not for this path, or gone); ``details`` are the kind's own (a GeneratingPolicy's ``gone``, a
        DeletingPolicy's ``last_execution``)."""
        ...

    def policies(self) -> Sequence[Any]:
        """The policies it runs with now."""
        ...

    def report_meta(self) -> dict[str, PolicyMeta]:
        """What the reports say of each of its policies besides the outcome, by policy key ({}: it reports
        nothing)."""
        ...

    def watched(self, discovery: Discovery) -> dict[GVR, ResourceInfo]:
        """The resources the scanner must watch for it."""
        ...

    def trigger_since(self, gvr: GVR, discovery: Discovery) -> str:
        """Where a new watch of ``gvr`` must start for it ("": now)."""
        ...

    def policies_changed(self, batch: Batch, discovery: Discovery) -> set[str]:
        """Its policies created, changed or gone in a batch (the keys it names for this path): what they do at once;
        the keys of those gone, whose results the scanner removes from the reports."""
        ...

    def objects_changed(self, batch: Batch, discovery: Discovery) -> int:
        """A batch of changes seen by the scanner's watches; how many objects it acted on (the scanner waits for the
        report writes of that work before the next path's)."""
        ...

    def periodic(self, discovery: Discovery) -> int:
        """Its part of a full background scan; how many objects it acted on."""
        ...

    def run_due(self) -> int:
        """What is due now, whatever arrived (a schedule's run); how many objects it acted on."""
        ...


class RunnerDefaults:
    """What a path that does not take part in one of the scanner's steps does there: nothing."""

    kind: ClassVar[str] = ""
    reports_results: ClassVar[bool] = False

    def hand_over(self, key: str, policy: Any | None, **details: Any) -> Handed:
        return Handed()

    def policies(self) -> Sequence[Any]:
        return []

    def report_meta(self) -> dict[str, PolicyMeta]:
        return {p.key: PolicyMeta(p.severity, p.category, p.scored) for p in self.policies()}

    def watched(self, discovery: Discovery) -> dict[GVR, ResourceInfo]:
        return {}

    def trigger_since(self, gvr: GVR, discovery: Discovery) -> str:
        return ""

    def policies_changed(self, batch: Batch, discovery: Discovery) -> set[str]:
        return set()

    def objects_changed(self, batch: Batch, discovery: Discovery) -> int:
        return 0

    def periodic(self, discovery: Discovery) -> int:
        return 0

    def run_due(self) -> int:
        return 0

"""settle(): what survives is frozen out of the collector's scans, and unreachable cycles are not frozen with it."""

from __future__ import annotations

import gc
import weakref

from vpol.controller.garbage import settle


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_settle_collects_cycles_then_freezes_the_survivors() -> None:
    try:
        kept = Node()
        cycle = Node()
        cycle.other = Node()
        cycle.other.other = cycle
        gone = weakref.ref(cycle)
        del cycle
        gc.freeze()  # the unreachable cycle is frozen from an earlier settle
        settle()
        assert gone() is None  # unfrozen, collected
        assert gc.get_freeze_count() > 0 and gc.is_tracked(kept)
        assert all(kept is not o for o in gc.get_objects(generation=2))  # frozen: in no generation scanned
    finally:
        gc.unfreeze()

"""The cyclic garbage collector and admission latency: long-lived objects kept out of its scans.

CPython's cyclic collector stops the interpreter for as long as a scan takes, and a full (generation 2)
scan walks every tracked object: Kopf's and the Kubernetes client's, and the policies the webhook compiled.
Measured in the operator under admission load (bench/admission.py --peer kyverno, 2026-11-26, 2 cores):
full collections of 75 to 220 ms, a few per minute, each one holding every request in flight (the 1-client
p99 of the webhook's overhead was 48 ms against 6 ms at p50). ``gc.freeze()`` moves every object alive now
to a generation no collection scans; objects made later are collected as before, so a scan only walks what
is recent. :func:`settle` does it at the moments the long-lived set changes: once the webhook has compiled a
new set of policies (vpol.controller.admission.server), first collecting (with the earlier frozen objects
back in) so that nothing unreachable is frozen for good.
"""

from __future__ import annotations

import gc
import logging
import time

logger = logging.getLogger(__name__)


def settle() -> float:
    """Collect everything, then freeze what survives (see the module docstring); the seconds it took."""
    started = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    took = time.perf_counter() - started
    logger.debug("garbage collected and %d long-lived objects frozen in %.0f ms", gc.get_freeze_count(), took * 1000)
    return took

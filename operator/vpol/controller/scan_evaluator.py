"""The background scans' evaluation worker: started, updated and closed as the scanned policies change.

Scans evaluate in the bounded worker process (``vpol.policies.sandbox``): an expression that errors or runs away
gives that resource an ``error`` result and the scan goes on. The worker compiles a change of the validating
policies or exceptions in place; its MutatingPolicies and global context are fixed at its start, so a change of
those starts a new one. Besides the worker, this says what a scan's results depend on (``policy_hash``, part of
every resource's scan key) and whether they depend on anything else (``pure``).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from typing import Any

from vpol.cel.backend import Backend
from vpol.engine.global_context import GlobalContextSource, reads_global_context
from vpol.kube.errors import describe
from vpol.model.policy import PolicyException
from vpol.policies.mutating.model import MutatingPolicy
from vpol.policies.sandbox import Limits, SandboxedEvaluator
from vpol.policies.validating.model import ValidatingPolicy

logger = logging.getLogger(__name__)

_IMPURE = re.compile(r"\b(resource|http|globalContext)\s*\.|GetMetadata|getMetadata|time\s*\.\s*now|random\s*\(")


class ScanEvaluator:
    """The worker the scans evaluate in, kept equal to the policies it is handed."""

    def __init__(self, backend: Backend | None, limits: Limits,
                 global_context: GlobalContextSource | None = None) -> None:
        self.backend = backend
        self.limits = limits
        #: GlobalContextEntry data for globalContext.Get (handed to a worker whose policies read it).
        self.global_context = global_context
        self._evaluator: SandboxedEvaluator | None = None
        self._key: tuple[Any, ...] = ()
        #: What the running worker was started with and cannot update in place.
        self._fixed: tuple[Any, ...] = ()
        #: What the scans' results depend on, besides each object and its namespace.
        self.policy_hash = ""
        #: Whether the results depend on nothing else: no policy reads other objects, the network, registries or
        #: the clock (such resources are evaluated again at every full scan, changed or not).
        self.pure = False

    def now(self, policies: Sequence[ValidatingPolicy], exceptions: Sequence[PolicyException],
            mutating: Sequence[MutatingPolicy], images: tuple[Any, ...] = (),
            impure_images: bool = False) -> SandboxedEvaluator | None:
        """The worker for these policies (None when there is nothing to evaluate in one); ``images`` is what the
        image policies' results depend on (their fingerprint), ``impure_images`` whether there are any."""
        key = tuple((p.name, repr(p.raw.get("spec")), tuple(sorted(p.annotations.items()))) for p in policies) + (
            repr(list(exceptions)),) + tuple((p.key, repr(p.raw.get("spec"))) for p in mutating)
        self.policy_hash = hashlib.sha256(repr((key, images)).encode()).hexdigest()[:16]
        self.pure = not any(_IMPURE.search(repr(p.raw.get("spec"))) for p in policies) and not impure_images
        if not policies and not mutating:
            self.close()
            return None
        fixed = (tuple((p.key, repr(p.raw.get("spec"))) for p in mutating),
                 reads_global_context([*policies, *mutating]))
        if self._evaluator is None or fixed != self._fixed:
            if self._evaluator:
                self._evaluator.close()
            source = self.global_context if fixed[1] else None
            self._evaluator = SandboxedEvaluator(list(policies), list(exceptions), self.backend, self.limits,
                                                 mutating=list(mutating), global_context=source)
            self._fixed = fixed
        elif key != self._key:
            self._evaluator.update(list(policies), list(exceptions))  # the running worker compiles what changed
        self._key = key
        return self._evaluator

    def close(self) -> None:
        if self._evaluator:
            self._evaluator.close()
            self._evaluator = None
        self._key = ()


def start_quietly(evaluator: SandboxedEvaluator) -> None:
    """Start the evaluation worker without waiting for it; a failure is logged (its first use starts it again)."""
    try:
        evaluator.start(wait=False)
    except Exception as exc:  # noqa: BLE001 - retried where the worker is first used
        logger.warning("starting the evaluation worker failed: %s", describe(exc))

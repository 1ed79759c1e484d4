"""Admission requests the serving process answers itself, when their work is bounded before it starts.

The webhook's evaluation workers (vpol.policies.sandbox) exist because cel-cpp
cannot be stopped: a runaway expression must cost a process, not the server.
Most requests need no such protection: the policies' expressions iterate the
request's own lists (containers, their ports...), and vpol.cel.cost bounds
their work from the sizes of those lists. Such a request is answered by the
serving process with the same engines and the same code as a worker
(:func:`vpol.policies.sandbox.admit_request`, so the decisions are the same),
without the round trip to a worker: no copy of the request to another process,
no second decoding, no wake-up of a process on the other core.

A request is answered here only when every policy answering it (the webhook's
failurePolicy, the variant that matches it, the PolicyExceptions of the policy)
has a work plan, the request body is at most ``max_body_bytes``, and the work
those plans bound on this request is at most ``max_work`` (iterations plus
element copies: about 0.1 us each); everything else goes to a worker, as
before. MutatingPolicies always go to a worker.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vpol.cel.cost import WorkPlan, merged
from vpol.engine.admission import subject_for_request
from vpol.engine.evaluate import SubjectData, compile_exception
from vpol.model.policy import PolicyException
from vpol.policies.sandbox import AdmissionAnswer, AdmissionCall, Answering, admit_request, answering_set
from vpol.policies.validating.engine import PolicyEngine
from vpol.policies.validating.model import ValidatingPolicy

#: Request shapes whose merged work plan is kept (see InlineAdmission.admit); beyond, the kept ones are dropped.
_PLANS_KEPT = 256


@dataclass(frozen=True)
class InlineLimits:
    #: Largest request body answered inline (every operation outside comprehensions is linear in it).
    max_body_bytes: int = 128 * 1024
    #: Most comprehension iterations plus list element copies the request's policies may take (vpol.cel.cost):
    #: 20,000 is a few milliseconds; the Pod Security policies take tens on a Pod with a few containers.
    max_work: int = 20_000


class InlineAdmission:
    """The ValidatingPolicies of one snapshot compiled in the serving process, with their work plans."""

    def __init__(self, policies: Sequence[ValidatingPolicy], exceptions: Sequence[PolicyException],
                 limits: InlineLimits = InlineLimits()):
        self.limits = limits
        compiled_exceptions = [compile_exception(e) for e in exceptions]
        self.engines = [PolicyEngine(p, compiled_exceptions) for p in policies]
        #: Per failurePolicy: whether some policy answering it has no work plan (then none of its requests is
        #: tried inline: the worker answers them all). Planned here for the policies as written; their autogen
        #: variants (Deployments, CronJobs...) are compiled and planned when a request first needs one (about
        #: 1 MiB each), and a variant without a plan sends its requests to a worker.
        self._unplanned: dict[str, bool] = {}
        for engine in self.engines:
            fp = engine.policy.spec.failure_policy
            self._unplanned[fp] = self._unplanned.get(fp, False) or engine.work_plan(0) is None
        #: Per failurePolicy: the engines answering its webhook (in order), and their policies by key.
        #: Each with its Batches (vpol.engine.evaluate): the policies a request's shape applies are evaluated as
        #: one program.
        self._answering: dict[str, Answering] = {fp: answering_set(self.engines, fp, batched=True)
                                                 for fp in self._unplanned}
        #: Per request shape (failurePolicy; the variant of each answering policy that matches, None for none):
        #: the work plans of the matching variants merged into one (vpol.cel.cost.merged), None when one of them
        #: has no plan. Requests of one shape (every Pod of the namespaces the policies select...) measure the
        #: lists the policies share once, in one call.
        self._plans: dict[tuple[str, tuple[int | None, ...]], WorkPlan | None] = {}

    def covers(self, failure_policy: str) -> bool:
        """Whether requests of this webhook may be answered inline (every policy answering them has plans)."""
        return not self._unplanned.get(failure_policy, False)

    def admit(self, req: dict[str, Any], body_bytes: int, call: AdmissionCall) -> AdmissionAnswer | None:
        """The answer, when this request's work is bounded within the limits; None: a worker must answer."""
        started = time.perf_counter()
        if call.mutating or body_bytes > self.limits.max_body_bytes or not self.covers(call.failure_policy):
            return None
        subject = subject_for_request(req, namespaced=call.namespaced, namespace_object=call.namespace_object)
        data = SubjectData(subject)
        engines = self.engines
        chosen = self._answering.get(call.failure_policy) or answering_set(engines, call.failure_policy)
        variants = chosen.batches.shape(subject) if chosen.batches is not None else \
            tuple(engines[i].variant(subject) for i in chosen.indexes)
        shape = (call.failure_policy, variants)
        plan = self._plans[shape] if shape in self._plans else self._plan(chosen.indexes, shape)
        if plan is None or plan.work(data.data, {}) > self.limits.max_work:
            return None
        return admit_request(engines, (), req, call, started, subject, data, chosen)

    def _plan(self, indexes: tuple[int, ...], shape: tuple[str, tuple[int | None, ...]]) -> WorkPlan | None:
        """The merged work plan of a request shape (see _plans), kept."""
        plans = []
        for i, variant in zip(indexes, shape[1]):
            if variant is not None:
                plans.append(self.engines[i].work_plan(variant))
        plan = None if any(p is None for p in plans) else merged(p for p in plans if p is not None)
        if len(self._plans) >= _PLANS_KEPT:
            self._plans.clear()
        self._plans[shape] = plan
        return plan

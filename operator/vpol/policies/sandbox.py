"""Bounded evaluation: untrusted expressions run in a worker process with a deadline and a memory cap.

cel-cpp has no cost estimator and no interrupt (../shared/NOTES.md section 6): a
single ``lists.range(5000).map(x, lists.range(5000))`` takes a second and
over a gigabyte, and nothing inside the engine can stop it. So evaluation
runs in a child process whose address space is capped (``RLIMIT_AS``) and
whose answers the parent waits for with a deadline. A worker that runs out
of time or memory is killed and restarted; the subject that was being
evaluated is retried one policy at a time, so only the offending policy
gets an ``error`` result and every other result is still computed.

The worker compiles the policies itself (they are plain data), so the
parent can be any process, threaded or not ("spawn" start method).
MutatingPolicies run in the same worker (``mutate_once``, ``apply_many``):
a mutation building a huge value is as bounded as a validation.

For the admission webhook the worker answers a whole request (``admit``): it
reads the AdmissionReview as received, evaluates, decides and writes the
answer, so the serving process only moves bytes; the round trip is awaited on
the event loop (no thread per request).

Every other kind's engine runs in a worker too, loaded by key (``load``, ``call``): the
engines a kind builds from plain data (its ``worker_engine`` in vpol.policies.registry: GeneratingPolicy,
DeletingPolicy, and ImageValidatingPolicy, a whole set under one key) are held under the key and called on
subjects with the same deadline and memory cap. An ImageValidatingPolicy's engine reads registries: it builds its
clients in the worker from the access it is sent (vpol.oci.access), and its calls add the time it may wait on
them (``io_seconds``) to each subject's deadline.

GlobalContextEntry data (``globalContext.Get``) reaches a worker from the
operator's store (vpol.engine.global_context): before a request, a worker
that is behind is sent what changed since the version it has, and answers
the library from its own copy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import multiprocessing as mp
import multiprocessing.connection
import resource
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from vpol.cel.backend import Backend, using
from vpol.cel.global_context import GlobalContextView
from vpol.engine.admission import decide, mutation_response, review_response, subject_for_request
from vpol.engine.evaluate import ERROR, CompiledException, Rendered, Result, SubjectData, compile_exception
from vpol.engine.global_context import GlobalContextBackend, GlobalContextSource
from vpol.engine.match import constraints_match
from vpol.engine.request import Subject
from vpol.model.policy import PolicyException
from vpol.policies.mutating.autogen import mutating_autogen_configs
from vpol.policies.mutating.engine import MutatingPolicyEngine, Targets, mutate_all
from vpol.policies.mutating.model import MutatingPolicy
from vpol.policies.registry import kind_named
from vpol.policies.validating.engine import Batches, PolicyEngine
from vpol.policies.validating.model import ValidatingPolicy


@dataclass(frozen=True)
class Limits:
    #: Longest time one subject may take across all policies (seconds).
    seconds_per_subject: float = 5.0
    #: Address-space cap of the worker process (bytes).
    memory_bytes: int = 2 * 1024**3


#: One subject's answer to an ``apply`` request: (the object as the MutatingPolicies left it, None when none
#: applied; their results; the ValidatingPolicies' results on that object, or with ``rendered``, those results
#: as `vpol apply` prints them).
Applied = tuple[dict[str, Any] | None, list[Result], list[Result] | list[Rendered]]


def _worker_engine(kind: str) -> Any:
    """What builds ``kind``'s engine in a worker (its registry entry's ``worker_engine``)."""
    described = kind_named(kind)
    if described is None or described.worker_engine is None:
        raise KeyError(f"no engine of {kind} runs in a worker")
    return described.worker_engine


def _validate(engines: list[PolicyEngine], subject: Subject, only: frozenset[int] | None,
              data: SubjectData | None = None) -> list[Result]:
    data = data or SubjectData(subject)
    out: list[Result] = []
    for i, engine in enumerate(engines):
        if only is not None and i not in only:
            continue
        res = engine.evaluate(subject, data)
        if res is not None:
            out.append(res)
    return out


#: Bodies larger than this are written to the worker from a thread (up to ~8 MiB for a large object).
_SEND_ON_LOOP_BYTES = 256 * 1024


@dataclass(frozen=True)
class AdmissionCall:
    """One admission request for a worker to answer: the AdmissionReview as the API server sent it, and what
    only the serving process knows about it."""

    body: bytes
    #: The webhook it came to: the policies of this failurePolicy answer it.
    failure_policy: str
    #: From discovery; None when unknown (a request with a namespace is then taken as namespaced).
    namespaced: bool | None = None
    #: The Namespace of a namespaced object (``namespaceObject``, namespaceSelectors).
    namespace_object: dict[str, Any] | None = None
    #: The mutating webhook (MutatingPolicies, answered with a JSON patch) instead of the validating one.
    mutating: bool = False


@dataclass(frozen=True)
class AdmissionAnswer:
    #: The AdmissionReview answering the request, as JSON.
    body: bytes
    #: (policy key, allow|deny|warn|audit|error|mutate) per policy that applied, for metrics.
    outcomes: tuple[tuple[str, str], ...]
    #: Seconds the worker spent evaluating.
    seconds: float
    #: Whether the request was admitted.
    allowed: bool = True
    #: (policy key, fail|warn|error, message) of the policies that did not pass, for events.
    violations: tuple[tuple[str, str, str], ...] = ()


def _admit(engines: list[PolicyEngine], mutating_engines: list[MutatingPolicyEngine], call: AdmissionCall,
           webhooks: dict[str, Answering] | None = None) -> AdmissionAnswer:
    """In the worker: one admission request, from the bytes received to the bytes to answer; ``webhooks``: the
    worker's answering_set of ``engines`` per webhook, kept across requests (filled here)."""
    started = time.perf_counter()
    webhook = None
    if webhooks is not None and not call.mutating:
        webhook = webhooks.get(call.failure_policy)
        if webhook is None:
            webhook = webhooks[call.failure_policy] = answering_set(engines, call.failure_policy, batched=True)
    return admit_request(engines, mutating_engines, json.loads(call.body)["request"], call, started,
                         webhook=webhook)


def admit_request(engines: Sequence[PolicyEngine], mutating_engines: Sequence[MutatingPolicyEngine],
                  req: dict[str, Any], call: AdmissionCall, started: float, subject: Subject | None = None,
                  data: SubjectData | None = None, webhook: Answering | None = None) -> AdmissionAnswer:
    """The answer to one decoded AdmissionRequest (``req``) by these engines: what a worker does with a request,
    and what the serving process does with one it may evaluate itself (vpol.policies.inline); ``subject`` and
    ``data``: the request's subject and its CEL inputs, ``webhook``: :func:`answering_set` of ``engines`` for the
    request's webhook, when the caller made them already."""
    uid = str(req.get("uid") or "")
    if subject is None:
        subject = subject_for_request(req, namespaced=call.namespaced, namespace_object=call.namespace_object)
    outcomes: list[tuple[str, str]]
    if call.mutating:
        chosen = [e for e in mutating_engines if e.policy.spec.failure_policy == call.failure_policy]
        mutated, results = mutate_all(chosen, subject) if chosen else (subject.object, [])
        answer = mutation_response(uid, subject.object, mutated, results,
                                   {e.policy.key: call.failure_policy for e in chosen})
        outcomes = [(r.policy, "mutate" if r.properties.get("changed") == "true" else
                     ("error" if r.result == ERROR else "allow")) for r in results]
        violations = [(r.policy, r.result, r.message) for r in results if r.result == ERROR]
    else:
        if webhook is None:
            webhook = answering_set(engines, call.failure_policy)
        validated = []
        if webhook.indexes:
            data = data or SubjectData(subject)
            if webhook.batches is not None:
                validated = webhook.batches.evaluate(subject, data)
            else:
                for i in webhook.indexes:
                    result = engines[i].evaluate(subject, data)
                    if result is not None:
                        validated.append(result)
        decision = decide(validated, webhook.policies)
        answer, outcomes, violations = review_response(uid, decision), decision.outcomes, decision.violations
    return AdmissionAnswer(json.dumps(answer, separators=(",", ":")).encode(), tuple(outcomes),
                           time.perf_counter() - started, bool(answer["response"]["allowed"]), tuple(violations))


class Answering(NamedTuple):
    """The engines answering one webhook: their indexes (in order), their policies by key, and optionally the
    Batches evaluating them together."""

    indexes: tuple[int, ...]
    policies: Mapping[str, ValidatingPolicy]
    batches: Batches | None = None


def answering_set(engines: Sequence[PolicyEngine], failure_policy: str, *, batched: bool = False) -> Answering:
    """The engines whose policies the webhook of ``failure_policy`` answers for (what a caller answering many
    requests keeps); ``batched``: with Batches of them (each request shape met compiles one, on first use)."""
    indexes = tuple(i for i, e in enumerate(engines) if e.policy.spec.failure_policy == failure_policy)
    return Answering(indexes, {engines[i].policy.key: engines[i].policy for i in indexes},
                     Batches([engines[i] for i in indexes]) if batched else None)


#: Engines a forked worker inherits from its parent (see SandboxedEvaluator's ``engines``).
Prebuilt = tuple[list[PolicyEngine], list[MutatingPolicyEngine]]


def _worker(conn: multiprocessing.connection.Connection, policies: list[ValidatingPolicy],
            exceptions: list[PolicyException], backend: Backend, memory_bytes: int,
            mutating: list[MutatingPolicy], prebuilt: Prebuilt | None = None, global_context: bool = False) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (ValueError, OSError):
        pass
    compiled_exceptions: list[CompiledException] | None = None
    if prebuilt is not None:
        engines, mutating_engines = prebuilt
    else:
        compiled_exceptions = [compile_exception(e) for e in exceptions]
        engines = [_prepared(PolicyEngine(p, compiled_exceptions)) for p in policies]
        mutating_engines = [MutatingPolicyEngine(p, compiled_exceptions) for p in mutating]
    view = GlobalContextView()
    if global_context:
        backend = GlobalContextBackend(backend, view)
    #: Other kinds' engines by key (SandboxedEvaluator.load).
    held: dict[str, Any] = {}
    #: The engines answering each admission webhook, with their batches (_admit); rebuilt when the policies are.
    webhooks: dict[str, Answering] = {}
    conn.send(("ready", None))
    with using(backend):
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return
            if msg is None:
                return
            op, subjects, only, only_mutating = msg
            if op == "global-context":  # no answer: the request that follows is answered
                try:
                    view.apply(subjects)
                except Exception:  # noqa: BLE001 - a bad change never stops the worker
                    pass
                continue
            try:
                if op == "load":
                    new_policies, new_exceptions = subjects
                    if compiled_exceptions is None or new_exceptions != exceptions:
                        compiled_exceptions, engines = [compile_exception(e) for e in new_exceptions], []
                    engines = _reload(engines, new_policies, compiled_exceptions)
                    exceptions = new_exceptions
                    webhooks = {}
                    conn.send(("ok", None))
                    continue
                if op == "admit":
                    conn.send(("ok", _admit(engines, mutating_engines, subjects, webhooks)))
                    continue
                if op == "engine":
                    key, kind, args = subjects
                    held[key] = _worker_engine(kind)(*args)
                    conn.send(("ok", None))
                    continue
                if op == "call":
                    key, method, args = only
                    engine = held[key]
                    conn.send(("ok", [getattr(engine, method)(subject, *args) for subject in subjects]))
                    continue
                if op in ("targets", "resolve", "resolve-unconditional"):
                    # mutateExisting: one policy (only_mutating holds its index) on targets, or resolving the
                    # targets of one trigger (unconditional: without its matchConditions, as Kyverno's CLI).
                    (index,) = only_mutating or (0,)
                    engine = mutating_engines[index]
                    if op != "targets":
                        conn.send(("ok", [engine.resolve_targets(s, conditions=op == "resolve") for s in subjects]))
                    else:
                        conn.send(("ok", [(m.result, m.object) for m in map(engine.mutate_target, subjects)]))
                    continue
                batch: list[Any] = []
                for subject in subjects:
                    if op == "validate":
                        batch.append(_validate(engines, subject, only))
                        continue
                    chosen = [e for i, e in enumerate(mutating_engines)
                              if only_mutating is None or i in only_mutating]
                    mutated, mutation_results = mutate_all(chosen, subject)
                    if op == "mutate":
                        batch.append((mutated, mutation_results, []))
                        continue
                    if mutation_results:
                        subject = dataclasses.replace(subject, object=mutated)
                    validated: list[Any] = _validate(engines, subject, only)
                    if op == "apply-rendered":
                        validated = [r.rendered() for r in validated]
                    # The object goes back only when a MutatingPolicy applied (the caller has it otherwise).
                    batch.append((mutated if mutation_results else None, mutation_results, validated))
                conn.send(("ok", batch))
            except MemoryError:
                conn.send(("error", "evaluation ran out of memory"))
            except Exception as exc:  # noqa: BLE001 - report, keep serving
                conn.send(("error", f"evaluation failed: {exc}"))


def _reload(engines: list[PolicyEngine], policies: list[ValidatingPolicy],
            exceptions: list[CompiledException]) -> list[PolicyEngine]:
    """In the worker: engines for a new set of policies, keeping the compiled engine of every policy that
    did not change (``engines`` were compiled with the same ``exceptions``)."""
    held = {e.policy.key: e for e in engines}
    out = []
    for policy in policies:
        engine = held.get(policy.key)
        out.append(engine if engine is not None and engine.policy == policy else
                   _prepared(PolicyEngine(policy, exceptions)))
    return out


def _prepared(engine: PolicyEngine) -> PolicyEngine:
    """``engine``, with what its first evaluation would build built now (PolicyEngine.prepare)."""
    engine.prepare()
    return engine


class SandboxedEvaluator:
    """Evaluates subjects against policies in a bounded worker process."""

    def __init__(self, policies: Sequence[ValidatingPolicy], exceptions: Sequence[PolicyException] = (),
                 backend: Backend | None = None, limits: Limits = Limits(),
                 mutating: Sequence[MutatingPolicy] = (), *, engines: Prebuilt | None = None,
                 global_context: GlobalContextSource | None = None):
        """``engines``: the policies already compiled, by this process, for ``policies`` and ``mutating`` in
        order. The first worker is then forked (on Linux) and inherits them, with no imports
        and no compiling of its own: for a single-threaded caller only (a process forked while other threads
        hold locks can deadlock), such as `vpol apply` before it starts any thread. A worker restarted after
        a kill is spawned and compiles, as always.

        ``global_context``: where GlobalContextEntry data comes from (the operator's store); without it,
        ``globalContext.Get`` is answered by ``backend``."""
        self.policies = list(policies)
        #: MutatingPolicies, in the order they apply (``mutate_once``, ``apply_many``).
        self.mutating = list(mutating)
        self.exceptions = list(exceptions)
        self.backend = backend or Backend()
        self.limits = limits
        self._ctx = mp.get_context("spawn")
        # Forking only on Linux: macOS's system libraries are not fork-safe (Python spawns there by default).
        self._prebuilt = engines if engines is not None and sys.platform.startswith("linux") else None
        self._proc: Any = None
        #: Killed by admit() and not reaped yet: a killed process can look alive for a moment after the
        #: signal, and must never be handed another request (nor be taken as restarted).
        self._killed = False
        self._conn: multiprocessing.connection.Connection | None = None
        #: Started with ``start(wait=False)`` and its "ready" not received yet.
        self._starting = False
        self.global_context = global_context
        #: The store version the running worker has (-1: none yet).
        self._global_version = -1
        #: How many times a worker had to be killed (for metrics and tests).
        self.kills = 0
        #: Other kinds' engines to hold, by key: (kind, what it is built from) (see load).
        self._kinds: dict[str, tuple[str, tuple[Any, ...]]] = {}
        #: Those the running worker holds.
        self._held: set[str] = set()

    def __enter__(self) -> "SandboxedEvaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self, *, wait: bool = True) -> None:
        """Start the worker now (it also starts on first use); a running one is kept. ``wait=False``: return
        once the process is started; it imports and compiles meanwhile, and the first use waits for that."""
        if not self.running:
            self._start(wait=wait)

    def _start(self, *, wait: bool = True) -> None:
        self._kill()  # a worker that was killed, or died: reap it (nothing to do for the first one)
        prebuilt, self._prebuilt = self._prebuilt, None  # only the first worker is forked
        ctx = mp.get_context("fork") if prebuilt is not None else self._ctx
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_worker, args=(child, self.policies, self.exceptions, self.backend, self.limits.memory_bytes,
                                  self.mutating, prebuilt, self.global_context is not None),
            daemon=True,
        )
        self._proc.start()
        child.close()
        self._conn = parent
        self._global_version = -1
        self._held = set()
        self._starting = True
        if wait:
            self._await_ready()

    def _await_ready(self) -> None:
        """Wait for a worker started without waiting to say it is ready (compiling takes time proportional to
        the policies, not the subject)."""
        if not self._starting or self._conn is None:
            return
        self._starting = False
        if not self._conn.poll(60 + len(self.policies) + len(self.mutating)):
            self._kill()
            raise RuntimeError("policy evaluation worker did not start")
        self._conn.recv()

    def global_context_stale(self) -> bool:
        """The running worker lacks changes of the GlobalContextEntry data."""
        return self.global_context is not None and self.global_context.version != self._global_version

    def _send_global_context(self) -> None:
        """Send the running worker what changed in the GlobalContextEntry data since the version it has."""
        if self.global_context is None or self._conn is None:
            return
        version, changes = self.global_context.changes_since(self._global_version)
        if changes:
            self._conn.send(("global-context", changes, None, None))
        self._global_version = version

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None
        self._killed = False
        self._starting = False

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        if self._proc is not None:
            self._proc.join(2)
        self._kill()

    def _died(self) -> str:
        """Why a worker vanished in the middle of a request: its address-space cap is what kills it."""
        return f"evaluation exceeded the memory limit of {self.limits.memory_bytes // 1024**2} MiB (worker died)"

    def load(self, key: str, kind: str, *args: Any) -> None:
        """Hold ``kind``'s engine under ``key``, built in the worker from ``args`` (plain data:
        :attr:`vpol.model.kind.PolicyKind.worker_engine`); sent before the next :meth:`call` of it, and again
        to a worker started anew."""
        self._kinds[key] = (kind, args)
        self._held.discard(key)

    def unload(self, key: str) -> None:
        self._kinds.pop(key, None)
        self._held.discard(key)

    def call(self, key: str, method: str, subjects: Sequence[Subject], *args: Any,
             io_seconds: float = 0.0, limit: float | None = None) -> tuple[str, Any]:
        """``method`` of the engine held under ``key``, on each subject (and ``args``, plain data), in the worker:
        ("ok", the answers), or ("killed", why) past the deadline or the memory cap (a new worker is started on
        the next use), or ("error", why). ``io_seconds``: how long the engine may wait on I/O per subject (an
        ImageValidatingPolicy's registry reads), added to each subject's deadline; ``limit``: the whole call's
        deadline instead (an admission request's)."""
        if key not in self._kinds:
            return "error", f"no engine is loaded for {key}"
        if not self.running:
            self._start()
        self._await_ready()
        if key not in self._held:
            kind, built_from = self._kinds[key]
            status, payload = self._ask([], None, "engine", None, payload=(key, kind, built_from), limit=60.0)
            if status != "ok":
                return status, payload
            self._held.add(key)
        if not subjects:
            return "ok", []  # the engine is loaded: what a caller warming the worker up asks for
        if limit is None and io_seconds:
            limit = (self.limits.seconds_per_subject + io_seconds) * len(subjects)
        return self._ask(subjects, None, "call", None, only_any=(key, method, args), limit=limit)

    def _ask(self, subjects: Sequence[Subject], only: frozenset[int] | None, op: str = "validate",
             only_mutating: frozenset[int] | None = None, *, payload: Any = None, only_any: Any = None,
             limit: float | None = None) -> tuple[str, Any]:
        """One request to the worker (started if needed), answered within the deadline: ``seconds_per_subject``
        per subject, or ``limit``. ``payload`` is sent instead of the subjects, ``only_any`` instead of ``only``
        (the requests of other kinds' engines)."""
        if not self.running:
            self._start()
        self._await_ready()
        assert self._conn is not None
        try:
            if self.global_context_stale():
                self._send_global_context()
            self._conn.send((op, list(subjects) if payload is None else payload,
                             only if only_any is None else only_any, only_mutating))
            deadline = time.monotonic() + (self.limits.seconds_per_subject * len(subjects) if limit is None
                                           else limit)
            if self._conn.poll(max(0.0, deadline - time.monotonic())):
                return self._conn.recv()
            reason = f"evaluation exceeded the time limit of {(limit or self.limits.seconds_per_subject):g}s"
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            reason = self._died()
        self.kills += 1
        self._kill()
        return "killed", reason

    def update(self, policies: Sequence[ValidatingPolicy], exceptions: Sequence[PolicyException] = ()) -> None:
        """Evaluate with these ValidatingPolicies and exceptions from now on. A running worker compiles only
        what changed, in place (starting a worker costs a process, its imports and compiling every policy);
        one that fails to is replaced."""
        self.policies, self.exceptions = list(policies), list(exceptions)
        if not self.running:
            return  # the next start compiles them
        try:
            self._await_ready()
        except RuntimeError:
            return  # killed: the next start compiles them
        assert self._conn is not None
        try:
            self._conn.send(("load", (self.policies, self.exceptions), None, None))
            if self._conn.poll(60 + len(self.policies)):
                status, _payload = self._conn.recv()
                if status == "ok":
                    return
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            pass
        self._kill()

    @property
    def running(self) -> bool:
        return not self._killed and self._proc is not None and self._proc.is_alive()

    async def admit(self, call: AdmissionCall, timeout: float) -> tuple[AdmissionAnswer | None, str]:
        """One admission request answered by the worker, awaited on the running event loop: (answer, "") or
        (None, why not). The worker must be running (:meth:`start`, off the event loop: it spawns and
        compiles); one that overruns ``timeout`` or dies is killed, and :meth:`start` replaces it.

        On the loop, not in a thread: a thread per request costs the serving process two hand-overs of the
        GIL and a wake-up of the loop from the thread, on top of the exchange itself."""
        if not self.running or self._conn is None:
            return None, "the evaluation worker is not running"
        if self._starting:
            return None, "the evaluation worker is still starting"
        conn = self._conn
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()
        fd = conn.fileno()

        def ready() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(fd, ready)
        try:
            if self.global_context_stale():  # rarely: only after the data changed; large, so off the loop
                await asyncio.to_thread(self._send_global_context)
            message = ("admit", call, None, None)
            if len(call.body) > _SEND_ON_LOOP_BYTES:  # a pipe takes ~64 KiB at a time: the loop must not wait
                await asyncio.to_thread(conn.send, message)
            else:
                conn.send(message)  # the worker is idle, reading: it drains at once
            async with asyncio.timeout(timeout):  # no task per request, unlike wait_for
                await readable
            status, payload = conn.recv()  # a message larger than the pipe arrives while this reads
            if status == "ok":
                return payload, ""
            return None, str(payload)
        except (asyncio.TimeoutError, TimeoutError):
            reason = f"evaluation exceeded the time limit of {timeout:g}s"
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            reason = self._died()
        finally:
            loop.remove_reader(fd)
        self.kills += 1
        self._proc.kill()  # reaped by the next start(), off the event loop
        self._killed = True
        return None, reason

    def _wanted(self, policies: Sequence[str] | None) -> frozenset[int] | None:
        """Indexes of the policies with these keys (``name``, or ``namespace/name``)."""
        if policies is None:
            return None
        wanted = set(policies)
        return frozenset(i for i, p in enumerate(self.policies) if p.key in wanted)

    def evaluate_once(self, subject: Subject, policies: Sequence[str] | None = None) -> tuple[list[Result] | None, str]:
        """Results of one round trip, without isolating a culprit: (results, "") or (None, why not).

        For admission, where the whole request has one deadline: a request whose
        evaluation runs out of time or memory is answered by the failurePolicy.
        The worker is restarted on the next call (or by :meth:`start`).
        """
        status, payload = self._ask([subject], self._wanted(policies))
        if status == "ok":
            return list(payload[0]), ""
        return None, str(payload)

    def mutate_once(self, subject: Subject, policies: Sequence[str] | None = None
                    ) -> tuple[tuple[dict[str, Any] | None, list[Result]] | None, str]:
        """The MutatingPolicies (or those named) applied in order, in one round trip: ((object, results), "")
        or (None, why not). For admission, where the request has one deadline (the failurePolicy answers)."""
        wanted = None if policies is None else frozenset(
            i for i, p in enumerate(self.mutating) if p.key in set(policies))
        status, payload = self._ask([subject], frozenset(), "mutate", wanted)
        if status == "ok":
            mutated, results, _validated = payload[0]
            return (mutated, list(results)), ""
        return None, str(payload)

    def apply_many(self, subjects: Sequence[Subject], *, rendered: bool = False) -> list[Applied]:
        """Every subject mutated by the MutatingPolicies, then validated as mutated, in one round trip when
        nothing goes wrong. When a batch fails, each subject is redone alone; a subject whose mutations run
        out of time or memory gets an ``error`` from every MutatingPolicy that matches it and is validated
        as it came (one policy at a time, as :meth:`evaluate` isolates culprits). With ``rendered``, the
        validation results come as `vpol apply` prints them (Result.rendered), made in the worker."""
        if not subjects:
            return []
        op = "apply-rendered" if rendered else "apply"
        status, payload = self._ask(subjects, None, op)
        if status == "ok":
            return [(m, list(mr), list(vr)) for m, mr, vr in payload]
        out: list[Applied] = []
        for subject in subjects:
            status, payload = self._ask([subject], None, op)
            if status == "ok":
                m, mr, vr = payload[0]
                out.append((m, list(mr), list(vr)))
                continue
            reason = str(payload)
            errors = [Result(policy=p.key, result=ERROR, message=reason, api_version=subject.type.api_version,
                             kind=subject.type.kind, namespace=subject.namespace, name=subject.name)
                      for p in self.mutating if _may_match(p, subject)]
            validated = self.evaluate(subject)
            out.append((subject.object if errors else None, errors,
                        [r.rendered() for r in validated] if rendered else validated))
        return out

    def _mutating_index(self, key: str) -> frozenset[int]:
        index = next((i for i, p in enumerate(self.mutating) if p.key == key), None)
        if index is None:
            raise KeyError(f"no MutatingPolicy {key} in this evaluator")
        return frozenset((index,))

    def mutate_targets(self, key: str, targets: Sequence[Subject]) -> list[tuple[Result, dict[str, Any]]]:
        """The MutatingPolicy ``key`` applied to targets of mutateExisting (``MutatingPolicyEngine.mutate_target``),
        in one round trip when nothing goes wrong; a batch that fails is redone one target at a time, and a target
        whose mutation runs out of time or memory gets an ``error``."""
        if not targets:
            return []
        wanted = self._mutating_index(key)
        status, payload = self._ask(targets, frozenset(), "targets", wanted)
        if status == "ok":
            return list(payload)
        out: list[tuple[Result, dict[str, Any]]] = []
        for target in targets:
            status, payload = self._ask([target], frozenset(), "targets", wanted)
            if status == "ok":
                out.extend(payload)
                continue
            out.append((Result(policy=key, result=ERROR, message=str(payload), api_version=target.type.api_version,
                               kind=target.type.kind, namespace=target.namespace, name=target.name),
                        target.object or {}))
        return out

    def resolve_targets(self, key: str, trigger: Subject, *, conditions: bool = True) -> Targets:
        """The targets the MutatingPolicy ``key``'s expression resolves from ``trigger`` (its matchConditions
        first, unless ``conditions`` is false: none when one is false); a failure is an error of the resolution."""
        op = "resolve" if conditions else "resolve-unconditional"
        status, payload = self._ask([trigger], frozenset(), op, self._mutating_index(key))
        if status == "ok":
            return payload[0]  # type: ignore[no-any-return]
        return Targets(error=str(payload))

    def evaluate_many(self, subjects: Sequence[Subject], policies: Sequence[str] | None = None
                      ) -> list[list[Result]]:
        """Results per subject, in one round trip when nothing goes wrong.

        Batching matters for background scans: one exchange with the worker per
        resource costs more than evaluating it. A batch that fails or runs out
        of time is redone one subject at a time, so the culprit is isolated.
        """
        if not subjects:
            return []
        status, payload = self._ask(subjects, self._wanted(policies))
        if status == "ok":
            return [list(r) for r in payload]
        return [self.evaluate(s, policies) for s in subjects]

    def evaluate(self, subject: Subject, policies: Sequence[str] | None = None) -> list[Result]:
        """Results of every policy (or only those named) that matches ``subject``."""
        wanted = self._wanted(policies)
        status, payload = self._ask([subject], wanted)
        if status == "ok":
            return list(payload[0])
        # Isolate the culprit: one policy at a time, fresh worker after each kill.
        results: list[Result] = []
        for i, policy in enumerate(self.policies):
            if wanted is not None and i not in wanted:
                continue
            status, payload = self._ask([subject], frozenset((i,)))
            if status == "ok":
                results.extend(payload[0])
            else:
                results.append(Result(policy=policy.key, result=ERROR, message=str(payload),
                                      api_version=subject.type.api_version, kind=subject.type.kind,
                                      namespace=subject.namespace, name=subject.name))
        return results


def _may_match(policy: MutatingPolicy, subject: Subject) -> bool:
    """Whether a MutatingPolicy (or one of its pod-controller variants) selects ``subject``."""
    variants = [policy, *(v for _name, v in mutating_autogen_configs(policy))]
    return any(constraints_match(v.spec.match_constraints, subject) for v in variants)

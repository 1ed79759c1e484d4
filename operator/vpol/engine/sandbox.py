"""Bounded evaluation: untrusted expressions run in a worker process with a deadline and a memory cap.

cel-cpp has no cost estimator and no interrupt (NOTES.md section 6): a
single ``lists.range(5000).map(x, lists.range(5000))`` takes a second and
over a gigabyte, and nothing inside the engine can stop it. So evaluation
runs in a child process whose address space is capped (``RLIMIT_AS``) and
whose answers the parent waits for with a deadline. A worker that runs out
of time or memory is killed and restarted; the subject that was being
evaluated is retried one policy at a time, so only the offending policy
gets an ``error`` result and every other result is still computed.

The worker compiles the policies itself (they are plain data), so the
parent can be any process, threaded or not ("spawn" start method).
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vpol.cel.backend import Backend, using
from vpol.engine.evaluate import ERROR, PolicyEngine, Result, SubjectData, compile_exception
from vpol.engine.request import Subject
from vpol.model.policy import PolicyException, ValidatingPolicy


@dataclass(frozen=True)
class Limits:
    #: Longest time one subject may take across all policies (seconds).
    seconds_per_subject: float = 5.0
    #: Address-space cap of the worker process (bytes).
    memory_bytes: int = 2 * 1024**3


def _worker(conn: multiprocessing.connection.Connection, policies: list[ValidatingPolicy],
            exceptions: list[PolicyException], backend: Backend, memory_bytes: int) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (ValueError, OSError):
        pass
    compiled_exceptions = [compile_exception(e) for e in exceptions]
    engines = [PolicyEngine(p, compiled_exceptions) for p in policies]
    conn.send(("ready", None))
    with using(backend):
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return
            if msg is None:
                return
            subjects, only = msg
            try:
                batch: list[list[Result]] = []
                for subject in subjects:
                    data = SubjectData(subject)
                    out: list[Result] = []
                    for i, engine in enumerate(engines):
                        if only is not None and i not in only:
                            continue
                        res = engine.evaluate(subject, data)
                        if res is not None:
                            out.append(res)
                    batch.append(out)
                conn.send(("ok", batch))
            except MemoryError:
                conn.send(("error", "evaluation ran out of memory"))
            except Exception as exc:  # noqa: BLE001 - report, keep serving
                conn.send(("error", f"evaluation failed: {exc}"))


class SandboxedEvaluator:
    """Evaluates subjects against policies in a bounded worker process."""

    def __init__(self, policies: Sequence[ValidatingPolicy], exceptions: Sequence[PolicyException] = (),
                 backend: Backend | None = None, limits: Limits = Limits()):
        self.policies = list(policies)
        self.exceptions = list(exceptions)
        self.backend = backend or Backend()
        self.limits = limits
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: multiprocessing.connection.Connection | None = None
        #: How many times a worker had to be killed (for metrics and tests).
        self.kills = 0

    def __enter__(self) -> "SandboxedEvaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        """Start the worker now (it also starts on first use); a running one is kept."""
        if self._proc is None or not self._proc.is_alive():
            self._start()

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(
            target=_worker, args=(child, self.policies, self.exceptions, self.backend, self.limits.memory_bytes),
            daemon=True,
        )
        self._proc.start()
        child.close()
        self._conn = parent
        # Compiling in the worker takes time proportional to the policies, not the subject.
        if not parent.poll(60 + len(self.policies)):
            self._kill()
            raise RuntimeError("policy evaluation worker did not start")
        parent.recv()

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        if self._proc is not None:
            self._proc.join(2)
        self._kill()

    def _ask(self, subjects: Sequence[Subject], only: frozenset[int] | None) -> tuple[str, Any]:
        if self._proc is None or not self._proc.is_alive():
            self._start()
        assert self._conn is not None
        try:
            self._conn.send((list(subjects), only))
            deadline = time.monotonic() + self.limits.seconds_per_subject * len(subjects)
            if self._conn.poll(max(0.0, deadline - time.monotonic())):
                return self._conn.recv()
            reason = f"evaluation exceeded the time limit of {self.limits.seconds_per_subject:g}s"
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            reason = "evaluation exceeded the memory limit of " \
                     f"{self.limits.memory_bytes // 1024**2} MiB (worker died)"
        self.kills += 1
        self._kill()
        return "killed", reason

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

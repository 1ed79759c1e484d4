"""A policy's fused program (vpol.policies.validating.fused) decides exactly as its expressions evaluated one by one.

Every ValidatingPolicy of examples/, the shared Kyverno CLI corpus and tests/differential/suites (plus
VPOL_DIFFERENTIAL_EXTRA folders), on every resource of its suite and on generated variations of each
(fields removed, nulled, emptied, given another type), as CREATE, UPDATE and DELETE requests: the engine
with the fused fast path and the engine without it give the same result, message, failing validation,
properties, autogen variant and exception. No Go needed: this runs wherever the unit tests run.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any


from tests.differential.test_kyverno import _backend, _values, _variations, every_suite
from vpol.cel.backend import using
from vpol.engine.evaluate import Result, compile_exception
from vpol.engine.subjects import subject_for
from vpol.policies.validating.engine import PolicyEngine
from vpol.policies.validating.fused import fused_program

#: Variations per resource (more than the Kyverno differential's: no oracle to wait for).
VARIATIONS = 16


def _fields(result: Result | None) -> Any:
    return None if result is None else dataclasses.astuple(result)


def test_fused_programs_decide_as_expression_by_expression() -> None:
    rng = random.Random(20261125)
    pairs = policies = fusible = 0
    differences = []
    for test_file, suite in every_suite():
        if suite is None or not suite.loaded.policies:
            continue
        values = _values(suite)
        backend, resolve = _backend(suite)
        exceptions = [compile_exception(e) for e in suite.loaded.exceptions]
        fast = [PolicyEngine(p, exceptions) for p in suite.loaded.policies]
        slow = [PolicyEngine(p, exceptions, fused=False) for p in suite.loaded.policies]
        policies += len(fast)
        fusible += sum(fused_program(e.compiled) is not None for e in fast)
        originals = [d.data for d in suite.loaded.resources if isinstance(d.data, dict)]
        objects = originals + [v for obj in originals for _ in range(2) for v in _variations(obj, rng)]
        for operation in ("CREATE", "UPDATE", "DELETE"):
            batch = objects if operation == "CREATE" else originals
            for obj in batch:
                subject = subject_for(obj, operation=operation, resolve=resolve, namespaces=values.namespaces,
                                      user_info=values.user_info)
                if operation == "UPDATE":
                    subject = dataclasses.replace(subject, old_object=subject.object)
                with using(backend):
                    for f, s in zip(fast, slow):
                        got, want = _fields(f.evaluate(subject)), _fields(s.evaluate(subject))
                        pairs += 1
                        if got != want:
                            differences.append(f"{test_file.parent.name}: {f.policy.name} on {subject.name} "
                                               f"({operation}): fused {got}; one by one {want}")
    print(f"{pairs} (policy, resource) pairs; {fusible} of {policies} policies have a fused program")
    assert pairs >= 2000, pairs
    # The fast path is really taken: most real policies have a fused form.
    assert fusible >= 0.8 * policies, (fusible, policies)
    assert not differences, f"{len(differences)} differences:\n" + "\n".join(differences[:40])

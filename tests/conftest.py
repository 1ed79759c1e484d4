"""How the suite is split between pytest-xdist's two workers (``-n 2 --dist loadscope`` in pyproject.toml).

The end-to-end tests share one control plane per worker (tests/e2e/conftest.py's session fixtures) and spend most
of their time waiting on it; the tests beside them (unit, conformance, differential, fault injection, the chart,
signing) need no cluster and keep a core busy. So the end-to-end tests are one unit of work, run by one worker in
file order against one control plane and one node, and every other file is a unit of its own, run by the other
worker meanwhile (or by the first, once the end-to-end tests are done). The benches' smoke tests
(tests/e2e/test_bench_smoke.py) start control planes of their own and use none of the shared one's fixtures: they
are a second unit, so they too can run beside the end-to-end tests.

Why a scheduler and not ``--dist loadgroup`` with ``xdist_group`` marks: pytest-xdist 3.8 implements groups by
appending the group to each test's id through an attribute that pytest 9 no longer reads, so with pytest 9 the
marks group nothing. The scheduler below is xdist's own ``loadscope`` (whole units to a worker, the largest
first) with the units named here.
"""

from __future__ import annotations

from typing import Any

#: Where the end-to-end tests are, as a test id starts.
E2E = "tests/e2e/"
#: The end-to-end files whose tests start control planes of their own.
OWN_CLUSTERS = frozenset({"tests/e2e/test_bench_smoke.py"})


def work_unit(nodeid: str) -> str | None:
    """The unit of work of the test ``nodeid`` when it is not its file: ``cluster`` for an end-to-end test on the
    shared control plane, ``benches`` for a bench's smoke test, None for every other test."""
    path = nodeid.split("::", 1)[0]
    if not path.startswith(E2E):
        return None
    return "benches" if path in OWN_CLUSTERS else "cluster"


def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class SharedClusterScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid) or super()._split_scope(nodeid)

    return SharedClusterScheduling(config, log)

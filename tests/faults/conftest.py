"""Fixtures of the fault-injection tests: the emulated API server and the real operator against it.

Fixtures
--------
kmock (function, from kmock's pytest plugin)
    A :class:`tests.faults.apiserver.VpolApiServer` on a local port
    (``kmock_options`` below swaps the class in).
operator (function)
    Factory ``await operator(workers=2)`` starting ``vpol run`` in a
    subprocess against ``kmock`` and waiting until it is live; returns an
    :class:`tests.faults.operator_process.Operator`. Every operator is
    stopped at teardown; its log is printed when the test failed.
create_policy (function)
    ``await create_policy(name, expression=...)`` POSTs a ValidatingPolicy
    through the API (so watch events flow) and returns the stored body.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.faults.apiserver import POLICY_PATH, VpolApiServer
from tests.faults.converge import WAIT
from tests.faults.operator_process import Operator, StartOperator, write_kubeconfig
from tests.faults.policies import VALID, CreatePolicy, policy_body


@pytest.fixture()
def kmock_options(kmock_options: dict[str, Any]) -> dict[str, Any]:
    return {**kmock_options, "cls": VpolApiServer}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    rep = yield
    if getattr(rep, "when", "") == "call":
        item.stash[_CALL_REPORT] = rep
    return rep


_CALL_REPORT = pytest.StashKey[Any]()


@pytest_asyncio.fixture()
async def operator(kmock: VpolApiServer, tmp_path: Path,
                   request: pytest.FixtureRequest) -> AsyncIterator[StartOperator]:
    started: list[Operator] = []

    async def start(*, workers: int = 2) -> Operator:
        n = len(started)
        kubeconfig = write_kubeconfig(tmp_path / f"kubeconfig-{n}", str(kmock.url).rstrip("/"))
        op = Operator(kubeconfig, tmp_path / f"operator-{n}.log", workers=workers)
        started.append(op)
        return await op.start(WAIT)

    yield start
    for op in started:
        await op.stop()
    rep = request.node.stash.get(_CALL_REPORT, None)
    if rep is not None and rep.failed:
        for i, op in enumerate(started):
            sys.stderr.write(f"\n--- operator {i} log (exit {op.returncode}) ---\n{op.log()[-8000:]}\n")


@pytest_asyncio.fixture()
async def create_policy(kmock: VpolApiServer) -> CreatePolicy:
    async def create(name: str, expression: str = VALID) -> dict[str, Any]:
        resp = await kmock.post(POLICY_PATH, json=policy_body(name, expression))
        assert resp.status in (200, 201), await resp.text()
        return dict(await resp.json())

    return create

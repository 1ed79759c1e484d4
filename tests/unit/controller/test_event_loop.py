"""`vpol run` runs Kopf, and with it the admission webhook's server, on uvloop's event loop, and closes it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvloop

from vpol.controller import run as operator_run
from vpol.controller.runtime import Options


def test_the_operator_runs_on_uvloop_and_closes_its_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def kopf_run(*, loop: asyncio.AbstractEventLoop, **kwargs: Any) -> None:
        async def running() -> asyncio.AbstractEventLoop:
            return asyncio.get_running_loop()

        seen["loop"] = loop
        seen["running"] = loop.run_until_complete(running())
        seen["kwargs"] = kwargs

    monkeypatch.setattr(operator_run.kopf, "run", kopf_run)
    monkeypatch.setattr(operator_run, "api_client", lambda *_a: object())
    monkeypatch.setattr(operator_run, "login_from", lambda _rt: None)
    monkeypatch.setattr(operator_run.metrics, "serve", lambda _port: None)
    monkeypatch.setattr(operator_run, "limit_arenas", lambda: None)
    operator_run.run(Options())
    assert isinstance(seen["loop"], uvloop.Loop)
    assert seen["running"] is seen["loop"]
    assert seen["loop"].is_closed()
    assert seen["kwargs"]["clusterwide"] is True

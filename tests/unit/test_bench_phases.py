"""The scan bench's phase list: a restart is only timed over reports a cold scan wrote."""

from __future__ import annotations

import pytest

from bench.scan import phases_to_run


@pytest.mark.parametrize(("asked", "run"), [
    ("apply,restart", ["apply", "cold", "restart"]),
    ("restart", ["cold", "restart"]),
    ("apply, cold ,restart", ["apply", "cold", "restart"]),
    ("enforce,apply,add,cold,restart", ["enforce", "apply", "add", "cold", "restart"]),
    ("apply,cold", ["apply", "cold"]),
    ("kyverno,kyverno-restart", ["kyverno", "kyverno-restart"]),
])
def test_a_restart_runs_after_the_cold_phase(asked: str, run: list[str]) -> None:
    assert phases_to_run(asked) == run

"""The Kubernetes library calls the benchmark times (bench/cel_core.py) evaluate correctly on a reused activation.

Their cost (10-20 µs per evaluation here, 2 cores) is measured by ``python3 bench/cel_core.py``, not asserted
in a test: timings on a shared machine are not a test outcome.
"""

from __future__ import annotations

import pytest

from bench.cel_core import K8S_LIBRARY_EXPRESSIONS, K8S_LIBRARY_OBJECT
from tests.unit.cel.kubernetes.conftest import BASE_DATA, policy_env


@pytest.mark.parametrize("expr", K8S_LIBRARY_EXPRESSIONS)
def test_library_expressions_evaluate_on_a_reused_activation(expr: str) -> None:
    env = policy_env()
    program = env.compile(expr)
    activation = env.Activation(data={**BASE_DATA, "object": K8S_LIBRARY_OBJECT})
    for _ in range(3):  # the activation is reused, as the benchmark does
        assert program.eval(activation).plain_value() is True

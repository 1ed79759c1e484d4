"""Kyverno's math library: ``math.round(value, precision)``.

``value`` is a double, ``precision`` an int (negative rounds to tens,
hundreds...). Like Kyverno (Go ``math.Round(v * 10^p) / 10^p``), halves are
rounded away from zero: ``math.round(10.125, 2) == 10.13``,
``math.round(-2.5, 0) == -3.0``. Python's ``round`` rounds halves to even,
hence the explicit rounding below.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from cel_expr_python import cel

from vpol.cel.declare import DOUBLE, INT
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.math"


def _round_half_away(x: float) -> float:
    """Go's ``math.Round``: nearest integer, halves away from zero (exact on floats)."""
    fraction, whole = math.modf(x)
    if abs(fraction) >= 0.5:
        whole += math.copysign(1.0, x)
    return whole


def round_to(value: float, precision: int) -> float:
    # IEEE results where Python raises: 10^400 is +Inf and x/0 is NaN here,
    # as in Go.
    try:
        shift = math.pow(10.0, float(precision))
    except OverflowError:
        shift = math.inf
    if shift == 0.0:
        return math.nan
    return _round_half_away(value * shift) / shift


def functions() -> Sequence[Fn]:
    return [Fn(LIBRARY, "math.round", "kyverno_math_round_double_int", cel.Type.DOUBLE, (DOUBLE, INT), round_to)]

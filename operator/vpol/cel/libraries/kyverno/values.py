"""Python data as Kyverno hands decoded documents to CEL.

:func:`go_json` mimics a round trip through Go's ``encoding/json`` into
``any``, which is what Kyverno does with decoded JSON, YAML and X.509 data:
every number becomes a float64 (a CEL ``double``). (Checking that a function
result is something cel-expr-python accepts is
:func:`vpol.cel.declare.guard_result`.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def go_json(value: Any) -> Any:
    """``value`` as Go would see it after ``json.Marshal`` then ``json.Unmarshal`` into ``any``.

    Numbers become floats; NaN and infinities cannot be encoded and raise.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        number = float(value)
        if math.isnan(number) or math.isinf(number):
            raise ValueError(f"json: unsupported value: {value}")
        return number
    if isinstance(value, Mapping):
        return {str(key): go_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [go_json(item) for item in value]
    raise ValueError(f"json: unsupported type: {type(value).__name__}")

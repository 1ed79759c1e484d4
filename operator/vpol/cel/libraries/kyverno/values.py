"""Python data as the Kyverno CEL functions hand it back to CEL.

Two concerns live here:

* :func:`to_cel` makes sure a function result is something cel-expr-python
  accepts. A value it cannot represent (an int beyond 64 bits, an arbitrary
  object) makes ``eval`` itself raise instead of yielding an error value, so
  results are checked and copied before they are returned.
* :func:`go_json` mimics a round trip through Go's ``encoding/json`` into
  ``any``, which is what Kyverno does with decoded JSON, YAML and X.509 data:
  every number becomes a float64 (a CEL ``double``).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def to_cel(value: Any) -> Any:
    """A copy of ``value`` made of types CEL accepts; raises ValueError otherwise."""
    if value is None or isinstance(value, bool | str | float):
        return value
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"integer {value} does not fit in 64 bits")
        return value
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str | int | bool):
                raise ValueError(f"unsupported map key type {type(key).__name__}")
            out[to_cel(key)] = to_cel(item)
        return out
    if isinstance(value, list | tuple):
        return [to_cel(item) for item in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
    if isinstance(value, datetime.timedelta | Message):
        return value
    raise ValueError(f"unsupported value type {type(value).__name__}")


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

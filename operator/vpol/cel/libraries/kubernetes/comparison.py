"""CEL equality and ordering on the Python values cel-expr-python hands us.

Functions like ``indexOf`` or ``min`` receive plain Python values (bool,
int, float, str, bytes, list, dict, datetime, timedelta, protobuf
messages, None) and must compare them the way cel-go does: heterogeneous
numeric equality (``1 == 1.0``), but ``true != 1`` (Python says otherwise),
deep equality of lists and maps, and ordering only between comparable
values (a string and an int cannot be ordered).
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from google.protobuf.message import Message


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _bytes(v: Any) -> bool:
    return isinstance(v, (bytes, bytearray))


def equal(a: Any, b: Any) -> bool:
    """CEL ``==`` between two values (never an error: mismatched kinds are unequal)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _number(a) and _number(b):
        return a == b  # NaN is unequal to everything, as in CEL
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    if _bytes(a) and _bytes(b):
        return bytes(a) == bytes(b)
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        if len(a) != len(b):
            return False
        for key, value in a.items():
            for other_key, other_value in b.items():
                if equal(key, other_key):
                    if not equal(value, other_value):
                        return False
                    break
            else:
                return False
        return True
    if isinstance(a, Message) and isinstance(b, Message):
        return type(a) is type(b) and a == b
    if isinstance(a, datetime.datetime) and isinstance(b, datetime.datetime):
        return a == b
    if isinstance(a, datetime.timedelta) and isinstance(b, datetime.timedelta):
        return a == b
    return False


def compare(a: Any, b: Any) -> int | None:
    """cel-go's ``Compare``: -1, 0 or 1, or None when the values cannot be ordered."""
    if isinstance(a, bool) or isinstance(b, bool):
        if isinstance(a, bool) and isinstance(b, bool):
            return (a > b) - (a < b)
        return None
    if _number(a) and _number(b):
        if (isinstance(a, float) and math.isnan(a)) or (isinstance(b, float) and math.isnan(b)):
            return None
        return (a > b) - (a < b)
    for kind in (str, datetime.datetime, datetime.timedelta):
        if isinstance(a, kind) and isinstance(b, kind):
            return (a > b) - (a < b)  # type: ignore[operator]
    if _bytes(a) and _bytes(b):
        return (bytes(a) > bytes(b)) - (bytes(a) < bytes(b))
    return None


def comparable(v: Any) -> bool:
    """Whether ``v`` belongs to a type cel-go can order at all."""
    return isinstance(v, (bool, int, float, str, bytes, bytearray, datetime.datetime, datetime.timedelta))

"""Values leaving one CEL evaluation and entering another (variables), in the shapes an Activation accepts.

``cel.Value.plain_value()`` turns durations into ``datetime.timedelta`` and
timestamps into ``datetime.datetime``, which an Activation does not take back
("Non-CEL value type"); protobuf's ``Duration``/``Timestamp`` messages it does
take. Bytes come out as ``bytearray``, which an Activation takes whole, while
Python ``bytes`` it reads as a C string, cut at the first NUL byte (cel-expr-python
0.1.3), so bytes always travel as ``bytearray``. A variable holding any of them,
at any depth of lists and maps, must reach the next expression unchanged, as it
does in cel-go.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

_PLAIN = (str, int, float, bool, bytearray, type(None))


def to_activation(value: Any) -> Any:
    """``value`` with every duration, timestamp and bytes value replaced by what an Activation accepts.

    Returns the same object when nothing needed replacing (no copy for the common case).
    """
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, dict)):
        try:
            json.dumps(value)  # in C, far faster than walking in Python: the common case
            return value
        except (TypeError, ValueError):
            pass
    return _convert(value)


def scalar(value: Any) -> Any:
    """One duration, timestamp or bytes value in the shape cel-expr-python accepts back (others unchanged)."""
    if isinstance(value, datetime.timedelta):
        d = duration_pb2.Duration()
        d.FromTimedelta(value)
        return d
    if isinstance(value, datetime.datetime):
        t = timestamp_pb2.Timestamp()
        t.FromDatetime(value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc))
        return t
    if isinstance(value, bytes):
        return bytearray(value)
    return value


def _convert(value: Any) -> Any:
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, list):
        items = [_convert(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    if isinstance(value, dict):
        converted = {k: _convert(v) for k, v in value.items()}
        return value if all(converted[k] is v for k, v in value.items()) else converted
    return scalar(value)

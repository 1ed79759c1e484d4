"""Kyverno's json library: the ``json`` variable with ``unmarshal(s)`` and ``marshal(v)``.

* ``json.unmarshal(s)`` decodes one JSON document like Go's ``json.Unmarshal``
  into ``any``: objects become maps, every number becomes a double
  (``json.unmarshal('{"a": 1}').a == 1.0``), ``NaN``/``Infinity`` literals and
  trailing data are errors, an empty string is ``unexpected end of JSON input``.
* ``json.marshal(v)`` encodes like Go's ``json.Marshal``: compact, map keys
  sorted, integral doubles without a fraction (``1.0`` is ``1``), ``<``, ``>``
  and ``&`` escaped as ``\\u003c``..., bytes as base64, timestamps as RFC 3339.

Go's number formatting and escaping differ from Python's ``json.dumps``, so
the encoder is written out here.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from cel_expr_python import cel

from vpol.cel import types
from vpol.cel.declare import ANY_VALUE, STRING, message
from vpol.cel.libraries.kyverno.declarations import Fn
from vpol.cel.libraries.kyverno.go_text import rfc3339_nano, shortest_fixed

LIBRARY = "kyverno.json"

JSON_TYPE, Json = types.opaque_type("vpol.kyverno.Json", {})
_JSON = message(JSON_TYPE, Json)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


def _to_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"json: cannot unmarshal number {text} into Go value of type float64")
    return number


def unmarshal(text: str) -> Any:
    """Decode like Go's ``json.Unmarshal(data, &anyValue)``."""
    if not text.strip():
        raise ValueError("unexpected end of JSON input")
    try:
        return json.loads(text, parse_int=_to_float, parse_float=_to_float, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc}") from None


def _go_float(number: float) -> str:
    """Go ``encoding/json`` float64 text: shortest digits, ``e`` only beyond [1e-6, 1e21)."""
    if math.isnan(number) or math.isinf(number):
        raise ValueError(f"json: unsupported value: {number}")
    if number == 0:
        return "-0" if math.copysign(1.0, number) < 0 else "0"
    if 1e-6 <= abs(number) < 1e21:
        return shortest_fixed(number)
    sign, digits, exponent = Decimal(repr(number)).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(str(d) for d in digits)
    exp = exponent + len(mantissa) - 1
    body = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
    return f"{'-' if sign else ''}{body}e{'-' if exp < 0 else '+'}{abs(exp):02d}".replace("e-0", "e-").replace("e+0", "e+")


def _go_string(s: str) -> str:
    encoded = json.dumps(s, ensure_ascii=False)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        encoded = encoded.replace(char, escape)
    return encoded


def marshal(value: Any) -> str:
    """Encode like Go's ``json.Marshal``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _go_string(value)
    if isinstance(value, bytes | bytearray):
        return _go_string(base64.b64encode(bytes(value)).decode("ascii"))
    if isinstance(value, datetime.datetime):
        return _go_string(rfc3339_nano(value))
    if isinstance(value, datetime.timedelta):
        # time.Duration is an int64 count of nanoseconds.
        return str((value.days * 86_400 + value.seconds) * 1_000_000_000 + value.microseconds * 1_000)
    if isinstance(value, Mapping):
        items = sorted((_key(k), v) for k, v in value.items())
        return "{" + ",".join(f"{_go_string(k)}:{marshal(v)}" for k, v in items) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(marshal(v) for v in value) + "]"
    raise ValueError(f"json: unsupported type: {type(value).__name__}")


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    raise ValueError(f"json: unsupported map key type: {type(key).__name__}")


def variables() -> dict[str, tuple[cel.Type, Any]]:
    return {"json": (JSON_TYPE, Json())}


def functions() -> Sequence[Fn]:
    T = cel.Type
    out = [Fn(LIBRARY, "unmarshal", "kyverno_json_unmarshal_string", T.DYN, (_JSON, STRING), lambda _j, s: unmarshal(s), member=True)]
    for param in ANY_VALUE:
        out.append(
            Fn(LIBRARY, "marshal", f"kyverno_json_marshal_{param.kind}", T.STRING, (_JSON, param), lambda _j, v: marshal(v), member=True)
        )
    return out

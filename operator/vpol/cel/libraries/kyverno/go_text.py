"""Go's text forms of values, as the Go libraries Kyverno's functions call write them.

``strconv.FormatFloat`` (shortest digits, ``'f'`` and ``'g'`` forms), ``strconv.Quote`` and
``time.RFC3339Nano`` in UTC, for the libraries that must write what Kyverno writes (json_lib's
``json.marshal``, format_lib's ``string.format``). Python's ``repr`` of a float has the same shortest
digits as Go's ``strconv``; only the layout differs, which is what these functions add.
"""

from __future__ import annotations

import datetime
import math
from decimal import Decimal


def shortest_fixed(number: float) -> str:
    """``strconv.FormatFloat(number, 'f', -1, 64)`` of a finite number: the shortest digits, no exponent."""
    text = format(Decimal(repr(number)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def shortest_g(number: float) -> str:
    """``strconv.FormatFloat(number, 'g', -1, 64)``: what cel-go's ``string(double)`` gives."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if number == 0:
        return "-0" if math.copysign(1.0, number) < 0 else "0"
    _sign, digit_tuple, exponent = Decimal(repr(abs(number))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    power = len(digit_tuple) + int(exponent) - 1  # number = d.ddd x 10^power
    if -4 <= power < 6:  # Go decides with precision 6 for the shortest form
        return shortest_fixed(number)
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{'-' if number < 0 else ''}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"


_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
            "\\": "\\\\", '"': '\\"'}


def quote(text: str) -> str:
    """``strconv.Quote``: double quotes, backslash escapes, printable characters as they are."""
    out = ['"']
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch == " " or ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def rfc3339_nano(when: datetime.datetime) -> str:
    """``time.RFC3339Nano`` in UTC: the fraction's trailing zeros trimmed, ``Z`` for the zone."""
    when = when.astimezone(datetime.timezone.utc)
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    if when.microsecond:
        text += f".{when.microsecond:06d}".rstrip("0")
    return text + "Z"

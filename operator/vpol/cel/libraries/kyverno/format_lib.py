"""``'...'.format([...])`` as cel-go's strings extension (version 2, Kyverno's and the API server's) writes it.

cel-cpp's ``format`` differs from cel-go's in what it writes (measured against Kyverno's engine):
cel-go quotes the strings inside lists and maps (``["a", "b"]``), writes maps as ``{"k":v}`` with
sorted keys, doubles inside lists and maps as ``1.500000``, durations and timestamps inside them as
``duration("90s")``, ``%s`` of a double as Go's shortest form (``0.30000000000000004``), ``%f``
through golang.org/x/text with thousands separators (``1,234.500000``, ``∞``) and ``%e`` as
``1.234500×10⁰³`` (its precision acting as a width). The evaluated program calls this
implementation instead (vpol.cel.compat.GO_FORMAT rewrites ``R.format(L)`` into
``vpol_format(R, L)``); what is type-checked is the expression as written.

Values reach Python without the difference between int and uint (it never shows in the text) and
with durations and timestamps at microsecond precision.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from cel_expr_python import cel

from vpol.cel.declare import LIST, STRING
from vpol.cel.libraries.kyverno.declarations import Fn
from vpol.cel.libraries.kyverno.go_text import quote, rfc3339_nano, shortest_fixed, shortest_g

LIBRARY = "kyverno.strings_format"
#: The name the evaluated program calls (vpol.cel.compat.GO_FORMAT).
FUNCTION = "vpol_format"
_DEFAULT_PRECISION = 6


class FormatError(ValueError):
    pass


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes | bytearray):
        return "bytes"
    if value is None:
        return "null_type"
    if isinstance(value, datetime.timedelta):
        return "google.protobuf.Duration"
    if isinstance(value, datetime.datetime):
        return "google.protobuf.Timestamp"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, cel.Type):
        return "type"
    return type(value).__name__


def _duration(value: datetime.timedelta) -> str:
    seconds = value.days * 86400 + value.seconds + value.microseconds / 1e6
    return shortest_fixed(seconds) + "s"


def _bytes_text(value: bytes | bytearray) -> str:
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError("invalid UTF-8 in bytes, cannot convert to string") from None


def _as_string(value: Any) -> str:
    """``%s``: cel-go's conversion of the value to a string, lists and maps written out."""
    if isinstance(value, list):
        return _list(value)
    if isinstance(value, dict):
        return _map(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, float):
        return shortest_g(value)
    if isinstance(value, bytes | bytearray):
        return _bytes_text(value)
    if value is None:
        return "null"
    if isinstance(value, datetime.timedelta):
        return _duration(value)
    if isinstance(value, datetime.datetime):
        return rfc3339_nano(value)
    if isinstance(value, cel.Type):
        return {"null": "null_type"}.get(value.name().lower(), value.name().lower())
    raise FormatError("string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, "
                      f"types, durations, and timestamps, was given {_type_name(value)}")


def _member(value: Any) -> str:
    """A value inside a list or map, written as a CEL literal."""
    if isinstance(value, bool) or value is None or isinstance(value, cel.Type):
        return _as_string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, bytes | bytearray):
        return "b" + quote(_bytes_text(value))
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return quote("NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf"))
        return f"{value:.{_DEFAULT_PRECISION}f}"
    if isinstance(value, datetime.timedelta):
        return f"duration({quote(_duration(value))})"
    if isinstance(value, datetime.datetime):
        return f"timestamp({quote(rfc3339_nano(value))})"
    if isinstance(value, list):
        return _list(value)
    if isinstance(value, dict):
        return _map(value)
    raise FormatError(f"no formatting function for {_type_name(value)}")


def _list(values: list[Any]) -> str:
    return "[" + ", ".join(_member(v) for v in values) + "]"


def _map(values: dict[Any, Any]) -> str:
    entries = []
    for key, value in values.items():
        if isinstance(key, bool):
            key_text = "true" if key else "false"
        elif isinstance(key, int):
            key_text = str(key)
        elif isinstance(key, str):
            key_text = quote(key)
        else:
            raise FormatError(f"no formatting function for map key of type {_type_name(key)}")
        entries.append((key_text, _member(value)))
    entries.sort(key=lambda entry: entry[0])
    return "{" + ", ".join(f"{k}:{v}" for k, v in entries) + "}"


def _decimal(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise FormatError(f"decimal clause can only be used on integers, was given {_type_name(value)}")


def _float_argument(value: Any, clause: str) -> float:
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        return float(value.replace("Infinity", "inf"))
    if isinstance(value, float):
        return value
    raise FormatError(f"{clause} clause can only be used on doubles, was given {_type_name(value)}")


def _fixed(precision: int | None) -> Callable[[Any], str]:
    # golang.org/x/text's printer (locale en-US): thousands separators, ∞ for infinities.
    digits = _DEFAULT_PRECISION if precision is None else precision

    def clause(value: Any) -> str:
        number = _float_argument(value, "fixed-point")
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "∞" if number > 0 else "-∞"
        return f"{number:,.{digits}f}"
    return clause


_SUPERSCRIPTS = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def _scientific(precision: int | None) -> Callable[[Any], str]:
    # cel-go builds "%<precision>e" (a width, not a precision) for golang.org/x/text's printer, which writes
    # six decimals and the exponent as ×10 and superscript digits.
    width = _DEFAULT_PRECISION if precision is None else precision

    def clause(value: Any) -> str:
        number = _float_argument(value, "scientific")
        if math.isnan(number):
            text = "NaN"
        elif math.isinf(number):
            text = "∞" if number > 0 else "-∞"
        else:
            mantissa, _e, exponent = f"{number:.{_DEFAULT_PRECISION}e}".partition("e")
            power = int(exponent)
            text = mantissa + "×10" + f"{'-' if power < 0 else ''}{abs(power):02d}".translate(_SUPERSCRIPTS)
        return text.rjust(width)
    return clause


def _binary(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return format(value, "b")
    raise FormatError(f"only integers and bools can be formatted as binary, was given {_type_name(value)}")


def _hex(upper: bool) -> Callable[[Any], str]:
    def clause(value: Any) -> str:
        if isinstance(value, str):
            text = value.encode("utf-8").hex()
        elif isinstance(value, bytes | bytearray):
            text = bytes(value).hex()
        elif isinstance(value, int) and not isinstance(value, bool):
            text = format(value, "x")
        else:
            raise FormatError("only integers, byte buffers, and strings can be formatted as hex, was given "
                              + _type_name(value))
        return text.upper() if upper else text
    return clause


def _octal(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return format(value, "o")
    raise FormatError(f"octal clause can only be used on integers, was given {_type_name(value)}")


#: The clauses cel-go's format knows, by their letter.
VERBS = frozenset("sdfebxXo")


def _parse_clause(spec: str) -> tuple[int, str, int | None]:
    """The clause at the start of ``spec`` (what follows a ``%``): (characters read, its letter, its precision);
    FormatError as cel-go words it when it cannot be parsed."""
    i = 0
    precision = None
    if spec[0] == ".":
        i = 1
        while True:
            if i >= len(spec):
                raise FormatError("error while parsing precision: could not find end of precision specifier")
            if not ("0" <= spec[i] <= "9"):
                break
            i += 1
        if i == 1:
            raise FormatError('error while parsing precision: error while converting precision to integer: '
                              'strconv.Atoi: parsing "": invalid syntax')
        precision = int(spec[1:i])
    verb = spec[i]
    if verb not in VERBS:
        raise FormatError(f'unrecognized formatting clause "{verb}"')
    return i + 1, verb, precision


def _formatter(verb: str, precision: int | None) -> Callable[[Any], str]:
    return {"s": _as_string, "d": _decimal, "f": _fixed(precision), "e": _scientific(precision), "b": _binary,
            "x": _hex(False), "X": _hex(True), "o": _octal}[verb]


class Clause(NamedTuple):
    """A ``%`` clause of a template: the argument it formats, its letter, its precision."""

    argument: int
    verb: str
    precision: int | None


def template_parts(template: str, count: int, *, checking: bool = False) -> Iterator[str | Clause]:
    """The template's literal text and its clauses in order, for ``count`` arguments; FormatError where cel-go
    refuses the template. cel-go formats and checks through the same parser, which meets a missing argument
    before a clause cut short when formatting and after it when checking (its checker never lacks one)."""
    i = index = 0
    while i < len(template):
        if template[i] != "%":
            yield template[i]
            i += 1
            continue
        if template[i + 1:i + 2] == "%":
            yield "%"
            i += 2
            continue
        if not checking and index >= count:
            raise FormatError(f"index {index} out of range")
        if i + 1 >= len(template):
            raise FormatError("unexpected end of string")
        if index >= count:
            raise FormatError(f"index {index} out of range")
        try:
            read, verb, precision = _parse_clause(template[i + 1:])
        except FormatError as exc:
            raise FormatError(f"could not parse formatting clause: {exc}") from None
        yield Clause(index, verb, precision)
        i += 1 + read
        index += 1


def format_string(template: str, args: Sequence[Any]) -> str:
    """``template.format(args)`` as cel-go (strings extension version 2) writes it; FormatError otherwise."""
    out: list[str] = []
    for part in template_parts(template, len(args)):
        if isinstance(part, str):
            out.append(part)
            continue
        try:
            out.append(_formatter(part.verb, part.precision)(args[part.argument]))
        except FormatError as exc:
            raise FormatError(f"error during formatting: {exc}") from None
    return "".join(out)


def functions() -> Sequence[Fn]:
    return [Fn(LIBRARY, FUNCTION, "vpol_format_string_list", cel.Type.STRING, (STRING, LIST), format_string)]

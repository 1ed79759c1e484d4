"""cel-go's compile-time checks of literal arguments, which the API server and Kyverno run.

Their CEL environments validate a string literal passed where it must parse, and refuse the expression when it
does not: cel-go's ``ValidateRegexLiterals`` (``s.matches(re)``: "invalid matches argument"),
``ValidateDurationLiterals`` (``duration``: "invalid duration argument") and ``ValidateTimestampLiterals``
(``timestamp``: "invalid timestamp argument"), each at the literal's position; and the Kubernetes regex library,
which compiles a literal pattern of ``find``/``findAll`` when the program is built ("error parsing regexp:
missing closing ): `(`"), as cel-go does for ``matches(s, re)``. cel-cpp has none of them (such a literal is an
error at every evaluation), so vpol runs them on the checked expression, as vpol.cel.format_check does for
``format``.

Validity follows Go, whose parsers cel-go uses: regular expressions are RE2's syntax (google-re2, as vpol's
regex library, plus the ``\\C`` escape Go refuses and RE2 accepts), durations Go's ``time.ParseDuration``,
timestamps Go's RFC 3339 (``time.RFC3339``) within cel-go's range (years 1 to 9999).
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

import re2

from vpol.cel.aggregate_literals import CheckedTree, _fields, _one
from vpol.cel.go_error_text import as_cel_go

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
#: ``\C`` (any byte) is RE2's; Go's regexp/syntax refuses it (an escape preceded by an even number of backslashes).
_BYTE_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\C")

#: Go's time.ParseDuration: an optional sign, then numbers (digits, an optional fraction) each with a unit.
_DURATION = re.compile(r"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+")
_UNIT_NANOS = {"ns": 1, "us": 10**3, "\u00b5s": 10**3, "\u03bcs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9,
               "h": 3600 * 10**9}
_DURATION_PART = re.compile(r"(\d*)(?:\.(\d*))?(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
#: Go's RFC 3339 layout (2006-01-02T15:04:05Z07:00; a fraction of a second may follow the seconds).
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:Z|([+-])(\d{2}):(\d{2}))")


#: The calls whose string literal argument must parse.
PARSED_LITERAL_CALLS = ("matches", "duration", "timestamp", "find", "findAll")


@dataclass(frozen=True)
class LiteralProblem:
    #: Code point offset in the source as compiled.
    offset: int
    message: str


def regexp_error(pattern: str) -> str:
    """Why Go's regexp package refuses ``pattern``, worded as Go words it ("" when it compiles)."""
    if _BYTE_ESCAPE.search(pattern):
        return "error parsing regexp: invalid escape sequence: `\\C`"
    try:
        re2.compile(pattern, options=_RE2_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else str(exc)
        text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
        return as_cel_go(f"invalid regular expression: {text}")
    return ""


def valid_go_duration(text: str) -> bool:
    """Whether Go's time.ParseDuration accepts ``text`` (within int64 nanoseconds)."""
    if text in ("0", "+0", "-0"):
        return True
    if not _DURATION.fullmatch(text):
        return False
    total = 0
    for whole, fraction, unit in _DURATION_PART.findall(text):
        nanos = _UNIT_NANOS[unit]
        total += int(whole or 0) * nanos
        if fraction:
            total += int(fraction) * nanos // 10 ** len(fraction)
        if total > 2**63:
            return False
    return total <= 2**63 - (0 if text.startswith("-") else 1)


def valid_go_timestamp(text: str) -> bool:
    """Whether Go's time.Parse(time.RFC3339, text) accepts ``text`` and cel-go's range (years 1-9999) holds."""
    m = _RFC3339.fullmatch(text)
    if m is None:
        return False
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    try:
        local = datetime.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return False
    if m.group(7):
        off_hours, off_minutes = int(m.group(8)), int(m.group(9))
        if off_hours > 23 or off_minutes > 59:
            return False
        offset = datetime.timedelta(hours=off_hours, minutes=off_minutes)
        try:
            local = local - offset if m.group(7) == "+" else local + offset
        except OverflowError:
            return False
    return 1 <= local.year <= 9999


def literal_problems(tree: CheckedTree) -> list[LiteralProblem]:
    """The literal arguments of a checked expression that cel-go's environment refuses, where and why."""
    found: list[LiteralProblem] = []
    for expr in tree.nodes():
        if 6 not in expr:
            continue
        call = _fields(_one(expr, 6))
        function = _one(call, 2).decode()
        if function not in PARSED_LITERAL_CALLS:
            continue
        args = [_fields(a) for a in call.get(3) or [] if isinstance(a, bytes)]
        member = 1 in call
        # The argument that must parse: matches' pattern (its first argument as a method, its second as a
        # function), duration's and timestamp's only one, find's and findAll's pattern.
        index = 0 if member or function in ("duration", "timestamp") else 1
        if len(args) <= index or 3 not in args[index]:
            continue
        constant = _fields(_one(args[index], 3))
        if 6 not in constant:  # not a string literal
            continue
        text = _one(constant, 6).decode("utf-8", "replace")
        at = tree.offset(args[index], tree.offset(expr))
        if function == "matches" and (error := regexp_error(text)):
            # The validator reads the method form; the function form's pattern is compiled with the program.
            found.append(LiteralProblem(at, "invalid matches argument" if member else error))
        elif function == "duration" and not valid_go_duration(text):
            found.append(LiteralProblem(at, "invalid duration argument"))
        elif function == "timestamp" and not valid_go_timestamp(text):
            found.append(LiteralProblem(at, "invalid timestamp argument"))
        elif function in ("find", "findAll") and member and (error := regexp_error(text)):
            found.append(LiteralProblem(at, error))
    return sorted(found, key=lambda p: p.offset)

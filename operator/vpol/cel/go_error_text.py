"""Evaluation errors worded as cel-go words them (pure).

cel-cpp reports an evaluation error as an absl status, ``CODE: message`` (``NOT_FOUND: Key not found in map :
"team"``); Kyverno and the API server run cel-go, whose errors are plain sentences (``no such key: team``), and
Kyverno writes them into report results, its CLI's output and its webhook's answers (``error: no such key:
team``). :func:`as_cel_go` rewrites cel-cpp's text for the errors whose cel-go wording can be derived from it
(compared with Kyverno's engine on every error of tests/differential/test_kyverno.py, whose deviations.yaml
lists the errors whose cel-go wording names what cel-cpp's text does not carry); any other error keeps
cel-cpp's message without the status code, which cel-go never prints. Hand-written because no library maps
one CEL runtime's errors to the other's.

The table below was read off cel-go (``common/types/err.go``, ``common/types/*.go``'s conversions and
arithmetic) and Go's ``regexp/syntax`` error codes against RE2's (cel-cpp's regular expressions): both parsers
name the offending fragment the same way, only the code's words differ.
"""

from __future__ import annotations

import re

#: ``CODE: `` as absl prints a status (the codes cel-cpp's evaluation errors use).
_STATUS = re.compile(r"^(?:CANCELLED|UNKNOWN|INVALID_ARGUMENT|DEADLINE_EXCEEDED|NOT_FOUND|ALREADY_EXISTS|"
                     r"PERMISSION_DENIED|RESOURCE_EXHAUSTED|FAILED_PRECONDITION|ABORTED|OUT_OF_RANGE|"
                     r"UNIMPLEMENTED|INTERNAL|UNAVAILABLE|DATA_LOSS|UNAUTHENTICATED): ")

#: RE2's error codes (re2/regexp.cc) -> Go's regexp/syntax error codes, which cel-go's matches() reports.
_REGEXP_CODES = {
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "unexpected )": "unexpected )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class": "invalid character class",
    "invalid character class range": "invalid character class range",
    "invalid UTF-8": "invalid UTF-8",
}
_REGEXP = re.compile(r"^invalid regular expression: (?P<code>.*?)(?:: (?P<fragment>.*))?$", re.S)
_MISSING_KEY = re.compile(r'^Key not found in map : (?:"(?P<quoted>.*)"|(?P<plain>.*))$', re.S)
_INDEX = re.compile(r"^Index error: index=(?P<index>-?\d+) size=\d+$")
_CONVERSION = re.compile(r"^cannot convert string to (?P<type>int|uint|double)$")

#: Messages with a fixed cel-go wording.
_FIXED = {
    "divide by zero": "division by zero",
    "modulus by zero": "modulus by zero",
    "integer overflow": "integer overflow",
    "unsigned integer overflow": "unsigned integer overflow",
    "double out of int64 range": "integer overflow",
    "int64 out of uint64 range": "unsigned integer overflow",
    "double out of uint64 range": "unsigned integer overflow",
    "uint64 out of int64 range": "integer overflow",
    "String to Duration conversion failed": "type conversion error from 'string' to 'google.protobuf.Duration'",
}


def as_cel_go(text: str) -> str:
    """cel-cpp's text of an evaluation error, as cel-go words the same error where that is known; otherwise
    the message without its status code."""
    message = _STATUS.sub("", text, count=1)
    fixed = _FIXED.get(message)
    if fixed is not None:
        return fixed
    if message.startswith("No matching overloads found"):
        return "no such overload"
    if m := _MISSING_KEY.match(message):
        return f"no such key: {m['quoted'] if m['quoted'] is not None else m['plain']}"
    if m := _INDEX.match(message):
        return f"index out of bounds: {m['index']}"
    if m := _CONVERSION.match(message):
        return f"type conversion error from 'string' to '{m['type']}'"
    if m := _REGEXP.match(message):
        code = _REGEXP_CODES.get(m["code"], m["code"])
        return f"error parsing regexp: {code}: `{m['fragment'] or ''}`"
    return message

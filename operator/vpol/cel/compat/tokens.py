"""CEL's tokens, read once per text: the only tokenizer vpol has for CEL expressions.

Hand-written rather than taken from a CEL parser: cel-expr-python exposes no syntax tree (only the checked
expression, after the rewrites of vpol.cel.compat have been made), and every reader of the text needs only tokens:
names, literals, brackets and operators, with their offsets.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import NamedTuple

_IDENT = re.compile(r"[_A-Za-z][_A-Za-z0-9]*")
_NUMBER = re.compile(r"(0x[0-9a-fA-F]+|\d+(\.\d*)?([eE][+-]?\d+)?)[uU]?|\.\d+([eE][+-]?\d+)?")
_STRING_PREFIX = re.compile(r"([rR][bB]?|[bB][rR]?)?('''|\"\"\"|'|\")")


class Token(NamedTuple):
    kind: str  # "ident" | "string" | "number" | "punct"
    text: str
    start: int  # offset in the source (code points)

    @property
    def end(self) -> int:
        return self.start + len(self.text)


#: One token (or a run of whitespace, or the start of a comment or string) at a position: the kinds in the
#: order ``scan`` tries them.
_TOKEN_RX = re.compile(
    r"(?P<space>\s+)|(?P<comment>//)|(?P<string>" + _STRING_PREFIX.pattern + r")|(?P<ident>" + _IDENT.pattern +
    r")|(?P<number>" + _NUMBER.pattern + r")|(?P<op>&&|\|\||==|!=|<=|>=)|(?P<punct>.)", re.S)


@functools.lru_cache(maxsize=2048)
def tokenize(src: str) -> tuple[Token, ...]:
    """The tokens of ``src`` (comments and whitespace left out). Cached: the compiler, the type checker, the
    namespaced-policy check and autogen read the same expression, and each gets this one reading."""
    return tuple(scan(src))


def scan(src: str, start: int = 0) -> Iterator[Token]:
    """CEL tokens of ``src`` from offset ``start`` (a token's start: the tokens from there are those of the whole
    text, at the same offsets; vpol.cel.compat.stream re-reads only what an edit changed this way).
    Unterminated strings end the input."""
    i, n = start, len(src)
    match = _TOKEN_RX.match
    while i < n:
        m = match(src, i)
        assert m is not None  # `.` matches any character
        kind = m.lastgroup
        if kind == "space":
            i = m.end()
            continue
        if kind == "comment":
            nl = src.find("\n", i)
            i = n if nl < 0 else nl + 1
            continue
        if kind == "string":
            s = _STRING_PREFIX.match(src, i)
            assert s is not None
            raw = bool(s.group(1)) and "r" in s.group(1).lower()
            quote = s.group(2)
            j = s.end()
            while j < n and not src.startswith(quote, j):
                if src[j] == "\\" and not raw:
                    j += 1
                elif src[j] == "\n" and len(quote) == 1:
                    break
                j += 1
            j = min(n, j + len(quote))
            yield Token("string", src[i:j], i)
            i = j
            continue
        text = m.group()
        yield Token("punct" if kind == "op" else str(kind), text, i)
        i += len(text)


def line_column(src: str, offset: int) -> tuple[int, int]:
    """1-based line and column (code points) of ``offset`` in ``src``."""
    before = src[:offset]
    line = before.count("\n") + 1
    return line, offset - (before.rfind("\n") + 1) + 1


def offset_of(src: str, line: int, column: int) -> int:
    """The offset of a 1-based line:column in ``src``."""
    start = 0
    for _ in range(line - 1):
        nl = src.find("\n", start)
        if nl < 0:
            break
        start = nl + 1
    return start + column - 1

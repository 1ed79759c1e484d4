"""Typed object literals in mutation expressions: ``Object.spec{...}`` and ``JSONPatch{...}``.

A MutatingAdmissionPolicy's expressions build values with CEL's message
syntax, ``Object{metadata: Object.metadata{labels: {"a": "b"}}}``, where the
type names are paths in the matched kind's schema. vpol type-checks those
against the schema (``vpol.cel.object_types``) and evaluates them as plain
maps: an apply configuration is JSON-like data merged into the object, so
this module rewrites every such literal into a map literal typed ``dyn``
(``dyn({"metadata": dyn({"labels": {"a": "b"}})})``), keeping a map from the
rewritten text back to the original for error positions.

Hand-written rather than taken from a CEL parser: cel-expr-python exposes no
syntax tree, and the rewrite needs only tokens (names, braces, field names).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from vpol.cel.schemas import CEL_RESERVED

#: Roots of the literal type names a mutation may use.
OBJECT_ROOT = "Object"
JSON_PATCH = "JSONPatch"

_IDENT = re.compile(r"[_A-Za-z][_A-Za-z0-9]*")
_NUMBER = re.compile(r"(0x[0-9a-fA-F]+|\d+(\.\d*)?([eE][+-]?\d+)?)[uU]?|\.\d+([eE][+-]?\d+)?")
_STRING_PREFIX = re.compile(r"([rR][bB]?|[bB][rR]?)?('''|\"\"\"|'|\")")
_UNESCAPES = {"__underscores__": "__", "__dot__": ".", "__dash__": "-", "__slash__": "/"}
_UNESCAPE_RX = re.compile("|".join(re.escape(k) for k in _UNESCAPES))


class Token(NamedTuple):
    kind: str  # "ident" | "string" | "number" | "punct"
    text: str
    start: int  # offset in the source (code points)

    @property
    def end(self) -> int:
        return self.start + len(self.text)


#: One token (or a run of whitespace, or the start of a comment or string) at a position: the kinds in the
#: order ``tokens`` tries them. (The rewrites of the evaluated program tokenize each expression many times.)
_TOKEN_RX = re.compile(
    r"(?P<space>\s+)|(?P<comment>//)|(?P<string>" + _STRING_PREFIX.pattern + r")|(?P<ident>" + _IDENT.pattern +
    r")|(?P<number>" + _NUMBER.pattern + r")|(?P<op>&&|\|\||==|!=|<=|>=)|(?P<punct>.)", re.S)


def tokens(src: str, start: int = 0) -> Iterator[Token]:
    """CEL tokens of ``src`` (comments and whitespace left out) from offset ``start`` (a token's start: the
    tokens from there are those of the whole text, at the same offsets). Unterminated strings end the input."""
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


@dataclass(frozen=True)
class Literal:
    """One ``Name.path{field: value, ...}`` literal in an expression."""

    #: The type name as written, split at dots (``("Object", "spec", "containers")``).
    name: tuple[str, ...]
    #: Offsets of the name's first character and of the opening brace.
    start: int
    brace: int
    #: (field name token, whether it is an optional entry `?field`) at the literal's top level.
    fields: tuple[tuple[Token, bool], ...] = field(default=())
    #: Offset of the closing brace (-1 when the literal is not closed).
    end: int = -1


def literals(src: str) -> list[Literal]:
    """Every message literal in ``src``, outermost first by position."""
    toks = list(tokens(src))
    out: list[Literal] = []
    for index, tok in enumerate(toks):
        if tok.text != "{" or index == 0 or toks[index - 1].kind != "ident":
            continue
        # Walk back over `a.b.c` (and a leading `.`).
        j = index - 1
        parts = [toks[j].text]
        while j >= 2 and toks[j - 1].text == "." and toks[j - 2].kind == "ident":
            j -= 2
            parts.insert(0, toks[j].text)
        start = toks[j].start
        if j >= 1 and toks[j - 1].text == ".":
            start = toks[j - 1].start
        fields, end = _fields(toks, index)
        out.append(Literal(tuple(parts), start, tok.start, fields, end))
    return out


def _fields(toks: list[Token], open_index: int) -> tuple[tuple[tuple[Token, bool], ...], int]:
    """The field-name tokens at the top level of the literal opening at ``toks[open_index]``, and
    the offset of its closing brace (-1 if it has none)."""
    out: list[tuple[Token, bool]] = []
    depth = 0
    expect_field = True
    i = open_index + 1
    while i < len(toks):
        t = toks[i]
        if t.text in ("(", "[", "{"):
            depth += 1
        elif t.text in (")", "]", "}"):
            if depth == 0:
                return tuple(out), t.start if t.text == "}" else -1
            depth -= 1
        elif depth == 0:
            if t.text == ",":
                expect_field = True
            elif expect_field:
                optional = t.text == "?"
                name = toks[i + 1] if optional and i + 1 < len(toks) else t
                if name.kind == "ident" and i + (2 if optional else 1) < len(toks) and \
                        toks[i + (2 if optional else 1)].text == ":":
                    out.append((name, optional))
                expect_field = False
        i += 1
    return tuple(out), -1


def unescape(name: str) -> str:
    """A CEL field name back to the property it stands for (``x__dash__y`` -> ``x-y``)."""
    if name.startswith("__") and name.endswith("__") and name[2:-2] in CEL_RESERVED:
        return name[2:-2]
    return _UNESCAPE_RX.sub(lambda m: _UNESCAPES[m.group(0)], name)


@dataclass(frozen=True)
class Rewritten:
    text: str
    #: Sorted (offset in text, offset in original) anchors: every edit boundary.
    _anchors: tuple[tuple[int, int], ...] = ()

    def original_offset(self, offset: int) -> int:
        """The offset in the original source that ``offset`` in the rewritten text came from."""
        if not self._anchors:
            return offset
        keys = [a for a, _ in self._anchors]
        i = bisect.bisect_right(keys, offset) - 1
        if i < 0:
            return offset
        new, old = self._anchors[i]
        return old + (offset - new)

    def original_line_column(self, line: int, column: int, original: str) -> tuple[int, int]:
        """The 1-based line and column in ``original`` (the source as written) of ``line:column`` here."""
        return line_column(original, self.original_offset(offset_of(self.text, line, column)))


def as_map_literals(src: str, roots: tuple[str, ...] = (OBJECT_ROOT, JSON_PATCH),
                    only: frozenset[tuple[str, ...]] | None = None) -> Rewritten:
    """``src`` with every literal whose type name starts with one of ``roots`` (with ``only``: every literal
    whose type name, split at dots, is one of ``only``) turned into a map literal."""
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) in the original
    for lit in literals(src):
        if lit.name[0] not in roots if only is None else lit.name not in only:
            continue
        # `dyn(...)`: every literal of one type name has one type, as in the API server (two Object
        # literals of different shapes in `c ? a : b`, or one against null, must type-check).
        closed = lit.end >= 0
        edits.append((lit.start, lit.brace, "dyn(" if closed else ""))
        for tok, _optional in lit.fields:
            edits.append((tok.start, tok.end, '"' + unescape(tok.text) + '"'))
        if closed:
            edits.append((lit.end + 1, lit.end + 1, ")"))
    if not edits:
        return Rewritten(src)
    edits.sort()
    parts: list[str] = []
    anchors: list[tuple[int, int]] = [(0, 0)]
    pos = 0
    length = 0
    for start, end, replacement in edits:
        parts.append(src[pos:start])
        length += start - pos
        anchors.append((length, start))
        parts.append(replacement)
        length += len(replacement)
        anchors.append((length, end))
        pos = end
    parts.append(src[pos:])
    return Rewritten("".join(parts), tuple(anchors))


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

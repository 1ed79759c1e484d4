"""Reading CEL's structure from its tokens: brackets, member chains, call arguments, message literals.

What the rewrites of vpol.cel.compat (and the readers of typed object literals) need of the syntax, over the one
token list of vpol.cel.compat.tokens: cel-expr-python exposes no syntax tree before type checking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from vpol.cel.compat.tokens import Token, tokenize
from vpol.cel.schemas import CEL_RESERVED

_OPEN = {")": "(", "]": "[", "}": "{"}


def is_name(tok: Token) -> bool:
    """An identifier (not an operator word such as ``in``)."""
    return tok.kind == "ident" and tok.text not in CEL_RESERVED


def closer(toks: Sequence[Token], opening: int) -> int:
    """Index of the bracket closing the one at ``toks[opening]`` (``len(toks)`` when it is never closed)."""
    depth = 0
    for k in range(opening, len(toks)):
        if toks[k].text in ("(", "[", "{"):
            depth += 1
        elif toks[k].text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return k
    return len(toks)


def opener(toks: Sequence[Token], j: int) -> int | None:
    """Index of the bracket opening the group that ``toks[j]`` closes."""
    close, depth = toks[j].text, 0
    for k in range(j, -1, -1):
        if toks[k].text == close:
            depth += 1
        elif toks[k].text == _OPEN[close]:
            depth -= 1
            if depth == 0:
                return k
    return None


def receiver_start(toks: Sequence[Token], end: int) -> int | None:
    """Index of the first token of the member chain ending just before ``toks[end]`` (None: no receiver)."""
    j, start = end - 1, None
    while j >= 0:
        tok = toks[j]
        if tok.text in _OPEN:
            k = opener(toks, j)
            if k is None:
                return None
            start, j = k, k - 1
            if tok.text == "]" and j >= 0 and (is_name(toks[j]) or toks[j].kind == "string" or toks[j].text in _OPEN):
                continue  # an index: its receiver comes before it
            if tok.text in (")", "}") and j >= 0 and is_name(toks[j]):
                start, j = j, j - 1  # a call f(...) or a message literal T{...}
        elif is_name(tok) or tok.kind in ("string", "number") or tok.text in ("true", "false", "null"):
            start, j = j, j - 1
        else:
            return start
        if j >= 1 and toks[j].text == "?" and toks[j - 1].text == ".":
            j -= 2  # an optional member access `.?`: the chain goes on
            continue
        if j >= 0 and toks[j].text == ".":
            j -= 1  # a member access: the chain goes on
            continue
        return start
    return start


def call_arguments(toks: Sequence[Token], opening: int) -> tuple[list[tuple[int, int]], int] | None:
    """The (first, last) token indexes of each top-level argument of the call whose ``(`` is ``toks[opening]``
    (``[]`` for no argument), and the index of its ``)``; None when it is never closed."""
    depth, start = 0, opening + 1
    args: list[tuple[int, int]] = []
    for k in range(opening, len(toks)):
        text = toks[k].text
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                if k > start or args:
                    args.append((start, k - 1))
                return args, k
        elif text == "," and depth == 1:
            args.append((start, k - 1))
            start = k + 1
    return None


def member_call(toks: Sequence[Token], dot: int, name: str) -> tuple[int, list[tuple[int, int]], int] | None:
    """When ``toks[dot:]`` is a call ``.name(...)`` on a receiver: (the receiver's first token, the call's
    arguments as :func:`call_arguments` gives them, the index of its ``)``); None otherwise."""
    if not (toks[dot].text == "." and dot + 2 < len(toks) and toks[dot + 1].text == name
            and toks[dot + 2].text == "("):
        return None
    first = receiver_start(toks, dot)
    found = call_arguments(toks, dot + 2)
    if first is None or found is None:
        return None
    return first, found[0], found[1]


def nesting(toks: Sequence[Token]) -> int:
    """How deep the brackets of ``toks`` nest."""
    depth = best = 0
    for tok in toks:
        if tok.text in ("(", "[", "{"):
            depth += 1
            best = max(best, depth)
        elif tok.text in (")", "]", "}"):
            depth -= 1
    return best


def names(toks: Sequence[Token], name: str) -> list[int]:
    """Indexes of the identifier ``name`` where it is not a field selected from something (``x.name``)."""
    return [i for i, tok in enumerate(toks)
            if tok.text == name and tok.kind == "ident" and not (i and toks[i - 1].text == ".")]


def calls(toks: Sequence[Token], receiver: str, function: str) -> list[int]:
    """Indexes of ``receiver`` in every call ``receiver.function(...)`` (``cel.bind(``, not ``x.cel.bind(``)."""
    return [i for i in names(toks, receiver)
            if i + 3 < len(toks) and toks[i + 1].text == "." and toks[i + 2].text == function
            and toks[i + 3].text == "("]


def member_references(toks: Sequence[Token], root: str) -> list[tuple[str, int]]:
    """Every ``root.name``, ``root.?name``, ``root["name"]`` and ``root[?"name"]`` in ``toks``: (name, offset of
    ``root``)."""
    out: list[tuple[str, int]] = []
    for i, tok in enumerate(toks):
        if tok.text != root or tok.kind != "ident" or i + 2 >= len(toks):
            continue
        after = toks[i + 1]
        field = toks[i + 3] if toks[i + 2].text == "?" and i + 3 < len(toks) else toks[i + 2]
        if after.text == "." and field.kind == "ident":
            out.append((field.text, tok.start))
        elif after.text == "[":
            key = toks[i + 3] if toks[i + 2].text == "?" and i + 3 < len(toks) else toks[i + 2]
            quote = key.text[:1]
            inner = key.text[1:-1]
            if key.kind == "string" and quote in "'\"" and len(key.text) > 2 and key.text[-1] == quote \
                    and "'" not in inner and '"' not in inner:
                out.append((inner, tok.start))
    return out


@dataclass(frozen=True)
class Literal:
    """One ``Name.path{field: value, ...}`` message literal in an expression."""

    #: The type name as written, split at dots (``("Object", "spec", "containers")``).
    name: tuple[str, ...]
    #: Offsets of the name's first character and of the opening brace.
    start: int
    brace: int
    #: (field name token, whether it is an optional entry `?field`) at the literal's top level.
    fields: tuple[tuple[Token, bool], ...] = field(default=())
    #: Offset of the closing brace (-1 when the literal is not closed).
    end: int = -1


def literals(src: str | Sequence[Token]) -> list[Literal]:
    """Every message literal in ``src`` (a text, or its tokens), outermost first by position."""
    toks = tokenize(src) if isinstance(src, str) else src
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


def _fields(toks: Sequence[Token], open_index: int) -> tuple[tuple[tuple[Token, bool], ...], int]:
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

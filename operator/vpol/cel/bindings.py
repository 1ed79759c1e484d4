"""``cel.bind`` without cel-cpp's lazy bindings.

cel-cpp initializes a ``cel.bind`` variable lazily, in a slot it shares with
comprehension variables, and a comprehension that stops early (``exists``
finding a match, ``all`` a false) leaves its last value in that slot: a later
``cel.bind`` then reads that value instead of its own
(``[1, 2].exists(c, true) && cel.bind(v, 5, v) == 5`` is false under
cel-expr-python 0.1.3). Kyverno policies use ``cel.bind``, and vpol's own
rewrites of the evaluated program (vpol.cel.optional_selection) do, so the
evaluated program binds through a one-element ``map`` instead, whose variable
is set on its one iteration::

    cel.bind(v, init, body)  ->  [init].map(v, body)[0]

which is also cel-go's meaning of ``cel.bind``: ``init`` is evaluated when the
binding is (not when ``v`` is first read), and its error is the expression's.
Expressions without an ``exists`` or ``all`` keep their (cheaper) lazy
bindings: nothing can leave a stale value for them.
Only the evaluated program is rewritten; what is checked and reported is the
expression as written. Hand-written over the tokens of
``vpol.cel.object_literals`` (cel-expr-python exposes no syntax tree).
"""

from __future__ import annotations

import functools

from vpol.cel.object_literals import tokens
from vpol.cel.optional_selection import call_arguments

#: Bound on the rewrites of one expression (pathological inputs stay as written).
MAX_BINDINGS = 400
#: The macros whose comprehension stops early (when the answer is known), leaving its variable in its slot:
#: only with one of them in the expression do the lazy bindings go wrong (measured: map, filter, exists_one and
#: a completed all/exists leave nothing behind).
_STOPPING = frozenset({"exists", "all"})


@functools.lru_cache(maxsize=4096)
def eager_bindings(src: str) -> str:
    """``src`` with every ``cel.bind(v, init, body)`` written as ``[init].map(v, body)[0]`` (module docstring);
    ``src`` when it has none, or when one cannot be rewritten (the compiler then reports it as written)."""
    if "bind" not in src:
        return src
    toks = list(tokens(src))
    if not any(tok.text in _STOPPING and i and toks[i - 1].text == "." and i + 1 < len(toks)
               and toks[i + 1].text == "(" for i, tok in enumerate(toks)):
        return src  # no comprehension that stops early: the lazy bindings read their own values
    text = src
    for _ in range(MAX_BINDINGS):
        toks = list(tokens(text))
        site = None
        for i in range(len(toks) - 3):
            if toks[i].text == "cel" and toks[i + 1].text == "." and toks[i + 2].text == "bind" \
                    and toks[i + 3].text == "(" and not (i and toks[i - 1].text == "."):
                site = i
                break
        if site is None:
            return text
        found = call_arguments(toks, site + 3)
        if found is None:
            return src
        args, close = found
        if len(args) != 3 or any(first > last for first, last in args):
            return src
        (v0, v1), (i0, i1), (b0, b1) = args
        if v0 != v1 or toks[v0].kind != "ident":
            return src
        init = text[toks[i0].start:toks[i1].end]
        body = text[toks[b0].start:toks[b1].end]
        replacement = f"[{init}].map({toks[v0].text}, {body})[0]"
        text = text[:toks[site].start] + replacement + text[toks[close].end:]
    return src

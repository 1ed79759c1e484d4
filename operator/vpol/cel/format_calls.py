"""``R.format(L)`` evaluated as cel-go writes it: a rewrite of the evaluated program.

cel-cpp's strings extension formats differently from cel-go's (quoting inside lists and maps, doubles,
``%f`` and ``%e``: vpol.cel.libraries.kyverno.format_lib). cel-expr-python cannot replace an overload
the extension declares, so the evaluated program calls vpol's implementation instead::

    R.format(L)  ->  vpol_format(R, L)

Only the evaluated program is rewritten (not in the API server's environment, whose programs the API
server runs itself); errors, positions and type checks come from the expression as written.
Hand-written over the tokens of ``vpol.cel.object_literals`` (cel-expr-python exposes no syntax tree).
"""

from __future__ import annotations

import functools

from vpol.cel.libraries.kyverno.format_lib import FUNCTION
from vpol.cel.object_literals import tokens
from vpol.cel.optional_selection import member_call

#: Bound on the rewrites of one expression (pathological inputs stay as written).
MAX_CALLS = 200


@functools.lru_cache(maxsize=4096)
def go_format(src: str) -> str:
    """``src`` with every one-argument ``R.format(L)`` call written ``vpol_format(R, L)``; ``src`` when it has
    none or one cannot be rewritten (the compiler then reports it as written)."""
    if "format" not in src:
        return src
    text = src
    for _ in range(MAX_CALLS):
        toks = list(tokens(text))
        site = None
        for i in range(len(toks)):
            call = member_call(toks, i, "format")
            if call is None:
                continue
            first, args, close = call
            if len(args) != 1:
                continue  # not cel-go's format: cel reports it as written
            site = (i, first, close)
            break
        if site is None:
            return text
        i, first, close = site
        receiver = text[toks[first].start:toks[i].start]
        argument = text[toks[i + 2].end:toks[close].start]
        text = f"{text[:toks[first].start]}{FUNCTION}({receiver}, {argument}){text[toks[close].end:]}"
    return src

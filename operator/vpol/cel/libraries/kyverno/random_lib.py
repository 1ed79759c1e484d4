"""Kyverno's random library: ``random()`` and ``random(pattern)`` (also ``random.random``).

``random(pattern)`` returns a random string matching the regular expression
``pattern``; ``random()`` uses ``[0-9a-z]{8}``. Kyverno generates with goregen
from Go's regexp syntax; here ``rstr.xeger`` generates from Python's, which
agrees on the usual constructs (classes, ranges, ``{n}`` / ``{n,m}``,
alternation, groups). An invalid pattern is an evaluation error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import rstr
from cel_expr_python import cel

from vpol.cel.declare import STRING
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.random"
DEFAULT_PATTERN = "[0-9a-z]{8}"


def random_string(pattern: str = DEFAULT_PATTERN) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"error parsing regexp: {exc}: `{pattern}`") from None
    return str(rstr.xeger(pattern))


def functions() -> Sequence[Fn]:
    T = cel.Type
    out = []
    for name, suffix in (("random", "non_prefixed"), ("random.random", "prefixed")):
        out.append(Fn(LIBRARY, name, f"kyverno_random_{suffix}", T.STRING, (), random_string))
        out.append(Fn(LIBRARY, name, f"kyverno_random_string_{suffix}", T.STRING, (STRING,), random_string))
    return out

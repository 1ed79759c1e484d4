"""Kubernetes regex library: ``<string>.find(re)``, ``findAll(re)``, ``findAll(re, n)``.

Kubernetes uses Go's ``regexp`` package, which implements RE2 syntax with
guaranteed linear-time matching (as CEL's own ``matches`` does). We use
google-re2 rather than Python's ``re`` for the same reasons: the same
syntax (no backreferences or lookarounds, Go/RE2 character classes) and no
catastrophic backtracking on untrusted patterns.

``findAll`` follows Go's ``FindAllString``: matches do not overlap and an
empty match right after the previous match is dropped (Python's ``re``
would keep it), and a limit ``n >= 0`` caps the number of matches.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

from vpol.cel.declare import INT, STRING, Fn, T
from vpol.cel.libraries.kubernetes.overloads import KubernetesLibraryError

LIBRARY = "kubernetes.regex"

_OPTIONS = re2.Options()
# RE2 logs every bad pattern to stderr by default; the error value is enough.
_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=512)
def compile_regex(pattern: str) -> Any:
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise KubernetesLibraryError(f"Illegal regex: error parsing regexp: {detail}") from None


def find(text: str, pattern: str) -> str:
    match = compile_regex(pattern).search(text)
    return match.group(0) if match is not None else ""


def find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    regex = compile_regex(pattern)
    out: list[str] = []
    pos = 0
    prev_end = -1
    end = len(text)
    while (limit < 0 or len(out) < limit) and pos <= end:
        match = regex.search(text, pos)
        if match is None:
            break
        start, stop = match.span()
        accept = True
        if stop == pos:
            # An empty match: not allowed right after the previous match.
            if start == prev_end:
                accept = False
            pos += 1
        else:
            pos = stop
        prev_end = stop
        if accept:
            out.append(match.group(0))
    return out


def functions() -> list[Fn]:
    return [
        Fn(LIBRARY, "find", "string_find_string", (STRING, STRING), T.STRING, find, member=True),
        Fn(LIBRARY, "findAll", "string_find_all_string", (STRING, STRING), T.List(T.STRING), find_all, member=True),
        Fn(LIBRARY, "findAll", "string_find_all_string_int", (STRING, STRING, INT), T.List(T.STRING), find_all,
           member=True),
    ]

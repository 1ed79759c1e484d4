"""Glob patterns over image references, with the syntax and meaning of github.com/gobwas/glob as Kyverno compiles
them for ``matchImageReferences[].glob`` (``glob.Compile(pattern)``, no separators).

Hand-written because Python has no gobwas-compatible matcher: ``fnmatch`` has neither ``{a,b}`` alternatives nor
``\\`` escapes, and reads ``[!...]`` only at the start. Without separators ``*`` and ``**`` both match any run of
characters and ``?`` any one character; ``[abc]``, ``[a-z]``, ``[!abc]`` are character classes; ``{p1,p2}`` matches
either sub-pattern (they nest); ``\\`` makes the next character literal. The whole reference must match.
"""

from __future__ import annotations

import functools
import re


class GlobError(ValueError):
    """The pattern does not compile (as gobwas/glob would refuse it)."""


def _translate(pattern: str, i: int, depth: int) -> tuple[str, int]:
    """The regular expression of ``pattern[i:]`` up to the end (``depth`` 0) or the ``,``/``}`` closing the
    alternative it is inside; the index after it."""
    out: list[str] = []
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if i + 1 >= len(pattern):
                raise GlobError("unexpected end of input after escape")
            out.append(re.escape(pattern[i + 1]))
            i += 2
        elif c == "*":
            while i < len(pattern) and pattern[i] == "*":
                i += 1
            out.append(".*")
        elif c == "?":
            out.append(".")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                raise GlobError("unclosed character class [")
            body = pattern[i + 1:end]
            negated = body.startswith("!")
            body = body[1:] if negated else body
            if not body:
                raise GlobError("empty character class")
            parts: list[str] = []
            j = 0
            while j < len(body):
                if j + 2 < len(body) and body[j + 1] == "-":
                    if body[j] > body[j + 2]:
                        raise GlobError(f"invalid range {body[j]}-{body[j + 2]}")
                    parts.append(f"{re.escape(body[j])}-{re.escape(body[j + 2])}")
                    j += 3
                else:
                    parts.append(re.escape(body[j]))
                    j += 1
            out.append(f"[{'^' if negated else ''}{''.join(parts)}]")
            i = end + 1
        elif c == "{":
            alternatives: list[str] = []
            i += 1
            while True:
                sub, i = _translate(pattern, i, depth + 1)
                alternatives.append(sub)
                if i >= len(pattern):
                    raise GlobError("unclosed alternatives {")
                if pattern[i] == "}":
                    i += 1
                    break
                i += 1  # ","
            out.append(f"(?:{'|'.join(alternatives)})")
        elif depth and c in ",}":
            return "".join(out), i
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out), i


@functools.lru_cache(maxsize=1024)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """The compiled pattern; raises :class:`GlobError` for one gobwas/glob refuses."""
    regex, _end = _translate(pattern, 0, 0)
    return re.compile(regex, re.DOTALL)


def glob_matches(pattern: str, text: str) -> bool:
    return compile_glob(pattern).fullmatch(text) is not None

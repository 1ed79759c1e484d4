"""One expression's text and tokens while the rewrites of vpol.cel.compat edit it, with the map back to what the
user wrote.

An edit (:meth:`TokenStream.splice`) replaces a span of whole tokens: the tokens are re-read only from the token
before the span until they meet the old ones again (the rest are the old tokens, moved by the length the edit
added), and the position map records where the span came from. Every rule edits the same stream, so an expression
is tokenized once, whatever the number of rules and rewrites, and one map serves every position reported.
"""

from __future__ import annotations

import bisect

from vpol.cel.compat.tokens import Token, line_column, offset_of, scan, tokenize


#: What :meth:`TokenStream.snapshot` keeps: the text, its tokens (None: not read yet), the position map.
_Saved = tuple[str, "tuple[Token, ...] | None", tuple[tuple[int, int], ...]]


class TokenStream:
    """``text`` (as rewritten so far), its ``tokens``, and the map from offsets in it to the original text."""

    def __init__(self, src: str) -> None:
        self.original = src
        self.text = src
        self._tokens: list[Token] | None = None  # read when a rule first looks (most expressions need none)
        #: Sorted (offset in text, offset in the original): every edit's boundaries; identity before the first.
        self._anchors: list[tuple[int, int]] = []
        #: A stream shared through a cache is never edited again (:meth:`thawed` gives an editable copy).
        self._frozen = False

    @property
    def tokens(self) -> list[Token]:
        """The tokens of :attr:`text` (kept in step with every edit)."""
        if self._tokens is None:
            if self._frozen:
                return list(tokenize(self.text))  # a shared stream keeps only its text and map
            self._tokens = list(tokenize(self.text))
        return self._tokens

    def snapshot(self) -> _Saved:
        return self.text, None if self._tokens is None else tuple(self._tokens), tuple(self._anchors)

    def restore(self, saved: _Saved) -> None:
        self.text, self._anchors = saved[0], list(saved[2])
        self._tokens = None if saved[1] is None else list(saved[1])

    def frozen(self) -> TokenStream:
        """This stream, no longer editable (to be shared; its tokens are let go: caches hold many streams)."""
        self._frozen, self._tokens = True, None
        return self

    def thawed(self) -> TokenStream:
        """An editable copy, which goes on from this stream's text, tokens and position map."""
        copy = TokenStream.__new__(TokenStream)
        copy.original = self.original
        copy.restore(self.snapshot())
        copy._frozen = False
        return copy

    def splice(self, start: int, end: int, replacement: str) -> None:
        """Replace ``text[start:end]`` (from a token's start, or the end of the text, to a token's end or start)
        with ``replacement``."""
        assert not self._frozen, "a shared stream is edited"
        text = self.text[:start] + replacement + self.text[end:]
        delta = len(replacement) - (end - start)
        toks = self.tokens
        # Re-read from the token before the edit (the replacement may join it: `in` followed by `[`).
        first = max(0, bisect.bisect_left(toks, start, key=_start) - 1)
        kept = bisect.bisect_left(toks, end, key=_start)  # the first old token after the edit
        fresh: list[Token] = []
        for tok in scan(text, toks[first].start if first < len(toks) and toks[first].start < start else start):
            if tok.start >= start + len(replacement):
                while kept < len(toks) and toks[kept].start + delta < tok.start:
                    kept += 1
                if kept < len(toks) and toks[kept].start + delta == tok.start and toks[kept].text == tok.text:
                    fresh.extend(t._replace(start=t.start + delta) for t in toks[kept:])
                    break  # met the old tokens again: the rest are theirs
            fresh.append(tok)
        del toks[first:]
        toks.extend(fresh)
        at_start, at_end = self.original_offset(start), self.original_offset(end)
        self._anchors = ([a for a in self._anchors if a[0] < start] +
                         [(start, at_start), (start + len(replacement), at_end)] +
                         [(new + delta, old) for new, old in self._anchors if new > end])
        self.text = text

    def original_offset(self, offset: int) -> int:
        """The offset in the original source that ``offset`` in the rewritten text came from."""
        i = bisect.bisect_right(self._anchors, offset, key=_new) - 1
        if i < 0:
            return offset
        new, old = self._anchors[i]
        return old + (offset - new)

    def original_line_column(self, line: int, column: int) -> tuple[int, int]:
        """The 1-based line and column in the original of ``line:column`` in the rewritten text."""
        return line_column(self.original, self.original_offset(offset_of(self.text, line, column)))


def _start(tok: Token) -> int:
    return tok.start


def _new(anchor: tuple[int, int]) -> int:
    return anchor[0]

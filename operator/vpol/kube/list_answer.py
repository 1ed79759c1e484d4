"""A list answer (``{"apiVersion": ..., "kind": ..., "metadata": {...}, "items": [...]}``) read one item at a time
from its bytes as they arrive, so a list of thousands of objects never exists parsed all at once.

An API server that honours ``limit`` keeps every answer small, and vpol parses those whole (``json.loads`` of a
page). Kyverno's reports-server ignores ``limit`` and answers one whole namespace of reports: 1,000 reports are
4.3 MiB of JSON and 18.5 MiB once parsed, all of it alive while a restart reads them back (bench/results/scan.md).
Read with :class:`ListReader`, the operator holds one chunk of the answer and the item in hand.

Written over the standard library's decoder rather than a streaming JSON library: ``json.JSONDecoder.raw_decode``
parses each item (in C, as ``json.loads`` would), and what is left is walking one object's keys and one array's
commas, which a dependency would not make shorter.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

_DECODER = json.JSONDecoder()
_WHITESPACE = re.compile(r"[ \t\n\r]*")
#: The characters that may follow a value in valid JSON.
_AFTER_VALUE = frozenset(" \t\n\r,:]}")


class ListAnswerError(ValueError):
    """An answer that is not one JSON object: what was wrong and at which character of the answer."""


class ListReader:
    """Reads one list answer from ``chunks`` (its bytes, in pieces of any size).

    :meth:`items` yields the ``items`` array's elements in order as the bytes arrive; :attr:`head` holds the
    answer's other top-level fields (``apiVersion``, ``kind``, ``metadata``): those written before ``items``
    as soon as the first item is yielded, all of them once :meth:`items` is exhausted. Typed lists (built-in
    resources, reports-server's) write ``metadata`` before ``items``; the API server's lists of custom
    resources write their keys in order, ``items`` before ``kind`` and ``metadata``."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = iter(chunks)
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._text = ""  # the answer's characters not yet consumed start at _pos
        self._pos = 0
        self._dropped = 0  # characters consumed and dropped from _text before it
        self._ended = False
        self.head: dict[str, Any] = {}

    def items(self) -> Iterator[Any]:
        self._skip_whitespace()
        self._expect("{")
        self._skip_whitespace()
        if self._peek() == "}":
            self._pos += 1
        else:
            while True:
                if self._peek() != '"':
                    raise self._error("expected a key (a string)", self._pos)
                key = self._value()
                self._skip_whitespace()
                self._expect(":")
                self._skip_whitespace()
                if key != "items":
                    self.head[key] = self._value()
                elif self._peek() == "[":
                    self._pos += 1
                    yield from self._array()
                else:
                    at = self._dropped + self._pos  # the answer's character: _value may drop what is before
                    if self._value() is not None:
                        raise self._error("the items are not an array", at - self._dropped)
                self._skip_whitespace()
                if self._peek() == "}":
                    self._pos += 1
                    break
                self._expect(",")
                self._skip_whitespace()
        self._skip_whitespace()
        if self._peek():
            raise self._error("extra data after the answer", self._pos)

    def _array(self) -> Iterator[Any]:
        self._skip_whitespace()
        if self._peek() == "]":
            self._pos += 1
            return
        while True:
            self._skip_whitespace()
            yield self._value()
            self._skip_whitespace()
            if self._peek() == "]":
                self._pos += 1
                return
            self._expect(",")

    def _value(self) -> Any:
        """The JSON value starting at the current character, read on until it is whole."""
        while True:
            try:
                value, end = _DECODER.raw_decode(self._text, self._pos)
            except json.JSONDecodeError as exc:
                if self._more():
                    continue
                raise self._error(exc.msg, exc.pos) from None
            # A number ending where the arrived text ends, or before a character that cannot follow a value
            # (the "." of "2.5" whose "5" has not arrived), may go on in the next chunk.
            if (end == len(self._text) or self._text[end] not in _AFTER_VALUE) and self._more():
                continue
            self._pos = end
            return value

    def _more(self) -> bool:
        """Reads chunks until what is left to parse has doubled (so a value longer than a chunk is parsed again
        a few times, not once per chunk); False when the answer had already ended."""
        if self._ended:
            return False
        if self._pos:
            self._dropped += self._pos
            self._text = self._text[self._pos:]
            self._pos = 0
        wanted = max(2 * len(self._text), 1)
        parts = [self._text]
        size = len(self._text)
        while size < wanted:
            chunk = next(self._chunks, None)
            if chunk is None:
                self._ended = True
                parts.append(self._decoded(b"", final=True))
                break
            text = self._decoded(chunk, final=False)
            parts.append(text)
            size += len(text)
        self._text = "".join(parts)
        return True

    def _decoded(self, chunk: bytes, *, final: bool) -> str:
        try:
            return self._utf8.decode(chunk, final)
        except UnicodeDecodeError as exc:
            raise self._error(f"not UTF-8 ({exc.reason})", len(self._text)) from None

    def _peek(self) -> str:
        """The current character ("" at the end of the answer)."""
        while self._pos >= len(self._text):
            if not self._more():
                return ""
        return self._text[self._pos]

    def _skip_whitespace(self) -> None:
        while True:
            match = _WHITESPACE.match(self._text, self._pos)
            self._pos = match.end() if match else self._pos
            if self._pos < len(self._text) or not self._more():
                return

    def _expect(self, char: str) -> None:
        found = self._peek()
        if found != char:
            raise self._error(f"expected {char!r}, found {found!r}" if found else f"expected {char!r}, the answer "
                              "ended", self._pos)
        self._pos += 1

    def _error(self, what: str, pos: int) -> ListAnswerError:
        return ListAnswerError(f"the list answer is not JSON: {what} at character {self._dropped + pos}")

"""vpol's CEL front end: an expression read once, and the cel-go compatibility rewrites as rules over its tokens.

vpol evaluates CEL with cel-cpp (cel-expr-python); Kyverno and the API server with cel-go. Where the two differ
and cel-expr-python offers no hook (no new overloads for existing functions, no macros, no optionals from Python),
vpol rewrites the expression's text before cel-cpp compiles it. This package is the one place that happens:

- :mod:`.tokens`: the tokenizer (the only one for CEL text in vpol; ``tokenize`` is cached, so the compiler, the
  type checker, autogen and the namespaced-policy check share one reading of an expression);
- :mod:`.stream`: :class:`TokenStream`, the text and tokens being rewritten: an edit re-reads only the tokens it
  changed and extends the one position map back to the text as written;
- :mod:`.syntax`: brackets, member chains, call arguments and message literals read from tokens;
- :mod:`.rules`: the rules, each a function that edits the stream, with what it reproduces and its tests.

Two stages, in this order (:func:`read`):

1. ``CHECKED``: what the type checker must see differently from what the user wrote. Only a mutation's typed
   object literals (``Object.spec{...}``, ``JSONPatch{...}``) today. Every error, warning and type-check finding is
   about this text, and :meth:`Source.position` moves its line:column back to the text as written.
2. ``EVALUATED``: what the evaluated program must do as cel-go does, on top of stage 1: Go's ``format``,
   Kyverno's ``orValue``, presence and optional selection on scalars, eager ``cel.bind``. Nothing is reported
   about this text (the compiler keeps the checked program when the evaluated one does not compile), and the
   API server's environment (``kubernetes_only``) never gets it: the API server runs its own programs.

The order matters where rules build on each other: ``orValue`` comes before the selection guards (its bindings
then hold guarded selections), and eager bindings come last (they rewrite the bindings every rule before them
made). A rule that cannot rewrite an expression raises ``Abandon`` and the text stays as it was before the rule.

Adding a rule: write a function ``(stream: TokenStream) -> None`` in :mod:`.rules` that finds its sites in
``stream.tokens`` (helpers in :mod:`.syntax`), replaces each with ``stream.splice(start, end, text)`` and reads
``stream.tokens`` again after each splice (they are updated in place); wrap it in a :class:`Rule` with the
substrings without which it has nothing to do, what it reproduces and where it is tested; put it in ``CHECKED``
or ``EVALUATED`` at the place its dependencies dictate; test it in tests/unit/cel (the rewrite itself, and the
evaluated result compared with cel-go's, through tests/differential where Kyverno decides).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from vpol.cel.compat.rules import (EAGER_BINDINGS, GO_FORMAT, OR_VALUE, PRESENCE_GUARDS, SELECTION_GUARDS, Abandon,
                                   Rule, typed_literals)
from vpol.cel.compat.stream import TokenStream
from vpol.cel.compat.tokens import Token, line_column, offset_of, tokenize

#: Stage 1, for mutations: what the checker sees.
CHECKED: tuple[Rule, ...] = (typed_literals(),)
#: Stage 2: what is evaluated, in this order.
EVALUATED: tuple[Rule, ...] = (GO_FORMAT, OR_VALUE, PRESENCE_GUARDS, SELECTION_GUARDS, EAGER_BINDINGS)

__all__ = ["CHECKED", "EVALUATED", "EAGER_BINDINGS", "OR_VALUE", "Rule", "Source", "Token", "TokenStream",
           "line_column", "offset_of", "read", "rewrite", "tokenize", "typed_literals"]


def apply(stream: TokenStream, rules: Sequence[Rule]) -> None:
    """Apply ``rules`` in order to ``stream``; a rule that abandons leaves the text as it was before it."""
    for rule in rules:
        if not any(need in stream.text for need in rule.needs):
            continue
        saved = stream.snapshot()
        try:
            rule.apply(stream)
        except Abandon:
            stream.restore(saved)


@functools.lru_cache(maxsize=4096)
def rewrite(src: str, rules: tuple[Rule, ...]) -> TokenStream:
    """``src`` read once and rewritten by ``rules`` (in order). Cached: policies repeat expressions (a shared
    variable, the autogen variants of a policy in every process that compiles it)."""
    stream = TokenStream(src)
    apply(stream, rules)
    return stream.frozen()


class Source:
    """One expression as written, as the checker reads it, and as cel-go would evaluate it (:func:`read`)."""

    def __init__(self, written: str, checked: TokenStream) -> None:
        self.written = written
        self._checked = checked

    @property
    def checked(self) -> str:
        """The text type-checked and reported about."""
        return self._checked.text

    def position(self, line: int, column: int) -> tuple[int, int]:
        """``line:column`` in :attr:`checked` moved to the text as written."""
        return self._checked.original_line_column(line, column)

    def offset(self, offset: int) -> int:
        """An offset in :attr:`checked` moved to the text as written."""
        return self._checked.original_offset(offset)

    @functools.cached_property
    def evaluated(self) -> str:
        """The text of the evaluated program: :attr:`checked` rewritten by ``EVALUATED``."""
        stream = self._checked.thawed()
        apply(stream, EVALUATED)
        return stream.text


@functools.lru_cache(maxsize=4096)
def read(src: str, *, typed_object_literals: bool = False) -> Source:
    """The front end's reading of ``src``; ``typed_object_literals`` for a mutation's expressions (stage 1)."""
    return Source(src, rewrite(src, CHECKED if typed_object_literals else ()))

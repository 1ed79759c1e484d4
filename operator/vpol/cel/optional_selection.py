"""Optional selection on a value of the wrong type, as cel-go evaluates it.

``x.?f`` and ``x[?k]`` where ``x`` holds a string, a number or a bool (a
field of the wrong type, which real objects and test variations have) give
``optional.none()`` in cel-go, and ``has(x.f)`` is false, so Kyverno's
evaluation goes on; cel-cpp (under cel-expr-python) has no overload of
``_?._`` / ``_[?_]`` for those types and cannot select from them. cel-expr-python cannot take new overloads of these
functions or return optionals from Python, so the evaluated program guards
each selection in CEL itself::

    R.?f    ->  (cel.bind(vpol_opt_1, R, type(vpol_opt_1) != map && (type(vpol_opt_1) == string || ...)
                 ? optional.none() : vpol_opt_1.?f))
    R[?k]   ->  the same around vpol_opt_2[?k]
    R.?f.g  ->  the same around a plain selection on the optional the first guard made
    has(R.f) -> (cel.bind(vpol_opt_1001, R, <R is a scalar> ? false : has(vpol_opt_1001.f)))

(on a map, a list or an optional the selection is evaluated as written).

``R.orValue(D)`` as Kyverno evaluates it (:func:`or_value_compat`): Kyverno's
CEL environments (pkg/cel/compiler, ``OrValueCompatEnvOptions``) turn every
one-argument ``orValue`` call into a function of both values, so ``R`` that is
not an optional at run time (``container.resources.requests.orValue({})``) is
the result itself where cel-cpp and cel-go 0.28 have no overload, the result
is typed ``dyn``, and ``D`` is always evaluated (an error in it is the
result's error even when ``R`` has a value; an error in ``R`` stays the
error)::

    R.orValue(D)  ->  (cel.bind(vpol_orv_1, R, cel.bind(vpol_ord_1, D,
                          type(vpol_ord_1) == type(vpol_ord_1)
                          ? (type(vpol_orv_1) == optional_type ? dyn(vpol_orv_1).orValue(vpol_ord_1) : dyn(vpol_orv_1))
                          : dyn(vpol_orv_1))))

(``cel.bind`` is lazy in cel-cpp: the condition reads ``D`` to evaluate it.)

Only the evaluated program is rewritten: errors, positions and type checks come
from the expression as written. Hand-written over the tokens of
``vpol.cel.object_literals``: cel-expr-python exposes no syntax tree.
"""

from __future__ import annotations

import functools

from vpol.cel.object_literals import Token, tokens
from vpol.cel.schemas import CEL_RESERVED

PREFIX = "vpol_opt_"
_OPEN = {")": "(", "]": "[", "}": "{"}
#: The types on which cel-go's optional selection is optional.none() and cel-cpp's has no overload
#: (maps, lists, messages and optionals keep the selection as written).
_SCALARS = ("string", "int", "uint", "double", "bool", "bytes", "null_type")
#: Bound on the rewrites of one expression (each adds a binding; pathological inputs stay as written).
MAX_GUARDS = 200


def _closer(toks: list[Token], opening: int) -> int:
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


def _name(tok: Token) -> bool:
    """An identifier (not an operator word such as ``in``)."""
    return tok.kind == "ident" and tok.text not in CEL_RESERVED


def _opener(toks: list[Token], j: int) -> int | None:
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


def _receiver_start(toks: list[Token], end: int) -> int | None:
    """Index of the first token of the member chain ending just before ``toks[end]`` (None: no receiver)."""
    j, start = end - 1, None
    while j >= 0:
        tok = toks[j]
        if tok.text in _OPEN:
            k = _opener(toks, j)
            if k is None:
                return None
            start, j = k, k - 1
            if tok.text == "]" and j >= 0 and (_name(toks[j]) or toks[j].kind == "string" or toks[j].text in _OPEN):
                continue  # an index: its receiver comes before it
            if tok.text in (")", "}") and j >= 0 and _name(toks[j]):
                start, j = j, j - 1  # a call f(...) or a message literal T{...}
        elif _name(tok) or tok.kind in ("string", "number") or tok.text in ("true", "false", "null"):
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


def _scalar(value: str, kinds: tuple[str, ...]) -> str:
    # A map (what objects are made of) is answered by the first comparison: a quarter less evaluation time
    # for the Pod Security policies than testing each scalar type first.
    return f"type({value}) != map && (" + " || ".join(f"type({value}) == {t}" for t in kinds) + ")"


def _is_guard(toks: list[Token], first: int, end: int) -> bool:
    """The tokens first..end-1 are exactly one guard group ``(cel.bind(vpol_opt_N, ...))``."""
    # ( cel . bind ( vpol_opt_N , ...
    if end - first < 7 or toks[first].text != "(" or toks[first + 1].text != "cel" or \
            not toks[first + 5].text.startswith(PREFIX):
        return False
    depth = 0
    for k in range(first, end):
        if toks[k].text in ("(", "[", "{"):
            depth += 1
        elif toks[k].text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return k == end - 1
    return False


def _guard_presence(text: str, n: int) -> str | None:
    """The first ``has(R.f)`` whose R may be a scalar, guarded (None when there is none left)."""
    toks = list(tokens(text))
    for i, tok in enumerate(toks):
        if tok.text != "has" or i + 1 >= len(toks) or toks[i + 1].text != "(" or (i and toks[i - 1].text == "."):
            continue
        k = _closer(toks, i + 1)
        # has( R . f ): the argument ends with `.f` right before the closing parenthesis.
        if k >= len(toks) or k - 2 <= i + 2 or toks[k - 2].text != "." or not _name(toks[k - 1]):
            continue
        first = _receiver_start(toks, k - 2)
        if first != i + 2:
            continue
        receiver = text[toks[first].start:toks[k - 2].start]
        if receiver.startswith(PREFIX):
            continue
        var = f"{PREFIX}{n}"
        replacement = (f"(cel.bind({var}, {receiver}, {_scalar(var, _SCALARS)} ? false : "
                       f"has({var}.{toks[k - 1].text})))")
        return text[:tok.start] + replacement + text[toks[k].end:]
    return None


@functools.lru_cache(maxsize=4096)
def guard(src: str) -> str:
    """``src`` with every optional selection and presence test guarded (see the module docstring);
    ``src`` when it has none. Cached: policies repeat expressions (a shared variable, autogen variants of
    the same policy in every process that compiles it), and each guard inserted re-reads the text."""
    if "?" not in src and "has" not in src:
        return src
    text = src
    n = 0
    while "has" in text and n < MAX_GUARDS:
        n += 1
        presence = _guard_presence(text, 1000 + n)
        if presence is None:
            break
        text = presence
    toks = list(tokens(text))
    #: Where the search for the next site starts: a rewrite changes the tokens from its receiver on, and whether
    #: token j is a site depends on the tokens before it and the two after it, so every j at least three tokens
    #: before the rewritten receiver is still no site (re-reading the whole text each time was quadratic).
    scan_from = 0
    for n in range(1, MAX_GUARDS + 1):
        site = None
        for i in range(scan_from, len(toks)):
            tok = toks[i]
            field = tok.text == "." and i + 2 < len(toks) and toks[i + 1].text == "?" and toks[i + 2].kind == "ident"
            index = tok.text == "[" and i + 1 < len(toks) and toks[i + 1].text == "?"
            # `x.?a.b`: a plain selection on the optional an earlier guard made (selections on an optional are
            # optional in cel-go, and none when the value inside is a scalar or null).
            plain = tok.text == "." and i + 1 < len(toks) and _name(toks[i + 1]) and \
                not (i + 2 < len(toks) and toks[i + 2].text == "(")
            if not (field or index or plain):
                continue
            first = _receiver_start(toks, i)
            if first is None:
                continue
            if plain and not _is_guard(toks, first, i):
                continue
            receiver = text[toks[first].start:tok.start]
            if receiver.startswith(PREFIX):
                continue  # already guarded
            site = (i, first, field or plain)
            break
        if site is None:
            return text
        i, first, field = site
        var = f"{PREFIX}{n}"
        if field and toks[i + 1].text != "?":  # plain selection on an optional
            end = toks[i + 1].end
            selection = f"{var}.{toks[i + 1].text}"
        elif field:
            end = toks[i + 2].end
            selection = f"{var}.?{toks[i + 2].text}"
        else:
            k = _closer(toks, i)
            if k >= len(toks):
                return src  # unbalanced: leave it to the compiler's error
            end = toks[k].end
            selection = var + text[toks[i].start:end]
        receiver = text[toks[first].start:toks[i].start]
        kinds = _SCALARS
        if _is_guard(toks, first, i):
            # The receiver is the optional an earlier guard made (`x.?a.?b`): look at the value inside.
            condition = f"{var}.hasValue() && ({_scalar(var + '.value()', kinds)})"
        else:
            condition = _scalar(var, kinds)
        replacement = f"(cel.bind({var}, {receiver}, {condition} ? optional.none() : {selection}))"
        text = text[:toks[first].start] + replacement + text[end:]
        # The text before the receiver is unchanged, and so are its tokens.
        toks = toks[:first] + list(tokens(text, toks[first].start))
        scan_from = max(0, first - 2)
    return src


OR_VALUE_PREFIX = "vpol_orv_"


def call_arguments(toks: list[Token], opening: int) -> tuple[list[tuple[int, int]], int] | None:
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


def member_call(toks: list[Token], dot: int, name: str) -> tuple[int, list[tuple[int, int]], int] | None:
    """When ``toks[dot:]`` is a call ``.name(...)`` on a receiver: (the receiver's first token, the call's
    arguments as :func:`call_arguments` gives them, the index of its ``)``); None otherwise. (The rewrites
    run on expressions that compiled, so a call that is never closed does not occur.)"""
    if not (toks[dot].text == "." and dot + 2 < len(toks) and toks[dot + 1].text == name
            and toks[dot + 2].text == "("):
        return None
    first = _receiver_start(toks, dot)
    found = call_arguments(toks, dot + 2)
    if first is None or found is None:
        return None
    return first, found[0], found[1]


def _optional_chain(toks: list[Token], dot: int) -> bool:
    """The member chain ending before ``toks[dot]`` holds an optional selection (``.?f`` or ``[?k]``) after
    which it only selects (``.f``, ``[k]``): its value is an optional whatever it selects from (selections
    on an optional are optional; vpol.cel.optional_selection.guard makes ``.?`` on a scalar none)."""
    j = dot - 1
    while j >= 0:
        tok = toks[j]
        if tok.text == "]":
            opening = _opener(toks, j)
            if opening is None:
                return False
            if toks[opening + 1].text == "?":
                return True
            j = opening - 1  # an index: its receiver comes before it
            continue
        if not _name(tok):
            return False  # a call, a parenthesised group, a literal: not known to be an optional
        if j >= 2 and toks[j - 1].text == "?" and toks[j - 2].text == ".":
            return True
        if j >= 1 and toks[j - 1].text == ".":
            j -= 2
            continue
        return False  # the chain's root
    return False


#: Punctuation of literal lists, maps and negative numbers (no operator that can fail, such as ``/``).
_LITERAL_PUNCT = frozenset("[]{},:-")


def _cannot_fail(toks: list[Token]) -> bool:
    """The tokens are a literal (strings, numbers, true/false/null in lists and maps) whose evaluation
    cannot fail."""
    for tok in toks:
        if tok.kind in ("string", "number") or tok.text in ("true", "false", "null"):
            continue
        if tok.kind == "punct" and tok.text in _LITERAL_PUNCT:
            continue
        return False
    return True


@functools.lru_cache(maxsize=4096)
def or_value_compat(src: str) -> str:
    """``src`` with every one-argument ``R.orValue(D)`` call evaluated as Kyverno does (module docstring);
    ``src`` when it has none or cannot be rewritten (unbalanced: the compiler reports it as written)."""
    if "orValue" not in src:
        return src
    text = src
    for n in range(1, MAX_GUARDS + 1):
        toks = list(tokens(text))
        site = None
        for i, tok in enumerate(toks):
            call = member_call(toks, i, "orValue")
            if call is None:
                continue
            first, args, close = call
            if text[toks[first].start:tok.start].startswith("dyn(" + OR_VALUE_PREFIX):
                continue  # a call this rewrite made
            if len(args) != 1:
                continue  # not one argument: cel reports it as written
            if _optional_chain(toks, i) and _cannot_fail(toks[i + 3:close]):
                continue  # `x.?f.orValue([])`: an optional, and a default that cannot fail: as written
            site = (i, first, close)
            break
        if site is None:
            return text
        i, first, close = site
        value, default = f"{OR_VALUE_PREFIX}{n}", f"vpol_ord_{n}"
        receiver = text[toks[first].start:toks[i].start]
        argument = text[toks[i + 2].end:toks[close].start]
        if _cannot_fail(toks[i + 3:close]):
            replacement = (f"(cel.bind({value}, {receiver}, type({value}) == optional_type ? "
                           f"dyn({value}).orValue({argument}) : dyn({value})))")
        else:
            replacement = (f"(cel.bind({value}, {receiver}, cel.bind({default}, {argument}, "
                           f"type({default}) == type({default}) ? (type({value}) == optional_type ? "
                           f"dyn({value}).orValue({default}) : dyn({value})) : dyn({value}))))")
        text = text[:toks[first].start] + replacement + text[toks[close].end:]
    return src

"""The rewrite rules of vpol's CEL front end, each a small function over the one token stream.

Each rule makes cel-expr-python (cel-cpp) read or evaluate an expression as cel-go, the API server or Kyverno do,
where cel-cpp differs and cel-expr-python cannot take a new overload or a new macro. vpol.cel.compat applies them
in the order of :data:`vpol.cel.compat.CHECKED` and :data:`vpol.cel.compat.EVALUATED`; the package docstring says
how to add one. A rule edits the stream in place (:meth:`TokenStream.splice`) and raises :class:`Abandon` when the
expression cannot be rewritten (the text is then as it was before the rule: the compiler reports it as written).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vpol.cel.compat.stream import TokenStream
from vpol.cel.compat.syntax import call_arguments, calls, closer, is_name, literals, member_call, opener, receiver_start
from vpol.cel.compat.tokens import Token
from vpol.cel.libraries.kyverno.format_lib import FUNCTION as FORMAT_FUNCTION
from vpol.cel.schemas import unescape


class Abandon(Exception):
    """The rule cannot rewrite this expression: it keeps the text it was given."""


@dataclass(frozen=True)
class Rule:
    """One rewrite: ``apply`` edits the stream; it runs only on a text holding one of ``needs``."""

    name: str
    needs: tuple[str, ...]
    apply: Callable[[TokenStream], None]
    #: What it reproduces (cel-go, the API server or Kyverno), and where its behaviour is tested.
    reproduces: str
    tested_in: str


# -- typed object literals (mutations): Object.spec{...} and JSONPatch{...} --------------------------------------

#: Roots of the literal type names a mutation may use.
OBJECT_ROOT = "Object"
JSON_PATCH = "JSONPatch"


@functools.lru_cache(maxsize=256)
def typed_literals(roots: tuple[str, ...] = (OBJECT_ROOT, JSON_PATCH),
                   only: frozenset[tuple[str, ...]] | None = None) -> Rule:
    """Every message literal whose type name starts with one of ``roots`` (with ``only``: whose type name, split
    at dots, is one of ``only``) as a ``dyn`` map literal: ``Object{metadata: Object.metadata{labels: {"a": "b"}}}``
    -> ``dyn({"metadata": dyn({"labels": {"a": "b"}})})``. The type names are paths in the matched kind's schema,
    which vpol.cel.object_types checks; the values are JSON-like data merged into the object."""

    def apply(stream: TokenStream) -> None:
        edits: list[tuple[int, int, str]] = []  # (start, end, replacement) in the text as given
        for lit in literals(stream.tokens):
            if lit.name[0] not in roots if only is None else lit.name not in only:
                continue
            # `dyn(...)`: every literal of one type name has one type, as in the API server (two Object
            # literals of different shapes in `c ? a : b`, or one against null, must type-check).
            closed = lit.end >= 0
            edits.append((lit.start, lit.brace, "dyn(" if closed else ""))
            for tok, _optional in lit.fields:
                edits.append((tok.start, tok.end, '"' + unescape(tok.text) + '"'))
            if closed:
                edits.append((lit.end + 1, lit.end + 1, ")"))
        for start, end, replacement in sorted(edits, reverse=True):  # from the end: earlier offsets stay valid
            stream.splice(start, end, replacement)

    return Rule("typed object literals", ("{",), apply,
                "the API server's MutatingAdmissionPolicy: Object and JSONPatch literals typed by the schema, "
                "evaluated as apply configurations (plain data)",
                "tests/unit/mutating/test_compile.py, tests/unit/cel/test_compat.py")


# -- Go's string formatting -------------------------------------------------------------------------------------

#: Bound on the rewrites of one expression by one rule (pathological inputs stay as written).
MAX_SITES = 200


def _go_format(stream: TokenStream) -> None:
    """``R.format(L)`` -> ``vpol_format(R, L)``: cel-cpp's strings extension formats differently from cel-go's
    (quoting inside lists and maps, doubles, ``%f`` and ``%e``: vpol.cel.libraries.kyverno.format_lib), and
    cel-expr-python cannot replace an overload the extension declares."""
    for _ in range(MAX_SITES):
        toks, text = stream.tokens, stream.text
        for i in range(len(toks)):
            call = member_call(toks, i, "format")
            if call is None or len(call[1]) != 1:
                continue  # not cel-go's one-argument format: cel reports it as written
            first, _args, close = call
            receiver = text[toks[first].start:toks[i].start]
            argument = text[toks[i + 2].end:toks[close].start]
            stream.splice(toks[first].start, toks[close].end, f"{FORMAT_FUNCTION}({receiver}, {argument})")
            break
        else:
            return
    raise Abandon


# -- Kyverno's orValue ------------------------------------------------------------------------------------------

OR_VALUE_PREFIX = "vpol_orv_"
#: Punctuation of literal lists, maps and negative numbers (no operator that can fail, such as ``/``).
_LITERAL_PUNCT = frozenset("[]{},:-")


def _cannot_fail(toks: Sequence[Token]) -> bool:
    """The tokens are a literal (strings, numbers, true/false/null in lists and maps) whose evaluation
    cannot fail."""
    for tok in toks:
        if tok.kind in ("string", "number") or tok.text in ("true", "false", "null"):
            continue
        if tok.kind == "punct" and tok.text in _LITERAL_PUNCT:
            continue
        return False
    return True


def _optional_chain(toks: Sequence[Token], dot: int) -> bool:
    """The member chain ending before ``toks[dot]`` holds an optional selection (``.?f`` or ``[?k]``) after
    which it only selects (``.f``, ``[k]``): its value is an optional whatever it selects from (selections
    on an optional are optional; the selection guards make ``.?`` on a scalar none)."""
    j = dot - 1
    while j >= 0:
        tok = toks[j]
        if tok.text == "]":
            opening = opener(toks, j)
            if opening is None:
                return False
            if toks[opening + 1].text == "?":
                return True
            j = opening - 1  # an index: its receiver comes before it
            continue
        if not is_name(tok):
            return False  # a call, a parenthesised group, a literal: not known to be an optional
        if j >= 2 and toks[j - 1].text == "?" and toks[j - 2].text == ".":
            return True
        if j >= 1 and toks[j - 1].text == ".":
            j -= 2
            continue
        return False  # the chain's root
    return False


def _or_value(stream: TokenStream) -> None:
    """``R.orValue(D)`` as Kyverno evaluates it: Kyverno's CEL environments (pkg/cel/compiler,
    ``OrValueCompatEnvOptions``) turn every one-argument ``orValue`` call into a function of both values, so ``R``
    that is not an optional at run time (``container.resources.requests.orValue({})``) is the result itself where
    cel-cpp and cel-go 0.28 have no overload, the result is typed ``dyn``, and ``D`` is always evaluated (an error
    in it is the result's error even when ``R`` has a value; an error in ``R`` stays the error)::

        R.orValue(D)  ->  (cel.bind(vpol_orv_1, R, cel.bind(vpol_ord_1, D,
                              type(vpol_ord_1) == type(vpol_ord_1)
                              ? (type(vpol_orv_1) == optional_type ? dyn(vpol_orv_1).orValue(vpol_ord_1)
                                                                   : dyn(vpol_orv_1))
                              : dyn(vpol_orv_1))))

    (``cel.bind`` is lazy in cel-cpp: the condition reads ``D`` to evaluate it.) A default that cannot fail needs
    no binding; on an optional chain (``x.?f.orValue([])``) with such a default the call stays as written."""
    for n in range(1, MAX_SITES + 1):
        toks, text = stream.tokens, stream.text
        for i, tok in enumerate(toks):
            call = member_call(toks, i, "orValue")
            if call is None:
                continue
            first, args, close = call
            if text[toks[first].start:tok.start].startswith("dyn(" + OR_VALUE_PREFIX):
                continue  # a call this rule made
            if len(args) != 1:
                continue  # not one argument: cel reports it as written
            literal_default = _cannot_fail(toks[i + 3:close])
            if literal_default and _optional_chain(toks, i):
                continue  # `x.?f.orValue([])`: an optional, and a default that cannot fail: as written
            value, default = f"{OR_VALUE_PREFIX}{n}", f"vpol_ord_{n}"
            receiver = text[toks[first].start:toks[i].start]
            argument = text[toks[i + 2].end:toks[close].start]
            if literal_default:
                replacement = (f"(cel.bind({value}, {receiver}, type({value}) == optional_type ? "
                               f"dyn({value}).orValue({argument}) : dyn({value})))")
            else:
                replacement = (f"(cel.bind({value}, {receiver}, cel.bind({default}, {argument}, "
                               f"type({default}) == type({default}) ? (type({value}) == optional_type ? "
                               f"dyn({value}).orValue({default}) : dyn({value})) : dyn({value}))))")
            stream.splice(toks[first].start, toks[close].end, replacement)
            break
        else:
            return
    raise Abandon


# -- optional selection and presence on scalars -----------------------------------------------------------------

GUARD_PREFIX = "vpol_opt_"
#: The types on which cel-go's optional selection is optional.none() and cel-cpp's has no overload
#: (maps, lists, messages and optionals keep the selection as written).
_SCALARS = ("string", "int", "uint", "double", "bool", "bytes", "null_type")


def _scalar(value: str) -> str:
    # A map (what objects are made of) is answered by the first comparison: a quarter less evaluation time
    # for the Pod Security policies than testing each scalar type first.
    return f"type({value}) != map && (" + " || ".join(f"type({value}) == {t}" for t in _SCALARS) + ")"


def _is_guard(toks: Sequence[Token], first: int, end: int) -> bool:
    """The tokens first..end-1 are exactly one guard group ``(cel.bind(vpol_opt_N, ...))``."""
    # ( cel . bind ( vpol_opt_N , ...
    if end - first < 7 or toks[first].text != "(" or toks[first + 1].text != "cel" or \
            not toks[first + 5].text.startswith(GUARD_PREFIX):
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


def _presence_guards(stream: TokenStream) -> None:
    """``has(R.f)`` is false in cel-go when ``R`` is a string, a number, a bool or null (a field of the wrong type,
    which real objects and test variations have), where cel-cpp cannot select from them::

        has(R.f)  ->  (cel.bind(vpol_opt_1001, R, <R is a scalar> ? false : has(vpol_opt_1001.f)))"""
    for n in range(1, MAX_SITES + 1):
        toks, text = stream.tokens, stream.text
        for i, tok in enumerate(toks):
            if tok.text != "has" or i + 1 >= len(toks) or toks[i + 1].text != "(" or (i and toks[i - 1].text == "."):
                continue
            k = closer(toks, i + 1)
            # has( R . f ): the argument ends with `.f` right before the closing parenthesis.
            if k >= len(toks) or k - 2 <= i + 2 or toks[k - 2].text != "." or not is_name(toks[k - 1]):
                continue
            if receiver_start(toks, k - 2) != i + 2:
                continue
            receiver = text[toks[i + 2].start:toks[k - 2].start]
            if receiver.startswith(GUARD_PREFIX):
                continue
            var = f"{GUARD_PREFIX}{1000 + n}"
            stream.splice(tok.start, toks[k].end, f"(cel.bind({var}, {receiver}, {_scalar(var)} ? false : "
                                                  f"has({var}.{toks[k - 1].text})))")
            break
        else:
            return


def _selection_guards(stream: TokenStream) -> None:
    """``x.?f`` and ``x[?k]`` are ``optional.none()`` in cel-go when ``x`` holds a string, a number, a bool or
    null, where cel-cpp has no overload of ``_?._`` / ``_[?_]`` for them (and cel-expr-python cannot take new
    overloads of these functions or return optionals from Python), so each selection is guarded in CEL::

        R.?f    ->  (cel.bind(vpol_opt_1, R, <R is a scalar> ? optional.none() : vpol_opt_1.?f))
        R[?k]   ->  the same around vpol_opt_2[?k]
        R.?f.g  ->  the same around a plain selection on the optional the first guard made

    (on a map, a list or an optional the selection is evaluated as written)."""
    #: Where the search for the next site starts: a rewrite changes the tokens from its receiver on, and whether
    #: token j is a site depends on the tokens before it and the two after it, so every j at least three tokens
    #: before the rewritten receiver is still no site.
    scan_from = 0
    for n in range(1, MAX_SITES + 1):
        toks, text = stream.tokens, stream.text
        site = None
        for i in range(scan_from, len(toks)):
            tok = toks[i]
            field = tok.text == "." and i + 2 < len(toks) and toks[i + 1].text == "?" and toks[i + 2].kind == "ident"
            index = tok.text == "[" and i + 1 < len(toks) and toks[i + 1].text == "?"
            # `x.?a.b`: a plain selection on the optional an earlier guard made (selections on an optional are
            # optional in cel-go, and none when the value inside is a scalar or null).
            plain = tok.text == "." and i + 1 < len(toks) and is_name(toks[i + 1]) and \
                not (i + 2 < len(toks) and toks[i + 2].text == "(")
            if not (field or index or plain):
                continue
            first = receiver_start(toks, i)
            if first is None:
                continue
            if plain and not _is_guard(toks, first, i):
                continue
            if text[toks[first].start:tok.start].startswith(GUARD_PREFIX):
                continue  # already guarded
            site = (i, first, field or plain)
            break
        if site is None:
            return
        i, first, field = site
        var = f"{GUARD_PREFIX}{n}"
        if field and toks[i + 1].text != "?":  # plain selection on an optional
            end = toks[i + 1].end
            selection = f"{var}.{toks[i + 1].text}"
        elif field:
            end = toks[i + 2].end
            selection = f"{var}.?{toks[i + 2].text}"
        else:
            k = closer(toks, i)
            if k >= len(toks):
                raise Abandon  # unbalanced: left to the compiler's error
            end = toks[k].end
            selection = var + text[toks[i].start:end]
        receiver = text[toks[first].start:toks[i].start]
        if _is_guard(toks, first, i):
            # The receiver is the optional an earlier guard made (`x.?a.?b`): look at the value inside.
            condition = f"{var}.hasValue() && ({_scalar(var + '.value()')})"
        else:
            condition = _scalar(var)
        stream.splice(toks[first].start, end, f"(cel.bind({var}, {receiver}, {condition} ? optional.none() : "
                                              f"{selection}))")
        scan_from = max(0, first - 2)
    raise Abandon


# -- cel.bind without cel-cpp's lazy bindings -------------------------------------------------------------------

#: The macros whose comprehension stops early (when the answer is known), leaving its variable in its slot:
#: only with one of them in the expression do the lazy bindings go wrong (measured: map, filter, exists_one and
#: a completed all/exists leave nothing behind).
_STOPPING = frozenset({"exists", "all"})
MAX_BINDINGS = 400


def _stops_early(toks: Sequence[Token]) -> bool:
    """A comprehension that may stop early (``.exists(`` or ``.all(``) is among the tokens."""
    return any(tok.text in _STOPPING and i and toks[i - 1].text == "." and i + 1 < len(toks)
               and toks[i + 1].text == "(" for i, tok in enumerate(toks))


def _binding(toks: Sequence[Token]) -> int | None:
    """Index of the first ``cel.bind(`` call's ``cel`` token (None: none)."""
    return next(iter(calls(toks, "cel", "bind")), None)


def lazy_binding_at_risk(toks: Sequence[Token]) -> bool:
    """A ``cel.bind`` left lazy beside a comprehension that may stop early: what :data:`EAGER_BINDINGS` could
    not rewrite (vpol.policies.validating.fused then builds no fused program)."""
    return _binding(toks) is not None and _stops_early(toks)


def _eager_bindings(stream: TokenStream) -> None:
    """``cel.bind(v, init, body)`` -> ``[init].map(v, body)[0]``. cel-cpp initializes a ``cel.bind`` variable
    lazily, in a slot it shares with comprehension variables, and a comprehension that stops early (``exists``
    finding a match, ``all`` a false) leaves its last value there: a later ``cel.bind`` then reads that value
    instead of its own (``[1, 2].exists(c, true) && cel.bind(v, 5, v) == 5`` is false under cel-expr-python
    0.1.3). A one-element ``map`` sets its variable on its one iteration, which is also cel-go's meaning: ``init``
    is evaluated when the binding is, and its error is the expression's. Expressions without an ``exists`` or
    ``all`` keep their (cheaper) lazy bindings: nothing can leave a stale value for them."""
    if not _stops_early(stream.tokens):
        return
    for _ in range(MAX_BINDINGS):
        toks, text = stream.tokens, stream.text
        site = _binding(toks)
        if site is None:
            return
        found = call_arguments(toks, site + 3)
        if found is None:
            raise Abandon
        args, close = found
        if len(args) != 3 or any(first > last for first, last in args):
            raise Abandon
        (v0, v1), (i0, i1), (b0, b1) = args
        if v0 != v1 or toks[v0].kind != "ident":
            raise Abandon
        init = text[toks[i0].start:toks[i1].end]
        body = text[toks[b0].start:toks[b1].end]
        stream.splice(toks[site].start, toks[close].end, f"[{init}].map({toks[v0].text}, {body})[0]")
    raise Abandon


GO_FORMAT = Rule("Go's string format", ("format",), _go_format,
                 "cel-go's strings extension: format as Go writes values (ext/formatting.go)",
                 "tests/unit/cel/test_string_format.py")
OR_VALUE = Rule("Kyverno's orValue", ("orValue",), _or_value,
                "Kyverno's OrValueCompatEnvOptions (pkg/cel/compiler): orValue on any value, typed dyn",
                "tests/unit/cel/test_optional_selection.py")
PRESENCE_GUARDS = Rule("presence on scalars", ("has",), _presence_guards,
                       "cel-go: has(x.f) is false when x is a scalar or null",
                       "tests/unit/cel/test_optional_selection.py")
SELECTION_GUARDS = Rule("optional selection on scalars", ("?",), _selection_guards,
                        "cel-go: x.?f and x[?k] are optional.none() when x is a scalar or null",
                        "tests/unit/cel/test_optional_selection.py")
EAGER_BINDINGS = Rule("eager cel.bind", ("bind",), _eager_bindings,
                      "cel-go's cel.bind (ext/bindings.go): the value is bound when the binding is evaluated",
                      "tests/unit/cel/test_bindings.py")

"""vpol's CEL front end (vpol.cel.compat): one reading of an expression, edits that keep its tokens and the map back
to the text as written, and the list of rules in one place."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from vpol.cel import compat
from vpol.cel.compat import CHECKED, EVALUATED, Rule, TokenStream, read, rewrite
from vpol.cel.compat.rules import Abandon
from vpol.cel.compat.tokens import scan

ROOT = Path(__file__).resolve().parents[3]

_TEXTS = [
    "object.?spec.c.all(x, x.?n == 'a.?b' || x[?'k'] >= 2) // c.?d\n && has(y.z) ? r'''q''' : 1.5e3",
    "Object{spec: Object.spec{containers: [Object.spec.containers{name: \"a\", image: 'b'}]}}",
    "'%s'.format([x.?y.orValue(1 / 0)]) + \"in\" in [\"a\"] ? cel.bind(v, 1, v) : 0x1Fu",
]
_REPLACEMENTS = ["x", "(", ")", " ", "in", "[", "'a'", "1.5", "&&", "// c\n", "cel.bind(q, 1, q)", ""]


@pytest.mark.parametrize("seed", range(40))
def test_after_any_edits_the_tokens_are_those_of_the_whole_text(seed: int) -> None:
    """An edit re-reads only the tokens around it; whatever the edits (ones that join neighbouring tokens, open a
    comment or a string included), the tokens are those a reading of the whole new text gives."""
    rng = random.Random(seed)
    stream = TokenStream(rng.choice(_TEXTS))
    for _ in range(6):
        toks = stream.tokens
        if not toks:
            break
        a = rng.randrange(len(toks))
        b = rng.randrange(a, min(len(toks), a + 4))
        stream.splice(toks[a].start, toks[b].end, rng.choice(_REPLACEMENTS))
        assert stream.tokens == list(scan(stream.text)), stream.text


def test_the_position_map_leads_back_to_the_text_as_written() -> None:
    src = 'Object{metadata: Object.metadata{x__dash__y: "1", labels: {"a": b}}}'
    source = read(src, typed_object_literals=True)
    assert source.checked == 'dyn({"metadata": dyn({"x-y": "1", "labels": {"a": b}})})'
    # Every token the rewrite kept is found where the user wrote it.
    for tok in scan(source.checked):
        if tok.text in ("{", "}", ":", ",", '"1"', '"a"', "b"):
            assert src[source.offset(tok.start):].startswith(tok.text), tok
    # The type checker's position of `b` (in the checked text) is the user's line:column.
    assert source.position(1, source.checked.index(" b}") + 2) == (1, src.index(" b}") + 2)


def test_a_rule_that_abandons_leaves_the_text_it_was_given() -> None:
    def half_done(stream: TokenStream) -> None:
        stream.splice(0, 1, "changed")
        raise Abandon

    stream = TokenStream("a + b")
    compat.apply(stream, (Rule("half", ("a",), half_done, "", ""),))
    assert (stream.text, stream.tokens) == ("a + b", list(scan("a + b")))


def test_rules_run_in_order_on_one_stream() -> None:
    """The evaluated text is the checked text rewritten by each rule in turn (a rule reads what the ones before
    it wrote: orValue's bindings hold guarded selections, and eager bindings rewrite every binding before)."""
    src = "[1].exists(c, true) && object.?a.b.orValue(1 / 0) == 1"
    text = src
    for rule in EVALUATED:
        text = rewrite(text, (rule,)).text
    assert read(src).evaluated == text != src
    assert "cel.bind" not in text and "vpol_orv_1" in text and "vpol_opt_1" in text


def test_every_rule_says_what_it_reproduces_and_where_it_is_tested() -> None:
    for rule in (*CHECKED, *EVALUATED):
        assert rule.needs and rule.reproduces
        for path in rule.tested_in.split(", "):
            assert (ROOT / path).is_file(), (rule.name, path)


def test_the_checked_text_is_what_the_user_wrote_outside_mutations() -> None:
    src = "object.spec.?x.orValue('') == 'a'"
    assert read(src).checked == src and read(src).position(1, 5) == (1, 5)
    assert read(src).evaluated != src

"""A list answer read one item at a time (vpol.kube.list_answer.ListReader): whatever the chunks its bytes come in,
the same items and fields as ``json.loads`` of the whole answer; items handed out before the answer has arrived;
an answer that is not JSON refused with the character where it went wrong."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from vpol.kube.list_answer import ListAnswerError, ListReader


def _report(i: int) -> dict[str, Any]:
    return {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
            "metadata": {"name": f"r-{i}", "namespace": "ns", "labels": {"app.kubernetes.io/managed-by": "vpol"},
                         "annotations": {"note": "\"items\": [1, 2] — ünïcode ✓ \U0001f600 \\ \n"}},
            "results": [{"policy": f"p{j}", "result": "pass" if j % 3 else "fail", "timestamp": {"seconds": 1700000000 + j},
                         "scored": j % 2 == 0, "score": 1.5e-3 * j, "none": None} for j in range(4)],
            "summary": {"pass": 2, "fail": 2, "warn": 0}}


def _answers() -> list[tuple[str, str]]:
    """(name, JSON text): the key orders servers write, indented or not, empty and null items, a number last."""
    items = [_report(i) for i in range(25)]
    typed = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReportList",
             "metadata": {"resourceVersion": "42", "continue": "abc="}, "items": items}
    custom = {"apiVersion": "v1", "items": items, "kind": "ConfigMapList", "metadata": {"resourceVersion": "7"}}
    return [
        ("typed", json.dumps(typed, separators=(",", ":"))),
        ("custom-resources order", json.dumps(custom, separators=(",", ":"), ensure_ascii=False)),
        ("indented", json.dumps(typed, indent=2, ensure_ascii=False)),
        ("spaces everywhere", " \n{ \"kind\" : \"XList\" , \"items\" : [ 1 , [ ] , { } , \"s\" , 2.5e3 ] , "
                              "\"remaining\" : 123456789 } \r\n"),
        ("no items", '{"kind":"XList","metadata":{},"items":[]}'),
        ("null items", '{"kind":"XList","items":null,"metadata":{"resourceVersion":"1"}}'),
        ("empty object", "{}"),
        ("a number last", '{"items":[{"a":1}],"total":1234567890123}'),
    ]


def _read(text: str, sizes: Iterator[int]) -> tuple[list[Any], dict[str, Any]]:
    data = text.encode()
    chunks: list[bytes] = []
    at = 0
    while at < len(data):
        size = next(sizes)
        chunks.append(data[at:at + size])
        at += size
    reader = ListReader(chunks)
    return list(reader.items()), reader.head


@pytest.mark.parametrize(("name", "text"), _answers(), ids=[name for name, _ in _answers()])
def test_any_split_of_the_bytes_reads_as_json_loads_reads_the_whole(name: str, text: str) -> None:
    whole = json.loads(text)
    want_items = whole.pop("items", None) or []
    rng = random.Random(name)
    splits: dict[str, Iterator[int]] = {
        "one chunk": iter(lambda: 1 << 30, None),
        "one byte at a time": iter(lambda: 1, None),
        "random": iter(lambda: rng.randint(1, 300), None),
        "64 KiB": iter(lambda: 64 * 1024, None),
    }
    for how, sizes in splits.items():
        items, head = _read(text, sizes)
        assert items == want_items, how
        assert head == whole, how


def test_items_are_handed_out_before_the_whole_answer_has_arrived() -> None:
    text = json.dumps({"apiVersion": "v1", "kind": "XList", "metadata": {},
                       "items": [_report(i) for i in range(2000)]}).encode()
    size = 4096
    chunks = [text[at:at + size] for at in range(0, len(text), size)]
    taken: list[int] = []

    def arriving() -> Iterator[bytes]:
        for number, chunk in enumerate(chunks):
            taken.append(number)
            yield chunk

    reader = ListReader(arriving())
    items = reader.items()
    first = next(items)
    assert first["metadata"]["name"] == "r-0"
    assert reader.head == {"apiVersion": "v1", "kind": "XList", "metadata": {}}
    # The first item came after the chunks holding it (and a few more to parse ahead), not after all of them.
    assert len(taken) <= 4 < len(chunks)
    names = [first["metadata"]["name"], *(i["metadata"]["name"] for i in items)]
    assert names == [f"r-{i}" for i in range(2000)]
    assert len(taken) == len(chunks)


@pytest.mark.parametrize(("text", "what", "at"), [
    ('{"items":[{"a":1},{"a":2]}', "Expecting ',' delimiter", 24),
    ('{"items":[{"a":1}', "expected ','", 17),
    ('{"kind":"XList","items":[]} x', "extra data", 28),
    ('[{"a":1}]', "expected '{'", 0),
    ("", "expected '{', the answer ended", 0),
    ('{"items":[1,,2]}', "Expecting value", 12),
    ('{"items":[1] "kind":"X"}', "expected ','", 13),
    ('{1:2}', "expected a key", 1),
    ('{"items":{"a":1}}', "the items are not an array", 9),
])
def test_an_answer_that_is_not_json_is_refused_at_its_character(text: str, what: str, at: int) -> None:
    for size in (1, 3, 1 << 20):
        data = text.encode()
        with pytest.raises(ListAnswerError) as refused:
            list(ListReader(data[i:i + size] for i in range(0, len(data), size)).items())
        assert what in str(refused.value)
        assert str(refused.value).endswith(f"at character {at}"), (size, str(refused.value))


def test_bytes_that_are_not_utf8_are_refused() -> None:
    with pytest.raises(ListAnswerError, match="not UTF-8"):
        list(ListReader([b'{"items":["caf', b'\xe9"]}']).items())
    with pytest.raises(ListAnswerError, match="not UTF-8"):
        list(ListReader([b'{"items":["\xe2\x9c']).items())  # cut inside a character, then the answer ends

"""The cel-go extensions of Kubernetes' environment, as the policy environment provides them.

Strings v2, optional types, sets, two-variable comprehensions and lists v3
come from cel-expr-python's extensions (enabled by vpol.cel.environment);
``transformMap``/``transformMapEntry`` need our ``cel.@mapInsert``. Every
expected value was also produced by the Kubernetes 1.37 environment.
"""

from __future__ import annotations

import pytest

from tests.unit.cel.kubernetes.conftest import error, value


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # strings, version 2
        ("'a,b'.split(',')", ["a", "b"]),
        ("'a,b,c'.split(',', 2)", ["a", "b,c"]),
        ("['a', 'b'].join('-')", "a-b"),
        ("['a', 'b'].join()", "ab"),
        ("'ABC'.lowerAscii()", "abc"),
        ("'abc'.upperAscii()", "ABC"),
        ("'abc'.replace('b', 'x')", "axc"),
        ("'aaa'.replace('a', 'b', 2)", "bba"),
        ("'abcdef'.substring(2)", "cdef"),
        ("'abcdef'.substring(1, 3)", "bc"),
        ("'  x  '.trim()", "x"),
        ("'hello'.indexOf('l')", 2),
        ("'hello'.indexOf('l', 3)", 3),
        ("'hello'.lastIndexOf('l')", 3),
        ("'hello'.charAt(1)", "e"),
        ("'%s is %d'.format(['x', 3])", "x is 3"),
        ("'%.2f'.format([1.2345])", "1.23"),
        ("strings.quote('a\"b')", '"a\\"b"'),
        ("'abc'.matches('^a')", True),
        # optional types
        ("{'a': {'b': 1}}.?a.?b.orValue(0)", 1),
        ("{'a': 1}.?z.orValue(7)", 7),
        ("optional.of(1).hasValue()", True),
        ("optional.none().hasValue()", False),
        ("optional.ofNonZeroValue(0).hasValue()", False),
        ("[1, 2][?5].orValue(9)", 9),
        ("optional.of(2).optMap(x, x * 2).value()", 4),
        ("optional.none().or(optional.of(3)).value()", 3),
        # sets
        ("sets.contains([1, 2, 3], [1, 2])", True),
        ("sets.equivalent([1, 2, 2], [2, 1])", True),
        ("sets.intersects([1, 2], [2, 3])", True),
        # two-variable comprehensions
        ("[1, 2, 3].all(i, v, v > i)", True),
        ("[1, 2, 3].exists(i, v, i == 2 && v == 3)", True),
        ("{'a': 1, 'b': 2}.all(k, v, v > 0)", True),
        ("{'a': 1}.exists(k, v, k == 'a')", True),
        ("[1, 2, 3].transformList(i, v, v * 2)", [2, 4, 6]),
        ("[1, 2, 3].transformList(i, v, i > 0, v * 2)", [4, 6]),
        ("{'a': 1}.transformMap(k, v, v + 1)", {"a": 2}),
        ("{'a': 1, 'b': 2}.transformMap(k, v, v > 1, v * 10)", {"b": 20}),
        ("{'a': 1}.transformMapEntry(k, v, {k + 'x': v})", {"ax": 1}),
        ("[1, 2].transformMap(i, v, v * 10)", {0: 10, 1: 20}),
        ("[5, 6].transformMapEntry(i, v, {string(v): i})", {"5": 0, "6": 1}),
        ("[true, false].transformMapEntry(i, v, {v: i})", {True: 0, False: 1}),
        ("{'a': 1}.transformMap(k, v, v + 1)['a'] + 1", 3),
        # lists, version 3
        ("[1, [2, [3]]].flatten()", [1, 2, [3]]),
        ("[1, [2, [3]]].flatten(2)", [1, 2, 3]),
        ("[1, 2, 3, 4].slice(1, 3)", [2, 3]),
        ("[3, 1, 2].sort()", [1, 2, 3]),
        ("[3, 1, 2].reverse()", [2, 1, 3]),
        ("[1, 1, 2].distinct()", [1, 2]),
        ("lists.range(4)", [0, 1, 2, 3]),
        ("[{'n': 2}, {'n': 1}].sortBy(x, x.n)", [{"n": 1}, {"n": 2}]),
        ("[1, 2, 3].exists_one(x, x == 2)", True),
    ],
)
def test_extension(expr: str, expected: object) -> None:
    assert value(expr) == expected


def test_transform_map_entry_rejects_duplicate_keys() -> None:
    assert error("{'a': 1, 'b': 2}.transformMapEntry(k, v, {'same': v})") == "insert failed: key same already exists"


def test_transform_map_on_policy_data() -> None:
    obj = {"metadata": {"labels": {"app": "web", "tier": "front"}}}
    assert value("object.metadata.labels.transformMap(k, v, v.upperAscii())", object=obj) == {
        "app": "WEB",
        "tier": "FRONT",
    }

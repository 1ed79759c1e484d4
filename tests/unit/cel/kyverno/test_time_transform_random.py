"""time.now/truncate/toCron, listObjToMap and random.

Expectations: Kyverno's tests (pkg/cel/libs/time, transform, random) and Go's
Time.Truncate, which counts from the zero time 0001-01-01T00:00:00Z (a Monday).
"""

from __future__ import annotations

import datetime
import re

import pytest

from tests.unit.cel.kyverno.conftest import error, value

UTC = datetime.timezone.utc


def test_time_now_is_a_timestamp_close_to_now() -> None:
    before = datetime.datetime.now(UTC)
    got = value("time.now()")
    after = datetime.datetime.now(UTC)
    assert isinstance(got, datetime.datetime)
    assert before - datetime.timedelta(seconds=1) <= got <= after + datetime.timedelta(seconds=1)
    # Kyverno's test: arithmetic with durations works
    assert value('time.now() - duration("3h") < time.now()') is True


@pytest.mark.parametrize(
    ("ts", "d", "expected"),
    [
        ("2025-01-02T03:45:27Z", "1h", datetime.datetime(2025, 1, 2, 3, 0, tzinfo=UTC)),  # Kyverno's test
        ("2025-01-02T03:45:27Z", "15m", datetime.datetime(2025, 1, 2, 3, 45, tzinfo=UTC)),
        ("2025-01-02T03:45:27Z", "24h", datetime.datetime(2025, 1, 2, tzinfo=UTC)),
        # a week counts from Monday 0001-01-01: 2025-01-02 (Thursday) -> Monday 2024-12-30
        ("2025-01-02T03:45:27Z", "168h", datetime.datetime(2024, 12, 30, tzinfo=UTC)),
        ("2025-01-02T03:45:27.5Z", "1s", datetime.datetime(2025, 1, 2, 3, 45, 27, tzinfo=UTC)),
        ("2025-01-02T03:45:27Z", "0s", datetime.datetime(2025, 1, 2, 3, 45, 27, tzinfo=UTC)),
        ("2025-01-02T03:45:27Z", "-1h", datetime.datetime(2025, 1, 2, 3, 45, 27, tzinfo=UTC)),
    ],
)
def test_time_truncate(ts: str, d: str, expected: datetime.datetime) -> None:
    assert value(f'time.truncate(timestamp("{ts}"), duration("{d}"))') == expected


@pytest.mark.parametrize(
    ("ts", "cron"),
    [
        ("2025-01-02T15:30:00Z", "30 15 2 1 4"),  # Kyverno's test (a Thursday)
        ("2025-01-05T00:00:00Z", "0 0 5 1 0"),  # Sunday is 0
        ("2024-12-31T23:59:59Z", "59 23 31 12 2"),
        ("2025-01-02T15:30:00+02:00", "30 13 2 1 4"),  # in UTC
    ],
)
def test_time_to_cron(ts: str, cron: str) -> None:
    assert value(f'time.toCron(timestamp("{ts}"))') == cron


def test_list_obj_to_map_kyverno_case() -> None:
    expr = """{fn}(
        [{{"name": "kyverno", "lfx": "mentorship"}}, {{"name": "kubernetes", "lfx": "something"}}],
        [{{"domain": "security"}}, {{"domain": "orchestration"}}],
        "name", "domain")"""
    expected = {"kyverno": "security", "kubernetes": "orchestration"}
    assert value(expr.format(fn="transform.listObjToMap")) == expected
    assert value(expr.format(fn="listObjToMap")) == expected


def test_list_obj_to_map_missing_value_is_null() -> None:
    assert value('listObjToMap([{"k": "a"}], [{"other": 1}], "k", "v")') == {"a": None}


def test_list_obj_to_map_from_object_fields() -> None:
    obj = {"keys": [{"n": "x"}, {"n": "y"}], "vals": [{"v": 1}, {"v": 2}]}
    assert value('listObjToMap(object.keys, object.vals, "n", "v")', obj=obj) == {"x": 1, "y": 2}


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ('listObjToMap([{"k": "a"}], [], "k", "v")', "lists of equal length. list1: 1, list2: 0"),
        ('listObjToMap([{"k": 1}], [{"v": 1}], "k", "v")', "cannot be handled as a string"),
        ('listObjToMap([{"x": "a"}], [{"v": 1}], "k", "v")', "cannot be handled as a string"),
        ('listObjToMap(["a"], [{"v": 1}], "k", "v")', "cannot be handled as a map"),
        ('listObjToMap([{"k": "a"}], ["v"], "k", "v")', "cannot be handled as a map"),
    ],
)
def test_list_obj_to_map_errors(expr: str, message: str) -> None:
    assert message in error(expr)


@pytest.mark.parametrize("fn", ["random", "random.random"])
def test_random_default_pattern(fn: str) -> None:
    for _ in range(20):
        assert re.fullmatch("[0-9a-z]{8}", value(f"{fn}()"))


def test_random_pattern_kyverno_case() -> None:
    pattern = "[A-Z0-9]{8}-[A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{12}"
    for fn in ("random", "random.random"):
        got = value(f'{fn}("{pattern}")')
        assert re.fullmatch(pattern, got)


def test_random_values_differ() -> None:
    assert len({value("random()") for _ in range(10)}) > 1


def test_random_invalid_pattern() -> None:
    assert "error parsing regexp" in error('random("[a-z")')

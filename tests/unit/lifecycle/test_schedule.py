"""A DeletingPolicy's schedule: Kyverno's cron dialect (supercronic's cronexpr, docs/internals/generating-and-deleting.md,
"Deletion") mapped onto croniter by vpol.model.schedule.

Expectations come from the documented dialect: 5 fields (minute hour day-of-month month day-of-week), 6 (the same
and a year), 7 (a second first, then the five, then a year), extra fields after the seventh ignored, the aliases
@yearly/@annually/@monthly/@weekly/@daily/@hourly (no @every, no @reboot), L, W, #, month and day names, day of
week 7 = Sunday, times in UTC, the next run strictly after a given time. Calendar facts used below: 2026-03-11 is a
Wednesday, 2026-03-01 and 2026-03-15 Sundays, 2026-03-31 a Tuesday, 2026-04-01 a Wednesday, 2026-05-31 a Sunday,
2026-08-01 a Saturday (checked by the first test).
"""

from __future__ import annotations

import datetime

import pytest

from vpol.model import schedule

UTC = datetime.timezone.utc
#: A Wednesday, mid-morning, with seconds: every expectation below is the first cron time strictly after it.
BASE = datetime.datetime(2026, 3, 11, 10, 30, 15, tzinfo=UTC)


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime.datetime:
    return datetime.datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_calendar_facts_the_expectations_rely_on() -> None:
    weekday = {d: datetime.date(*d).strftime("%A") for d in
               [(2026, 3, 11), (2026, 3, 1), (2026, 3, 15), (2026, 3, 31), (2026, 4, 1), (2026, 5, 31),
                (2026, 8, 1), (2026, 3, 27)]}
    assert weekday == {(2026, 3, 11): "Wednesday", (2026, 3, 1): "Sunday", (2026, 3, 15): "Sunday",
                       (2026, 3, 31): "Tuesday", (2026, 4, 1): "Wednesday", (2026, 5, 31): "Sunday",
                       (2026, 8, 1): "Saturday", (2026, 3, 27): "Friday"}


@pytest.mark.parametrize(("cron", "expected"), [
    # five fields: minute hour day-of-month month day-of-week (second 0)
    ("* * * * *", at(2026, 3, 11, 10, 31)),
    ("*/15 * * * *", at(2026, 3, 11, 10, 45)),
    ("5/20 * * * *", at(2026, 3, 11, 10, 45)),  # 5, 25, 45
    ("0 0 * * *", at(2026, 3, 12)),
    ("30 2 * * 1-5", at(2026, 3, 12, 2, 30)),  # Thursday
    ("0 0 29 2 *", at(2028, 2, 29)),  # the next leap day
    # day of month and day of week both restricted: either matches (crontab(5))
    ("0 0 1 * 5", at(2026, 3, 13)),  # Friday the 13th comes before April 1st
    # names, case-insensitive, ranges of names; 7 is Sunday like 0
    ("0 0 * JAN *", at(2027, 1, 1)),
    ("0 0 * jan-mar mon", at(2026, 3, 16)),
    ("0 0 * * SUN", at(2026, 3, 15)),
    ("0 0 * * 7", at(2026, 3, 15)),
    ("0 0 * * 0", at(2026, 3, 15)),
    # L (last day of the month), W (nearest weekday, never across the month), # (n-th weekday of the month)
    ("0 0 L * *", at(2026, 3, 31)),
    ("0 0 15W * *", at(2026, 3, 16)),  # the 15th is a Sunday: Monday the 16th
    ("0 0 * * 1#2", at(2026, 4, 13)),  # the 2nd Monday of March (the 9th) is past, so April's: Mondays 6, 13
    ("0 0 * * fri#2", at(2026, 3, 13)),
    ("0 0 * * 7#1", at(2026, 4, 5)),  # March's first Sunday (the 1st) is past
    # six fields: the five and a year (second 0)
    ("0 0 1 1 * 2030", at(2030, 1, 1)),
    ("0 12 * * * 2026", at(2026, 3, 11, 12)),
    # seven fields: a second first, then the five, then a year
    ("30 0 0 * * * *", at(2026, 3, 12, 0, 0, 30)),
    ("*/10 * * * * * *", at(2026, 3, 11, 10, 30, 20)),
    ("5 0 0 1 1 * 2027", at(2027, 1, 1, 0, 0, 5)),
    # more than seven: the extra ones are ignored
    ("0 0 * * * * * extra", at(2026, 3, 11, 11)),
    ("0 0 * * * * * 1 2 3", at(2026, 3, 11, 11)),
    # aliases
    ("@hourly", at(2026, 3, 11, 11)),
    ("@daily", at(2026, 3, 12)),
    ("@weekly", at(2026, 3, 15)),  # Sunday midnight
    ("@monthly", at(2026, 4, 1)),
    ("@yearly", at(2027, 1, 1)),
    ("@annually", at(2027, 1, 1)),
    # fields are separated by any whitespace
    ("  0\t0  *  * *  ", at(2026, 3, 12)),
])
def test_next_run(cron: str, expected: datetime.datetime) -> None:
    assert schedule.validate(cron) == ""
    assert schedule.next_run(cron, BASE) == expected


def test_the_day_of_month_w_does_not_cross_the_month() -> None:
    # August 1st 2026 is a Saturday: 1W is Monday the 3rd, not Friday July 31st.
    assert schedule.next_run("0 0 1W * *", at(2026, 7, 15)) == at(2026, 8, 3)
    # May 31st 2026 is a Sunday: 31W is Friday the 29th, not Monday June 1st.
    assert schedule.next_run("0 0 31W * *", at(2026, 5, 15)) == at(2026, 5, 29)


def test_next_run_is_strictly_after() -> None:
    # Exactly on a cron time: the next one, not the same.
    assert schedule.next_run("30 10 * * *", at(2026, 3, 11, 10, 30)) == at(2026, 3, 12, 10, 30)
    assert schedule.next_run("0 0 * * * * *", at(2026, 3, 11, 10)) == at(2026, 3, 11, 11)
    # A fraction of a second after a cron time is past it.
    half = datetime.datetime(2026, 3, 11, 10, 30, 0, 500_000, tzinfo=UTC)
    assert schedule.next_run("* * * * *", half) == at(2026, 3, 11, 10, 31)
    assert schedule.next_run("* * * * * * *", half) == at(2026, 3, 11, 10, 30, 1)


def test_runs_chain_one_after_another() -> None:
    first = schedule.next_run("*/20 * * * *", BASE)
    assert first == at(2026, 3, 11, 10, 40)
    second = schedule.next_run("*/20 * * * *", first)
    assert second == at(2026, 3, 11, 11, 0)


def test_times_are_utc_whatever_the_zone_given() -> None:
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    # 12:00 at +02:00 is 10:00 UTC: the next "11:00" is 11:00 UTC the same day (09:00 the next day if the cron
    # were read in the given zone's wall time).
    got = schedule.next_run("0 11 * * *", datetime.datetime(2026, 3, 11, 12, 0, tzinfo=plus_two))
    assert got == at(2026, 3, 11, 11)
    assert got is not None and got.utcoffset() == datetime.timedelta(0)


def test_a_year_range_and_its_end() -> None:
    assert schedule.next_run("0 0 1 1 * 2027-2028", at(2027, 6, 1)) == at(2028, 1, 1)
    # Only 2026: nothing after the last second of 2026.
    assert schedule.next_run("*/30 * * * * * 2026", at(2026, 12, 31, 23, 59, 45)) is None


def test_a_schedule_with_no_future_time_has_no_next_run() -> None:
    # Kyverno's cronexpr answers the zero time here, and its controller then seems to run the policy every second
    # (docs/internals/generating-and-deleting.md, open questions); vpol answers None (no run), as its docstring says.
    assert schedule.validate("0 0 1 1 * 2020") == ""
    assert schedule.next_run("0 0 1 1 * 2020", BASE) is None


@pytest.mark.parametrize("cron", ["", "   ", "*", "* *", "* * *", "* * * *", "0 0 1 1"])
def test_fewer_than_five_fields_are_missing_fields(cron: str) -> None:
    assert schedule.validate(cron) == "missing field(s)"
    assert schedule.next_run(cron, BASE) is None


@pytest.mark.parametrize("cron", ["@every 1h", "@reboot", "@midnight", "@sometimes"])
def test_unsupported_descriptors_are_refused(cron: str) -> None:
    assert schedule.validate(cron) != ""
    assert schedule.next_run(cron, BASE) is None


@pytest.mark.parametrize("cron", [
    "60 * * * *",  # minute 0-59
    "* 24 * * *",  # hour 0-23
    "0 0 32 * *",  # day of month 1-31
    "0 0 0 * *",
    "0 0 * 13 *",  # month 1-12
    "0 0 * * 8",  # day of week 0-7
    "abc * * * *",
    "0 0 1 1 * 1969",  # year 1970-2099
    "0 0 1 1 * 2100",
    "61 0 0 * * * *",  # second 0-59
    "*/0 * * * *",  # a step of 0
])
def test_invalid_fields_are_refused(cron: str) -> None:
    why = schedule.validate(cron)
    assert why != ""
    assert "missing field(s)" not in why
    assert schedule.next_run(cron, BASE) is None


def test_croniter_expression_maps_kyverno_field_order() -> None:
    # croniter's six- and seven-field forms put the seconds sixth and the year seventh.
    assert schedule.croniter_expression("1 2 3 4 5") == "1 2 3 4 5"
    assert schedule.croniter_expression("1 2 3 4 5 2030") == "1 2 3 4 5 0 2030"
    assert schedule.croniter_expression("9 1 2 3 4 5 2030") == "1 2 3 4 5 9 2030"
    with pytest.raises(schedule.ScheduleError, match=r"missing field\(s\)"):
        schedule.croniter_expression("1 2 3 4")


# --- what croniter cannot express -----------------------------------------------------------------------------


def test_last_weekday_of_the_month_lw_is_refused() -> None:
    # Kyverno's cronexpr accepts `LW` in the day of month (the last weekday of the month: Tuesday 2026-03-31);
    # croniter has no such token, so vpol refuses a schedule Kyverno accepts. The current behaviour, pinned.
    assert schedule.validate("0 0 LW * *") != ""
    assert schedule.next_run("0 0 LW * *", BASE) is None


# --- Kyverno's dialect where croniter spells or reads it otherwise --------------------------------------------


def test_day_of_month_or_nth_weekday() -> None:
    # The 1st of April (a Wednesday) comes before April's 2nd Monday (the 13th).
    assert schedule.validate("0 0 1 * 1#2") == ""
    assert schedule.next_run("0 0 1 * 1#2", BASE) == at(2026, 4, 1)
    # The 12th of March comes before April's 2nd Monday.
    assert schedule.next_run("0 0 12 * 1#2", BASE) == at(2026, 3, 12)


def test_last_given_weekday_of_the_month() -> None:
    assert schedule.validate("0 0 * * 5L") == ""
    assert schedule.next_run("0 0 * * 5L", BASE) == at(2026, 3, 27)


def test_full_month_and_day_names() -> None:
    assert schedule.next_run("0 0 * january *", BASE) == at(2027, 1, 1)
    assert schedule.next_run("0 0 * * sunday", BASE) == at(2026, 3, 15)


def test_aliases_are_lower_case_only() -> None:
    assert schedule.validate("@HOURLY") == "missing field(s)"


def test_a_reversed_range_is_refused() -> None:
    assert schedule.validate("10-5 * * * *") != ""

"""A DeletingPolicy's ``schedule``: Kyverno's cron dialect, and the next run after a moment (pure).

Kyverno reads the schedule with supercronic's cronexpr: five fields (minute hour day-of-month month
day-of-week), six (the same and a year) or seven (a second first, then the five, then a year), and the aliases
``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``, ``@hourly`` (no ``@every``, no ``@reboot``);
names of months and days, ``L``, ``W`` and ``#``. Times are UTC (Kyverno's images run in UTC).

The arithmetic is croniter's (a maintained parser of the same cron syntax); this module only maps Kyverno's field
order onto croniter's, whose six- and seven-field forms put the seconds sixth and the year seventh.
"""

from __future__ import annotations

import datetime

from croniter import CroniterError, croniter

ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


class ScheduleError(ValueError):
    """The schedule is not a cron expression Kyverno accepts."""


def croniter_expression(schedule: str) -> str:
    """``schedule`` written in croniter's field order, or :class:`ScheduleError`."""
    text = " ".join(schedule.split())
    if not text:
        raise ScheduleError("missing field(s)")
    if text.startswith("@"):
        if text.lower() not in ALIASES or text.lower() == "@midnight":
            raise ScheduleError(f"unsupported descriptor {text!r} (@yearly, @annually, @monthly, @weekly, @daily, "
                                "@hourly)")
        return text.lower()
    fields = text.split(" ")
    if len(fields) < 5:
        raise ScheduleError("missing field(s)")
    if len(fields) == 5:
        out = fields
    elif len(fields) == 6:  # ... and a year
        out = [*fields[:5], "0", fields[5]]
    else:  # a second, the five, a year (cronexpr ignores anything after the seventh)
        out = [*fields[1:6], fields[0], fields[6]]
    expression = " ".join(out)
    if not croniter.is_valid(expression):
        raise ScheduleError(f"invalid expression {schedule!r}")
    return expression


def validate(schedule: str) -> str:
    """Why ``schedule`` is not a cron expression Kyverno accepts ("" when it is)."""
    try:
        croniter_expression(schedule)
    except ScheduleError as exc:
        return str(exc)
    return ""


def next_run(schedule: str, after: datetime.datetime) -> datetime.datetime | None:
    """The first time ``schedule`` names strictly after ``after`` (UTC); None when it names none (a past year)."""
    base = after.astimezone(datetime.timezone.utc)
    try:
        value = croniter(croniter_expression(schedule), base).get_next(datetime.datetime)
    except (CroniterError, ScheduleError, StopIteration, ValueError):
        return None
    if not isinstance(value, datetime.datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)

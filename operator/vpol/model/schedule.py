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
import re

from croniter import CroniterError, croniter

ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@hourly")
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
DAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
_NAMES = {name: name[:3] for name in (*MONTHS, *DAYS)}
_LAST_WEEKDAY = re.compile(r"^([0-7])L$", re.IGNORECASE)
_RANGE = re.compile(r"^(\d+)-(\d+)(?:/\d+)?$")


class ScheduleError(ValueError):
    """The schedule is not a cron expression Kyverno accepts."""


def _field(text: str, day_of_week: bool) -> str:
    """One field in croniter's spelling: full month and day names shortened, ``<day>L`` (the last such day of the
    month) written ``L<day>``; a range ending before it starts is refused, as cronexpr refuses it."""
    parts = []
    for part in text.split(","):
        lowered = part.lower()
        for name, short in _NAMES.items():
            lowered = lowered.replace(name, short)
        if day_of_week and (last := _LAST_WEEKDAY.match(lowered)):
            lowered = f"L{last.group(1)}"
        if (span := _RANGE.match(lowered)) and int(span.group(1)) > int(span.group(2)):
            raise ScheduleError(f"invalid interval {span.group(1)}-{span.group(2)}")
        parts.append(lowered)
    return ",".join(parts)


def croniter_expression(schedule: str) -> str:
    """``schedule`` written in croniter's field order and spelling, or :class:`ScheduleError`."""
    text = " ".join(schedule.split())
    if not text:
        raise ScheduleError("missing field(s)")
    if text in ALIASES:
        return text
    fields = text.split(" ")
    if len(fields) < 5:
        raise ScheduleError("missing field(s)")  # also an alias not in lower case, as cronexpr reads it
    if len(fields) == 5:
        out = fields
    elif len(fields) == 6:  # ... and a year
        out = [*fields[:5], "0", fields[5]]
    else:  # a second, the five, a year (cronexpr ignores anything after the seventh)
        out = [*fields[1:6], fields[0], fields[6]]
    out = [_field(f, day_of_week=i == 4) for i, f in enumerate(out)]
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


def _next(expression: str, base: datetime.datetime) -> datetime.datetime | None:
    try:
        value = croniter(expression, base).get_next(datetime.datetime)
    except (CroniterError, StopIteration, ValueError):
        return None
    if not isinstance(value, datetime.datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)


def next_run(schedule: str, after: datetime.datetime) -> datetime.datetime | None:
    """The first time ``schedule`` names strictly after ``after`` (UTC); None when it names none (a past year).

    A day of month and a day of week both restricted name either (cron's rule, and cronexpr's); croniter applies
    it, but not with an n-th (``#``) or last (``L``) weekday: then each is computed on its own and the first
    wins."""
    base = after.astimezone(datetime.timezone.utc)
    try:
        expression = croniter_expression(schedule)
    except ScheduleError:
        return None
    fields = expression.split(" ")
    if len(fields) < 5:
        return _next(expression, base)  # an alias
    dom, dow = fields[2], fields[4]
    if dom not in ("*", "?") and dow not in ("*", "?") and any(c in dow for c in "#L"):
        either = [_next(" ".join([*fields[:2], dom, fields[3], "*", *fields[5:]]), base),
                  _next(" ".join([*fields[:2], "*", fields[3], dow, *fields[5:]]), base)]
        found = [t for t in either if t is not None]
        return min(found) if found else None
    return _next(expression, base)

"""Kyverno's time library: ``time.now()``, ``time.truncate(ts, d)``, ``time.toCron(ts)``.

* ``time.now()`` is the current timestamp.
* ``time.truncate(ts, d)`` rounds ``ts`` down to a multiple of ``d`` counted
  from Go's zero time (0001-01-01T00:00:00Z), like Go's ``Time.Truncate``;
  a non-positive ``d`` leaves ``ts`` unchanged. For durations that divide a
  day this is the same as counting from the Unix epoch; for others (a week)
  it is not.
* ``time.toCron(ts)`` is the five-field cron expression matching ``ts`` (UTC):
  ``"<minute> <hour> <day> <month> <weekday>"``, weekday 0 = Sunday, e.g.
  ``time.toCron(timestamp("2025-01-02T15:30:00Z")) == "30 15 2 1 4"``.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from cel_expr_python import cel

from vpol.cel.declare import DURATION, TIMESTAMP
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.time"

_GO_ZERO = datetime.datetime(1, 1, 1, tzinfo=datetime.timezone.utc)
_MICROSECOND = datetime.timedelta(microseconds=1)


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _utc(ts: datetime.datetime) -> datetime.datetime:
    return ts.replace(tzinfo=datetime.timezone.utc) if ts.tzinfo is None else ts.astimezone(datetime.timezone.utc)


def truncate(ts: datetime.datetime, d: datetime.timedelta) -> datetime.datetime:
    ts = _utc(ts)
    if d <= datetime.timedelta(0):
        return ts
    since_zero = (ts - _GO_ZERO) // _MICROSECOND
    step = d // _MICROSECOND
    if step == 0:
        return ts
    return ts - (since_zero % step) * _MICROSECOND


def to_cron(ts: datetime.datetime) -> str:
    ts = _utc(ts)
    weekday = (ts.weekday() + 1) % 7  # Python: Monday = 0; cron and Go: Sunday = 0
    return f"{ts.minute} {ts.hour} {ts.day} {ts.month} {weekday}"


def functions() -> Sequence[Fn]:
    T = cel.Type
    return [
        Fn(LIBRARY, "time.now", "kyverno_time_now", T.TIMESTAMP, (), now),
        Fn(LIBRARY, "time.truncate", "kyverno_time_truncate_timestamp_duration", T.TIMESTAMP, (TIMESTAMP, DURATION), truncate),
        Fn(LIBRARY, "time.toCron", "kyverno_time_to_cron_timestamp", T.STRING, (TIMESTAMP,), to_cron),
    ]

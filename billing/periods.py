"""Billing periods in the billing time zone (`BILLING_TIME_ZONE`, UTC by default).

Pure functions of instants: a local hour, day or month is a half-open interval [start, end) of
aware datetimes. A day is 23 or 25 hours long when the clocks change; a month is the calendar
month on the local calendar. Splitting an interval at these boundaries counts each second once.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from functools import cache
from zoneinfo import ZoneInfo

from django.conf import settings
from django.utils import timezone

from portal.errors import DomainError

UTC = dt.UTC


@cache
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def billing_zone() -> ZoneInfo:
    return _zone(settings.BILLING_TIME_ZONE)


def local_midnight(day: dt.date) -> dt.datetime:
    """The instant the billing zone's day begins (midnight, or the first instant after a gap)."""
    return _local_start(dt.datetime(day.year, day.month, day.day))  # noqa: DTZ001 (a wall time, placed below)


def _local_start(naive: dt.datetime) -> dt.datetime:
    """The first instant at or after a naive local wall time (a wall time inside a gap moves to its end)."""
    zone = billing_zone()
    aware = naive.replace(tzinfo=zone, fold=0).astimezone(UTC)
    # A nonexistent wall time round-trips to a different wall time: step to the gap's end.
    if aware.astimezone(zone).replace(tzinfo=None) != naive:
        aware = naive.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return aware


def day_bounds(day: dt.date) -> tuple[dt.datetime, dt.datetime]:
    return local_midnight(day), local_midnight(day + dt.timedelta(days=1))


def month_start(day: dt.date) -> dt.date:
    return day.replace(day=1)


def next_month(month: dt.date) -> dt.date:
    return (month.replace(day=28) + dt.timedelta(days=4)).replace(day=1)


MONTH = re.compile(r"([0-9]{4})-([0-9]{2})")


LAST_YEAR = 2999


def month_parse(text: str) -> dt.date | None:
    """The first day of a month written YYYY-MM (the years 2000 to 2999), or None for anything else.
    The upper bound keeps the month after it, and the ranges pages draw around it, within what a
    date can hold: "9999-12" was a 500 on every page that reads a month."""
    match = MONTH.fullmatch(text.strip())
    if match is None or not 1 <= int(match[2]) <= 12 or not 2000 <= int(match[1]) <= LAST_YEAR:
        return None
    return dt.date(int(match[1]), int(match[2]), 1)


def month_asked(text: str | None) -> dt.date:
    """A month a page or the API was asked for, written YYYY-MM, this month when empty; anything
    else is refused in a sentence."""
    text = (text or "").strip()
    if not text:
        return current_month()
    month = month_parse(text)
    if month is None:
        raise DomainError(f"“{text}” is not a month; write it as YYYY-MM, for example 2026-11.", field="month")
    return month


def month_bounds(month: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) of the local calendar month that contains `month`."""
    first = month_start(month)
    return local_midnight(first), local_midnight(next_month(first))


def local_date(instant: dt.datetime) -> dt.date:
    return instant.astimezone(billing_zone()).date()


def current_month(now: dt.datetime | None = None) -> dt.date:
    return month_start(local_date(now or timezone.now()))


def recent_months(*, now: dt.datetime | None = None, count: int = 12) -> list[dt.date]:
    """This month and the eleven before it, newest first: the month picker's choices."""
    month = current_month(now)
    months = []
    for _ in range(count):
        months.append(month)
        month = month_start(month - dt.timedelta(days=1))
    return months


def hour_floor(instant: dt.datetime) -> dt.datetime:
    """The start of the local hour that holds the instant.

    Local hours are whole UTC-offset hours apart in every zone the tz database has except those
    with sub-hour offsets (e.g. Asia/Kolkata, +05:30); working on the local wall clock handles both.
    """
    zone = billing_zone()
    local = instant.astimezone(zone)
    floored = local.replace(minute=0, second=0, microsecond=0)
    return floored.astimezone(UTC)


def hour_starts(start: dt.datetime, end: dt.datetime) -> Iterator[dt.datetime]:
    """The starts of the local hours that overlap [start, end)."""
    hour = hour_floor(start)
    while hour < end:
        yield hour
        hour = next_hour(hour)


def next_hour(hour: dt.datetime) -> dt.datetime:
    """The next local hour boundary after `hour` (a boundary itself)."""
    # One real hour later is the next local hour boundary, across DST changes too, for zones whose
    # offsets differ by whole hours; for the rest (Lord Howe's 30-minute shift) re-floor.
    candidate = hour + dt.timedelta(hours=1)
    floored = hour_floor(candidate)
    return floored if floored > hour else candidate


def split_by_hour(start: dt.datetime, end: dt.datetime) -> Iterator[tuple[dt.datetime, int]]:
    """(local hour start, whole seconds inside that hour) for [start, end), each second counted once.

    Seconds are counted on whole-second boundaries (instants are truncated to the second), so
    adjacent intervals that share an endpoint never count the shared second twice.
    """
    start = start.replace(microsecond=0)
    end = end.replace(microsecond=0)
    if end <= start:
        return
    for hour in hour_starts(start, end):
        upper = min(next_hour(hour), end)
        lower = max(hour, start)
        if upper > lower:
            yield hour, int((upper - lower).total_seconds())

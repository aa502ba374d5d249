"""Where a team's month is heading: its cost so far and, at its current burn, at the month's end
and the day it crosses a budget. The usage page shows it, and budgets build on it."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.db.models import Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from billing import money, periods
from billing.figures import Lines
from billing.models import Account, UsageHour
from billing.money import SECONDS_PER_HOUR, round_money
from billing.rates.card import RateCard
from billing.usage.rollups import line_fields, one_currency
from portal.errors import DomainError

FORECAST_WINDOW = dt.timedelta(hours=24)


@dataclass(frozen=True)
class MonthForecast:
    """Where a team's month is heading at its current burn.

    The burn is the cost of the last 24 hours (or of the month so far, when younger) divided by
    that window: recent enough to see a big job start, long enough not to swing with every pod.
    `projected` is the month-to-date cost plus that burn until the month ends.
    """

    month: dt.date
    currency: str
    spent: Decimal
    projected: Decimal
    burn: Fraction
    now: dt.datetime
    month_end: dt.datetime
    daily_cumulative: tuple[tuple[dt.date, Fraction], ...]

    @property
    def burn_per_hour(self) -> Decimal:
        return round_money(self.burn, self.currency)

    def crossing_date(self, budget: Decimal | int | str) -> dt.date | None:
        """The local day the month's cost reaches `budget`: the day it did, or the day it will at
        this burn; None if it stays under it to the month's end."""
        limit = Fraction(Decimal(budget))
        for day, cumulative in self.daily_cumulative:
            if cumulative >= limit:
                return day
        if self.spent >= Decimal(budget):
            return periods.local_date(min(self.now, self.month_end - dt.timedelta(seconds=1)))
        if self.burn <= 0 or self.now >= self.month_end:
            return None
        hours = (limit - Fraction(self.spent)) / self.burn
        when = self.now + dt.timedelta(seconds=float(hours * SECONDS_PER_HOUR))
        return periods.local_date(when) if when < self.month_end else None


def month_forecast(*, account: Account, month: dt.date, now: dt.datetime | None = None) -> MonthForecast:
    """The month-to-date cost and, at the current burn, the month-end cost and (through
    `crossing_date`) the day it crosses a budget: two grouped queries over the month's rollups
    (by local day and line, and the last 24 hours by line).

    For a month that has ended the projection is what was spent; for one not yet begun, nothing.
    """
    forecast = month_forecasts(accounts=[account], month=month, now=now)[account.pk]
    if isinstance(forecast, DomainError):
        raise forecast
    return forecast


def month_forecasts(*, accounts: list[Account], month: dt.date,
                    now: dt.datetime | None = None) -> dict[int, MonthForecast | DomainError]:
    """`month_forecast` of every account at once, in the same two grouped queries whatever their
    number; an account whose usage is priced in two currencies gets the refusal instead."""
    now = now or timezone.now()
    start, end = periods.month_bounds(month)
    clipped_now, window_start = forecast_window(start=start, end=end, now=now)
    priced = UsageHour.objects.filter(account__in=accounts, hour__gte=start, hour__lt=clipped_now, rate__isnull=False)
    rows = (priced.annotate(day=TruncDate("hour", tzinfo=periods.billing_zone()))
            .values(*line_fields("day")).annotate(unit_seconds=Sum("unit_seconds")).order_by())
    recent_rows: Iterable[dict[str, Any]] = []
    if clipped_now > window_start:
        recent_rows = (priced.filter(hour__gte=window_start).values(*line_fields())
                       .annotate(unit_seconds=Sum("unit_seconds")).order_by())
    return forecasts(accounts=accounts, month=month, now=now, daily_rows=rows, recent_rows=recent_rows)


def forecast_window(*, start: dt.datetime, end: dt.datetime, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """Where a month's forecast stops counting (now, within the month) and where its burn window begins."""
    clipped_now = min(max(now, start), end)
    return clipped_now, max(start, periods.hour_floor(clipped_now - FORECAST_WINDOW))




@dataclass
class _Folded:
    """An account's priced rows of the month, their currencies, each local day's exact cost and the
    burn window's."""

    rows: list[dict[str, Any]]
    currencies: set[str]
    by_day: dict[dt.date, Fraction]
    recent: Fraction = Fraction(0)


def forecasts(*, accounts: list[Account], month: dt.date, now: dt.datetime, daily_rows: Iterable[dict[str, Any]],
              recent_rows: Iterable[dict[str, Any]],
              idle_currency: str | None = None) -> dict[int, MonthForecast | DomainError]:
    """The forecasts folded from the month's priced rollups up to now, grouped by account, local
    day and line (`daily_rows`), and those of the burn window, by account and line. An account
    with no priced usage is shown in `idle_currency`, the rate card's default unless the caller read it."""
    start, end = periods.month_bounds(month)
    clipped_now, window_start = forecast_window(start=start, end=end, now=now)
    folded: dict[int, _Folded] = defaultdict(lambda: _Folded(rows=[], currencies=set(), by_day=defaultdict(Fraction)))
    for row in daily_rows:
        theirs = folded[row["account_id"]]
        theirs.currencies.add(row["rate__currency"])
        theirs.rows.append(row)
        theirs.by_day[row["day"]] += money.row_cost(row)
    for row in recent_rows:
        folded[row["account_id"]].recent += money.row_cost(row)
    window_hours = Fraction(int((clipped_now - window_start).total_seconds()), SECONDS_PER_HOUR)
    remaining_hours = Fraction(int((end - clipped_now).total_seconds()), SECONDS_PER_HOUR)
    if idle_currency is None:
        idle_currency = RateCard.read().default_currency if any(
            not folded[account.pk].currencies for account in accounts) else ""
    result: dict[int, MonthForecast | DomainError] = {}
    for account in accounts:
        mine = folded[account.pk]
        try:
            currency = one_currency(mine.currencies, what=f"{account.name}'s usage") if mine.currencies else idle_currency
        except DomainError as refusal:
            result[account.pk] = refusal
            continue
        spent = Lines(mine.rows, currency=currency).total().cost
        burn = mine.recent / window_hours if window_hours > 0 else Fraction(0)
        result[account.pk] = MonthForecast(
            month=periods.month_start(month), currency=currency, spent=spent,
            projected=spent + round_money(burn * remaining_hours, currency), burn=burn, now=now, month_end=end,
            daily_cumulative=_cumulative(mine.by_day))
    return result


def _cumulative(by_day: dict[dt.date, Fraction]) -> tuple[tuple[dt.date, Fraction], ...]:
    """Each day with the month's exact cost up to its end."""
    running, cumulative = Fraction(0), []
    for day in sorted(by_day):
        running += by_day[day]
        cumulative.append((day, running))
    return tuple(cumulative)

"""Reads of prices, usage and cost.

Usage is read from the hourly rollups (`UsageHour`) only, in a fixed number of grouped queries,
so a page costs the same with ten teams or a thousand and never scans a month of raw intervals.
Costs are exact `Fraction`s until shown, rounded half-even once per team × flavor × rate line as a
statement rounds them, so the month-to-date figure a page shows is the one the statement bills.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from django.db.models import Sum
from django.utils import timezone

from billing import periods
from billing.models import Account, Rate, UsageHour
from billing.money import SECONDS_PER_HOUR, round_money
from portal.errors import DomainError
from tenants.models import Flavor

DEFAULT_CURRENCY = "USD"
FORECAST_WINDOW = dt.timedelta(hours=24)


def rate_at(*, flavor: Flavor, at: dt.datetime | None = None) -> Rate | None:
    """The rate in force for the flavor at that moment (now by default)."""
    return Rate.objects.filter(flavor=flavor, effective_from__lte=at or timezone.now()).order_by("-effective_from").first()


def hourly_cost(*, flavor: Flavor, units: int, at: dt.datetime | None = None) -> tuple[Decimal, str] | None:
    """What `units` of the flavor cost per hour at the rate in force, or None without a rate."""
    rate = rate_at(flavor=flavor, at=at)
    if rate is None:
        return None
    gpus = Decimal(units * flavor.fraction_numerator) / Decimal(flavor.fraction_denominator)
    return (rate.price_per_gpu_hour * gpus).quantize(Decimal("0.01")), rate.currency


# --- Cost of a team's month ---------------------------------------------------------------------


def _line_key_fields() -> tuple[str, ...]:
    return ("flavor_id", "rate_id", "rate__price_per_gpu_hour", "rate__currency", "fraction_numerator",
            "fraction_denominator")


def _one_currency(currencies: set[str], *, what: str) -> str:
    if len(currencies) > 1:
        raise DomainError(f"{what} is priced in {' and '.join(sorted(currencies))}; a month is billed in one currency, "
                          "so finance must set every flavor's rate in the same currency.")
    return next(iter(currencies)) if currencies else default_currency()


def default_currency() -> str:
    """The currency of the newest rate, so an idle team's zero is shown in the currency it would be billed in."""
    newest = Rate.objects.order_by("-effective_from").values_list("currency", flat=True).first()
    return newest or DEFAULT_CURRENCY


def _rounded_lines_total(lines: dict[tuple[int, int], Fraction], currency: str) -> Decimal:
    return sum((round_money(amount, currency) for amount in lines.values()), Decimal(0)) + round_money(0, currency)


def team_month_cost(*, account: Account, month: dt.date) -> tuple[Decimal, str]:
    """The team's cost so far in the local month holding `month`, rounded per flavor × rate line
    as the month's statement rounds it, and its currency (one grouped query).

    Hours metered while a flavor had no rate cost nothing. Usage priced in two currencies is
    refused with a sentence (a statement has one currency).
    """
    start, end = periods.month_bounds(month)
    rows = (UsageHour.objects.filter(account=account, hour__gte=start, hour__lt=end, rate__isnull=False)
            .values(*_line_key_fields()).annotate(unit_seconds=Sum("unit_seconds")).order_by())
    lines: dict[tuple[int, int], Fraction] = defaultdict(Fraction)
    currencies: set[str] = set()
    for row in rows:
        currencies.add(row["rate__currency"])
        lines[(row["flavor_id"], row["rate_id"])] += _row_cost(row)
    currency = _one_currency(currencies, what=f"{account.name}'s usage")
    return _rounded_lines_total(lines, currency), currency


def _row_cost(row: dict) -> Fraction:
    price = row["rate__price_per_gpu_hour"]
    if price is None:
        return Fraction(0)
    return (Fraction(row["unit_seconds"] * row["fraction_numerator"], row["fraction_denominator"] * SECONDS_PER_HOUR)
            * Fraction(price))


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
    `crossing_date`) the day it crosses a budget: one grouped query over the month's rollups.

    For a month that has ended the projection is what was spent; for one not yet begun, nothing.
    """
    now = now or timezone.now()
    start, end = periods.month_bounds(month)
    rows = (UsageHour.objects.filter(account=account, hour__gte=start, hour__lt=min(end, now), rate__isnull=False)
            .values("hour", *_line_key_fields()).annotate(unit_seconds=Sum("unit_seconds")).order_by("hour"))
    lines: dict[tuple[int, int], Fraction] = defaultdict(Fraction)
    currencies: set[str] = set()
    clipped_now = min(max(now, start), end)
    window_start = max(start, periods.hour_floor(clipped_now - FORECAST_WINDOW))
    recent = Fraction(0)
    by_day: dict[dt.date, Fraction] = defaultdict(Fraction)
    for row in rows:
        amount = _row_cost(row)
        currencies.add(row["rate__currency"])
        lines[(row["flavor_id"], row["rate_id"])] += amount
        by_day[periods.local_date(row["hour"])] += amount
        if row["hour"] >= window_start:
            recent += amount
    currency = _one_currency(currencies, what=f"{account.name}'s usage")
    spent = _rounded_lines_total(lines, currency)
    cumulative: list[tuple[dt.date, Fraction]] = []
    running = Fraction(0)
    for day in sorted(by_day):
        running += by_day[day]
        cumulative.append((day, running))
    window_seconds = int((clipped_now - window_start).total_seconds())
    burn = recent / Fraction(window_seconds, SECONDS_PER_HOUR) if window_seconds > 0 else Fraction(0)
    remaining_hours = Fraction(int((end - clipped_now).total_seconds()), SECONDS_PER_HOUR)
    projected = spent + round_money(burn * remaining_hours, currency)
    return MonthForecast(month=periods.month_start(month), currency=currency, spent=spent, projected=projected,
                         burn=burn, now=now, month_end=end, daily_cumulative=tuple(cumulative))

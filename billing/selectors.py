"""Reads of prices, usage and cost.

Usage is read from the hourly rollups (`UsageHour`) only, in a fixed number of grouped queries,
so a page costs the same with ten teams or a thousand and never scans a month of raw intervals.
Costs are exact `Fraction`s until shown, rounded half-even once per team × flavor × rate line as a
statement rounds them, so the month-to-date figure a page shows is the one the statement bills.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, cast

from django.contrib.auth.models import AnonymousUser
from django.core.cache import cache
from django.db.models import (
    Case,
    Count,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    Max,
    Min,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Greatest, Least, TruncDate, TruncSecond
from django.utils import timezone

from billing import efficiency, ledger, metering, money, periods, xid_credits
from billing.figures import LINE_FIELDS, Figure, Lines
from billing.models import Account, CapacityHour, GuaranteeHour, IdlePolicy, MeteringState, Rate, UsageHour, UsageMonth
from billing.money import ROUNDING_HOURS, SECONDS_PER_HOUR, round_money, round_places
from jobs.models import RunInterval, Workload
from portal.collector import collector_paused
from portal.errors import DomainError
from portal.models import User
from tenants.models import Flavor, Team

DEFAULT_CURRENCY = "USD"
FORECAST_WINDOW = dt.timedelta(hours=24)


def rate_at(*, flavor: Flavor, at: dt.datetime | None = None) -> Rate | None:
    """The rate in force for the flavor at that moment (now by default)."""
    return Rate.objects.filter(flavor=flavor, effective_from__lte=at or timezone.now()).order_by("-effective_from").first()


def priced_flavors(*, flavor_ids: Collection[int]) -> set[int]:
    """Which of the flavors have a rate in force now (one query)."""
    return set(Rate.objects.filter(flavor_id__in=list(flavor_ids), effective_from__lte=timezone.now())
               .values_list("flavor_id", flat=True).distinct())


def unpriced_refusal(*, flavors: Sequence[Flavor]) -> str | None:
    """Why nothing may launch on these flavors now: one of them has no rate in force, so its hours
    would be billed at nothing without anyone deciding that (a price of 0 is a decision; no price
    is not). None when every one has a rate. One query."""
    priced = priced_flavors(flavor_ids=[flavor.pk for flavor in flavors])
    unpriced = [flavor.name for flavor in flavors if flavor.pk not in priced]
    if not unpriced:
        return None
    one = len(unpriced) == 1
    return (f"{' and '.join(unpriced)} {'has' if one else 'have'} no price on the rate card yet, so "
            f"{'its' if one else 'their'} GPU-hours could not be billed: nothing launches on "
            f"{'it' if one else 'them'} until finance sets a rate.")


def hourly_cost(*, flavor: Flavor, units: int, at: dt.datetime | None = None) -> tuple[Decimal, str] | None:
    """What `units` of the flavor cost per hour at the rate in force, or None without a rate."""
    rate = rate_at(flavor=flavor, at=at)
    if rate is None:
        return None
    gpus = Decimal(units * flavor.fraction_numerator) / Decimal(flavor.fraction_denominator)
    return (rate.price_per_gpu_hour * gpus).quantize(Decimal("0.01")), rate.currency


# --- Cost of a team's month ---------------------------------------------------------------------


def _line_key_fields(*fields: str) -> tuple[str, ...]:
    """`fields` and what makes a statement line (billing.figures.LINE_FIELDS), each once."""
    return tuple(dict.fromkeys((*fields, *LINE_FIELDS)))


def _one_currency(currencies: set[str], *, what: str) -> str:
    if len(currencies) > 1:
        raise DomainError(f"{what} is priced in {' and '.join(sorted(currencies))}; a month is billed in one currency, "
                          "so finance must set every flavor's rate in the same currency.")
    return next(iter(currencies)) if currencies else default_currency()


def default_currency() -> str:
    """The currency of the newest rate, so an idle team's zero is shown in the currency it would be billed in."""
    newest = Rate.objects.order_by("-effective_from").values_list("currency", flat=True).first()
    return newest or DEFAULT_CURRENCY


def team_month_cost(*, account: Account, month: dt.date) -> tuple[Decimal, str]:
    """The team's cost so far in the local month holding `month`: the sum of its statement lines,
    each rounded once (billing.money's rule), and its currency (one grouped query).

    Hours metered while a flavor had no rate cost nothing. Usage priced in two currencies is
    refused with a sentence (a statement has one currency).
    """
    start, end = periods.month_bounds(month)
    rows = list(UsageHour.objects.filter(account=account, hour__gte=start, hour__lt=end, rate__isnull=False)
                .values(*_line_key_fields()).annotate(unit_seconds=Sum("unit_seconds")).order_by())
    currency = _one_currency({row["rate__currency"] for row in rows}, what=f"{account.name}'s usage")
    return Lines(rows, currency=currency).total().cost, currency


def _row_cost(row: dict) -> Fraction:
    """A grouped rollup row's exact cost (its query keeps priced rows only)."""
    return money.cost(unit_seconds=row["unit_seconds"], numerator=row["fraction_numerator"],
                      denominator=row["fraction_denominator"], price_per_gpu_hour=row["rate__price_per_gpu_hour"])


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
    clipped_now, window_start = _forecast_window(start=start, end=end, now=now)
    priced = UsageHour.objects.filter(account__in=accounts, hour__gte=start, hour__lt=clipped_now, rate__isnull=False)
    rows = (priced.annotate(day=TruncDate("hour", tzinfo=periods.billing_zone()))
            .values(*_line_key_fields("day")).annotate(unit_seconds=Sum("unit_seconds")).order_by())
    recent_rows: Iterable[dict[str, Any]] = []
    if clipped_now > window_start:
        recent_rows = (priced.filter(hour__gte=window_start).values(*_line_key_fields())
                       .annotate(unit_seconds=Sum("unit_seconds")).order_by())
    return _forecasts(accounts=accounts, month=month, now=now, daily_rows=rows, recent_rows=recent_rows)


def _forecast_window(*, start: dt.datetime, end: dt.datetime, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """Where a month's forecast stops counting (now, within the month) and where its burn window begins."""
    clipped_now = min(max(now, start), end)
    return clipped_now, max(start, periods.hour_floor(clipped_now - FORECAST_WINDOW))


def _forecasts(*, accounts: list[Account], month: dt.date, now: dt.datetime, daily_rows: Iterable[dict[str, Any]],
               recent_rows: Iterable[dict[str, Any]],
               idle_currency: str | None = None) -> dict[int, MonthForecast | DomainError]:
    """The forecasts folded from the month's priced rollups up to now, grouped by account, local
    day and line (`daily_rows`), and those of the burn window, by account and line. An account
    with no priced usage is shown in `idle_currency`, `default_currency()` unless the caller read it."""
    start, end = periods.month_bounds(month)
    clipped_now, window_start = _forecast_window(start=start, end=end, now=now)
    rows_of: dict[int, list[dict[str, Any]]] = defaultdict(list)
    currencies: dict[int, set[str]] = defaultdict(set)
    by_day: dict[int, dict[dt.date, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    for row in daily_rows:
        amount, account_id = _row_cost(row), row["account_id"]
        currencies[account_id].add(row["rate__currency"])
        rows_of[account_id].append(row)
        by_day[account_id][row["day"]] += amount
    recent: dict[int, Fraction] = defaultdict(Fraction)
    for row in recent_rows:
        recent[row["account_id"]] += _row_cost(row)
    window_seconds = int((clipped_now - window_start).total_seconds())
    remaining_hours = Fraction(int((end - clipped_now).total_seconds()), SECONDS_PER_HOUR)
    forecasts: dict[int, MonthForecast | DomainError] = {}
    if idle_currency is None:
        idle_currency = default_currency() if any(not currencies[account.pk] for account in accounts) else ""
    for account in accounts:
        try:
            currency = _one_currency(currencies[account.pk], what=f"{account.name}'s usage") \
                if currencies[account.pk] else idle_currency
        except DomainError as refusal:
            forecasts[account.pk] = refusal
            continue
        spent = Lines(rows_of[account.pk], currency=currency).total().cost
        cumulative: list[tuple[dt.date, Fraction]] = []
        running = Fraction(0)
        for day in sorted(by_day[account.pk]):
            running += by_day[account.pk][day]
            cumulative.append((day, running))
        burn = recent[account.pk] / Fraction(window_seconds, SECONDS_PER_HOUR) if window_seconds > 0 else Fraction(0)
        projected = spent + round_money(burn * remaining_hours, currency)
        forecasts[account.pk] = MonthForecast(
            month=periods.month_start(month), currency=currency, spent=spent, projected=projected, burn=burn, now=now,
            month_end=end, daily_cumulative=tuple(cumulative))
    return forecasts


# --- Usage grouped from the rollups -------------------------------------------------------------

@dataclass(frozen=True)
class Line:
    """One shown line: a label, GPU-hours and cost, rounded by billing.money's rule."""

    key: object
    label: str
    gpu_hours: Decimal
    cost: Decimal



_MONTHLY_KEYS = {"account_id", "flavor_id", "borrowed"}  # what UsageMonth keeps besides the line key


def _rollup_sums(*, start: dt.datetime, end: dt.datetime, fields: tuple[str, ...],
                 account_ids: list[int] | None = None) -> QuerySet[Any, dict[str, Any]]:
    """The usage of [start, end) grouped by `fields` (ones UsageMonth keeps) with its
    `unit_seconds`, from the monthly level wherever it holds the hours asked for, in one statement.

    Per local month the range touches: when the range begins with the month, UsageMonth holds
    [month start, months_through) of it, so it is read, plus the hourly rows from months_through,
    as long as months_through falls inside the range (or the range runs to the month's end); any
    other piece of a month is read from the hourly rows. `months_through` is read inside the same
    statement, so a refresh committing meanwhile cannot count an hour twice or not at all. Rows of
    one key may come back several times (a month's level and its open hours): callers add them."""
    through = Subquery(MeteringState.objects.order_by("pk").values("months_through")[:1])
    parts: list[QuerySet[Any, Any]] = []
    at = start
    while at < end:
        month_begins, month_ends = periods.month_bounds(periods.local_date(at))
        piece_end = min(end, month_ends)
        hourly = UsageHour.objects.filter(hour__gte=at, hour__lt=piece_end)
        if at == month_begins:
            monthly = UsageMonth.objects.filter(month=month_begins)
            if piece_end < month_ends:  # part of the month: its level is usable only if it stops inside
                monthly = monthly.alias(through=through).filter(through__lte=piece_end)
                hourly = hourly.alias(through=through).filter(hour__gte=Case(
                    When(through__lte=piece_end, then=Greatest("through", Value(at))), default=Value(at)))
            else:
                hourly = hourly.filter(hour__gte=Coalesce(through, Value(at)))
            parts.append(monthly)
        parts.append(hourly)
        at = piece_end
    grouped = []
    for part in parts:
        if account_ids is not None:
            part = part.filter(account_id__in=account_ids)
        grouped.append(part.values(*fields).annotate(unit_seconds=Sum("unit_seconds")).order_by())
    if not grouped:
        return UsageHour.objects.none().values(*fields).annotate(unit_seconds=Sum("unit_seconds"))
    return grouped[0].union(*grouped[1:], all=True)


def account_for_team(*, team: Team) -> Account | None:
    """The team's billing account, if metering has made one (a read never makes it)."""
    return Account.objects.filter(Q(team=team) | Q(team_uid=team.uid)).order_by("pk").first()


def accounts_for_user(*, user: User | AnonymousUser) -> QuerySet[Account]:
    """The accounts whose usage the user may read: every one (deleted teams' too) for finance and
    platform admins, otherwise those of the user's own teams."""
    if not user.is_authenticated:
        return Account.objects.none()
    if user.has_perm("portal.read_costs"):
        return Account.objects.all()
    return Account.objects.filter(team__in=Team.objects.for_user(user))


@dataclass(frozen=True)
class FlavorLine:
    flavor: Flavor
    gpu_hours: Decimal
    guaranteed_hours: Decimal
    borrowed_hours: Decimal
    lent_hours: Decimal
    cost: Decimal


@dataclass(frozen=True)
class DayBar:
    day: dt.date
    gpu_hours: Decimal
    cost: Decimal
    x: int
    y: int
    height: int


@dataclass(frozen=True)
class WorkloadLine:
    workload: Workload
    gpu_hours: Decimal
    cost: Decimal | None


@dataclass(frozen=True)
class TeamMonthUsage:
    team: Team
    account: Account | None
    month: dt.date
    currency: str
    total: Line
    by_flavor: list[FlavorLine]
    by_person: list[Line]
    by_day: list[DayBar]
    chart_max: Decimal
    top_workloads: list[WorkloadLine]
    ledger: str
    forecast: MonthForecast | None
    xid_credit: Decimal  # zero or less: what closing the month credits for GPU time after hardware XIDs, so far
    months: list[dt.date]
    metered_until: dt.datetime  # how far the rollups (and so every figure on the page) count
    allocated_device_seconds: Fraction  # what the team's pods held in the month up to now: the efficiency's allocated time

    @property
    def is_current(self) -> bool:
        return self.month == periods.current_month()

    @property
    def chart_width(self) -> int:
        return len(self.by_day) * (CHART_BAR + 2)


TOP_WORKLOADS = 10
CHART_HEIGHT = 120
CHART_BAR = 18


def team_month_usage(*, team: Team, month: dt.date, now: dt.datetime | None = None) -> TeamMonthUsage:
    """Everything the team usage page shows for a local month, in a fixed number of queries:
    by flavor (guaranteed, borrowed), by person, by day and the forecast from one grouped read of
    the month's hourly rollups (`_team_month_rows`), the lent hours, the top workloads."""
    now = now or timezone.now()
    month = periods.month_start(month)
    start, end = periods.month_bounds(month)
    account = account_for_team(team=team)
    ids = [account.pk] if account else []
    rows = _team_month_rows(account_id=account.pk, start=start, end=end, now=now) if account else []
    currencies = {row["rate__currency"] for row in rows if row["rate_id"] is not None}
    currency = _one_currency(currencies, what=f"{team.name}'s usage")
    lines = Lines(rows, currency=currency)
    by_flavor = lines.parts("flavor_id", "borrowed")
    lent = ledger.lent(start=start, end=end, account_ids=ids) if ids else {}
    flavors = Flavor.objects.in_bulk({flavor_id for flavor_id, _ in by_flavor} | {flavor_id for _, flavor_id in lent})

    nothing = Figure(gpu_hours=round_places(0, ROUNDING_HOURS), cost=lines.zero)
    flavor_lines: list[FlavorLine] = []
    for flavor_id in sorted(flavors, key=lambda pk: flavors[pk].name):
        guaranteed, borrowed = by_flavor.get((flavor_id, False), nothing), by_flavor.get((flavor_id, True), nothing)
        flavor_lines.append(FlavorLine(
            flavor=flavors[flavor_id], gpu_hours=guaranteed.gpu_hours + borrowed.gpu_hours,
            guaranteed_hours=guaranteed.gpu_hours, borrowed_hours=borrowed.gpu_hours,
            lent_hours=round_places(_unit_seconds_as_gpu_hours(
                sum(v for (_, f), v in lent.items() if f == flavor_id), flavors[flavor_id]), ROUNDING_HOURS),
            cost=guaranteed.cost + borrowed.cost))
    people = sorted(lines.parts("owner_key", "owner_username").items(),
                    key=lambda item: (-item[1].cost, -item[1].gpu_hours, item[0][1], item[0][0] or 0))
    person_lines = [Line(key=key[0], label=str(key[1]), gpu_hours=figure.gpu_hours, cost=figure.cost)
                    for key, figure in people]

    bars = _day_bars(month, {day: figure for (day,), figure in lines.parts("day").items()}, nothing)

    # Only a month under way has a forecast to show: an ended month's would be its total, read twice.
    forecast = None
    if account and start <= now < end:
        found = _forecasts(accounts=[account], month=month, now=now,
                           daily_rows=_summed(rows, ("account_id", "day"), measure="to_now", priced_only=True),
                           recent_rows=_summed(rows, ("account_id",), measure="recent", priced_only=True),
                           idle_currency=None if currencies else currency)[account.pk]  # default_currency(), read once
        if isinstance(found, DomainError):
            raise found
        forecast = found
    metered = _metered_end(start=start, end=end, now=now)
    total = lines.total()
    credit = xid_credits.pending(account=account, month=month, now=now, billed=total.cost, currency=currency) \
        if account else lines.zero
    return TeamMonthUsage(
        team=team, account=account, month=month, currency=currency,
        total=Line(key="total", label="Total", gpu_hours=total.gpu_hours, cost=total.cost),
        by_flavor=flavor_lines, by_person=person_lines, by_day=bars,
        chart_max=max((bar.gpu_hours for bar in bars), default=Decimal(0)),
        top_workloads=top_workloads(team=team, start=start, end=metered, now=now),
        ledger=_ledger_sentence(month=month, flavor_lines=flavor_lines),
        forecast=forecast, xid_credit=credit, months=recent_months(now=now), metered_until=metered,
        allocated_device_seconds=efficiency.device_seconds(
            ((row["flavor_id"], row["fraction_numerator"], row["fraction_denominator"], row["to_now"])
             for row in rows if row["to_now"] is not None), flavors))


_TEAM_MONTH_KEYS = ("account_id", "flavor_id", "borrowed", "owner_key", "owner_username", "day")


def _team_month_rows(*, account_id: int, start: dt.datetime, end: dt.datetime,
                     now: dt.datetime) -> list[dict[str, Any]]:
    """The account's hourly rollups of [start, end) in one grouped statement, by flavor, borrowed,
    person, local day and line, each group with three sums: `unit_seconds` (all of it), `to_now`
    (its hours before now: the forecast's and the efficiency's) and `recent` (the forecast's burn
    window); a sum is None where none of the group's hours fall in its range. The team page folds
    its by-flavor, by-person and by-day figures, the forecast and the allocated hours out of
    these rows with `_summed`: one read of a month of hourly rows instead of six."""
    clipped_now, window_start = _forecast_window(start=start, end=end, now=now)
    return list(UsageHour.objects.filter(account_id=account_id, hour__gte=start, hour__lt=end)
                .annotate(day=TruncDate("hour", tzinfo=periods.billing_zone()))
                .values(*_line_key_fields(*_TEAM_MONTH_KEYS))
                .annotate(to_now=Sum("unit_seconds", filter=Q(hour__lt=clipped_now)),
                          recent=Sum("unit_seconds", filter=Q(hour__gte=window_start, hour__lt=clipped_now)),
                          unit_seconds=Sum("unit_seconds"))  # last: it shadows the column for what follows
                .order_by())


def _summed(rows: Iterable[dict[str, Any]], keys: tuple[str, ...], *, measure: str = "unit_seconds",
            priced_only: bool = False) -> list[dict[str, Any]]:
    """Grouped rollup rows summed again by `keys` and the line, in integers: the rows the database
    answers when grouped by those keys alone (`measure` picks which of `_team_month_rows`' sums;
    a group without it is left out, as a read of that range would leave it out). Costs are linear
    in unit-seconds within a line, so tallying these gives exactly the figures of such a read."""
    fields = _line_key_fields(*keys)
    sums: dict[tuple, int] = defaultdict(int)
    for row in rows:
        if row[measure] is not None and not (priced_only and row["rate_id"] is None):
            sums[tuple(row[field] for field in fields)] += row[measure]
    return [{**dict(zip(fields, key, strict=True)), "unit_seconds": value} for key, value in sums.items()]


def _metered_end(*, start: dt.datetime, end: dt.datetime, now: dt.datetime) -> dt.datetime:
    """Where the rollups of a period ending at `end` stop: at the metering watermark (the instant
    the last refresh counted up to), never after now. The top workloads are priced from their
    own intervals and cut here, so a workload's cost agrees with the by-person, by-flavor and
    total figures read from the rollups on the same page, rather than running ahead of them by
    whatever ran since the last refresh (and a run a cluster's clock dates in the future is
    counted by both as far as the portal's clock has reached). Never metered: nothing yet."""
    metered = metering.watermark()
    return start if metered is None else max(start, min(end, now, metered))


def recent_months(*, now: dt.datetime | None = None, count: int = 12) -> list[dt.date]:
    """This month and the eleven before it, newest first: the month picker's choices."""
    month = periods.current_month(now)
    months = []
    for _ in range(count):
        months.append(month)
        month = periods.month_start(month - dt.timedelta(days=1))
    return months


def _day_bars(month: dt.date, days: dict[dt.date, Figure], nothing: Figure) -> list[DayBar]:
    """Every local day of the month with its GPU-hours and cost (each day's share of the month's
    lines), laid out for the SVG chart."""
    all_days = []
    day = month
    while day.month == month.month:
        all_days.append(day)
        day += dt.timedelta(days=1)
    figures = {d: days.get(d, nothing) for d in all_days}
    peak = max((figure.gpu_hours for figure in figures.values()), default=Decimal(0))
    bars = []
    for index, d in enumerate(all_days):
        height = int(round(figures[d].gpu_hours / peak * CHART_HEIGHT)) if peak else 0
        bars.append(DayBar(day=d, gpu_hours=figures[d].gpu_hours, cost=figures[d].cost,
                           x=index * (CHART_BAR + 2), y=CHART_HEIGHT - height, height=height))
    return bars


def _unit_seconds_as_gpu_hours(unit_seconds: int, flavor: Flavor) -> Fraction:
    return money.gpu_hours(unit_seconds=unit_seconds, numerator=flavor.fraction_numerator,
                           denominator=flavor.fraction_denominator)


def _hours_phrase(hours: Decimal) -> str:
    return f"{hours.normalize():f} GPU-hours"


def _ledger_sentence(*, month: dt.date, flavor_lines: list[FlavorLine]) -> str:
    """"In November 2026 you used 120 GPU-hours on your own quota; you lent 84 H100 GPU-hours of
    idle quota to other teams; you borrowed 6 H100 GPU-hours of other teams' idle quota." """
    when = f"In {month:%B %Y}"
    if not flavor_lines:
        return f"{when} your team used no GPUs."
    borrowed_parts = [f"{line.borrowed_hours.normalize():f} {line.flavor.name} GPU-hours"
                      for line in flavor_lines if line.borrowed_hours]
    guaranteed = sum((line.guaranteed_hours for line in flavor_lines), Decimal(0))
    sentence = f"{when} you used {_hours_phrase(guaranteed)} on your own quota"
    lent_parts = [f"{line.lent_hours.normalize():f} {line.flavor.name} GPU-hours"
                  for line in flavor_lines if line.lent_hours]
    if lent_parts:
        sentence += f"; you lent {', '.join(lent_parts)} of idle quota to other teams"
    if borrowed_parts:
        sentence += f"; you borrowed {', '.join(borrowed_parts)} of other teams' idle quota"
    else:
        sentence += " and borrowed nothing"
    return sentence + "."


# --- Top workloads and a workload's cost so far ------------------------------------------------


class _Seconds(Func):
    """Seconds between two instants, as a float: only ranks workloads (exact sums come after)."""

    output_field = FloatField()
    arity = 2

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="((julianday(%(expressions)s)) * 86400.0)",
                           arg_joiner=") - julianday(", **extra)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="EXTRACT(EPOCH FROM (%(expressions)s))",
                           arg_joiner=" - ", **extra)


def top_workloads(*, team: Team, start: dt.datetime, end: dt.datetime, now: dt.datetime | None = None,
                  limit: int = TOP_WORKLOADS) -> list[WorkloadLine]:
    """The team's workloads that used the most GPU-time in [start, end), biggest first.

    Rollups do not keep the workload (a workload's hours are its owner's), so this ranks the
    team's own intervals that overlap the period with one SQL aggregate and a LIMIT (the database
    sums; Python never sees the month's intervals), then prices the few it keeps exactly from
    their own intervals: three queries whatever the number of intervals.
    """
    now = now or timezone.now()
    if end <= start:
        return []
    clipped_end = Least(Coalesce("ended_at", Value(now)), Value(end))
    ranked = (RunInterval.objects
              .filter(team=team, workload__isnull=False, started_at__lt=end)
              .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
              .values("workload_id")
              .annotate(weight=Sum(F("units") * F("fraction_numerator")
                                   * _Seconds(clipped_end, Greatest("started_at", Value(start)))
                                   / F("fraction_denominator"), output_field=FloatField()))
              .order_by("-weight", "workload_id")[:limit])
    ids = [row["workload_id"] for row in ranked]
    if not ids:
        return []
    workloads = Workload.objects.select_related("flavor", "owner").in_bulk(ids)
    costs = workload_costs(workload_ids=ids, start=start, end=end, now=now)
    lines = [WorkloadLine(workload=workloads[pk], gpu_hours=costs[pk].gpu_hours, cost=costs[pk].cost)
             for pk in ids if pk in workloads]
    return sorted(lines, key=lambda line: (-line.gpu_hours, line.workload.pk))


@dataclass(frozen=True)
class WorkloadCost:
    gpu_hours: Decimal
    cost: Decimal | None
    currency: str


def workload_costs(*, workload_ids: list[int], start: dt.datetime | None = None, end: dt.datetime | None = None,
                   now: dt.datetime | None = None) -> dict[int, WorkloadCost]:
    """GPU-hours and cost so far of each workload, from its own intervals (an open one up to
    now), each second at the rate in force then: two queries for any number of workloads, whatever
    the number of their intervals (a third when some of them ran across a price change).

    Seconds are whole seconds, as metering counts them: the database sums them per workload,
    flavor and share, with the first and last second of each group; a group that lies within one
    rate's window is priced whole, and only a group that spans a price change is read interval
    by interval. A workload whose hours span rates in two currencies shows GPU-hours and no cost.
    """
    now = now or timezone.now()
    intervals = RunInterval.objects.filter(workload_id__in=workload_ids)
    if start is not None:
        intervals = intervals.filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
    if end is not None:
        intervals = intervals.filter(started_at__lt=end)
    upper: Any = Coalesce("ended_at", Value(now, output_field=DateTimeField()))
    if end is not None:
        upper = Least(upper, Value(end, output_field=DateTimeField()))
    lower: Any = F("started_at") if start is None else Greatest("started_at", Value(start, output_field=DateTimeField()))
    clamped = (intervals.annotate(began=lower, ended=upper, lower=TruncSecond(lower), upper=TruncSecond(upper))
               .filter(upper__gt=F("lower")))
    key = ("workload_id", "flavor_id", "units", "fraction_numerator", "fraction_denominator")
    groups = list(clamped.values(*key).annotate(
        total=Sum(ExpressionWrapper(F("upper") - F("lower"), output_field=DurationField())),
        first=Min("began"), last=Max("ended")).order_by())
    rates: dict[int, list[Rate]] = defaultdict(list)
    for found in Rate.objects.filter(flavor_id__in={group["flavor_id"] for group in groups}).order_by("flavor_id",
                                                                                                       "effective_from"):
        rates[found.flavor_id].append(found)
    windows = {flavor_id: [(rate, rate.effective_from.replace(microsecond=0),
                            found[i + 1].effective_from.replace(microsecond=0) if i + 1 < len(found) else None)
                           for i, rate in enumerate(found)] for flavor_id, found in rates.items()}
    # Whole seconds summed as integers per workload and fraction (and per rate for the amounts), one
    # Fraction per sum at the end.
    seconds: dict[tuple[int, int, int], int] = defaultdict(int)
    rated: dict[tuple[int, Rate, int, int], int] = defaultdict(int)
    across: list[dict[str, Any]] = []  # groups that ran across a price change (or before the first price)
    for group in groups:
        share, denominator = group["units"] * group["fraction_numerator"], group["fraction_denominator"]
        total = int(group["total"].total_seconds())
        seconds[group["workload_id"], share, denominator] += total
        flavor_windows = windows.get(group["flavor_id"], ())
        first, last = group["first"].replace(microsecond=0), group["last"].replace(microsecond=0)
        within = next((rate for rate, since, until in flavor_windows
                       if since <= first and (until is None or last <= until)), None)
        if within is not None:
            rated[group["workload_id"], within, share, denominator] += total
        elif flavor_windows:
            across.append(group)
    if across:
        condition = Q()
        for group in across:
            condition |= Q(**{field: group[field] for field in key})
        rows = clamped.filter(condition).values_list(*key, "lower", "upper")
        for workload_id, flavor_id, units, numerator, denominator, began, ended in rows:
            for rate, since, until in windows[flavor_id]:
                a = max(began, since)
                b = min(ended, until) if until else ended
                if b > a:
                    rated[workload_id, rate, units * numerator, denominator] += int((b - a).total_seconds())
    unit_seconds: dict[int, Fraction] = defaultdict(Fraction)
    for (workload_id, share, denominator), total in seconds.items():
        unit_seconds[workload_id] += Fraction(share * total, denominator)
    amounts: dict[int, Fraction] = defaultdict(Fraction)
    currencies: dict[int, set[str]] = defaultdict(set)
    for (workload_id, rate, share, denominator), total in rated.items():
        currencies[workload_id].add(rate.currency)
        amounts[workload_id] += (Fraction(share * total, denominator) / SECONDS_PER_HOUR
                                 * Fraction(rate.price_per_gpu_hour))
    fallback = DEFAULT_CURRENCY
    result = {}
    for workload_id in workload_ids:
        found_currencies = currencies.get(workload_id, set())
        currency = next(iter(found_currencies)) if len(found_currencies) == 1 else fallback
        cost = round_money(amounts[workload_id], currency) if len(found_currencies) == 1 else None
        result[workload_id] = WorkloadCost(
            gpu_hours=round_places(unit_seconds[workload_id] / SECONDS_PER_HOUR, ROUNDING_HOURS), cost=cost,
            currency=currency)
    return result


# --- Finance overview --------------------------------------------------------------------------

OVERVIEW_SORTS = ("team", "cost_center", "gpu_hours", "cost", "change")


@dataclass(frozen=True)
class OverviewRow:
    account_id: int
    name: str
    cost_center: str
    team_slug: str | None  # None once the team is deleted (its account and hours stay)
    gpu_hours: Decimal
    cost: Decimal
    previous_cost: Decimal
    change: Decimal | None  # percent against last month; None when last month cost nothing


@dataclass(frozen=True)
class UnallocatedLine:
    """Capacity of a flavor nobody used in the month: shown apart, and the part shared among the
    teams by guarantee for a flavor whose idle policy says share."""

    flavor: Flavor
    gpu_hours: Decimal
    shared_hours: Decimal


@dataclass(frozen=True)
class FinanceOverview:
    month: dt.date
    currency: str
    rows: list[OverviewRow]
    flavor_totals: list[Line]
    unallocated: list[UnallocatedLine]
    total: Line
    previous_total: Decimal
    sort: str
    descending: bool
    months: list[dt.date]


OVERVIEW_CACHE_SECONDS = 3600


def _rollups_version() -> str:
    """A token that changes whenever the rollups behind the overview can have changed: a metering
    refresh (it stamps MeteringState.refreshed_at), any row written (refreshes replace rows, so
    the newest id moves), or a flavor's idle policy. Five small reads, by index."""
    refreshed = MeteringState.objects.aggregate(at=Max("refreshed_at"))["at"]
    newest = [model._default_manager.aggregate(last=Max("id"))["last"]
              for model in (UsageHour, CapacityHour, GuaranteeHour)]
    policy = IdlePolicy.objects.aggregate(at=Max("updated_at"), n=Count("id"))
    token = f"{refreshed}|{newest}|{policy['at']}|{policy['n']}|{periods.billing_zone()}"
    return hashlib.sha256(token.encode()).hexdigest()[:32]


LineKey = tuple[int, int, int | None]  # account id, flavor id, rate id
LineParts = dict[tuple[int, int], int]  # (fraction numerator, denominator) → unit-seconds


def _all_accounts_month(*, start: dt.datetime, end: dt.datetime) -> tuple[dict[LineKey, LineParts],
                                                                          dict[int, tuple[Decimal, str]]]:
    """Every account's local month [start, end) by flavor and rate, as integer unit-seconds per
    fraction, and the price and currency of each rate involved: the monthly rollup of the complete
    hours plus the UsageHour rows of the hours after them (the open hour), in one statement, so it
    reads about accounts × flavors rows rather than a month of hourly ones, and a refresh
    committing meanwhile cannot count an hour twice or not at all."""
    lines: dict[LineKey, LineParts] = defaultdict(lambda: defaultdict(int))
    for row in _rollup_sums(start=start, end=end, fields=(
            "account_id", "flavor_id", "rate_id", "fraction_numerator", "fraction_denominator")):
        lines[(row["account_id"], row["flavor_id"], row["rate_id"])][
            (row["fraction_numerator"], row["fraction_denominator"])] += row["unit_seconds"]
    prices = {pk: (price, currency) for pk, price, currency in Rate.objects.filter(
        pk__in={key[2] for key in lines if key[2] is not None}).values_list("pk", "price_per_gpu_hour", "currency")}
    return lines, prices


class _Sums:
    """Rounded line figures summed per key (an account, a flavor): the finance overview's
    thousands of lines cost integer arithmetic and Decimal additions."""

    no_hours = round_places(0, ROUNDING_HOURS)

    def __init__(self) -> None:
        self.hours: dict[Any, Decimal] = defaultdict(Decimal)
        self.money: dict[Any, Decimal] = defaultdict(Decimal)

    def add(self, key: Any, hours: Decimal, cost: Decimal) -> None:
        self.hours[key] += hours
        self.money[key] += cost


def _line_figures(key: LineKey, fraction: tuple[int, int], unit_seconds: int, rates: dict[int, tuple[Decimal, str]],
                  currency: str) -> tuple[Decimal, Decimal]:
    """One statement line's GPU-hours and amount, each rounded once (billing.money's rule); hours
    metered while the flavor had no price cost nothing."""
    numerator, denominator = fraction
    hours = money.round_ratio(unit_seconds * numerator, denominator * SECONDS_PER_HOUR, ROUNDING_HOURS)
    if key[2] is None:
        return hours, round_money(0, currency)
    return hours, money.rounded_cost(parts={fraction: unit_seconds}, price_per_gpu_hour=rates[key[2]][0], currency=currency)


def _idle_shared(*, start: dt.datetime, end: dt.datetime) -> dict[int, Fraction]:
    """The part of each flavor's unallocated capacity shared to teams by guarantee. It weighs every
    team's guarantee in every hour, so it is kept in the cache until the rollups change (see
    `_rollups_version`); only a flavor whose idle policy says share needs it."""
    def compute() -> dict[int, Fraction]:
        shared: dict[int, Fraction] = defaultdict(Fraction)
        for (_, flavor_id), share in ledger.idle_shares(start=start, end=end).items():
            shared[flavor_id] += share
        return dict(shared)

    key = f"billing:idle-shared:{start:%Y%m%d%H%M}:{end:%Y%m%d%H%M}:{_rollups_version()}"
    return cast(dict[int, Fraction], cache.get_or_set(key, compute, OVERVIEW_CACHE_SECONDS))


@collector_paused()  # ~27 collections a request, and the full ones doubled its p95 (benchmarks/billing_pages.py)
def finance_overview(*, month: dt.date, sort: str = "cost", descending: bool = True,
                     now: dt.datetime | None = None) -> FinanceOverview:
    """Every account (teams, and deleted teams that still have hours), with cost center, this
    month's GPU-hours and cost, last month's cost and the change; totals per flavor and the
    unallocated capacity from billing.ledger. A fixed number of queries whatever the number of
    teams, none of which reads a month of every team's hourly rows (see `_all_accounts_month`
    and `ledger.unallocated`)."""
    month = periods.month_start(month)
    start, end = periods.month_bounds(month)
    previous = periods.month_start(month - dt.timedelta(days=1))
    prev_start, prev_end = periods.month_bounds(previous)
    by_account, prices = _all_accounts_month(start=start, end=end)
    before, previous_prices = _all_accounts_month(start=prev_start, end=prev_end)
    currencies = {prices[key[2]][1] for key in by_account if key[2] is not None}
    currency = _one_currency(currencies | {previous_prices[key[2]][1] for key in before if key[2] is not None},
                             what="The usage of these months")
    zero = round_money(0, currency)
    this_month, flavor_sums, last_month = _Sums(), _Sums(), _Sums()
    for key, parts in by_account.items():
        for fraction, unit_seconds in parts.items():
            hours, cost = _line_figures(key, fraction, unit_seconds, prices, currency)
            this_month.add(key[0], hours, cost)
            flavor_sums.add(key[1], hours, cost)
    for key, parts in before.items():
        for fraction, unit_seconds in parts.items():
            last_month.add(key[0], *_line_figures(key, fraction, unit_seconds, previous_prices, currency))
    spent, previous_money = this_month.money, last_month.money
    wanted = set(this_month.hours) | set(previous_money)
    rows = []
    for account_id, name, cost_center, team_slug in Account.objects.values_list("pk", "name", "cost_center", "team__slug"):
        if team_slug is None and account_id not in wanted:
            continue  # a deleted team's account with no hours in either month
        cost = spent.get(account_id, zero)
        was = previous_money.get(account_id, zero)
        rows.append(OverviewRow(account_id=account_id, name=name, cost_center=cost_center, team_slug=team_slug,
                                gpu_hours=this_month.hours.get(account_id, this_month.no_hours), cost=cost, previous_cost=was,
                                change=_percent_change(was, cost)))
    sort = sort if sort in OVERVIEW_SORTS else "cost"
    rows.sort(key=lambda row: row.name.lower())
    keys = {"team": lambda r: r.name.lower(), "cost_center": lambda r: r.cost_center.lower(),
            "gpu_hours": lambda r: r.gpu_hours, "cost": lambda r: r.cost,
            "change": lambda r: (r.change is not None, r.change or Decimal(0))}
    rows.sort(key=keys[sort], reverse=descending)

    idle = ledger.unallocated(start=start, end=end)
    shared = _idle_shared(start=start, end=end) if ledger.shared_flavors() else {}
    flavors = Flavor.objects.in_bulk(set(flavor_sums.hours) | set(idle))
    unallocated = [UnallocatedLine(
        flavor=flavors[pk], gpu_hours=round_places(_unit_seconds_as_gpu_hours(idle[pk], flavors[pk]), ROUNDING_HOURS),
        shared_hours=round_places(shared.get(pk, Fraction(0)) * flavors[pk].fraction / SECONDS_PER_HOUR, ROUNDING_HOURS))
        for pk in sorted(idle, key=lambda pk: flavors[pk].name)]
    flavor_totals = [Line(key=flavors[pk].slug, label=flavors[pk].name,
                          gpu_hours=flavor_sums.hours.get(pk, flavor_sums.no_hours), cost=flavor_sums.money.get(pk, zero))
                     for pk in sorted(flavors, key=lambda pk: flavors[pk].name)]
    total_cost = sum(spent.values(), zero)
    return FinanceOverview(
        month=month, currency=currency, rows=rows, flavor_totals=flavor_totals, unallocated=unallocated,
        total=Line(key="total", label="Total", gpu_hours=sum(this_month.hours.values(), this_month.no_hours),
                   cost=total_cost),
        previous_total=sum(previous_money.values(), zero), sort=sort, descending=descending,
        months=recent_months(now=now))


def _percent_change(was: Decimal, now: Decimal) -> Decimal | None:
    """(now - was) / was in percent, rounded half-even to a tenth; None when `was` is zero."""
    if not was:
        return None
    was_numerator, was_denominator = was.as_integer_ratio()
    now_numerator, now_denominator = now.as_integer_ratio()
    numerator = (now_numerator * was_denominator - was_numerator * now_denominator) * 100
    denominator = now_denominator * was_numerator
    if denominator < 0:
        numerator, denominator = -numerator, -denominator
    return money.round_ratio(numerator, denominator, 1)


# --- Personal ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PersonalUsage:
    month: dt.date
    currency: str
    total: Line
    by_team: list[Line]


def personal_usage(*, user: User, month: dt.date | None = None) -> PersonalUsage:
    """What the user's own workloads used this month, per team: their share of each team's
    statement lines (billing.money's rule), the same figure the team's usage page shows for them.
    Two queries."""
    month = periods.month_start(month or periods.current_month())
    start, end = periods.month_bounds(month)
    hours = UsageHour.objects.filter(hour__gte=start, hour__lt=end)
    theirs = hours.filter(owner_key=user.pk).values("account_id")
    rows = list(hours.filter(account_id__in=Subquery(theirs)).values("owner_key", "owner_username", *LINE_FIELDS)
                .annotate(unit_seconds=Sum("unit_seconds")).order_by())
    currency = _one_currency({row["rate__currency"] for row in rows if row["rate_id"] is not None}, what="Your usage")
    mine: dict[int, Figure] = defaultdict(lambda: Figure(gpu_hours=round_places(0, ROUNDING_HOURS),
                                                         cost=round_money(0, currency)))
    for (account_id, owner, _), figure in Lines(rows, currency=currency).parts(
            "account_id", "owner_key", "owner_username").items():
        if owner == user.pk:  # under any username they had
            mine[account_id] = Figure(gpu_hours=mine[account_id].gpu_hours + figure.gpu_hours,
                                      cost=mine[account_id].cost + figure.cost)
    accounts = Account.objects.in_bulk(list(mine))
    by_team = [Line(key=account_id, label=accounts[account_id].name, gpu_hours=figure.gpu_hours, cost=figure.cost)
               for account_id, figure in sorted(mine.items(), key=lambda item: (-item[1].cost, item[0]))]
    total = Line(key="total", label="Total", gpu_hours=sum((line.gpu_hours for line in by_team), round_places(0, ROUNDING_HOURS)),
                 cost=sum((line.cost for line in by_team), round_money(0, currency)))
    return PersonalUsage(month=month, currency=currency, total=total, by_team=by_team)


@dataclass(frozen=True)
class IdlePolicyRow:
    """A flavor and what finance chose for its unallocated capacity (apart when never chosen)."""

    flavor: Flavor
    mode: str
    label: str


def idle_policy_rows(*, flavors: QuerySet[Flavor] | None = None) -> list[IdlePolicyRow]:
    """Every flavor (or those given) with its idle policy, by name: one query."""
    found = (flavors if flavors is not None else Flavor.objects.all()).select_related("idle_policy").order_by("name")
    rows = []
    for flavor in found:
        policy = getattr(flavor, "idle_policy", None)
        mode = policy.mode if policy is not None else IdlePolicy.Mode.SHOW_APART
        rows.append(IdlePolicyRow(flavor=flavor, mode=mode, label=IdlePolicy.Mode(mode).label))
    return rows


def rates_in_force(*, at: dt.datetime | None = None) -> dict[int, Rate]:
    """Each flavor's rate in force at the moment (now by default), in one query."""
    at = at or timezone.now()
    found: dict[int, Rate] = {}
    for rate in Rate.objects.filter(effective_from__lte=at).order_by("flavor_id", "-effective_from"):
        found.setdefault(rate.flavor_id, rate)
    return found


# --- Usage for the API: any grouping over any local period -------------------------------------

USAGE_GROUPS = ("team", "flavor", "person", "day", "borrowed")
# A person is their user id (usage is keyed on the person) with the username they had then.
_GROUP_COLUMNS: dict[str, tuple[str, ...]] = {
    "team": ("account_id",), "flavor": ("flavor_id",), "person": ("owner_key", "owner_username"), "day": ("day",),
    "borrowed": ("borrowed",)}


@dataclass(frozen=True)
class UsageReport:
    start: dt.date
    end: dt.date  # the last local day included
    currency: str
    by: tuple[str, ...]
    rows: list[dict[str, Any]]
    total: Line
    time_zone: str  # the billing time zone its days are local days of


def usage_report(*, accounts: QuerySet[Account], start: dt.date, end: dt.date, by: tuple[str, ...]) -> UsageReport:
    """GPU-hours and cost of the accounts over the local days start..end (inclusive), grouped by
    any of team, flavor, person, day and borrowed.

    Figures follow billing.money's rule: the lines are those of each local month the range
    touches, rounded once, and each row is its share of them (a range that ends inside a month
    gets the days it holds of that month's lines), so the rows add up to the total and a month's
    row for a team and flavor is its statement line. One grouped query per month touched, plus
    one for the names.
    """
    begin, _ = periods.day_bounds(start)
    _, finish = periods.day_bounds(end)
    keys = tuple(column for group in by for column in _GROUP_COLUMNS[group])
    account_ids = list(accounts.values_list("pk", flat=True))
    month_rows: list[tuple[list[dict[str, Any]], bool]] = []
    at = periods.month_bounds(periods.local_date(begin))[0]
    while at < finish:
        month_start, month_end = periods.month_bounds(periods.local_date(at))
        whole = begin <= month_start and month_end <= finish
        month_rows.append((_month_rows(start=month_start, end=month_end, keys=keys, whole=whole,
                                       account_ids=account_ids), whole))
        at = month_end
    currency = _one_currency({row["rate__currency"] for rows, _ in month_rows for row in rows if row["rate_id"] is not None},
                             what="The usage asked for")
    figures: dict[tuple[Any, ...], list[Figure]] = defaultdict(list)
    for rows, whole in month_rows:
        fields = keys if whole else (*keys, "day")
        for key, figure in Lines(rows, currency=currency).parts(*fields).items():
            if whole or start <= key[-1] <= end:
                figures[key[:len(keys)]].append(figure)
    summed = {key: Figure(gpu_hours=sum((f.gpu_hours for f in found), Decimal(0)),
                          cost=sum((f.cost for f in found), Decimal(0))) for key, found in figures.items()}
    teams = ({a.pk: a for a in Account.objects.filter(pk__in={k[keys.index("account_id")] for k in summed})}
             if "team" in by else {})
    flavor_slugs = (dict(Flavor.objects.filter(pk__in={k[keys.index("flavor_id")] for k in summed}).values_list("pk", "slug"))
                    if "flavor" in by else {})
    zero = Figure(gpu_hours=round_places(0, ROUNDING_HOURS), cost=round_money(0, currency))
    rows = []
    for key, figure in summed.items():
        value = dict(zip(keys, key, strict=True))
        row: dict[str, Any] = {}
        for group in by:
            if group == "team":
                account = teams[value["account_id"]]
                row.update(team=account.slug, team_name=account.name, cost_center=account.cost_center)
            elif group == "flavor":
                row[group] = flavor_slugs[value["flavor_id"]]
            elif group == "person":
                row.update(person=value["owner_username"], person_id=value["owner_key"])
            else:
                row[group] = value[_GROUP_COLUMNS[group][0]]
        row.update(gpu_hours=figure.gpu_hours, cost=figure.cost)
        rows.append(row)
    rows.sort(key=lambda row: tuple(str(row[group]) for group in by))
    total = Figure(gpu_hours=sum((row["gpu_hours"] for row in rows), zero.gpu_hours),
                   cost=sum((row["cost"] for row in rows), zero.cost))
    return UsageReport(start=start, end=end, currency=currency, by=by, rows=rows,
                       total=Line(key="total", label="Total", gpu_hours=total.gpu_hours, cost=total.cost),
                       time_zone=str(periods.billing_zone()))


def _month_rows(*, start: dt.datetime, end: dt.datetime, keys: tuple[str, ...], whole: bool,
                account_ids: list[int]) -> list[dict[str, Any]]:
    """One local month's rollups grouped by `keys` and the line (and the local day, unless the
    month is wanted whole): from the monthly level wherever it holds the hours (`_rollup_sums`),
    when the keys are ones it keeps."""
    fields = tuple(dict.fromkeys((*keys, *LINE_FIELDS)))
    if whole and set(keys) <= _MONTHLY_KEYS:
        return list(_rollup_sums(start=start, end=end, fields=fields, account_ids=account_ids))
    rows = UsageHour.objects.filter(hour__gte=start, hour__lt=end, account_id__in=account_ids)
    if "day" in keys or not whole:
        rows = rows.annotate(day=TruncDate("hour", tzinfo=periods.billing_zone()))
        fields = tuple(dict.fromkeys((*fields, "day")))
    return list(rows.values(*fields).annotate(unit_seconds=Sum("unit_seconds")).order_by())

"""Reads of usage and cost: a team's month (the usage page), a person's month, any grouping over
any local period (the usage API), and whose accounts a user may read.

Every figure reads the hourly rollups in a fixed number of grouped queries (billing.usage.rollups)
and is rounded by billing.money's rule (billing.figures): exact `Fraction`s until shown, rounded
half-even once per team × flavor × rate line as a statement rounds them, so the month-to-date
figure a page shows is the one the statement bills.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.db.models import Q, QuerySet, Subquery, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from billing import ledger, metering, periods
from billing.figures import LINE_FIELDS, Figure, Lines
from billing.models import Account, UsageHour
from billing.money import ROUNDING_HOURS, round_money, round_places
from billing.statements import xid_credits
from billing.usage import efficiency
from billing.usage.forecast import MonthForecast, forecast_window, forecasts
from billing.usage.rollups import MONTHLY_KEYS, Line, gpu_hours_of, line_fields, one_currency, rollup_sums
from billing.usage.workloads import WorkloadLine, top_workloads
from portal.errors import DomainError
from portal.models import User
from tenants.models import Flavor, Team


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


def team_month_cost(*, account: Account, month: dt.date) -> tuple[Decimal, str]:
    """The team's cost so far in the local month holding `month`: the sum of its statement lines,
    each rounded once (billing.money's rule), and its currency (one grouped query).

    Hours metered while a flavor had no rate cost nothing. Usage priced in two currencies is
    refused with a sentence (a statement has one currency).
    """
    start, end = periods.month_bounds(month)
    rows = list(UsageHour.objects.filter(account=account, hour__gte=start, hour__lt=end, rate__isnull=False)
                .values(*line_fields()).annotate(unit_seconds=Sum("unit_seconds")).order_by())
    currency = one_currency({row["rate__currency"] for row in rows}, what=f"{account.name}'s usage")
    return Lines(rows, currency=currency).total().cost, currency


# --- A team's month ------------------------------------------------------------------------------


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


CHART_HEIGHT = 120
CHART_BAR = 18


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


def team_month_usage(*, team: Team, month: dt.date, now: dt.datetime | None = None) -> TeamMonthUsage:
    """Everything the team usage page shows for a local month, in a fixed number of queries:
    by flavor (guaranteed, borrowed), by person, by day and the forecast from one grouped read of
    the month's hourly rollups (`_team_month_rows`), the lent hours, the top workloads."""
    now = now or timezone.now()
    month = periods.month_start(month)
    start, end = periods.month_bounds(month)
    account = account_for_team(team=team)
    rows = _team_month_rows(account_id=account.pk, start=start, end=end, now=now) if account else []
    currencies = {row["rate__currency"] for row in rows if row["rate_id"] is not None}
    currency = one_currency(currencies, what=f"{team.name}'s usage")
    lines = Lines(rows, currency=currency)
    flavor_lines, flavors = _flavor_lines(lines, account=account, start=start, end=end)
    bars = _day_bars(month, {day: figure for (day,), figure in lines.parts("day").items()},
                     Figure(gpu_hours=round_places(0, ROUNDING_HOURS), cost=lines.zero))
    # Only a month under way has a forecast to show: an ended month's would be its total, read twice.
    forecast = (_team_forecast(account=account, month=month, now=now, rows=rows,
                               idle_currency=None if currencies else currency)  # the default currency, read once
                if account and start <= now < end else None)
    metered = _metered_end(start=start, end=end, now=now)
    total = lines.total()
    return TeamMonthUsage(
        team=team, account=account, month=month, currency=currency,
        total=Line(key="total", label="Total", gpu_hours=total.gpu_hours, cost=total.cost),
        by_flavor=flavor_lines, by_person=_person_lines(lines), by_day=bars,
        chart_max=max((bar.gpu_hours for bar in bars), default=Decimal(0)),
        top_workloads=top_workloads(team=team, start=start, end=metered, now=now),
        ledger=_ledger_sentence(month=month, flavor_lines=flavor_lines), forecast=forecast,
        xid_credit=xid_credits.pending(account=account, month=month, now=now, billed=total.cost, currency=currency)
        if account else lines.zero,
        months=periods.recent_months(now=now), metered_until=metered,
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
    clipped_now, window_start = forecast_window(start=start, end=end, now=now)
    return list(UsageHour.objects.filter(account_id=account_id, hour__gte=start, hour__lt=end)
                .annotate(day=TruncDate("hour", tzinfo=periods.billing_zone()))
                .values(*line_fields(*_TEAM_MONTH_KEYS))
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
    fields = line_fields(*keys)
    sums: dict[tuple, int] = defaultdict(int)
    for row in rows:
        if row[measure] is not None and not (priced_only and row["rate_id"] is None):
            sums[tuple(row[field] for field in fields)] += row[measure]
    return [{**dict(zip(fields, key, strict=True)), "unit_seconds": value} for key, value in sums.items()]


def _team_forecast(*, account: Account, month: dt.date, now: dt.datetime, rows: list[dict[str, Any]],
                   idle_currency: str | None) -> MonthForecast:
    """The month's forecast folded out of `_team_month_rows`, as `forecast.month_forecast` reads it."""
    found = forecasts(accounts=[account], month=month, now=now,
                      daily_rows=_summed(rows, ("account_id", "day"), measure="to_now", priced_only=True),
                      recent_rows=_summed(rows, ("account_id",), measure="recent", priced_only=True),
                      idle_currency=idle_currency)[account.pk]
    if isinstance(found, DomainError):
        raise found
    return found


def _flavor_lines(lines: Lines, *, account: Account | None, start: dt.datetime,
                  end: dt.datetime) -> tuple[list[FlavorLine], dict[int, Flavor]]:
    """Each flavor's guaranteed, borrowed and lent hours and cost, by name, and the flavors read."""
    by_flavor = lines.parts("flavor_id", "borrowed")
    lent = ledger.lent(start=start, end=end, account_ids=[account.pk]) if account else {}
    flavors = Flavor.objects.in_bulk({flavor_id for flavor_id, _ in by_flavor} | {flavor_id for _, flavor_id in lent})
    nothing = Figure(gpu_hours=round_places(0, ROUNDING_HOURS), cost=lines.zero)
    flavor_lines: list[FlavorLine] = []
    for flavor_id in sorted(flavors, key=lambda pk: flavors[pk].name):
        guaranteed, borrowed = by_flavor.get((flavor_id, False), nothing), by_flavor.get((flavor_id, True), nothing)
        lent_seconds = sum(value for (_, lent_flavor), value in lent.items() if lent_flavor == flavor_id)
        flavor_lines.append(FlavorLine(
            flavor=flavors[flavor_id], gpu_hours=guaranteed.gpu_hours + borrowed.gpu_hours,
            guaranteed_hours=guaranteed.gpu_hours, borrowed_hours=borrowed.gpu_hours,
            lent_hours=round_places(gpu_hours_of(lent_seconds, flavors[flavor_id]), ROUNDING_HOURS),
            cost=guaranteed.cost + borrowed.cost))
    return flavor_lines, flavors


def _person_lines(lines: Lines) -> list[Line]:
    """Each person's share of the lines, the costliest first."""
    people = sorted(lines.parts("owner_key", "owner_username").items(),
                    key=lambda item: (-item[1].cost, -item[1].gpu_hours, item[0][1], item[0][0] or 0))
    return [Line(key=key[0], label=str(key[1]), gpu_hours=figure.gpu_hours, cost=figure.cost) for key, figure in people]


def _metered_end(*, start: dt.datetime, end: dt.datetime, now: dt.datetime) -> dt.datetime:
    """Where the rollups of a period ending at `end` stop: at the metering watermark (the instant
    the last refresh counted up to), never after now. The top workloads are priced from their
    own intervals and cut here, so a workload's cost agrees with the by-person, by-flavor and
    total figures read from the rollups on the same page, rather than running ahead of them by
    whatever ran since the last refresh (and a run a cluster's clock dates in the future is
    counted by both as far as the portal's clock has reached). Never metered: nothing yet."""
    metered = metering.watermark()
    return start if metered is None else max(start, min(end, now, metered))


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


# --- A person's month ----------------------------------------------------------------------------


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
    currency = one_currency({row["rate__currency"] for row in rows if row["rate_id"] is not None}, what="Your usage")
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
    keys = tuple(column for group in by for column in _GROUP_COLUMNS[group])
    months = _report_months(account_ids=list(accounts.values_list("pk", flat=True)), start=start, end=end, keys=keys)
    currency = one_currency({row["rate__currency"] for rows, _ in months for row in rows if row["rate_id"] is not None},
                            what="The usage asked for")
    figures: dict[tuple[Any, ...], list[Figure]] = defaultdict(list)
    for rows, whole in months:
        fields = keys if whole else (*keys, "day")
        for key, figure in Lines(rows, currency=currency).parts(*fields).items():
            if whole or start <= key[-1] <= end:
                figures[key[:len(keys)]].append(figure)
    summed = {key: Figure(gpu_hours=sum((f.gpu_hours for f in found), Decimal(0)),
                          cost=sum((f.cost for f in found), Decimal(0))) for key, found in figures.items()}
    rows = _report_rows(summed, keys=keys, by=by)
    zero = Figure(gpu_hours=round_places(0, ROUNDING_HOURS), cost=round_money(0, currency))
    return UsageReport(start=start, end=end, currency=currency, by=by, rows=rows,
                       total=Line(key="total", label="Total", gpu_hours=sum((row["gpu_hours"] for row in rows), zero.gpu_hours),
                                  cost=sum((row["cost"] for row in rows), zero.cost)),
                       time_zone=str(periods.billing_zone()))


def _report_months(*, account_ids: list[int], start: dt.date, end: dt.date,
                   keys: tuple[str, ...]) -> list[tuple[list[dict[str, Any]], bool]]:
    """Each local month the days start..end touch: its grouped rows, and whether all of it is asked."""
    begin, _ = periods.day_bounds(start)
    _, finish = periods.day_bounds(end)
    months: list[tuple[list[dict[str, Any]], bool]] = []
    at = periods.month_bounds(periods.local_date(begin))[0]
    while at < finish:
        month_start, month_end = periods.month_bounds(periods.local_date(at))
        whole = begin <= month_start and month_end <= finish
        months.append((_month_rows(start=month_start, end=month_end, keys=keys, whole=whole, account_ids=account_ids),
                       whole))
        at = month_end
    return months


def _report_rows(summed: dict[tuple[Any, ...], Figure], *, keys: tuple[str, ...],
                 by: tuple[str, ...]) -> list[dict[str, Any]]:
    """The report's rows, each group named (a team's slug, name and cost center; a flavor's slug;
    a person's username and id), sorted by the groups."""
    teams = ({a.pk: a for a in Account.objects.filter(pk__in={k[keys.index("account_id")] for k in summed})}
             if "team" in by else {})
    flavor_slugs = (dict(Flavor.objects.filter(pk__in={k[keys.index("flavor_id")] for k in summed}).values_list("pk", "slug"))
                    if "flavor" in by else {})
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
    return rows


def _month_rows(*, start: dt.datetime, end: dt.datetime, keys: tuple[str, ...], whole: bool,
                account_ids: list[int]) -> list[dict[str, Any]]:
    """One local month's rollups grouped by `keys` and the line (and the local day, unless the
    month is wanted whole): from the monthly level wherever it holds the hours (`rollup_sums`),
    when the keys are ones it keeps."""
    fields = line_fields(*keys)
    if whole and set(keys) <= MONTHLY_KEYS:
        return list(rollup_sums(start=start, end=end, fields=fields, account_ids=account_ids))
    rows = UsageHour.objects.filter(hour__gte=start, hour__lt=end, account_id__in=account_ids)
    if "day" in keys or not whole:
        rows = rows.annotate(day=TruncDate("hour", tzinfo=periods.billing_zone()))
        fields = tuple(dict.fromkeys((*fields, "day")))
    return list(rows.values(*fields).annotate(unit_seconds=Sum("unit_seconds")).order_by())

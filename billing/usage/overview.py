"""The finance overview: every account's month with its cost center, GPU-hours, cost, last
month's cost and the change; totals per flavor and the capacity nobody used. A fixed number of
queries whatever the number of teams, none of which reads a month of every team's hourly rows."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, cast

from django.core.cache import cache
from django.db.models import Count, Max

from billing import ledger, money, periods
from billing.models import Account, CapacityHour, GuaranteeHour, IdlePolicy, MeteringState, Rate, UsageHour
from billing.money import ROUNDING_HOURS, SECONDS_PER_HOUR, round_money, round_places
from billing.rates.card import RateCard
from billing.usage.rollups import Line, gpu_hours_of, one_currency, rollup_sums
from portal.collector import collector_paused
from tenants.models import Flavor

OVERVIEW_SORTS = ("team", "cost_center", "gpu_hours", "cost", "change")
OVERVIEW_CACHE_SECONDS = 3600


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
    department: str | None = None  # its team's department's slug
    department_name: str = ""


@dataclass(frozen=True)
class DepartmentLine:
    """The rows of one department's teams summed (slug None: the teams in none, and deleted teams)."""

    slug: str | None
    name: str
    teams: int
    gpu_hours: Decimal
    cost: Decimal
    previous_cost: Decimal
    change: Decimal | None


def department_lines(rows: list[OverviewRow], zero: Decimal, no_hours: Decimal) -> list[DepartmentLine]:
    """Per department, the sum of its rows as shown (so the lines add up to the overview's total);
    none when no row is in a department."""
    if not any(row.department for row in rows):
        return []
    grouped: dict[str | None, list[OverviewRow]] = {}
    for row in rows:
        grouped.setdefault(row.department, []).append(row)
    lines = []
    for slug, members in grouped.items():
        cost, was = sum((r.cost for r in members), zero), sum((r.previous_cost for r in members), zero)
        lines.append(DepartmentLine(
            slug=slug, name=members[0].department_name if slug else "No department",
            teams=sum(1 for r in members if r.team_slug), gpu_hours=sum((r.gpu_hours for r in members), no_hours),
            cost=cost, previous_cost=was, change=percent_change(was, cost)))
    lines.sort(key=lambda line: (line.slug is None, line.name.lower()))
    return lines


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
    departments: list[DepartmentLine]
    flavor_totals: list[Line]
    unallocated: list[UnallocatedLine]
    total: Line
    previous_total: Decimal
    sort: str
    descending: bool
    months: list[dt.date]


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
LineParts = dict[tuple[int, int], dict[bool, int]]  # (fraction numerator, denominator) → borrowed → unit-seconds


def _all_accounts_month(*, start: dt.datetime, end: dt.datetime) -> dict[LineKey, LineParts]:
    """Every account's local month [start, end) by flavor and rate, as integer unit-seconds per
    fraction: the monthly rollup of the complete hours plus the UsageHour rows of the hours after
    them (the open hour), in one statement, so it reads about accounts × flavors rows rather than a
    month of hourly ones, and a refresh committing meanwhile cannot count an hour twice or not at all."""
    lines: dict[LineKey, LineParts] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    for row in rollup_sums(start=start, end=end, fields=(
            "account_id", "flavor_id", "rate_id", "fraction_numerator", "fraction_denominator", "borrowed")):
        lines[(row["account_id"], row["flavor_id"], row["rate_id"])][
            (row["fraction_numerator"], row["fraction_denominator"])][row["borrowed"]] += row["unit_seconds"]
    return lines


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


def _rate(card: RateCard, rate_id: int) -> Rate:
    rate = card.rate(rate_id)
    assert rate is not None  # rollups keep their rate (PROTECT) and the card holds every rate
    return rate


def _line_figures(key: LineKey, fraction: tuple[int, int], unit_seconds: dict[bool, int], card: RateCard,
                  currency: str) -> tuple[Decimal, Decimal]:
    """One statement line's GPU-hours and amount (its borrowed hours at its rate's discount), each
    rounded once (billing.money's rule); hours metered while the flavor had no price cost nothing."""
    numerator, denominator = fraction
    hours = money.round_ratio(sum(unit_seconds.values()) * numerator, denominator * SECONDS_PER_HOUR, ROUNDING_HOURS)
    if key[2] is None:
        return hours, round_money(0, currency)
    rate = _rate(card, key[2])
    return hours, money.rounded_cost(parts={(*fraction, borrowed): seconds for borrowed, seconds in unit_seconds.items()},
                                     price_per_gpu_hour=rate.price_per_gpu_hour, currency=currency,
                                     discount_percent=rate.borrowed_discount_percent)


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


# What the pause buys: at 1,000 teams a request otherwise sets off ~23 collections and now and then
# a full one; benchmarks/billing_pages.py's finance_overview p95 is 94-99 ms with it, 169-185 ms
# without (p50 alike, ~91 ms).
@collector_paused()
def finance_overview(*, month: dt.date, sort: str = "cost", descending: bool = True,
                     now: dt.datetime | None = None) -> FinanceOverview:
    """Every account (teams, and deleted teams that still have hours), with cost center, this
    month's GPU-hours and cost, last month's cost and the change; totals per flavor and the
    unallocated capacity from billing.ledger. A fixed number of queries whatever the number of
    teams, none of which reads a month of every team's hourly rows (see `_all_accounts_month`
    and `ledger.unallocated`); the prices come from one `RateCard`."""
    month = periods.month_start(month)
    start, end = periods.month_bounds(month)
    previous_start, previous_end = periods.month_bounds(month - dt.timedelta(days=1))
    this_month = _all_accounts_month(start=start, end=end)
    before = _all_accounts_month(start=previous_start, end=previous_end)
    card = RateCard.read()
    currency = one_currency({_rate(card, key[2]).currency for key in (*this_month, *before) if key[2] is not None},
                            what="The usage of these months", card=card)
    by_account, by_flavor, last_month = _Sums(), _Sums(), _Sums()
    for key, parts in this_month.items():
        for fraction, unit_seconds in parts.items():
            hours, cost = _line_figures(key, fraction, unit_seconds, card, currency)
            by_account.add(key[0], hours, cost)
            by_flavor.add(key[1], hours, cost)
    for key, parts in before.items():
        for fraction, unit_seconds in parts.items():
            last_month.add(key[0], *_line_figures(key, fraction, unit_seconds, card, currency))
    zero = round_money(0, currency)
    rows = _overview_rows(this_month=by_account, last_month=last_month, zero=zero, sort=sort, descending=descending)
    flavor_totals, unallocated = _flavor_lines(start=start, end=end, by_flavor=by_flavor, zero=zero)
    return FinanceOverview(
        month=month, currency=currency, rows=rows, departments=department_lines(rows, zero, by_account.no_hours),
        flavor_totals=flavor_totals, unallocated=unallocated,
        total=Line(key="total", label="Total", gpu_hours=sum(by_account.hours.values(), by_account.no_hours),
                   cost=sum(by_account.money.values(), zero)),
        previous_total=sum(last_month.money.values(), zero), sort=sort if sort in OVERVIEW_SORTS else "cost",
        descending=descending, months=periods.recent_months(now=now))


def _overview_rows(*, this_month: _Sums, last_month: _Sums, zero: Decimal, sort: str,
                   descending: bool) -> list[OverviewRow]:
    """A row per account with hours in either month (every live team's, even idle), sorted by the
    column asked (cost when it is none of them), ties by name."""
    wanted = set(this_month.hours) | set(last_month.money)
    rows = []
    for account_id, name, cost_center, team_slug, department, department_name in Account.objects.values_list(
            "pk", "name", "cost_center", "team__slug", "team__department__slug", "team__department__name"):
        if team_slug is None and account_id not in wanted:
            continue  # a deleted team's account with no hours in either month
        cost = this_month.money.get(account_id, zero)
        was = last_month.money.get(account_id, zero)
        rows.append(OverviewRow(account_id=account_id, name=name, cost_center=cost_center, team_slug=team_slug,
                                gpu_hours=this_month.hours.get(account_id, this_month.no_hours), cost=cost,
                                previous_cost=was, change=percent_change(was, cost), department=department,
                                department_name=department_name or ""))
    rows.sort(key=lambda row: row.name.lower())
    keys = {"team": lambda r: r.name.lower(), "cost_center": lambda r: r.cost_center.lower(),
            "gpu_hours": lambda r: r.gpu_hours, "cost": lambda r: r.cost,
            "change": lambda r: (r.change is not None, r.change or Decimal(0))}
    rows.sort(key=keys[sort if sort in OVERVIEW_SORTS else "cost"], reverse=descending)
    return rows


def _flavor_lines(*, start: dt.datetime, end: dt.datetime, by_flavor: _Sums,
                  zero: Decimal) -> tuple[list[Line], list[UnallocatedLine]]:
    """Each flavor's total of the month, and the capacity nobody used (billing.ledger), with the
    part shared by guarantee, by flavor name."""
    idle = ledger.unallocated(start=start, end=end)
    shared = _idle_shared(start=start, end=end) if ledger.shared_flavors() else {}
    flavors = Flavor.objects.in_bulk(set(by_flavor.hours) | set(idle))
    unallocated = [UnallocatedLine(
        flavor=flavors[pk], gpu_hours=round_places(gpu_hours_of(idle[pk], flavors[pk]), ROUNDING_HOURS),
        shared_hours=round_places(shared.get(pk, Fraction(0)) * flavors[pk].fraction / SECONDS_PER_HOUR, ROUNDING_HOURS))
        for pk in sorted(idle, key=lambda pk: flavors[pk].name)]
    totals = [Line(key=flavors[pk].slug, label=flavors[pk].name,
                   gpu_hours=by_flavor.hours.get(pk, by_flavor.no_hours), cost=by_flavor.money.get(pk, zero))
              for pk in sorted(flavors, key=lambda pk: flavors[pk].name)]
    return totals, unallocated


def percent_change(was: Decimal, now: Decimal) -> Decimal | None:
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

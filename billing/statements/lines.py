"""A month's statement lines before they are written: one per team × flavor × rate period ×
GPU fraction for the usage (guaranteed and borrowed unit-seconds, the borrowed at the rate's
discount), and per flavor and price the
capacity nobody used (for flavors whose idle policy says share, each team's share of it first).

Amounts are exact until a line is written, rounded half-even to the currency's minor unit once
per line (`Draft.amount`). The prices are the month's, from one `RateCard`.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from django.db.models import Q, Sum

from billing import ledger, periods
from billing.models import Account, CapacityHour, StatementLine, UsageHour
from billing.money import SECONDS_PER_HOUR, borrowed_factor, priced_numerator, round_money
from billing.rates.card import RateCard, RatePeriod
from portal.errors import DomainError
from tenants.models import Flavor

HOURS_PLACES = 6  # GPU-hours shown on a line; the exact figure is its unit-seconds and fraction

UsageKey = tuple[int, int, int | None, int, int]  # account, flavor, rate, fraction numerator, denominator
Window = tuple[dt.datetime, dt.datetime]


@dataclass
class Draft:
    """A line being built: exact quantities, rounded once when it is written."""

    kind: str
    account: Account | None
    flavor: Flavor
    period: RatePeriod
    numerator: int
    denominator: int
    guaranteed: int = 0
    borrowed: int = 0

    def amount(self, currency: str) -> Decimal:
        if self.period.rate is None:
            return round_money(0, currency)
        rate = self.period.rate
        price_numerator, price_denominator = rate.price_per_gpu_hour.as_integer_ratio()
        # Borrowed unit-seconds at the rate's discount (billing.money.borrowed_factor).
        units = self.guaranteed + self.borrowed * borrowed_factor(rate.borrowed_discount_percent)
        priced = priced_numerator(self.numerator, self.denominator)  # a CPU-only unit's price is per unit-hour
        exact = units * Fraction(priced * price_numerator, self.denominator * SECONDS_PER_HOUR * price_denominator)
        return round_money(exact, currency)

    def hours(self, unit_seconds: int) -> Decimal:
        """GPU-hours for display, rounded half-even to 6 places in integers (thousands per close)."""
        quotient, remainder = divmod(unit_seconds * self.numerator * 10**HOURS_PLACES, self.denominator * SECONDS_PER_HOUR)
        twice, divisor = 2 * remainder, self.denominator * SECONDS_PER_HOUR
        if twice > divisor or (twice == divisor and quotient % 2):
            quotient += 1
        return Decimal(quotient).scaleb(-HOURS_PLACES)


def month_drafts(*, start: dt.datetime, end: dt.datetime, card: RateCard) -> tuple[list[Draft], str]:
    """The month's lines, unwritten: usage per team × flavor × rate × fraction, then idle shares
    and unallocated capacity; with the statement's one currency."""
    month = _MonthUsage.read(start=start, end=end, card=card)
    flavors = Flavor.objects.in_bulk(month.flavor_ids())
    accounts = Account.objects.in_bulk({account_id for account_id, *_ in month.lines})
    drafts = [
        Draft(kind=StatementLine.Kind.USAGE, account=accounts[account_id], flavor=flavors[flavor_id],
              period=_period_of(card, flavor_id, rate_id, start=start, end=end),
              numerator=numerator, denominator=denominator, guaranteed=guaranteed, borrowed=borrowed)
        for (account_id, flavor_id, rate_id, numerator, denominator), (guaranteed, borrowed) in month.lines.items()
        if guaranteed or borrowed
    ]
    drafts += _idle_drafts(month=month, flavors=flavors, card=card, start=start, end=end)
    return drafts, _one_currency(drafts, card, flavors, start=start, end=end)


def _idle_bounds(span: RatePeriod, start: dt.datetime, end: dt.datetime) -> Window:
    """The whole hours a price period prices idle capacity for: rollups count whole hours, so a
    price that changed inside an hour prices that hour's idle capacity at the new price."""
    lower = max(periods.hour_floor(span.start), start)
    upper = end if span.end >= end else periods.hour_floor(span.end)
    return lower, upper


@dataclass
class _MonthUsage:
    """The month's rollups, read in one grouped query, and its capacity.

    The usage query groups by team × flavor × rate × GPU fraction: those are the statement's usage
    lines, and summed over teams they are what each flavor used at each price, which capacity
    minus is the unallocated capacity. Both come from the same rows in the same snapshot, so teams
    plus unallocated add up to the capacity even while late hours are still being metered. Only the
    usage of an hour in which a price changed needs a second, tiny read (that hour's rows), because
    its idle capacity goes with the new price.
    """

    lines: dict[UsageKey, tuple[int, int]]
    used: dict[tuple[int, int], int]  # (flavor, index of its price period) -> unit-seconds
    capacity: dict[tuple[int, int], int]

    @classmethod
    def read(cls, *, start: dt.datetime, end: dt.datetime, card: RateCard) -> _MonthUsage:
        lines = _usage_lines(start=start, end=end)
        capacity_rows = list(CapacityHour.objects.filter(hour__gte=start, hour__lt=end)
                             .values_list("flavor_id", "hour", "unit_seconds"))
        flavor_ids = {key[1] for key in lines} | {flavor_id for flavor_id, _, _ in capacity_rows}
        spans = {flavor_id: card.periods(flavor_id, start=start, end=end) for flavor_id in flavor_ids}
        windows = {flavor_id: [_idle_bounds(span, start, end) for span in spans[flavor_id]] for flavor_id in flavor_ids}
        capacity: dict[tuple[int, int], int] = defaultdict(int)
        for flavor_id, hour, units in capacity_rows:
            index = _window_of(windows[flavor_id], hour)
            if index is not None:
                capacity[flavor_id, index] += units
        used: dict[tuple[int, int], int] = defaultdict(int)
        span_index = {(flavor_id, span.rate.pk if span.rate else None): index
                      for flavor_id in flavor_ids for index, span in enumerate(spans[flavor_id])}
        for (_, flavor_id, rate_id, _, _), (guaranteed, borrowed) in lines.items():
            index = span_index.get((flavor_id, rate_id))
            if index is not None:
                used[flavor_id, index] += guaranteed + borrowed
        _move_changeover_hours(used, spans=spans, windows=windows, end=end)
        return cls(lines=lines, used=dict(used), capacity=dict(capacity))

    def flavor_ids(self) -> set[int]:
        return {key[1] for key in self.lines} | {flavor_id for flavor_id, _ in self.capacity}

    def unallocated(self, flavor_id: int, index: int) -> int:
        return max(self.capacity.get((flavor_id, index), 0) - self.used.get((flavor_id, index), 0), 0)


def _usage_lines(*, start: dt.datetime, end: dt.datetime) -> dict[UsageKey, tuple[int, int]]:
    """(guaranteed, borrowed) unit-seconds of the month per team × flavor × rate × fraction: one grouped query."""
    return {
        (account_id, flavor_id, rate_id, numerator, denominator): (guaranteed or 0, borrowed or 0)
        for account_id, flavor_id, rate_id, numerator, denominator, guaranteed, borrowed in (
            UsageHour.objects.filter(hour__gte=start, hour__lt=end)
            .values("account_id", "flavor_id", "rate_id", "fraction_numerator", "fraction_denominator")
            .annotate(guaranteed=Sum("unit_seconds", filter=Q(borrowed=False)),
                      borrowed=Sum("unit_seconds", filter=Q(borrowed=True)))
            .order_by()
            .values_list("account_id", "flavor_id", "rate_id", "fraction_numerator", "fraction_denominator",
                         "guaranteed", "borrowed"))
    }


def _move_changeover_hours(used: dict[tuple[int, int], int], *, spans: dict[int, list[RatePeriod]],
                           windows: dict[int, list[Window]], end: dt.datetime) -> None:
    """An hour in which a price changed holds rows at the old price; its idle capacity belongs to
    the new price's window, so those rows' usage moves there too (one small query, only then)."""
    changeovers = {(flavor_id, span.rate.pk if span.rate else None): index
                   for flavor_id, found in spans.items() for index, span in enumerate(found)
                   if span.end < end and periods.hour_floor(span.end) != span.end}
    if not changeovers:
        return
    hours = {periods.hour_floor(span.end) for found in spans.values() for span in found if span.end < end}
    for flavor_id, rate_id, hour, units in (
            UsageHour.objects.filter(hour__in=hours, flavor_id__in=set(spans)).values("flavor_id", "rate_id", "hour")
            .annotate(units=Sum("unit_seconds")).order_by().values_list("flavor_id", "rate_id", "hour", "units")):
        index = changeovers.get((flavor_id, rate_id))
        if index is not None and windows[flavor_id][index][1] == hour:
            used[flavor_id, index] -= units
            used[flavor_id, index + 1] += units


def _window_of(windows: list[Window], hour: dt.datetime) -> int | None:
    return next((index for index, (lower, upper) in enumerate(windows) if lower <= hour < upper), None)


def _idle_drafts(*, month: _MonthUsage, flavors: dict[int, Flavor], card: RateCard,
                 start: dt.datetime, end: dt.datetime) -> list[Draft]:
    """Per flavor with capacity and per price: each team's share of the idle capacity (for flavors
    whose idle policy shares it, from `billing.ledger.idle_shares`, asked once per distinct window)
    and what stays unallocated."""
    shared: dict[Window, dict[tuple[int, int], Fraction]] = {}
    drafts: list[Draft] = []
    for flavor_id in sorted({flavor_id for flavor_id, _ in month.capacity}):
        for index, period in enumerate(card.periods(flavor_id, start=start, end=end)):
            lower, upper = _idle_bounds(period, start, end)
            if upper <= lower:
                continue
            if (lower, upper) not in shared:
                shared[lower, upper] = ledger.idle_shares(start=lower, end=upper)
            shares = {account_id: units for (account_id, shared_flavor), units in shared[lower, upper].items()
                      if shared_flavor == flavor_id and units}
            drafts += _flavor_idle(flavor=flavors[flavor_id], period=period, unallocated=month.unallocated(flavor_id, index),
                                   shares=shares)
    return drafts


def _flavor_idle(*, flavor: Flavor, period: RatePeriod, unallocated: int, shares: dict[int, Fraction]) -> list[Draft]:
    whole = _whole_shares(shares)
    accounts = Account.objects.in_bulk(list(whole)) if whole else {}
    drafts = [
        Draft(kind=StatementLine.Kind.IDLE_SHARE, account=accounts[account_id], flavor=flavor, period=period,
              numerator=flavor.fraction_numerator, denominator=flavor.fraction_denominator, guaranteed=units)
        for account_id, units in sorted(whole.items()) if units
    ]
    remainder = unallocated - sum(whole.values())
    if remainder > 0:
        drafts.append(Draft(kind=StatementLine.Kind.UNALLOCATED, account=None, flavor=flavor, period=period,
                            numerator=flavor.fraction_numerator, denominator=flavor.fraction_denominator,
                            guaranteed=remainder))
    return drafts


def _whole_shares(shares: dict[int, Fraction]) -> dict[int, int]:
    """Shares in whole unit-seconds that add up to the rounded total exactly (largest remainder,
    ties to the lower account id), so teams plus unallocated still equal the capacity."""
    return ledger.largest_remainder(shares, total=round(sum(shares.values(), Fraction(0))))


def _period_of(card: RateCard, flavor_id: int, rate_id: int | None, *, start: dt.datetime, end: dt.datetime) -> RatePeriod:
    for span in card.periods(flavor_id, start=start, end=end):
        if (span.rate.pk if span.rate else None) == rate_id:
            return span
    # Usage metered at a rate that is not in force this month would be a metering fault; the line
    # still bills it at that rate, over the whole month, rather than dropping hours.
    rate = card.rate(rate_id) if rate_id else None
    assert rate is not None or not rate_id  # the card holds every rate, and rollups keep theirs (PROTECT)
    return RatePeriod(rate=rate, start=start, end=end)


def _one_currency(drafts: list[Draft], card: RateCard, flavors: dict[int, Flavor], *, start: dt.datetime,
                  end: dt.datetime) -> str:
    """The statement's one currency, or a refusal naming the flavors that would mix currencies.

    Every rate in force during the month for a billed flavor counts, not only those with usage."""
    by_flavor: dict[str, set[str]] = defaultdict(set)
    for flavor_id in {draft.flavor.pk for draft in drafts}:
        for span in card.periods(flavor_id, start=start, end=end):
            if span.rate is not None:
                by_flavor[flavors[flavor_id].name].add(span.rate.currency)
    for draft in drafts:
        if draft.period.rate is not None:
            by_flavor[draft.flavor.name].add(draft.period.rate.currency)
    for name, currencies in sorted(by_flavor.items()):
        if len(currencies) > 1:
            raise DomainError(
                f"{name} was priced in {' and '.join(sorted(currencies))} during the month; a statement has one "
                "currency, so the month cannot be closed until its rates agree.", field="month")
    currencies = {next(iter(found)) for found in by_flavor.values()}
    if len(currencies) > 1:
        named = ", ".join(f"{name} in {next(iter(found))}" for name, found in sorted(by_flavor.items()))
        raise DomainError(f"The month's prices are in more than one currency ({named}); a statement has one currency, "
                          "so the month cannot be closed until the rates agree.", field="month")
    return currencies.pop() if currencies else card.default_currency

"""Closing a month into a chargeback statement, and correcting a closed one with adjustments.

`statement_close` reads the month's hourly rollups in one grouped query and writes one line per
team × flavor × rate period (guaranteed and borrowed GPU-hours, the price, the amount rounded
once), a line per flavor for the capacity nobody used (and, for flavors whose idle policy says
share, each team's share of it), then seals the statement: from that moment the database refuses
any change to it. Everything happens in one transaction, so a refusal or a failure leaves nothing.

Amounts are exact `Fraction`s until a line is written, rounded half-even to the currency's minor
unit once per line; totals are sums of rounded lines.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, connection, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from billing import ledger, periods, rate_card, selectors, xid_credits
from billing.models import Account, Adjustment, CapacityHour, Rate, Statement, StatementLine, UsageHour
from billing.money import SECONDS_PER_HOUR, minor_unit, money_input, round_money
from billing.rate_card import RatePeriod
from portal.audit import audit_record
from portal.errors import DomainError, StateConflict
from portal.models import User
from tenants.models import Flavor

HOURS_PLACES = 6  # GPU-hours shown on a line; the exact figure is its unit-seconds and fraction
MAX_ADJUSTMENT_DIGITS = 15  # before the decimal point: a trillion is far beyond any correction


@dataclass
class _Draft:
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
        price_numerator, price_denominator = self.period.rate.price_per_gpu_hour.as_integer_ratio()
        units = self.guaranteed + self.borrowed
        exact = Fraction(units * self.numerator * price_numerator, self.denominator * SECONDS_PER_HOUR * price_denominator)
        return round_money(exact, currency)

    def hours(self, unit_seconds: int) -> Decimal:
        """GPU-hours for display, rounded half-even to 6 places in integers (thousands per close)."""
        quotient, remainder = divmod(unit_seconds * self.numerator * 10**HOURS_PLACES, self.denominator * SECONDS_PER_HOUR)
        twice, divisor = 2 * remainder, self.denominator * SECONDS_PER_HOUR
        if twice > divisor or (twice == divisor and quotient % 2):
            quotient += 1
        return Decimal(quotient).scaleb(-HOURS_PLACES)


def month_label(month: dt.date) -> str:
    return f"{month:%B %Y}"


# --- Closing a month ---------------------------------------------------------------------------


def statement_close(*, actor: User, month: dt.date, now: dt.datetime | None = None) -> Statement:
    """Closes the billing zone's calendar month holding `month` into a sealed statement.

    Refused when the month has not ended, when it is already closed (a second close racing this
    one loses on the unique month and is refused the same way), and when its prices are in more
    than one currency.
    """
    first, start, end = _closable(actor=actor, month=month, now=now or timezone.now())
    now = now or timezone.now()
    try:
        with transaction.atomic():
            statement = _close(actor=actor, first=first, start=start, end=end, now=now)
    except IntegrityError:
        # Another close of the same month committed while this one was writing: theirs stands.
        _refuse_if_closed(first)
        raise
    return statement


def _closable(*, actor: User, month: dt.date, now: dt.datetime) -> tuple[dt.date, dt.datetime, dt.datetime]:
    """The month's first day and bounds, or the refusal: not finance, not ended, already closed."""
    if not actor.has_perm("billing.close_statements"):
        raise PermissionDenied
    first = periods.month_start(month)
    start, end = periods.month_bounds(first)
    if now < end:
        ends_local = end.astimezone(periods.billing_zone())
        raise DomainError(
            f"{month_label(first)} has not ended yet in the billing time zone ({periods.billing_zone().key}): "
            f"it can be closed from {ends_local:%Y-%m-%d %H:%M}.", field="month")
    _refuse_if_closed(first)
    return first, start, end


@dataclass(frozen=True)
class ClosePreview:
    """What closing a month would write, for the confirmation: each team's total, the sum, and
    the unallocated capacity, at the prices in force; XID credits are added as the close writes."""

    month: dt.date
    currency: str
    teams: list[tuple[str, str, Decimal]]  # slug, name, amount of its lines
    lines: int
    charged: Decimal
    unallocated: Decimal

    @property
    def label(self) -> str:
        return month_label(self.month)


def statement_preview(*, actor: User, month: dt.date, now: dt.datetime | None = None) -> ClosePreview:
    """The statement `statement_close` would write for the month now, refused for the same reasons,
    written nowhere."""
    first, start, end = _closable(actor=actor, month=month, now=now or timezone.now())
    drafts, currency, _ = _drafts(start=start, end=end)
    teams: dict[int, tuple[str, str, Decimal]] = {}
    unallocated = round_money(0, currency)
    for draft in drafts:
        amount = draft.amount(currency)
        if draft.account is None:
            unallocated += amount
            continue
        slug, name, total = teams.get(draft.account.pk, (draft.account.slug, draft.account.name, round_money(0, currency)))
        teams[draft.account.pk] = (slug, name, total + amount)
    ordered = sorted(teams.values(), key=lambda team: (team[0], team[1]))
    return ClosePreview(month=first, currency=currency, teams=ordered, lines=len(drafts),
                        charged=sum((team[2] for team in ordered), round_money(0, currency)), unallocated=unallocated)


def _refuse_if_closed(first: dt.date) -> None:
    closed = Statement.objects.filter(month=first).first()
    if closed is not None:
        raise StateConflict(
            f"{month_label(first)} was already closed by {closed.closed_by_name} on {closed.closed_at:%Y-%m-%d %H:%M}; "
            "a closed statement never changes, so correct it with an adjustment.", field="month")


def _close(*, actor: User, first: dt.date, start: dt.datetime, end: dt.datetime, now: dt.datetime) -> Statement:
    # The month's row is written first: a second close of the same month waits here on the unique
    # index until this transaction ends, then fails instead of billing the month twice.
    statement = Statement.objects.create(
        month=first, period_start=start, period_end=end, currency=selectors.DEFAULT_CURRENCY,
        time_zone=periods.billing_zone().key, closed_at=now, closed_by=actor, closed_by_name=actor.username)
    drafts, currency, rate_periods = _drafts(start=start, end=end)
    rows = [_line_row(statement, draft, currency) for draft in drafts]
    _write_lines(rows)
    charged = sum((row["amount"] for row in rows if row["kind"] != StatementLine.Kind.UNALLOCATED), Decimal(0))
    unallocated_total = sum((row["amount"] for row in rows if row["kind"] == StatementLine.Kind.UNALLOCATED), Decimal(0))
    statement.currency = currency
    statement.charged_total = charged + round_money(0, currency)
    statement.unallocated_total = unallocated_total + round_money(0, currency)
    statement.sealed = True
    statement.save(update_fields=["currency", "charged_total", "unallocated_total", "sealed"])
    billed: dict[int, Decimal] = defaultdict(Decimal)
    for row in rows:
        if row["account_id"] is not None:
            billed[row["account_id"]] += row["amount"]
    credits = xid_credits.xid_credits_add(statement=statement, actor=actor, rate_periods=rate_periods, billed=billed)
    audit_record(actor=actor, action="statement.closed", obj=statement,
                 message=f"{actor.username} closed {month_label(first)}: {len(rows)} lines, "
                         f"{statement.charged_total} {currency} charged to teams"
                         + (f", {len(credits)} credits for GPU time after hardware XIDs" if credits else ""),
                 data={"month": statement.slug, "lines": len(rows), "charged_total": str(statement.charged_total),
                       "unallocated_total": str(statement.unallocated_total), "currency": currency})
    return statement


def _drafts(*, start: dt.datetime, end: dt.datetime) -> tuple[list[_Draft], str, dict[int, list[RatePeriod]]]:
    """The month's lines, unwritten: usage per team × flavor × rate × fraction, then idle shares
    and unallocated capacity; with the statement's one currency and the month's price periods."""
    rate_periods = rate_card.rate_periods(start=start, end=end)
    month = _MonthUsage.read(start=start, end=end, rate_periods=rate_periods)
    flavors = Flavor.objects.in_bulk(month.flavor_ids())
    accounts = Account.objects.in_bulk({account_id for account_id, *_ in month.lines})
    drafts = [
        _Draft(kind=StatementLine.Kind.USAGE, account=accounts[account_id], flavor=flavors[flavor_id],
               period=_period_of(rate_periods.get(flavor_id, []), rate_id, start=start, end=end),
               numerator=numerator, denominator=denominator, guaranteed=guaranteed, borrowed=borrowed)
        for (account_id, flavor_id, rate_id, numerator, denominator), (guaranteed, borrowed) in month.lines.items()
        if guaranteed or borrowed
    ]
    drafts += _idle_drafts(month=month, flavors=flavors, rate_periods=rate_periods, start=start, end=end)
    return drafts, _one_currency(drafts, rate_periods, flavors), rate_periods


def _idle_bounds(span: RatePeriod, start: dt.datetime, end: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The whole hours a price period prices idle capacity for: rollups count whole hours, so a
    price that changed inside an hour prices that hour's idle capacity at the new price."""
    lower = max(periods.hour_floor(span.start), start)
    upper = end if span.end >= end else periods.hour_floor(span.end)
    return lower, upper


def _spans(rate_periods: dict[int, list[RatePeriod]], flavor_id: int, start: dt.datetime,
           end: dt.datetime) -> list[RatePeriod]:
    return rate_periods.get(flavor_id) or [RatePeriod(rate=None, start=start, end=end)]


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

    lines: dict[tuple[int, int, int | None, int, int], tuple[int, int]]
    used: dict[tuple[int, int], int]  # (flavor, index of its price period) -> unit-seconds
    capacity: dict[tuple[int, int], int]

    @classmethod
    def read(cls, *, start: dt.datetime, end: dt.datetime, rate_periods: dict[int, list[RatePeriod]]) -> _MonthUsage:
        month = {"hour__gte": start, "hour__lt": end}
        lines: dict[tuple[int, int, int | None, int, int], tuple[int, int]] = {
            (account_id, flavor_id, rate_id, numerator, denominator): (guaranteed or 0, borrowed or 0)
            for account_id, flavor_id, rate_id, numerator, denominator, guaranteed, borrowed in (
                UsageHour.objects.filter(**month)
                .values("account_id", "flavor_id", "rate_id", "fraction_numerator", "fraction_denominator")
                .annotate(guaranteed=Sum("unit_seconds", filter=Q(borrowed=False)),
                          borrowed=Sum("unit_seconds", filter=Q(borrowed=True)))
                .order_by()
                .values_list("account_id", "flavor_id", "rate_id", "fraction_numerator", "fraction_denominator",
                             "guaranteed", "borrowed"))
        }
        flavor_ids = {key[1] for key in lines}
        capacity: dict[tuple[int, int], int] = defaultdict(int)
        capacity_rows = list(CapacityHour.objects.filter(**month).values_list("flavor_id", "hour", "unit_seconds"))
        flavor_ids |= {flavor_id for flavor_id, _, _ in capacity_rows}
        windows = {flavor_id: [_idle_bounds(span, start, end) for span in _spans(rate_periods, flavor_id, start, end)]
                   for flavor_id in flavor_ids}
        for flavor_id, hour, units in capacity_rows:
            index = _window_of(windows[flavor_id], hour)
            if index is not None:
                capacity[flavor_id, index] += units
        used: dict[tuple[int, int], int] = defaultdict(int)
        span_index = {(flavor_id, span.rate.pk if span.rate else None): index
                      for flavor_id in flavor_ids for index, span in enumerate(_spans(rate_periods, flavor_id, start, end))}
        for (_, flavor_id, rate_id, _, _), (guaranteed, borrowed) in lines.items():
            index = span_index.get((flavor_id, rate_id))
            if index is not None:
                used[flavor_id, index] += guaranteed + borrowed
        # An hour in which a price changed holds rows at the old price; its idle capacity belongs to
        # the new price's window, so those rows' usage moves there too.
        changeovers = {(flavor_id, span.rate.pk if span.rate else None): index
                       for flavor_id in flavor_ids
                       for index, span in enumerate(_spans(rate_periods, flavor_id, start, end))
                       if span.end < end and periods.hour_floor(span.end) != span.end}
        if changeovers:
            hours = {periods.hour_floor(span.end) for flavor_id in flavor_ids
                     for span in _spans(rate_periods, flavor_id, start, end) if span.end < end}
            for flavor_id, rate_id, hour, units in (
                    UsageHour.objects.filter(hour__in=hours, flavor_id__in=flavor_ids).values("flavor_id", "rate_id", "hour")
                    .annotate(units=Sum("unit_seconds")).order_by().values_list("flavor_id", "rate_id", "hour", "units")):
                index = changeovers.get((flavor_id, rate_id))
                if index is not None and windows[flavor_id][index][1] == hour:
                    used[flavor_id, index] -= units
                    used[flavor_id, index + 1] += units
        return cls(lines=lines, used=dict(used), capacity=dict(capacity))

    def flavor_ids(self) -> set[int]:
        return {key[1] for key in self.lines} | {flavor_id for flavor_id, _ in self.capacity}

    def unallocated(self, flavor_id: int, index: int) -> int:
        return max(self.capacity.get((flavor_id, index), 0) - self.used.get((flavor_id, index), 0), 0)


def _window_of(windows: list[tuple[dt.datetime, dt.datetime]], hour: dt.datetime) -> int | None:
    return next((index for index, (lower, upper) in enumerate(windows) if lower <= hour < upper), None)


def _idle_drafts(*, month: _MonthUsage, flavors: dict[int, Flavor], rate_periods: dict[int, list[RatePeriod]],
                 start: dt.datetime, end: dt.datetime) -> list[_Draft]:
    """Per flavor with capacity and per price: each team's share of the idle capacity (for flavors
    whose idle policy shares it, from `billing.ledger.idle_shares`, asked once per distinct window)
    and what stays unallocated."""
    shared: dict[tuple[dt.datetime, dt.datetime], dict[tuple[int, int], Fraction]] = {}
    drafts: list[_Draft] = []
    for flavor_id in sorted({flavor_id for flavor_id, _ in month.capacity}):
        for index, period in enumerate(_spans(rate_periods, flavor_id, start, end)):
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


def _flavor_idle(*, flavor: Flavor, period: RatePeriod, unallocated: int, shares: dict[int, Fraction]) -> list[_Draft]:
    whole = _whole_shares(shares)
    accounts = Account.objects.in_bulk(list(whole)) if whole else {}
    drafts = [
        _Draft(kind=StatementLine.Kind.IDLE_SHARE, account=accounts[account_id], flavor=flavor, period=period,
               numerator=flavor.fraction_numerator, denominator=flavor.fraction_denominator, guaranteed=units)
        for account_id, units in sorted(whole.items()) if units
    ]
    remainder = unallocated - sum(whole.values())
    if remainder > 0:
        drafts.append(_Draft(kind=StatementLine.Kind.UNALLOCATED, account=None, flavor=flavor, period=period,
                             numerator=flavor.fraction_numerator, denominator=flavor.fraction_denominator,
                             guaranteed=remainder))
    return drafts


def _whole_shares(shares: dict[int, Fraction]) -> dict[int, int]:
    """Shares in whole unit-seconds that add up to the rounded total exactly (largest remainder,
    ties to the lower account id), so teams plus unallocated still equal the capacity."""
    return ledger.largest_remainder(shares, total=round(sum(shares.values(), Fraction(0))))


def _period_of(spans: list[RatePeriod], rate_id: int | None, *, start: dt.datetime, end: dt.datetime) -> RatePeriod:
    for span in spans:
        if (span.rate.pk if span.rate else None) == rate_id:
            return span
    # Usage metered at a rate that is not in force this month would be a metering fault; the line
    # still bills it at that rate, over the whole month, rather than dropping hours.
    return RatePeriod(rate=Rate.objects.get(pk=rate_id) if rate_id else None, start=start, end=end)


def _one_currency(drafts: list[_Draft], rate_periods: dict[int, list[RatePeriod]], flavors: dict[int, Flavor]) -> str:
    """The statement's one currency, or a refusal naming the flavors that would mix currencies.

    Every rate in force during the month for a billed flavor counts, not only those with usage."""
    by_flavor: dict[str, set[str]] = defaultdict(set)
    for flavor_id in {draft.flavor.pk for draft in drafts}:
        for span in rate_periods.get(flavor_id, []):
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
    if currencies:
        return currencies.pop()
    return selectors.default_currency()


_LINE_COLUMNS = ["statement_id", "kind", "account_id", "account_slug", "account_name", "cost_center", "flavor_id",
                 "flavor_slug", "flavor_name", "rate_id", "period_start", "period_end", "fraction_numerator",
                 "fraction_denominator", "guaranteed_unit_seconds", "borrowed_unit_seconds", "guaranteed_gpu_hours",
                 "borrowed_gpu_hours", "price_per_gpu_hour", "amount"]


def _line_row(statement: Statement, draft: _Draft, currency: str) -> dict[str, Any]:
    account = draft.account
    rate = draft.period.rate
    return {
        "statement_id": statement.pk, "kind": str(draft.kind), "account_id": account.pk if account else None,
        "account_slug": account.slug if account else "", "account_name": account.name if account else "",
        "cost_center": account.cost_center if account else "",
        "flavor_id": draft.flavor.pk, "flavor_slug": draft.flavor.slug, "flavor_name": draft.flavor.name,
        "rate_id": rate.pk if rate else None, "period_start": draft.period.start, "period_end": draft.period.end,
        "fraction_numerator": draft.numerator, "fraction_denominator": draft.denominator,
        "guaranteed_unit_seconds": draft.guaranteed, "borrowed_unit_seconds": draft.borrowed,
        "guaranteed_gpu_hours": draft.hours(draft.guaranteed), "borrowed_gpu_hours": draft.hours(draft.borrowed),
        "price_per_gpu_hour": rate.price_per_gpu_hour if rate else None, "amount": draft.amount(currency),
    }


def _write_lines(rows: list[dict[str, Any]]) -> None:
    """PostgreSQL takes the lines by COPY (thousands a month, in one round trip); elsewhere bulk_create."""
    if connection.vendor == "postgresql":
        table = connection.ops.quote_name(StatementLine._meta.db_table)
        columns = ", ".join(connection.ops.quote_name(column) for column in _LINE_COLUMNS)
        with connection.cursor() as cursor, cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([row[column] for column in _LINE_COLUMNS])
        return
    StatementLine.objects.bulk_create([StatementLine(**row) for row in rows], batch_size=2000)


# --- Adjustments -------------------------------------------------------------------------------


@transaction.atomic
def adjustment_add(*, actor: User, statement: Statement, account: Account, amount: Any, reason: str) -> Adjustment:
    """A correction on a closed statement: a charge, or a credit when negative. The statement's
    lines never change; its total charged is its lines plus its adjustments."""
    if not actor.has_perm("billing.close_statements"):
        raise PermissionDenied
    statement = Statement.objects.select_for_update().get(pk=statement.pk)
    if not statement.sealed:
        raise StateConflict("This statement is still being closed; add the adjustment once it is.")
    reason = (reason or "").strip()
    if not reason:
        raise DomainError("An adjustment needs a reason: say what it corrects, e.g. “GPU node 7 was broken on the 12th”.",
                          field="reason")
    value = parse_amount(amount, currency=statement.currency)
    adjustment = Adjustment.objects.create(
        statement=statement, account=account, account_slug=account.slug, account_name=account.name,
        cost_center=account.cost_center, amount=value, reason=reason, created_by=actor, created_by_name=actor.username)
    kind = "credit" if value < 0 else "charge"
    audit_record(actor=actor, action="statement.adjusted", obj=adjustment, team_id=account.team_id,
                 message=f"{actor.username} added a {kind} of {value} {statement.currency} for {account.slug} to "
                         f"{statement.label}: {reason}",
                 data={"month": statement.slug, "amount": str(value), "account": account.slug})
    return adjustment


def parse_amount(amount: Any, *, currency: str) -> Decimal:
    """An amount of money as typed, or a refusal that says what is wrong with it."""
    places = minor_unit(currency)
    value = money_input(amount, column=Adjustment._meta.get_field("amount"), field="amount", noun="amount",
                        example=f"{'-120.50' if places else '-120'} (negative for a credit)", places=places,
                        unit=f" in {currency}", most=Decimal(10**MAX_ADJUSTMENT_DIGITS) - Decimal(1).scaleb(-places))
    if value == 0:
        raise DomainError("An adjustment of zero changes nothing; give the amount to charge, or a negative credit.",
                          field="amount")
    return value.quantize(Decimal(1).scaleb(-places))

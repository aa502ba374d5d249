"""Closing a month into a chargeback statement, and correcting a closed one with adjustments.

`statement_close` writes the month's lines (billing.statements.lines: one per team × flavor ×
rate period, guaranteed and borrowed GPU-hours, the price, the amount rounded once; a line per
flavor for the capacity nobody used and, for flavors whose idle policy says share, each team's
share of it), then seals the statement: from that moment the database refuses any change to it,
and credits GPU time lost to hardware XIDs (billing.statements.xid_credits) as adjustments.
Everything happens in one transaction, so a refusal or a failure leaves nothing. Totals are sums
of rounded lines.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from billing import energy, periods
from billing.models import Account, Adjustment, Statement, StatementEnergy, StatementLine
from billing.money import minor_unit, money_input, round_money
from billing.rates.card import DEFAULT_CURRENCY, RateCard
from billing.statements import xid_credits
from billing.statements.lines import Draft, month_drafts
from portal.audit import audit_record
from portal.errors import DomainError, StateConflict
from portal.models import User

MAX_ADJUSTMENT_DIGITS = 15  # before the decimal point: a trillion is far beyond any correction


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
    drafts, currency = month_drafts(start=start, end=end, card=RateCard.read())
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
        month=first, period_start=start, period_end=end, currency=DEFAULT_CURRENCY,
        time_zone=periods.billing_zone().key, closed_at=now, closed_by=actor, closed_by_name=actor.username)
    card = RateCard.read()  # the month's prices, for its lines and its credits alike
    Account.follow_departments()  # the lines keep each team's department as it is at close
    drafts, currency = month_drafts(start=start, end=end, card=card)
    rows = [_line_row(statement, draft, currency) for draft in drafts]
    _write_lines(rows)
    charged = sum((row["amount"] for row in rows if row["kind"] != StatementLine.Kind.UNALLOCATED), Decimal(0))
    unallocated_total = sum((row["amount"] for row in rows if row["kind"] == StatementLine.Kind.UNALLOCATED), Decimal(0))
    power = _write_energy(statement, start=start, end=end)
    statement.currency = currency
    statement.charged_total = charged + round_money(0, currency)
    statement.unallocated_total = unallocated_total + round_money(0, currency)
    statement.sealed = True
    statement.save(update_fields=["currency", "charged_total", "unallocated_total", "sealed"])
    billed: dict[int, Decimal] = defaultdict(Decimal)
    for row in rows:
        if row["account_id"] is not None:
            billed[row["account_id"]] += row["amount"]
    credits = xid_credits.xid_credits_add(statement=statement, actor=actor, card=card, billed=billed)
    audit_record(actor=actor, action="statement.closed", obj=statement,
                 message=f"{actor.username} closed {month_label(first)}: {len(rows)} lines, "
                         f"{statement.charged_total} {currency} charged to teams"
                         + (f", {len(credits)} credits for GPU time after hardware XIDs" if credits else ""),
                 data={"month": statement.slug, "lines": len(rows), "charged_total": str(statement.charged_total),
                       "unallocated_total": str(statement.unallocated_total), "currency": currency,
                       "energy_kwh": str(power.kwh)})
    return statement


def _write_energy(statement: Statement, *, start: dt.datetime, end: dt.datetime) -> energy.Energy:
    """Each team's metered GPU energy in the month, copied onto the statement before it is sealed."""
    power = energy.energy_report(start=start, end=end)
    if power.through is not None:
        StatementEnergy.objects.bulk_create(
            StatementEnergy(statement=statement, account_id=team.account_id, account_slug=team.slug,
                            watt_hours=team.watt_hours, kwh=team.kwh, emission_factor=power.factor,
                            kg_co2e=team.kg_co2e, metered_through=power.through) for team in power.teams)
    return power


_LINE_COLUMNS = ["statement_id", "kind", "account_id", "account_slug", "account_name", "cost_center", "department",
                 "flavor_id",
                 "flavor_slug", "flavor_name", "rate_id", "period_start", "period_end", "fraction_numerator",
                 "fraction_denominator", "guaranteed_unit_seconds", "borrowed_unit_seconds", "guaranteed_gpu_hours",
                 "borrowed_gpu_hours", "price_per_gpu_hour", "borrowed_discount_percent", "amount"]


def _line_row(statement: Statement, draft: Draft, currency: str) -> dict[str, Any]:
    account = draft.account
    rate = draft.period.rate
    return {
        "statement_id": statement.pk, "kind": str(draft.kind), "account_id": account.pk if account else None,
        "account_slug": account.slug if account else "", "account_name": account.name if account else "",
        "cost_center": account.cost_center if account else "", "department": account.department if account else "",
        "flavor_id": draft.flavor.pk, "flavor_slug": draft.flavor.slug, "flavor_name": draft.flavor.name,
        "rate_id": rate.pk if rate else None, "period_start": draft.period.start, "period_end": draft.period.end,
        "fraction_numerator": draft.numerator, "fraction_denominator": draft.denominator,
        "guaranteed_unit_seconds": draft.guaranteed, "borrowed_unit_seconds": draft.borrowed,
        "guaranteed_gpu_hours": draft.hours(draft.guaranteed), "borrowed_gpu_hours": draft.hours(draft.borrowed),
        "price_per_gpu_hour": rate.price_per_gpu_hour if rate else None,
        "borrowed_discount_percent": rate.borrowed_discount_percent if rate else 0, "amount": draft.amount(currency),
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
    # It sits with the team's lines: under the department they were closed in, not one made since.
    closed_in = StatementLine.objects.filter(statement=statement, account=account).values_list("department", flat=True).first()
    adjustment = Adjustment.objects.create(
        statement=statement, account=account, account_slug=account.slug, account_name=account.name,
        cost_center=account.cost_center, department=account.department if closed_in is None else closed_in, amount=value,
        reason=reason, created_by=actor, created_by_name=actor.username)
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

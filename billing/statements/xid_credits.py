"""Credits for GPU time lost to a broken GPU: a pod's time on its GPUs after a hardware XID
(jobs.models.GpuXidEvent) is not billed. Closing a month adds, per pod with such time in the
month, one credit adjustment on the statement (a negative amount at the prices then in force),
so the statement's lines stay the metered usage and the credit is a visible correction.

Each pod-second is credited at most once: a pod's credit is the union of its hardware XIDs'
aftermaths, [its first hardware XID, its end), however many XIDs on however many of its GPUs
followed; a month credits only its own part of that time, and a statement is closed once. A team is
never credited more than its lines bill in the month. The team usage page shows the credits a
month under way has gathered (`pending`), which closing the month applies."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction

from billing import periods
from billing.models import Account, Adjustment, Statement
from billing.money import SECONDS_PER_HOUR, cost, round_money
from billing.rates.card import RateCard
from billing.usage.workloads import borrowed_pieces
from jobs.models import GpuXidEvent, RunInterval, RunIntervalSwitch
from portal.metrics.xid import xid_meaning
from portal.models import User


def xid_credits(
    *, start: dt.datetime, end: dt.datetime, card: RateCard | None = None,
    account_ids: set[int] | None = None, now: dt.datetime | None = None,
) -> list[tuple[Account, Fraction, str]]:
    """(account, exact credit, reason) for each pod with billable time in [start, end) after its
    first hardware XID; only the accounts asked for, when given. An interval still open counts to
    `now` (or `end`). The prices are the rate card's (`card`, read here when not given and only
    when some GPU failed)."""
    events = list(GpuXidEvent.objects.filter(hardware=True, at__lt=end).order_by("at", "id"))
    if not events:
        return []
    if card is None:
        card = RateCard.read()
    first: dict[tuple[int | None, str], GpuXidEvent] = {}
    codes: dict[tuple[int | None, str], list[str]] = defaultdict(list)
    for event in events:
        first.setdefault((event.workload_id, event.pod_name), event)
        codes[(event.workload_id, event.pod_name)].append(f"XID {event.code} on {event.gpu}")
    intervals = {(i.workload_id, i.pod_name): i for i in RunInterval.objects.filter(pod_name__in={e.pod_name for e in events})}
    switches: dict[int, list[tuple[dt.datetime, bool]]] = defaultdict(list)
    for interval_id, at, borrowed in RunIntervalSwitch.objects.filter(
            interval_id__in=[i.pk for i in intervals.values()]).order_by("at", "pk").values_list("interval_id", "at", "borrowed"):
        switches[interval_id].append((at, borrowed))
    accounts = {a.team_uid: a for a in Account.objects.filter(team_uid__in={i.team_uid for i in intervals.values()})}
    credits = []
    for key, event in first.items():
        interval = intervals.get(key)
        if interval is None or interval.team_uid not in accounts:
            continue
        account = accounts[interval.team_uid]
        if account_ids is not None and account.pk not in account_ids:
            continue
        unit_seconds, exact = _priced_time(interval, card, switches.get(interval.pk, []),
                                           start=max(event.at, interval.started_at, start),
                                           end=min(interval.ended_at or now or end, end))
        if exact > 0:
            credits.append((account, exact, _reason(interval, event, unit_seconds, codes[key])))
    return credits


def _priced_time(interval: RunInterval, card: RateCard, switches: list[tuple[dt.datetime, bool]], *, start: dt.datetime,
                 end: dt.datetime) -> tuple[int, Fraction]:
    """The interval's unit-seconds in [start, end), whole seconds per price period, and their exact
    cost at the prices then (borrowed seconds at the rate's discount, as they were billed)."""
    exact, unit_seconds = Fraction(0), 0
    for lower, upper, borrowed in borrowed_pieces(start, end, interval.borrowed, switches):
        for span in card.periods(interval.flavor_id, start=lower, end=upper):
            seconds = int((span.end - span.start).total_seconds())
            if seconds <= 0:
                continue
            unit_seconds += seconds * interval.units
            if span.rate is not None:
                exact += cost(unit_seconds=seconds * interval.units, numerator=interval.fraction_numerator,
                              denominator=interval.fraction_denominator, price_per_gpu_hour=span.rate.price_per_gpu_hour,
                              borrowed=borrowed, discount_percent=span.rate.borrowed_discount_percent)
    return unit_seconds, exact


def _reason(interval: RunInterval, event: GpuXidEvent, unit_seconds: int, seen: list[str]) -> str:
    hours = Fraction(unit_seconds * interval.fraction_numerator, interval.fraction_denominator * SECONDS_PER_HOUR)
    return (f"Credit: {float(hours):.2f} GPU-hours of pod {interval.pod_name} (workload #{event.workload_id}) "
            f"after XID {event.code} on {event.gpu} at {event.at:%Y-%m-%d %H:%M} UTC: {xid_meaning(event.code)}"
            + (f" (then {len(seen) - 1} more: {', '.join(seen[1:4])}{'…' if len(seen) > 4 else ''})"
               if len(seen) > 1 else ""))


def capped(credits: list[tuple[Account, Fraction, str]], *, billed: dict[int, Decimal],
           currency: str) -> list[tuple[Account, Decimal, str]]:
    """The credits as rounded negative amounts, none making a team's credits exceed what its lines
    bill (`billed`, per account): a credit that would is cut to what is left, and says so."""
    left = dict(billed)
    result = []
    for account, exact, reason in credits:
        amount = round_money(exact, currency)
        room = left.get(account.pk, Decimal(0))
        if amount > room:
            amount, reason = room, reason + f"; cut to {room} {currency}, what is left of the month's bill"
        if amount <= 0:
            continue
        left[account.pk] = room - amount
        result.append((account, -amount, reason))
    return result


def xid_credits_add(*, statement: Statement, actor: User, card: RateCard,
                    billed: dict[int, Decimal]) -> list[Adjustment]:
    """The month's XID credits as adjustments on its (sealed) statement, rounded once each and
    never more, per team, than its lines bill (`billed`, per account)."""
    rows = []
    credits = xid_credits(start=statement.period_start, end=statement.period_end, card=card)
    for account, amount, reason in capped(credits, billed=billed, currency=statement.currency):
        rows.append(Adjustment(statement=statement, account=account, account_slug=account.slug, account_name=account.name,
                               cost_center=account.cost_center, department=account.department, amount=amount,
                               reason=reason, created_by=actor, created_by_name=actor.username))
    return Adjustment.objects.bulk_create(rows)


def pending(*, account: Account, month: dt.date, now: dt.datetime, billed: Decimal, currency: str) -> Decimal:
    """What closing the month would credit the team so far for GPU time after hardware XIDs (zero
    or less), against `billed`, what its lines bill so far. One query when no GPU failed."""
    start, end = periods.month_bounds(month)
    if now <= start:
        return round_money(0, currency)
    credits = xid_credits(start=start, end=min(end, now), account_ids={account.pk}, now=now)
    return sum((amount for _, amount, _ in capped(credits, billed={account.pk: billed}, currency=currency)),
               round_money(0, currency))

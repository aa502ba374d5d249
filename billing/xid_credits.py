"""Credits for GPU time lost to a broken GPU: a pod's time on a GPU after a hardware XID
(jobs.models.GpuXidEvent) is not billed. Closing a month adds, per event with such time in the
month, one credit adjustment on the statement (a negative amount at the prices then in force),
so the statement's lines stay the metered usage and the credit is a visible correction.

Each second is credited once: a month credits only its own part of the time after the event,
and a statement is closed once."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from fractions import Fraction
from typing import Any

from billing.models import Account, Adjustment, Statement
from billing.money import SECONDS_PER_HOUR, cost, round_money
from jobs.models import GpuXidEvent, RunInterval
from portal.metrics.xid import xid_meaning
from portal.models import User


def xid_credits(
    *, start: dt.datetime, end: dt.datetime, rate_periods: dict[int, list[Any]]
) -> list[tuple[Account, Fraction, str]]:
    """(account, exact credit, reason) for each hardware XID with billable time in [start, end)."""
    events = list(GpuXidEvent.objects.filter(hardware=True, at__lt=end))
    if not events:
        return []
    intervals = {(i.workload_id, i.pod_name): i for i in RunInterval.objects.filter(pod_name__in={e.pod_name for e in events})}
    accounts = {a.team_uid: a for a in Account.objects.filter(team_uid__in={i.team_uid for i in intervals.values()})}
    credits = []
    for event in events:
        interval = intervals.get((event.workload_id, event.pod_name))
        if interval is None or interval.team_uid not in accounts:
            continue
        lower = max(event.at, interval.started_at, start)
        upper = min(interval.ended_at or end, end)
        exact, unit_seconds = Fraction(0), 0
        for span in rate_periods.get(interval.flavor_id, []):
            seconds = int((min(upper, span.end) - max(lower, span.start)).total_seconds())
            if seconds <= 0:
                continue
            unit_seconds += seconds * interval.units
            if span.rate is not None:
                exact += cost(unit_seconds=seconds * interval.units, numerator=interval.fraction_numerator,
                              denominator=interval.fraction_denominator, price_per_gpu_hour=span.rate.price_per_gpu_hour)
        if exact <= 0:
            continue
        hours = Fraction(unit_seconds * interval.fraction_numerator, interval.fraction_denominator * SECONDS_PER_HOUR)
        reason = (f"Credit: {float(hours):.2f} GPU-hours of pod {interval.pod_name} (workload #{event.workload_id}) "
                  f"after XID {event.code} on {event.gpu} at {event.at:%Y-%m-%d %H:%M} UTC: {xid_meaning(event.code)}")
        credits.append((accounts[interval.team_uid], exact, reason))
    return credits


def xid_credits_add(*, statement: Statement, actor: User, rate_periods: dict[int, list[Any]]) -> list[Adjustment]:
    """The month's XID credits as adjustments on its (sealed) statement, rounded once each."""
    rows = []
    for account, exact, reason in xid_credits(start=statement.period_start, end=statement.period_end,
                                              rate_periods=rate_periods):
        amount = -round_money(exact, statement.currency)
        if amount == Decimal(0):
            continue
        rows.append(Adjustment(statement=statement, account=account, account_slug=account.slug, account_name=account.name,
                               cost_center=account.cost_center, amount=amount, reason=reason, created_by=actor,
                               created_by_name=actor.username))
    return Adjustment.objects.bulk_create(rows)

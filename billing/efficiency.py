"""Allocated vs busy GPU time for a team's month: what its pods held (the usage rollups, in
unit-hours) against what their GPUs did (engine active from telemetry, in device-hours: a GPU or
MIG instance 50 % busy for two hours is one busy hour), so a lead sees what idle GPUs cost.

Only hours telemetry covered are judged: an hour the exporter did not report (it was down, the
pod ran before telemetry was set up) is neither busy nor idle, so efficiency is busy over covered
hours, the page says how much of the allocated time that is, and the idle cost is priced on the
covered share alone.

Two queries whatever the team's size: one aggregate over the rollups (none when the caller
read the allocated time already), one metrics query.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Sum
from django.utils import timezone

from billing import periods
from billing.models import Account, UsageHour
from portal.metrics import MetricsError, metrics
from tenants.models import Team


@dataclass(frozen=True)
class Efficiency:
    allocated_hours: float  # unit-hours the team's pods held (metered)
    busy_hours: float | None  # device-hours their GPUs were busy; None: no metrics
    cost: Decimal
    covered_hours: float = 0.0  # device-hours telemetry reported at all
    unavailable: str = ""

    @property
    def percent(self) -> float | None:
        """Busy share of the hours telemetry covered."""
        if self.busy_hours is None or not self.covered_hours:
            return None
        return min(100.0, 100 * self.busy_hours / self.covered_hours)

    @property
    def coverage(self) -> float | None:
        """The share of allocated hours telemetry covered, in percent."""
        if self.busy_hours is None or not self.allocated_hours:
            return None
        return min(100.0, 100 * self.covered_hours / self.allocated_hours)

    @property
    def idle_cost(self) -> Decimal | None:
        """The cost of the covered hours times the share of them the GPUs sat idle."""
        if self.percent is None or self.coverage is None:
            return None
        return (self.cost * Decimal(self.coverage / 100) * Decimal(1 - self.percent / 100)).quantize(Decimal("0.01"))


def team_month_efficiency(*, team: Team, account: Account | None, month: dt.date, cost: Decimal,
                          now: dt.datetime | None = None, allocated_unit_seconds: int | None = None) -> Efficiency:
    """`allocated_unit_seconds`, when the caller read them already (the team usage page's grouped
    read), spares the aggregate over the rollups."""
    start, end = periods.month_bounds(periods.month_start(month))
    end = min(end, now or timezone.now())
    if allocated_unit_seconds is not None:
        seconds = allocated_unit_seconds
    elif account is not None:
        seconds = (UsageHour.objects.filter(account=account, hour__gte=start, hour__lt=end)
                   .aggregate(total=Sum("unit_seconds"))["total"] or 0)
    else:
        seconds = 0
    allocated = seconds / 3600
    if end <= start:
        return Efficiency(allocated, None, cost, unavailable="The month has not begun.")
    try:
        hours = metrics().device_hours(namespaces=[team.namespace], start=start, end=end).get(team.namespace)
    except MetricsError as error:
        return Efficiency(allocated, None, cost, unavailable=f"Telemetry could not be read: {error}.")
    if hours is None or not hours.covered:
        return Efficiency(allocated, None, cost, unavailable="No GPU metrics for this month.")
    return Efficiency(allocated, hours.busy, cost, covered_hours=hours.covered)

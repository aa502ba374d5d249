"""Allocated vs busy GPU time for a team's month: what its pods held (the usage rollups) against
what their GPUs did (engine active from telemetry), both in device-hours (a GPU or MIG instance 50 %
busy for two hours is one busy hour; a pod holding all 16 GiB of a memory-sliced T4 for two hours
held two device-hours, not 32 GiB-hours), so a lead sees what idle GPUs cost. A team mixing
flavors sums like with like: each flavor's units count as the part of a device one unit is
(`Flavor.unit_is_a_device`).

Only hours telemetry covered are judged: an hour the exporter did not report (it was down, the
pod ran before telemetry was set up) is neither busy nor idle, so efficiency is busy over covered
hours, the page says how much of the allocated time that is, and the idle cost is priced on the
covered share alone.

The percent is a headline only over enough of the allocated time (COVERAGE_FLOOR): 87 % busy on
0.2 of 607.7 allocated device-hours says nothing about the team.

Two queries whatever the team's size: one grouped aggregate over the rollups (none when the caller
read the allocated time already), one metrics query.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from django.db.models import Sum
from django.utils import timezone

from billing import periods
from billing.models import Account, UsageHour
from portal.metrics import MetricsError, metrics
from tenants.models import Flavor, Team

COVERAGE_FLOOR = 50.0  # percent of the allocated time telemetry must cover for the percent to be a headline


@dataclass(frozen=True)
class Efficiency:
    allocated_hours: float  # device-hours the team's pods held (metered)
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
    def headline(self) -> bool:
        """Whether the percent rests on enough of the allocated time to be shown as the figure."""
        return self.percent is not None and self.coverage is not None and self.coverage >= COVERAGE_FLOOR

    @property
    def idle_cost(self) -> Decimal | None:
        """The cost of the covered hours times the share of them the GPUs sat idle."""
        if self.percent is None or self.coverage is None:
            return None
        return (self.cost * Decimal(self.coverage / 100) * Decimal(1 - self.percent / 100)).quantize(Decimal("0.01"))


def device_seconds(rows: Iterable[tuple[int, int, int, int]], flavors: Mapping[int, Flavor]) -> Fraction:
    """Device-seconds of (flavor id, fraction numerator, denominator, unit-seconds) rows: a shared
    card's units at the fraction of the card they were metered at, a GPU's or a MIG slice's whole."""
    total = Fraction(0)
    for flavor_id, numerator, denominator, unit_seconds in rows:
        whole = flavors[flavor_id].unit_is_a_device
        total += unit_seconds if whole else Fraction(unit_seconds * numerator, denominator)
    return total


def team_month_efficiency(*, team: Team, account: Account | None, month: dt.date, cost: Decimal,
                          now: dt.datetime | None = None, allocated_device_seconds: Fraction | None = None) -> Efficiency:
    """`allocated_device_seconds`, when the caller read them already (the team usage page's grouped
    read), spares the aggregate over the rollups."""
    start, end = periods.month_bounds(periods.month_start(month))
    end = min(end, now or timezone.now())
    if allocated_device_seconds is not None:
        seconds = allocated_device_seconds
    elif account is not None:
        rows = list(UsageHour.objects.filter(account=account, hour__gte=start, hour__lt=end)
                    .values_list("flavor_id", "fraction_numerator", "fraction_denominator")
                    .annotate(total=Sum("unit_seconds")).order_by())
        seconds = device_seconds(rows, Flavor.objects.in_bulk({row[0] for row in rows}))
    else:
        seconds = Fraction(0)
    allocated = float(seconds / 3600)
    if end <= start:
        return Efficiency(allocated, None, cost, unavailable="The month has not begun.")
    try:
        hours = metrics().device_hours(namespaces=[team.namespace], start=start, end=end).get(team.namespace)
    except MetricsError as error:
        return Efficiency(allocated, None, cost, unavailable=f"Telemetry could not be read: {error}.")
    if hours is None or not hours.covered:
        return Efficiency(allocated, None, cost, unavailable="No GPU metrics for this month.")
    return Efficiency(allocated, hours.busy, cost, covered_hours=hours.covered)

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from fractions import Fraction

from django.db.models import Sum
from django.utils import timezone

from billing import money, periods
from billing.models import Account, Rate, UsageHour
from tenants.models import Flavor


def rate_at(*, flavor: Flavor, at: dt.datetime | None = None) -> Rate | None:
    """The rate in force for the flavor at that moment (now by default)."""
    return Rate.objects.filter(flavor=flavor, effective_from__lte=at or timezone.now()).order_by("-effective_from").first()


def hourly_cost(*, flavor: Flavor, units: int, at: dt.datetime | None = None) -> tuple[Decimal, str] | None:
    """What `units` of the flavor cost per hour at the rate in force, or None without a rate."""
    rate = rate_at(flavor=flavor, at=at)
    if rate is None:
        return None
    gpus = Decimal(units * flavor.fraction_numerator) / Decimal(flavor.fraction_denominator)
    return (rate.price_per_gpu_hour * gpus).quantize(Decimal("0.01")), rate.currency


# Month-to-date cost and its forecast. Budgets read these; the usage pages own them.
def team_month_cost(*, account: Account, month: dt.date) -> tuple[Decimal, str]:
    """What the account used in the month so far, at the rates in force, rounded once, and its currency."""
    start, end = periods.month_bounds(month)
    rows = (UsageHour.objects.filter(account=account, hour__gte=start, hour__lt=end, rate__isnull=False)
            .values("rate__price_per_gpu_hour", "rate__currency", "fraction_numerator", "fraction_denominator")
            .annotate(total=Sum("unit_seconds")))
    exact = Fraction(0)
    currency = "USD"
    for row in rows:
        currency = row["rate__currency"]
        exact += money.cost(unit_seconds=row["total"], numerator=row["fraction_numerator"],
                            denominator=row["fraction_denominator"], price_per_gpu_hour=row["rate__price_per_gpu_hour"])
    return money.round_money(exact, currency), currency


def month_forecast(*, account: Account, month: dt.date, now: dt.datetime | None = None) -> Decimal:
    """The month's cost at the month-to-date burn rate: spent × month length ÷ time elapsed."""
    now = now or timezone.now()
    start, end = periods.month_bounds(month)
    spent, currency = team_month_cost(account=account, month=month)
    if now >= end:
        return spent
    elapsed = (now - start).total_seconds()
    if elapsed <= 0:
        return Decimal(0)
    return money.round_money(Fraction(spent) * Fraction((end - start).total_seconds()) / Fraction(elapsed), currency)

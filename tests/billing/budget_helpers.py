"""What the budget tests share: a priced flavor and usage written straight into the hourly rollups."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from billing.models import Account, Rate, UsageHour
from tenants.models import Flavor, Team
from tests.helpers import own_prices

UTC = dt.UTC
PRICE = Decimal("10.00")  # USD per GPU-hour: 1 GPU-hour of the test flavor costs 10 USD


def priced(flavor: Flavor) -> Rate:
    own_prices(flavor)
    return Rate.objects.create(flavor=flavor, price_per_gpu_hour=PRICE, currency="USD",
                               effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))


def use(team: Team, flavor: Flavor, *, gpu_hours: int, at: dt.datetime, owner: str = "alice") -> UsageHour:
    """`gpu_hours` GPU-hours of the flavor in the hour at `at` (cost: gpu_hours × 10 USD)."""
    rate = Rate.objects.filter(flavor=flavor).order_by("-effective_from").first()
    hour = at.replace(minute=0, second=0, microsecond=0)
    row, created = UsageHour.objects.get_or_create(
        hour=hour, account=Account.for_team(team), flavor=flavor, owner_username=owner, borrowed=False, rate=rate,
        fraction_numerator=flavor.fraction_numerator, fraction_denominator=flavor.fraction_denominator,
        defaults={"unit_seconds": gpu_hours * 3600})
    if not created:
        row.unit_seconds += gpu_hours * 3600
        row.save(update_fields=["unit_seconds"])
    return row

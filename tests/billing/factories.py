"""Billing rows made directly, so tests of pages, statements and budgets need no metering engine.

`usage(...)` writes one hourly rollup row; `rate(...)` a price from any moment (the rate service
refuses the past, rightly; tests need past months priced).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from billing.models import Account, Rate, UsageHour
from portal.models import User
from tenants.models import Flavor, Team
from tests.helpers import own_prices


def account(team: Team) -> Account:
    return Account.for_team(team)


def rate(flavor: Flavor, price: str | Decimal, *, effective_from: dt.datetime, currency: str = "USD",
         borrowed_discount: str | Decimal = "0") -> Rate:
    own_prices(flavor)
    return Rate.objects.create(flavor=flavor, price_per_gpu_hour=Decimal(price), currency=currency,
                               effective_from=effective_from, borrowed_discount_percent=Decimal(borrowed_discount))


def usage(*, account: Account, flavor: Flavor, hour: dt.datetime, gpu_seconds: int | None = None,
          unit_seconds: int | None = None, owner: str = "alice", borrowed: bool = False,
          rate: Rate | None = None) -> UsageHour:
    """One rollup row; `gpu_seconds` for a whole-GPU flavor, `unit_seconds` for any."""
    units = unit_seconds if unit_seconds is not None else gpu_seconds
    assert units is not None, "give gpu_seconds or unit_seconds"
    person = User.objects.filter(username=owner).values_list("pk", flat=True).first()
    return UsageHour.objects.create(
        hour=hour, account=account, flavor=flavor, owner_key=person, owner_username=owner, borrowed=borrowed, rate=rate,
        fraction_numerator=flavor.fraction_numerator, fraction_denominator=flavor.fraction_denominator,
        unit_seconds=units)

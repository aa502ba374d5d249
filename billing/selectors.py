from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.utils import timezone

from billing.models import Rate
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

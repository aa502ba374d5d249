"""The ledger of capacity: what nobody used, and how idle capacity is shared.

A stand-in with the public names the metering engineer (`meter`) owns and will replace: capacity
minus what teams used, per flavor, from the hourly rollups. Until the per-flavor idle policy
lands every flavor keeps its unallocated capacity apart (the default), so no idle is shared.
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

from django.db.models import Sum

from billing.models import CapacityHour, UsageHour


def unallocated(*, start: dt.datetime, end: dt.datetime) -> dict[int, int]:
    """Unit-seconds of each flavor's capacity in [start, end) that no team used (never negative)."""
    hours = {"hour__gte": start, "hour__lt": end}
    capacity = dict(CapacityHour.objects.filter(**hours).values("flavor_id").annotate(total=Sum("unit_seconds"))
                    .order_by().values_list("flavor_id", "total"))
    used = dict(UsageHour.objects.filter(**hours).values("flavor_id").annotate(total=Sum("unit_seconds"))
                .order_by().values_list("flavor_id", "total"))
    return {flavor_id: max(total - used.get(flavor_id, 0), 0) for flavor_id, total in capacity.items()}


def idle_shares(*, start: dt.datetime, end: dt.datetime) -> dict[tuple[int, int], Fraction]:
    """Unallocated unit-seconds shared to (account, flavor) for flavors whose policy says share: none yet."""
    return {}

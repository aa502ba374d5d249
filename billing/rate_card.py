"""The rate card over time: each flavor's prices as periods of a month (or any span), as a
statement lines them up and an XID credit prices them."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

from billing.models import Rate


@dataclass(frozen=True)
class RatePeriod:
    """Part of the month during which one price (or none) applied to a flavor: [start, end)."""

    rate: Rate | None
    start: dt.datetime
    end: dt.datetime


def rate_periods(*, start: dt.datetime, end: dt.datetime) -> dict[int, list[RatePeriod]]:
    """Every priced flavor's prices across [start, end), one query over the (small) rate card: the
    span before its first price (free), then each rate from its start to the next rate's, clipped
    to the month. A flavor that never had a price is not in it: its usage is free all month."""
    by_flavor: dict[int, list[Rate]] = defaultdict(list)
    for rate in Rate.objects.filter(effective_from__lt=end).order_by("flavor_id", "effective_from"):
        by_flavor[rate.flavor_id].append(rate)
    result: dict[int, list[RatePeriod]] = {}
    for flavor_id, rates in by_flavor.items():
        spans: list[RatePeriod] = []
        if rates[0].effective_from > start:
            spans.append(RatePeriod(rate=None, start=start, end=min(rates[0].effective_from, end)))
        for index, rate in enumerate(rates):
            upper = rates[index + 1].effective_from if index + 1 < len(rates) else end
            lower = max(rate.effective_from, start)
            if min(upper, end) > lower:
                spans.append(RatePeriod(rate=rate, start=lower, end=min(upper, end)))
        result[flavor_id] = spans
    return result

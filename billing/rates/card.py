"""The rate card as one value: every price of the flavors asked for, read in one query, answering
each question billing asks of prices.

- the price in force for a flavor at a moment (`rate_at`, `in_force`, `priced`, `hourly_cost`);
- a flavor's prices as periods across [start, end), the span before its first price unpriced
  (`periods`: a statement's lines, an XID credit, a workload's cost);
- the moments a flavor's price changes (`changes`, and in epoch seconds `change_seconds`: where
  metering cuts an interval, asking `rate_at_second` for each piece);
- the currency an amount with no priced usage is shown in (`default_currency`).

Build it once per request or pass (`RateCard.read()`), and ask it as often as needed: no answer
goes back to the database. Metering and a workload's cost count whole seconds, so they ask
`whole_seconds()`, the same card with each price starting at its whole second.
"""

from __future__ import annotations

import datetime as dt
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from billing.models import Rate
from billing.money import borrowed_factor, discount_words, priced_numerator, round_places
from tenants.models import Flavor

DEFAULT_CURRENCY = "USD"  # an idle portal's zero, before finance set any price


@dataclass(frozen=True)
class HourlyCost:
    """What some units of a flavor cost per hour at one rate: guaranteed, and borrowed (at the
    rate's discount for borrowed, preemptible hours; the same amount when it has none)."""

    amount: Decimal
    currency: str
    borrowed_amount: Decimal
    borrowed_discount_percent: Decimal

    @property
    def borrowed_discount(self) -> str:
        return discount_words(self.borrowed_discount_percent)


@dataclass(frozen=True)
class RatePeriod:
    """Part of a span during which one price (or none) applied to a flavor: [start, end)."""

    rate: Rate | None
    start: dt.datetime
    end: dt.datetime


class RateCard:
    """The prices of the flavors it was read for, each flavor's in the order they took effect."""

    def __init__(self, rates: Iterable[Rate], *, whole_seconds: bool = False) -> None:
        self._rates = list(rates)
        self._whole_seconds = whole_seconds
        self._by_pk = {rate.pk: rate for rate in self._rates}
        self._changes: dict[int, list[tuple[dt.datetime, Rate]]] = defaultdict(list)
        for rate in sorted(self._rates, key=lambda rate: (rate.flavor_id, rate.effective_from, rate.pk)):
            since = rate.effective_from.replace(microsecond=0) if whole_seconds else rate.effective_from
            self._changes[rate.flavor_id].append((since, rate))
        self._starts = {flavor_id: [since for since, _ in changes] for flavor_id, changes in self._changes.items()}
        # The same moments in whole epoch seconds (truncated), as metering counts time: it asks for
        # every piece of every interval, so it compares plain integers.
        self._seconds = {flavor_id: tuple(int(since.timestamp()) for since in starts)
                         for flavor_id, starts in self._starts.items()}

    @classmethod
    def read(cls, *, flavor_ids: Collection[int] | None = None) -> RateCard:
        """Every price (of these flavors only, when given) in one query over the small rate card."""
        rates = Rate.objects.all()
        if flavor_ids is not None:
            rates = rates.filter(flavor_id__in=list(flavor_ids))
        return cls(rates)

    def whole_seconds(self) -> RateCard:
        """The same prices, each in force from the whole second its moment falls in: how metering
        and a workload's cost count time (instants are truncated to the second before they compare)."""
        return RateCard(self._rates, whole_seconds=True)

    def rates(self) -> list[Rate]:
        """The rates it holds, in the order they were read."""
        return list(self._rates)

    def rate(self, pk: int) -> Rate | None:
        return self._by_pk.get(pk)

    def flavor_ids(self) -> set[int]:
        """The flavors that have (or had, or will have) a price."""
        return set(self._changes)

    def changes(self, flavor_id: int) -> list[tuple[dt.datetime, Rate]]:
        """(the moment it takes effect, the rate) of each of the flavor's prices, oldest first."""
        return list(self._changes.get(flavor_id, ()))

    def rate_at(self, flavor_id: int, at: dt.datetime) -> Rate | None:
        """The price in force for the flavor at that moment: the latest that has started."""
        index = bisect_right(self._starts.get(flavor_id, ()), at) - 1
        return self._changes[flavor_id][index][1] if index >= 0 else None

    def change_seconds(self, flavor_id: int) -> tuple[int, ...]:
        """The moments the flavor's price changes, in whole epoch seconds, ascending."""
        return self._seconds.get(flavor_id, ())

    def rate_at_second(self, flavor_id: int, second: int) -> Rate | None:
        """`rate_at` for a moment given in whole epoch seconds, each price in force from its second."""
        index = bisect_right(self._seconds.get(flavor_id, ()), second) - 1
        return self._changes[flavor_id][index][1] if index >= 0 else None

    def in_force(self, at: dt.datetime) -> dict[int, Rate]:
        """Each priced flavor's rate in force at the moment."""
        found = {flavor_id: self.rate_at(flavor_id, at) for flavor_id in self._changes}
        return {flavor_id: rate for flavor_id, rate in found.items() if rate is not None}

    def priced(self, flavor_ids: Collection[int], at: dt.datetime) -> set[int]:
        """Which of the flavors have a rate in force at the moment."""
        return {flavor_id for flavor_id in flavor_ids if self.rate_at(flavor_id, at) is not None}

    def hourly_cost(self, flavor: Flavor, units: int, at: dt.datetime) -> HourlyCost | None:
        """What `units` of the flavor cost per hour at the rate in force then, or None without a rate."""
        rate = self.rate_at(flavor.pk, at)
        if rate is None:
            return None
        exact = (Fraction(units * priced_numerator(flavor.fraction_numerator, flavor.fraction_denominator),
                          flavor.fraction_denominator) * Fraction(rate.price_per_gpu_hour))
        return HourlyCost(amount=round_places(exact, 2), currency=rate.currency,
                          borrowed_amount=round_places(exact * borrowed_factor(rate.borrowed_discount_percent), 2),
                          borrowed_discount_percent=rate.borrowed_discount_percent)

    def periods(self, flavor_id: int, *, start: dt.datetime, end: dt.datetime) -> list[RatePeriod]:
        """The flavor's prices across [start, end): the span before its first price (unpriced), then
        each rate from its start to the next rate's, clipped to the span. A flavor with no price
        before `end` is one unpriced period: its usage there is free. An empty span has no period."""
        if end <= start:
            return []
        changes = [(since, rate) for since, rate in self._changes.get(flavor_id, ()) if since < end]
        if not changes:
            return [RatePeriod(rate=None, start=start, end=end)]
        spans: list[RatePeriod] = []
        if changes[0][0] > start:
            spans.append(RatePeriod(rate=None, start=start, end=min(changes[0][0], end)))
        for index, (since, rate) in enumerate(changes):
            upper = min(changes[index + 1][0] if index + 1 < len(changes) else end, end)
            lower = max(since, start)
            if upper > lower:
                spans.append(RatePeriod(rate=rate, start=lower, end=upper))
        return spans

    @property
    def default_currency(self) -> str:
        """The currency of the newest price, so an idle team's zero is shown in the currency it
        would be billed in (USD before any price)."""
        newest = max(self._rates, key=lambda rate: (rate.effective_from, rate.pk), default=None)
        return newest.currency if newest is not None else DEFAULT_CURRENCY

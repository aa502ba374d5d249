"""The ledger of who used, lent and left idle each flavor's capacity, from the hourly rollups.

The arithmetic is in pure functions (`split_lent`, `lent_rows`, `share_idle`, `hour_balance`) tested on their
own; the functions that take a period read the rollups with grouped queries and apply them hour
by hour. Periods are whole local hours: rows whose `hour` lies in [start, end) count.

Unallocated capacity
    In each hour, a flavor's capacity minus everything every team used of it (guaranteed and
    borrowed), never below zero. Conservation: used + unallocated = capacity in every hour where
    the teams did not use more than the capacity (exactly, in integers); an hour where they did
    (a sync that lagged a pod's end by a few seconds) is counted as fully used.

Sharing idle capacity (IdlePolicy)
    A flavor whose policy is "share" gives each hour's unallocated capacity to the teams in
    proportion to their guaranteed unit-seconds of it in that hour (OpenCost's shareIdle, with the
    guarantee as the weight). The shares are exact Fractions and add up to the hour's unallocated
    capacity, so teams + what is left unallocated = capacity exactly. An hour in which no team
    holds a guarantee keeps its idle capacity unallocated. The policy in force when the ledger is
    read applies to the whole period; a closed statement keeps what it was closed with.

Lent hours (the attribution rule)
    In each hour and flavor, the borrowed usage B (all teams' unit-seconds on borrowed quota) was
    lent by the teams that let others use their idle quota (`lends_idle`). A team that borrowed
    any of the flavor in that hour is not a lender of it in that hour: Kueue lets a queue borrow
    only once its own nominal quota is in use, so whatever of its guarantee looks idle at hour
    granularity was idle at other moments of the hour, not lent to anyone (counting it would
    credit a team as lender of its own borrowing). A lender's idle guarantee is its guaranteed
    unit-seconds minus its own guaranteed usage (never below zero). The lenders lent min(B, total
    idle) between them, in proportion to their idle guarantee; the integers are made by the
    largest-remainder method (ties to the smaller account id), so the hour's lent unit-seconds add
    up exactly. Borrowing beyond every lender's idle guarantee came from capacity no team was
    guaranteed, and nobody lent it.

    Departments' pools come first: a pool is guaranteed to a department's teams together and held
    by none of them, so the borrowing it could cover was lent by no team. Of the hour's B, the
    unit-seconds pooled of the flavor in that hour (every department's, `P`) are taken off before
    the lenders are counted: they lent min(B - P, total idle). The pools are counted whole, whoever
    borrowed: which department's teams borrowed is not kept per hour, and a pool usually lends
    nothing outside its department, so borrowing outside it is then credited to no lender either.

    The rule is applied when metering refreshes an hour (`lent_rows`, into `LentHour` rows, which
    `billing.metering.recompute` checks against a computation from scratch), so `lent` reads one
    grouped query over those rows and never every team's usage of the period.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from django.db import connection, transaction
from django.db.models import BigIntegerField, Case, F, Model, OuterRef, QuerySet, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce, Greatest

from billing.models import CapacityHour, FlavorHour, GuaranteeHour, IdlePolicy, LentHour, MeteringState, UsageHour

AccountFlavor = tuple[int, int]
LentKey = tuple[dt.datetime, int, int]  # hour, account id, flavor id


@dataclass(frozen=True)
class HourBalance:
    """One flavor in one hour, in unit-seconds."""

    capacity: int
    used: int

    @property
    def unallocated(self) -> int:
        return max(self.capacity - self.used, 0)


def hour_balance(*, capacity: int, used: int) -> HourBalance:
    return HourBalance(capacity=capacity, used=used)


def share_idle(*, idle: int, weights: dict[int, int]) -> dict[int, Fraction]:
    """`idle` unit-seconds shared in proportion to the positive weights; nothing when there are none.
    The shares add up to `idle` exactly."""
    total = sum(weight for weight in weights.values() if weight > 0)
    if idle <= 0 or total == 0:
        return {}
    return {key: Fraction(idle * weight, total) for key, weight in weights.items() if weight > 0}


def split_lent(*, borrowed: int, idle_by_lender: dict[int, int]) -> dict[int, int]:
    """Who lent the hour's borrowed unit-seconds: min(borrowed, total idle) in proportion to each
    lender's idle guarantee, as integers by the largest remainder (ties to the smaller key)."""
    idle = {key: value for key, value in idle_by_lender.items() if value > 0}
    total = sum(idle.values())
    lent_total = min(borrowed, total)
    if lent_total <= 0:
        return {}
    whole = largest_remainder({key: Fraction(lent_total * value, total) for key, value in idle.items()}, total=lent_total)
    return {key: value for key, value in whole.items() if value}


def largest_remainder(exact: dict[int, Fraction], *, total: int) -> dict[int, int]:
    """Whole numbers for exact non-negative shares that add up to `total`: each share's floor, then
    one more for the largest remainders (ties to the smaller key)."""
    whole = {key: int(value) for key, value in exact.items()}
    left = total - sum(whole.values())
    for key in sorted(exact, key=lambda k: (-(exact[k] - whole[k]), k))[:max(left, 0)]:
        whole[key] += 1
    return whole


def lent_rows(*, usage: Iterable[tuple[dt.datetime, int, int, bool, int]],
              guarantees: Iterable[tuple[dt.datetime, int, int, int, bool]],
              pools: Mapping[tuple[dt.datetime, int], int] | None = None) -> dict[LentKey, int]:
    """The rule above, hour by hour: (hour, account id, flavor id) → unit-seconds lent, from whole
    hours' usage rows (hour, account id, flavor id, borrowed, unit-seconds; several rows per key
    add up), guarantee rows (hour, account id, flavor id, unit-seconds, lends idle) and the
    unit-seconds the departments pooled ((hour, flavor id) → unit-seconds)."""
    pools = pools or {}
    borrowed: dict[tuple[dt.datetime, int], int] = defaultdict(int)
    borrowers: set[LentKey] = set()
    own: dict[LentKey, int] = defaultdict(int)
    for hour, account_id, flavor_id, on_borrowed, seconds in usage:
        if on_borrowed:
            borrowed[(hour, flavor_id)] += seconds
            if seconds > 0:
                borrowers.add((hour, account_id, flavor_id))
        else:
            own[(hour, account_id, flavor_id)] += seconds
    idle: dict[tuple[dt.datetime, int], dict[int, int]] = defaultdict(dict)
    for hour, account_id, flavor_id, seconds, lends_idle in guarantees:
        key = (hour, account_id, flavor_id)
        if lends_idle and (hour, flavor_id) in borrowed and key not in borrowers:
            idle[(hour, flavor_id)][account_id] = max(seconds - own.get(key, 0), 0)
    rows: dict[LentKey, int] = {}
    for (hour, flavor_id), value in borrowed.items():
        beyond_pools = value - pools.get((hour, flavor_id), 0)
        for account_id, amount in split_lent(borrowed=beyond_pools, idle_by_lender=idle.get((hour, flavor_id), {})).items():
            rows[(hour, account_id, flavor_id)] = amount
    return rows


def _hours(model: type[Model], start: dt.datetime, end: dt.datetime) -> QuerySet[Any]:
    return model._default_manager.filter(hour__gte=start, hour__lt=end)


def capacity(*, start: dt.datetime, end: dt.datetime) -> dict[int, int]:
    """Unit-seconds of capacity per flavor id."""
    rows = _hours(CapacityHour, start, end).values("flavor_id").annotate(total=Sum("unit_seconds"))
    return {row["flavor_id"]: row["total"] for row in rows}


def _used_by_hour(start: dt.datetime, end: dt.datetime) -> dict[tuple[dt.datetime, int], int]:
    """All teams' use of each flavor in each hour: FlavorHour for the complete hours and the
    UsageHour rows of the hours after them, in one statement (one snapshot)."""
    through = Subquery(MeteringState.objects.order_by("pk").values("months_through")[:1])
    complete = _hours(FlavorHour, start, end).values("hour", "flavor_id").annotate(total=Sum("unit_seconds")).order_by()
    still_open = (_hours(UsageHour, start, end).filter(hour__gte=Coalesce(through, Value(start)))
                  .values("hour", "flavor_id").annotate(total=Sum("unit_seconds")).order_by())
    used: dict[tuple[dt.datetime, int], int] = defaultdict(int)
    for row in complete.union(still_open, all=True):
        used[(row["hour"], row["flavor_id"])] += row["total"]
    return used


def _unallocated_by_hour(start: dt.datetime, end: dt.datetime) -> dict[tuple[dt.datetime, int], int]:
    used = _used_by_hour(start, end)
    return {(hour, flavor_id): hour_balance(capacity=value, used=used.get((hour, flavor_id), 0)).unallocated
            for hour, flavor_id, value in _hours(CapacityHour, start, end).values_list("hour", "flavor_id", "unit_seconds")}


def unallocated(*, start: dt.datetime, end: dt.datetime) -> dict[int, int]:
    """Unit-seconds of capacity nobody used, per flavor id (every flavor with capacity, 0 included),
    before any is shared; `idle_shares` says how much of it the teams take on.

    One grouped query summed by the database: each capacity row less that hour's use, never below
    zero, the use read from FlavorHour for a complete hour and from the hourly rows after
    `months_through` (the CASE keeps the database from summing team rows of complete hours)."""
    through = Subquery(MeteringState.objects.order_by("pk").values("months_through")[:1])
    complete = (FlavorHour.objects.filter(hour=OuterRef("hour"), flavor_id=OuterRef("flavor_id"))
                .order_by().values("unit_seconds")[:1])
    still_open = (UsageHour.objects.filter(hour=OuterRef("hour"), flavor_id=OuterRef("flavor_id")).order_by()
                  .values("flavor_id").annotate(total=Sum("unit_seconds")).values("total")[:1])
    used = Case(When(hour__gte=Coalesce(through, Value(start)), then=Coalesce(Subquery(still_open), Value(0))),
                default=Coalesce(Subquery(complete), Value(0)), output_field=BigIntegerField())
    rows = (_hours(CapacityHour, start, end).annotate(idle=Greatest(F("unit_seconds") - used, Value(0)))
            .values("flavor_id").annotate(total=Sum("idle")).order_by())
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # The subplans' estimates pass jit_above_cost; compiling took 1.3 s of a query that
            # reads ~3,000 rows (EXPLAIN ANALYZE in benchmarks/billing_pages.py).
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL jit = off")
        return {row["flavor_id"]: int(row["total"]) for row in rows}


def shared_flavors() -> set[int]:
    return set(IdlePolicy.objects.filter(mode=IdlePolicy.Mode.SHARE_BY_GUARANTEE).values_list("flavor_id", flat=True))


def idle_shares(*, start: dt.datetime, end: dt.datetime) -> dict[AccountFlavor, Fraction]:
    """Unit-seconds of unallocated capacity shared to each (account id, flavor id), for flavors whose
    policy is to share; per flavor they add up to the part of `unallocated` that was shared."""
    flavors = shared_flavors()
    if not flavors:
        return {}
    idle = {key: value for key, value in _unallocated_by_hour(start, end).items() if key[1] in flavors and value}
    weights: dict[tuple[dt.datetime, int], dict[int, int]] = defaultdict(dict)
    for hour, account_id, flavor_id, value in _hours(GuaranteeHour, start, end).filter(flavor_id__in=flavors).values_list(
            "hour", "account_id", "flavor_id", "unit_seconds"):
        weights[(hour, flavor_id)][account_id] = value
    shares: dict[AccountFlavor, Fraction] = defaultdict(Fraction)
    for (hour, flavor_id), value in idle.items():
        for account_id, share in share_idle(idle=value, weights=weights.get((hour, flavor_id), {})).items():
            shares[(account_id, flavor_id)] += share
    return dict(shares)


def lent(*, start: dt.datetime, end: dt.datetime, account_ids: list[int] | None = None) -> dict[AccountFlavor, int]:
    """Unit-seconds each (account id, flavor id) lent to borrowing teams (see the rule above), from
    the LentHour rows metering keeps: one grouped query, over the given accounts' rows only."""
    rows = _hours(LentHour, start, end)
    if account_ids is not None:
        rows = rows.filter(account_id__in=account_ids)
    return {(account_id, flavor_id): total for account_id, flavor_id, total in rows.values(
        "account_id", "flavor_id").annotate(total=Sum("unit_seconds")).values_list("account_id", "flavor_id", "total")}

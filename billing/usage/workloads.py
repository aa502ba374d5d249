"""A workload's own figures: the ranking of a team's top workloads and each workload's GPU-hours
and cost so far, from its run intervals (the rollups keep the owner, not the workload). Jobs
reads the cost so far through the `jobs.pricing.USAGE` hook billing fills."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.db.models import (
    DateTimeField,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, Greatest, Least, TruncSecond
from django.utils import timezone

from billing.models import Rate
from billing.money import ROUNDING_HOURS, SECONDS_PER_HOUR, price_factor, priced_numerator, round_money, round_places
from billing.rates.card import DEFAULT_CURRENCY, RateCard
from jobs.models import RunInterval, RunIntervalSwitch, Workload
from tenants.models import Team

TOP_WORKLOADS = 10


@dataclass(frozen=True)
class WorkloadLine:
    workload: Workload
    gpu_hours: Decimal
    cost: Decimal | None


class _Seconds(Func):
    """Seconds between two instants, as a float: only ranks workloads (exact sums come after)."""

    output_field = FloatField()
    arity = 2

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="((julianday(%(expressions)s)) * 86400.0)",
                           arg_joiner=") - julianday(", **extra)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="EXTRACT(EPOCH FROM (%(expressions)s))",
                           arg_joiner=" - ", **extra)


def top_workloads(*, team: Team, start: dt.datetime, end: dt.datetime, now: dt.datetime | None = None,
                  limit: int = TOP_WORKLOADS) -> list[WorkloadLine]:
    """The team's workloads that used the most GPU-time in [start, end), biggest first.

    Rollups do not keep the workload (a workload's hours are its owner's), so this ranks the
    team's own intervals that overlap the period with one SQL aggregate and a LIMIT (the database
    sums; Python never sees the month's intervals), then prices the few it keeps exactly from
    their own intervals: three queries whatever the number of intervals.
    """
    now = now or timezone.now()
    if end <= start:
        return []
    clipped_end = Least(Coalesce("ended_at", Value(now)), Value(end))
    ranked = (RunInterval.objects
              .filter(team=team, workload__isnull=False, started_at__lt=end)
              .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
              .values("workload_id")
              .annotate(weight=Sum(F("units") * F("fraction_numerator")
                                   * _Seconds(clipped_end, Greatest("started_at", Value(start)))
                                   / F("fraction_denominator"), output_field=FloatField()))
              .order_by("-weight", "workload_id")[:limit])
    ids = [row["workload_id"] for row in ranked]
    if not ids:
        return []
    workloads = Workload.objects.select_related("flavor", "owner").in_bulk(ids)
    costs = workload_costs(workload_ids=ids, start=start, end=end, now=now)
    lines = [WorkloadLine(workload=workloads[pk], gpu_hours=costs[pk].gpu_hours, cost=costs[pk].cost)
             for pk in ids if pk in workloads]
    return sorted(lines, key=lambda line: (-line.gpu_hours, line.workload.pk))


@dataclass(frozen=True)
class WorkloadCost:
    gpu_hours: Decimal
    cost: Decimal | None
    currency: str
    cpu_unit_hours: Decimal = Decimal(0)  # on a CPU-only flavor, which adds no GPU-hours


_GROUP = ("workload_id", "flavor_id", "units", "fraction_numerator", "fraction_denominator", "borrowed", "switched")
# workload id, units × fraction numerator, fraction denominator; where rated, units × the priced
# numerator (billing.money.priced_numerator: a CPU-only unit is priced whole, and is no GPU-hour)
Share = tuple[int, int, int]


def workload_costs(*, workload_ids: list[int], start: dt.datetime | None = None, end: dt.datetime | None = None,
                   now: dt.datetime | None = None) -> dict[int, WorkloadCost]:
    """GPU-hours and cost so far of each workload, from its own intervals (an open one up to
    now), each second at the rate in force then: two queries for any number of workloads, whatever
    the number of their intervals (a third when some of them ran across a price change).

    Seconds are whole seconds, as metering counts them: the database sums them per workload,
    flavor and share, with the first and last second of each group; a group that lies within one
    rate's period is priced whole, and only a group that spans a price change, or whose intervals
    moved between guaranteed and borrowed quota (their borrowed seconds cost the rate's discount
    less), is read interval by interval. A workload whose hours span rates in two currencies shows
    GPU-hours and no cost.
    """
    clamped = _clamped_intervals(workload_ids=workload_ids, start=start, end=end, now=now or timezone.now())
    groups = list(clamped.values(*_GROUP).annotate(
        total=Sum(ExpressionWrapper(F("upper") - F("lower"), output_field=DurationField())),
        first=Min("began"), last=Max("ended")).order_by())
    card = RateCard.read(flavor_ids={group["flavor_id"] for group in groups}).whole_seconds()
    # Whole seconds summed as integers per workload and fraction (and per rate for the amounts), one
    # Fraction per sum at the end.
    seconds: dict[Share, int] = defaultdict(int)
    cpu_seconds: dict[int, int] = defaultdict(int)  # unit-seconds on CPU-only flavors (fraction 0)
    rated: dict[tuple[Share, Rate, bool], int] = defaultdict(int)
    across: list[dict[str, Any]] = []  # groups that ran across a price change (or before the first price) or a switch
    for group in groups:
        share = (group["workload_id"], group["units"] * group["fraction_numerator"], group["fraction_denominator"])
        total = int(group["total"].total_seconds())
        seconds[share] += total
        if not group["fraction_numerator"]:
            cpu_seconds[group["workload_id"]] += group["units"] * total
        spans = card.periods(group["flavor_id"], start=group["first"].replace(microsecond=0),
                             end=group["last"].replace(microsecond=0))
        if len(spans) == 1 and spans[0].rate is not None and not group["switched"]:
            rated[_priced(group["workload_id"], group["units"], group["fraction_numerator"], group["fraction_denominator"]),
                  spans[0].rate, group["borrowed"]] += total
        elif any(span.rate is not None for span in spans):
            across.append(group)
    if across:
        _rate_across(clamped, across, card, rated)
    return _costs(workload_ids, seconds, rated, cpu_seconds)


def _clamped_intervals(*, workload_ids: list[int], start: dt.datetime | None, end: dt.datetime | None,
                       now: dt.datetime) -> QuerySet[RunInterval]:
    """The workloads' intervals within [start, end) (open ones up to now), each with the instants it
    began and ended there (`began`, `ended`) and those at whole seconds (`lower`, `upper`)."""
    intervals = RunInterval.objects.filter(workload_id__in=workload_ids)
    if start is not None:
        intervals = intervals.filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
    if end is not None:
        intervals = intervals.filter(started_at__lt=end)
    upper: Any = Coalesce("ended_at", Value(now, output_field=DateTimeField()))
    if end is not None:
        upper = Least(upper, Value(end, output_field=DateTimeField()))
    lower: Any = F("started_at") if start is None else Greatest("started_at", Value(start, output_field=DateTimeField()))
    return (intervals.annotate(began=lower, ended=upper, lower=TruncSecond(lower), upper=TruncSecond(upper),
                               switched=Exists(RunIntervalSwitch.objects.filter(interval=OuterRef("pk"))))
            .filter(upper__gt=F("lower")))


def _rate_across(clamped: QuerySet[RunInterval], across: list[dict[str, Any]], card: RateCard,
                 rated: dict[tuple[Share, Rate, bool], int]) -> None:
    """Adds to `rated` the seconds of each interval of the groups that ran across a price change or
    a switch between guaranteed and borrowed, at each price in force then, borrowed or not as it
    was then (two queries)."""
    condition = Q()
    for group in across:
        condition |= Q(**{field: group[field] for field in _GROUP})
    intervals = list(clamped.filter(condition).values_list("pk", *_GROUP, "lower", "upper"))
    switches: dict[int, list[tuple[dt.datetime, bool]]] = defaultdict(list)
    for interval_id, at, borrowed in RunIntervalSwitch.objects.filter(
            interval_id__in=[row[0] for row in intervals if row[7]]).order_by("at", "pk").values_list(
            "interval_id", "at", "borrowed"):
        switches[interval_id].append((at.replace(microsecond=0), borrowed))
    for interval_id, workload_id, flavor_id, units, numerator, denominator, borrowed, _, began, ended in intervals:
        for lower, upper, state in borrowed_pieces(began, ended, borrowed, switches.get(interval_id, [])):
            for span in card.periods(flavor_id, start=lower, end=upper):
                if span.rate is not None:
                    rated[_priced(workload_id, units, numerator, denominator), span.rate, state] += int(
                        (span.end - span.start).total_seconds())


def borrowed_pieces(start: dt.datetime, end: dt.datetime, borrowed: bool,
                    switches: list[tuple[dt.datetime, bool]]) -> list[tuple[dt.datetime, dt.datetime, bool]]:
    """[start, end) cut where the interval moved between guaranteed and borrowed quota, each piece
    with its state, as metering counts it (billing.metering.rows: a switch at or before the start
    sets the state it begins in). `switches` are (whole-second moment, state from then), in order."""
    state, cuts = borrowed, []
    for at, value in switches:
        if at <= start:
            state = value
        elif at < end:
            cuts.append((at, value))
    pieces, here = [], start
    for at, value in cuts:
        if at > here:
            pieces.append((here, at, state))
        state, here = value, max(here, at)
    pieces.append((here, end, state))
    return [piece for piece in pieces if piece[1] > piece[0]]


def _priced(workload_id: int, units: int, numerator: int, denominator: int) -> Share:
    return workload_id, units * priced_numerator(numerator, denominator), denominator


def _costs(workload_ids: list[int], seconds: dict[Share, int], rated: dict[tuple[Share, Rate, bool], int],
           cpu_seconds: dict[int, int]) -> dict[int, WorkloadCost]:
    """Each workload's GPU-hours and cost, rounded once (billing.money's rule), from its seconds per
    share and per share and rate."""
    unit_seconds: dict[int, Fraction] = defaultdict(Fraction)
    for (workload_id, share, denominator), total in seconds.items():
        unit_seconds[workload_id] += Fraction(share * total, denominator)
    amounts: dict[int, Fraction] = defaultdict(Fraction)
    currencies: dict[int, set[str]] = defaultdict(set)
    for ((workload_id, share, denominator), rate, borrowed), total in rated.items():
        currencies[workload_id].add(rate.currency)
        amounts[workload_id] += (Fraction(share * total, denominator) / SECONDS_PER_HOUR * Fraction(rate.price_per_gpu_hour)
                                 * price_factor(borrowed=borrowed, discount_percent=rate.borrowed_discount_percent))
    result = {}
    for workload_id in workload_ids:
        found = currencies.get(workload_id, set())
        currency = next(iter(found)) if len(found) == 1 else DEFAULT_CURRENCY
        result[workload_id] = WorkloadCost(
            gpu_hours=round_places(unit_seconds[workload_id] / SECONDS_PER_HOUR, ROUNDING_HOURS),
            cost=round_money(amounts[workload_id], currency) if len(found) == 1 else None, currency=currency,
            cpu_unit_hours=round_places(Fraction(cpu_seconds.get(workload_id, 0), SECONDS_PER_HOUR), ROUNDING_HOURS))
    return result

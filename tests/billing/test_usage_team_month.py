"""The team usage page folds its by-flavor, by-person and by-day figures, its forecast and its
allocated hours out of one grouped read of the month's hourly rollups: each must equal the figure
read on its own (by flavor from the monthly level, by person and by day from the hourly rows, the
forecast's two queries, the efficiency's aggregate), to the exact Fraction."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.db.models import Sum
from django.db.models.functions import TruncDate
from django.test.utils import CaptureQueriesContext

from billing import metering, periods
from billing.models import Rate, UsageHour, UsageMonth
from billing.usage import selectors
from billing.usage.efficiency import team_month_efficiency
from billing.usage.forecast import month_forecast
from billing.usage.rollups import line_fields
from tests.billing.metering_helpers import account, at, make_interval, make_workload
from tests.factories import FlavorFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

NOW = at("2026-11-10 12:20")
OCTOBER, NOVEMBER = dt.date(2026, 10, 1), dt.date(2026, 11, 1)


@pytest.fixture
def two_months_metered(settings):
    """Vision's October and November in Berlin, metered as the beat task meters them: three flavors
    (whole GPUs, 1/7 slices and one never priced), a price change mid-month, slices unpriced until Oct 10,
    guaranteed and borrowed hours, three people, runs across both local month boundaries (Oct 1
    and Nov 1 begin at 22:00 and 23:00 UTC), one still running at NOW and a row a cluster's clock
    dated after it; Speech's hours beside them."""
    settings.BILLING_TIME_ZONE = "Europe/Berlin"
    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=16)
    slice_ = FlavorFactory.create(name="A100 1g.10gb", slug="a100-1g", resource_name="nvidia.com/mig-1g.10gb",
                                  sharing_mode="mig", fraction_denominator=7, capacity_units=56)
    unpriced = FlavorFactory.create(name="L40S", slug="l40s", resource_name="nvidia.com/l40s", capacity_units=8)
    Rate.objects.create(flavor=h100, price_per_gpu_hour=Decimal("2.50"), effective_from=at("2026-09-01 00:00"))
    Rate.objects.create(flavor=h100, price_per_gpu_hour=Decimal("3.10"), effective_from=at("2026-10-20 10:00"))
    Rate.objects.create(flavor=slice_, price_per_gpu_hour=Decimal("7.00"), effective_from=at("2026-10-10 00:00"))
    vision, speech = TeamFactory.create(slug="vision", name="Vision"), TeamFactory.create(slug="speech", name="Speech")
    alice, bob, carol, dave = (UserFactory.create(username=name) for name in ("alice", "bob", "carol", "dave"))

    make_interval(make_workload(team=vision, owner=alice, flavor=h100, units=2), at("2026-09-30 21:30"),
                  at("2026-10-01 02:15"))
    make_interval(make_workload(team=vision, owner=bob, flavor=slice_, units=3), at("2026-10-05 08:00"),
                  at("2026-10-12 09:40"))
    make_interval(make_workload(team=vision, owner=carol, flavor=h100, on_borrowed=True), at("2026-10-20 09:00"),
                  at("2026-10-20 13:30"))
    make_interval(make_workload(team=speech, owner=dave, flavor=h100, units=8), at("2026-10-15 00:00"),
                  at("2026-10-16 00:00"))
    metering.rollups_refresh(until=at("2026-10-25 00:00"))
    make_interval(make_workload(team=vision, owner=alice, flavor=h100, units=4), at("2026-10-31 22:10"),
                  at("2026-11-01 00:45"))
    make_interval(make_workload(team=vision, owner=bob, flavor=slice_, units=5), at("2026-11-09 20:00"))
    make_interval(make_workload(team=vision, owner=carol, flavor=h100, on_borrowed=True), at("2026-11-10 03:00"),
                  at("2026-11-10 11:00"))
    make_interval(make_workload(team=vision, owner=alice, flavor=unpriced), at("2026-11-08 10:00"),
                  at("2026-11-10 11:30"))
    metering.rollups_refresh(until=NOW)
    vision_account = account(vision)
    UsageHour.objects.create(hour=at("2026-11-20 09:00"), account=vision_account, flavor=h100, owner_username="alice",
                             rate=Rate.objects.filter(flavor=h100).latest("effective_from"), fraction_numerator=1,
                             fraction_denominator=1, unit_seconds=3600)
    assert UsageMonth.objects.filter(account=vision_account, month=periods.month_bounds(OCTOBER)[0]).exists()
    return vision


def summed(rows: Iterable[dict[str, Any]], fields: tuple[str, ...]) -> dict[tuple[Any, ...], int]:
    sums: dict[tuple[Any, ...], int] = defaultdict(int)
    for row in rows:
        sums[tuple(row[field] for field in fields)] += row["unit_seconds"]
    return {key: value for key, value in sums.items() if value}


@pytest.mark.parametrize("month", [OCTOBER, NOVEMBER], ids=["past month", "open month"])
def test_the_grouped_read_folds_into_each_figure_read_on_its_own(two_months_metered, month):
    vision = two_months_metered
    vision_account = account(vision)
    start, end = periods.month_bounds(month)

    with CaptureQueriesContext(connection) as read:
        rows = selectors._team_month_rows(account_id=vision_account.pk, start=start, end=end, now=NOW)

    assert len(read) == 1
    hourly = UsageHour.objects.filter(account=vision_account, hour__gte=start, hour__lt=end).annotate(
        day=TruncDate("hour", tzinfo=periods.billing_zone()))
    for keys in (("flavor_id", "borrowed"), ("owner_username",), ("day",)):
        fields = line_fields(*keys)
        read_on_its_own = hourly.values(*fields).annotate(unit_seconds=Sum("unit_seconds")).order_by()
        assert summed(selectors._summed(rows, keys), fields) == summed(read_on_its_own, fields), keys
    by_flavor = summed(selectors._summed(rows, ("flavor_id", "borrowed")), ("flavor_id", "borrowed"))
    by_person = summed(selectors._summed(rows, ("owner_username",)), ("owner_username",))
    assert {borrowed for _, borrowed in by_flavor} == {False, True} and len({f for f, _ in by_flavor}) >= 2
    assert set(by_person) == {("alice",), ("bob",), ("carol",)} and {row["rate__currency"] for row in rows} == {"USD", None}


@pytest.mark.parametrize("month", [OCTOBER, NOVEMBER], ids=["past month", "open month"])
def test_the_team_page_shows_the_forecast_and_allocated_hours_each_read_would_give(two_months_metered, month):
    vision = two_months_metered
    vision_account = account(vision)

    usage = selectors.team_month_usage(team=vision, month=month, now=NOW)

    expected_forecast = month_forecast(account=vision_account, month=month, now=NOW) \
        if month == NOVEMBER else None
    assert usage.forecast == expected_forecast
    on_its_own = team_month_efficiency(team=vision, account=vision_account, month=month, cost=usage.total.cost, now=NOW)
    folded = team_month_efficiency(team=vision, account=vision_account, month=month, cost=usage.total.cost, now=NOW,
                                   allocated_device_seconds=usage.allocated_device_seconds)
    assert folded == on_its_own and folded.allocated_hours > 0
    if month == NOVEMBER:  # the row dated after now counts on the page, not in the forecast or the allocated hours
        assert usage.forecast is not None and usage.forecast.spent < usage.total.cost
        assert usage.allocated_device_seconds < sum(UsageHour.objects.filter(
            account=vision_account, hour__gte=periods.month_bounds(month)[0]).values_list("unit_seconds", flat=True))


"""The rollups' upsert path on PostgreSQL (ON CONFLICT on the NULLS NOT DISTINCT key) and two
refreshes at once: the watermark's row lock serialises them, and nothing is counted twice."""

from __future__ import annotations

import threading
import time
from decimal import Decimal

import pytest
from django.db import connection, connections

from billing import metering
from billing.metering import refresh
from billing.models import Rate, UsageHour
from tests.billing.metering_helpers import at, make_interval, make_workload, total, usage
from tests.billing.test_metering_months import play_a_month_end_with_late_and_closed_intervals
from tests.factories import FlavorFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _postgresql():
    if connection.vendor != "postgresql":
        pytest.fail("run with scripts/with-services.sh: this test is about PostgreSQL's upsert")


def test_refreshing_the_open_hour_updates_its_rows_in_place_with_and_without_a_rate():
    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=8)
    vision = TeamFactory.create(slug="vision", name="Vision")
    alice = UserFactory.create(username="alice")
    Rate.objects.create(flavor=h100, price_per_gpu_hour=Decimal("2.50"), effective_from=at("2026-10-07 10:30"))
    make_interval(make_workload(team=vision, owner=alice, flavor=h100, units=2), at("2026-10-07 10:00"))

    metering.rollups_refresh(until=at("2026-10-07 10:20"))
    ids = set(UsageHour.objects.values_list("id", flat=True))
    metering.rollups_refresh(until=at("2026-10-07 10:25"))  # the row without a rate grows in place

    assert set(UsageHour.objects.values_list("id", flat=True)) == ids
    metering.rollups_refresh(until=at("2026-10-07 10:50"))
    metering.rollups_refresh(until=at("2026-10-07 10:55"))

    rows = {row.rate_id is None: row.unit_seconds for row in UsageHour.objects.all()}
    assert rows == {True: 2 * 1800, False: 2 * 1500}
    assert UsageHour.objects.count() == 2
    assert metering.recompute(start=at("2026-10-07 00:00"), end=at("2026-10-08 00:00")) == []


def test_two_refreshes_at_once_count_each_second_once():
    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=64)
    teams = [TeamFactory.create(slug=f"team-{n}", name=f"Team {n}") for n in range(4)]
    alice = UserFactory.create(username="alice")
    for n in range(40):
        make_interval(make_workload(team=teams[n % 4], owner=alice, flavor=h100), at("2026-10-07 08:00"),
                      at("2026-10-07 12:00") if n % 2 else None)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def refresh() -> None:
        try:
            barrier.wait()
            metering.rollups_refresh(until=at("2026-10-07 13:00"))
        except BaseException as error:  # noqa: BLE001 (reported by the test below)
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=refresh) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert total() == 20 * 4 * 3600 + 20 * 5 * 3600
    assert usage()[at("2026-10-07 12:00")] == 20 * 3600
    assert metering.recompute(start=at("2026-10-07 00:00"), end=at("2026-10-08 00:00")) == []


def test_two_first_refreshes_on_a_fresh_install_make_one_state_row_and_take_turns():
    # Two watchers closing intervals at once on a fresh install: each found no state row, made one
    # of its own and locked it, so both wrote the same capacity row (a UniqueViolation in a CI run).
    from django.db import transaction

    from billing.models import MeteringState

    locked, order = threading.Event(), []

    def first() -> None:
        with transaction.atomic():
            refresh._lock_state()
            locked.set()
            time.sleep(0.5)  # the second starts while this one holds the row it just made
            order.append("first")
        connections.close_all()

    def second() -> None:
        locked.wait()
        with transaction.atomic():
            refresh._lock_state()
            order.append("second")
        connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert MeteringState.objects.count() == 1
    assert order == ["first", "second"]


def test_the_monthly_level_adds_its_differences_on_postgresql():
    """The same play as on SQLite, through PostgreSQL's additive upsert and its TruncMonth."""
    play_a_month_end_with_late_and_closed_intervals()

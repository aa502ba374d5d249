"""Golden datasets for the metering engine: every expected number is worked out by hand in the test.

Units × seconds are unit-seconds; GPU-seconds are that × the flavor's fraction."""

from __future__ import annotations

import datetime as dt
import gc
from decimal import Decimal
from fractions import Fraction
from zoneinfo import ZoneInfo

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing import metering
from billing.metering import refresh
from billing.models import Account, CapacityHour, FlavorHour, LentHour, Rate, UsageHour, UsageMonth
from billing.money import gpu_hours
from billing.periods import month_bounds
from tests.billing.metering_helpers import account, at, make_interval, make_workload, total, usage
from tests.factories import FlavorFactory, QuotaGrantFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def h100(db):
    return FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=8)


@pytest.fixture
def vision(db):
    return TeamFactory(slug="vision", name="Vision")


@pytest.fixture
def alice(db):
    return UserFactory(username="alice")


def test_an_interval_across_midnight_and_the_month_end_is_split_at_each_hour_and_counted_once(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100, units=2)
    make_interval(workload, at("2026-10-31 22:30"), at("2026-11-01 01:15"))

    metering.rollups_refresh(until=at("2026-11-02 00:00"))

    assert usage(account=account(vision)) == {
        at("2026-10-31 22:00"): 2 * 1800, at("2026-10-31 23:00"): 2 * 3600,
        at("2026-11-01 00:00"): 2 * 3600, at("2026-11-01 01:00"): 2 * 900,
    }
    october, november = month_bounds(dt.date(2026, 10, 1)), month_bounds(dt.date(2026, 11, 1))
    assert total(hour__gte=october[0], hour__lt=october[1]) == 10_800  # 1.5 h × 2 GPUs = 3 GPU-hours
    assert total(hour__gte=november[0], hour__lt=november[1]) == 9_000  # 1.25 h × 2 GPUs = 2.5 GPU-hours
    assert metering.recompute(start=october[0], end=november[1]) == []


def test_a_ten_second_pod_is_ten_unit_seconds_even_with_fractions_of_a_second(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100)
    make_interval(workload, at("2026-10-05 12:00:00") + dt.timedelta(microseconds=400_000),
                  at("2026-10-05 12:00:10") + dt.timedelta(microseconds=900_000))
    # A second pod starts on the very second the first one ended: the shared second counts once.
    make_interval(workload, at("2026-10-05 12:00:10"), at("2026-10-05 12:00:15"))

    metering.rollups_refresh(until=at("2026-10-05 13:00"))

    assert usage() == {at("2026-10-05 12:00"): 10 + 5}


def test_a_pod_still_running_is_metered_up_to_the_refresh_and_the_next_refresh_starts_where_that_ended(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100, units=4)
    interval = make_interval(workload, at("2026-10-31 23:00"))

    metering.rollups_refresh(until=at("2026-10-31 23:40"))
    assert usage() == {at("2026-10-31 23:00"): 4 * 2400}

    # The statement for October reads whole hours of October: 23:00 is complete once the rollups pass midnight.
    metering.rollups_refresh(until=at("2026-11-01 00:20"))
    assert usage() == {at("2026-10-31 23:00"): 4 * 3600, at("2026-11-01 00:00"): 4 * 1200}

    interval.ended_at = at("2026-11-01 00:30")
    interval.save()
    metering.rollups_refresh(until=at("2026-11-01 02:00"))
    assert usage() == {at("2026-10-31 23:00"): 4 * 3600, at("2026-11-01 00:00"): 4 * 1800}
    interval.refresh_from_db()
    assert interval.settled and interval.metered_until == interval.ended_at


def test_a_pod_that_ended_before_the_last_refresh_gives_back_the_seconds_it_was_metered_beyond_its_end(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100)
    interval = make_interval(workload, at("2026-10-10 08:50"))
    metering.rollups_refresh(until=at("2026-10-10 10:30"))
    assert usage() == {at("2026-10-10 08:00"): 600, at("2026-10-10 09:00"): 3600, at("2026-10-10 10:00"): 1800}

    # The sync learns late that it finished at 09:15 (the pod's own finish time).
    interval.ended_at = at("2026-10-10 09:15")
    interval.save()
    metering.rollups_refresh(until=at("2026-10-10 10:31"))

    assert usage() == {at("2026-10-10 08:00"): 600, at("2026-10-10 09:00"): 900}
    assert metering.recompute(start=at("2026-10-10 00:00"), end=at("2026-10-11 00:00")) == []


def test_a_pod_the_sync_found_late_is_metered_from_its_own_start_in_hours_already_rolled_up(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100)
    metering.rollups_refresh(until=at("2026-10-10 12:00"))
    make_interval(workload, at("2026-10-10 09:30"), at("2026-10-10 10:10"))

    hours = metering.rollups_refresh(until=at("2026-10-10 12:05"))

    assert usage() == {at("2026-10-10 09:00"): 1800, at("2026-10-10 10:00"): 600}
    assert hours == 3  # 09 and 10 again for the late pod, and the open hour 12; 11 is left alone


def test_pods_closed_and_found_late_in_a_complete_hour_correct_it_and_who_lent_in_it(h100, vision, alice):
    speech, audio = TeamFactory.create(slug="speech", name="Speech"), TeamFactory.create(slug="audio", name="Audio")
    QuotaGrantFactory(team=vision, flavor=h100, units=4, valid_from=at("2026-10-01 00:00"))
    QuotaGrantFactory(team=speech, flavor=h100, units=1, valid_from=at("2026-10-01 00:00"))
    make_interval(make_workload(team=vision, owner=alice, flavor=h100, units=2), at("2026-10-06 10:00"))
    borrowing = make_interval(make_workload(team=audio, owner=alice, flavor=h100, units=2, on_borrowed=True),
                              at("2026-10-06 10:00"))
    metering.rollups_refresh(until=at("2026-10-06 10:00"))
    metering.rollups_refresh(until=at("2026-10-06 11:10"))
    hour = at("2026-10-06 10:00")
    # Audio borrowed 7,200; Speech's 3,600 and Vision's 7,200 were idle: they lent it 1 : 2.
    assert dict(LentHour.objects.filter(hour=hour).values_list("account__slug", "unit_seconds")) == {
        "speech": 2400, "vision": 4800}
    untouched = UsageHour.objects.get(hour=hour, account=account(vision))

    # Seen after the hour ended: Audio's pod had ended at 10:30, and Speech ran 1 unit 10:00-10:45.
    borrowing.ended_at = at("2026-10-06 10:30")
    borrowing.save(update_fields=["ended_at"])
    make_interval(make_workload(team=speech, owner=alice, flavor=h100), at("2026-10-06 10:00"), at("2026-10-06 10:45"))
    metering.rollups_refresh(until=at("2026-10-06 11:15"))

    assert usage(hour=hour, account=account(audio)) == {hour: 2 * 1800}
    assert usage(hour=hour, account=account(speech)) == {hour: 2700}
    assert UsageHour.objects.get(hour=hour, account=account(vision)) == untouched
    assert untouched.unit_seconds == 2 * 3600
    assert usage(hour=at("2026-10-06 11:00")) == {at("2026-10-06 11:00"): 2 * 900}  # Vision's only
    # Borrowed 3,600 now; idle 900 (Speech) and 7,200 (Vision): lent 3,600 × 900 / 8,100 and × 7,200 / 8,100.
    assert dict(LentHour.objects.filter(hour=hour).values_list("account__slug", "unit_seconds")) == {
        "speech": 400, "vision": 3200}
    assert FlavorHour.objects.get(hour=hour).unit_seconds == 3600 + 2700 + 7200
    assert dict(UsageMonth.objects.values_list("account__slug", "unit_seconds")) == {
        "audio": 3600, "speech": 2700, "vision": 7200}
    assert metering.recompute(start=at("2026-10-06 00:00"), end=at("2026-10-07 00:00")) == []


def test_a_refresh_runs_with_the_collector_paused(h100, vision, alice, monkeypatch):
    seen: list[bool] = []
    rows = metering.usage_rows

    def usage_rows(*args: object, **kwargs: object) -> dict:
        seen.append(gc.isenabled())
        return rows(*args, **kwargs)  # type: ignore[arg-type]

    make_interval(make_workload(team=vision, owner=alice, flavor=h100), at("2026-10-06 10:00"))
    monkeypatch.setattr(refresh, "usage_rows", usage_rows)  # as the refresh calls it
    enabled = gc.isenabled()
    gc.enable()
    try:
        metering.rollups_refresh(until=at("2026-10-06 10:30"))
        assert seen == [False]
        assert gc.isenabled()
    finally:
        (gc.enable if enabled else gc.disable)()


def test_refreshing_twice_changes_nothing(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100, units=3)
    make_interval(workload, at("2026-10-01 00:00"), at("2026-10-01 05:00"))
    make_interval(workload, at("2026-10-01 04:00"))
    metering.rollups_refresh(until=at("2026-10-01 06:30"))
    before = sorted(UsageHour.objects.values_list("id", "hour", "unit_seconds"))

    metering.rollups_refresh(until=at("2026-10-01 06:30"))
    metering.rollups_refresh(until=at("2026-10-01 06:00"))  # never back before the watermark

    assert sorted(UsageHour.objects.values_list("id", "hour", "unit_seconds")) == before
    assert total() == 3 * 5 * 3600 + 3 * int(2.5 * 3600)


def test_a_mig_slice_is_a_seventh_and_a_shared_gpu_a_quarter_of_a_gpu(vision, alice):
    mig = FlavorFactory.create(name="A100 1g", slug="a100-1g", resource_name="nvidia.com/mig-1g.10gb",
                        fraction_denominator=7, capacity_units=56)
    shared = FlavorFactory.create(name="T4 shared", slug="t4-shared", resource_name="nvidia.com/gpu.shared",
                           fraction_denominator=4, capacity_units=16)
    make_interval(make_workload(team=vision, owner=alice, flavor=mig, units=2), at("2026-10-02 10:00"),
                  at("2026-10-02 13:30"))
    make_interval(make_workload(team=vision, owner=alice, flavor=shared, units=1), at("2026-10-02 10:00"),
                  at("2026-10-02 12:00"))

    metering.rollups_refresh(until=at("2026-10-03 00:00"))

    mig_rows = UsageHour.objects.filter(flavor=mig)
    assert {(r.fraction_numerator, r.fraction_denominator) for r in mig_rows} == {(1, 7)}
    mig_seconds = total(flavor=mig)
    assert mig_seconds == 2 * 3 * 3600 + 2 * 1800
    assert gpu_hours(unit_seconds=mig_seconds, numerator=1, denominator=7) == Fraction(1, 1)  # 7 slice-hours = 1 GPU-hour
    shared_seconds = total(flavor=shared)
    assert gpu_hours(unit_seconds=shared_seconds, numerator=1, denominator=4) == Fraction(1, 2)


def test_the_fraction_is_the_one_at_the_time_even_if_the_flavor_changes_later(vision, alice):
    mig = FlavorFactory.create(name="A100 2g", slug="a100-2g", resource_name="nvidia.com/mig-2g.20gb",
                        fraction_numerator=2, fraction_denominator=7, capacity_units=21)
    make_interval(make_workload(team=vision, owner=alice, flavor=mig), at("2026-10-02 10:00"), at("2026-10-02 11:00"))
    mig.fraction_numerator, mig.fraction_denominator = 3, 7
    mig.save()

    metering.rollups_refresh(until=at("2026-10-03 00:00"))

    row = UsageHour.objects.get()
    assert (row.fraction_numerator, row.fraction_denominator, row.unit_seconds) == (2, 7, 3600)


def test_a_price_change_mid_month_splits_the_hour_it_happens_in(h100, vision, alice):
    old = Rate.objects.create(flavor=h100, price_per_gpu_hour=Decimal("2.00"), effective_from=at("2026-09-01 00:00"))
    new = Rate.objects.create(flavor=h100, price_per_gpu_hour=Decimal("3.00"), effective_from=at("2026-10-15 12:20"))
    make_interval(make_workload(team=vision, owner=alice, flavor=h100, units=2), at("2026-10-15 11:00"),
                  at("2026-10-15 13:00"))

    metering.rollups_refresh(until=at("2026-10-16 00:00"))

    rows = {(r.hour, r.rate_id): r.unit_seconds for r in UsageHour.objects.all()}
    assert rows == {
        (at("2026-10-15 11:00"), old.pk): 2 * 3600,
        (at("2026-10-15 12:00"), old.pk): 2 * 1200,
        (at("2026-10-15 12:00"), new.pk): 2 * 2400,
    }
    prices: dict[int | None, Fraction] = {old.pk: Fraction(old.price_per_gpu_hour), new.pk: Fraction(new.price_per_gpu_hour)}
    cost = sum((Fraction(seconds, 3600) * prices[rate_id] for (_, rate_id), seconds in rows.items()), Fraction(0))
    assert cost == Fraction(2 * 80, 60) * 2 + Fraction(2 * 40, 60) * 3  # 1h20 at 2.00 and 40 min at 3.00, × 2 GPUs


def test_usage_before_any_price_has_no_rate(h100, vision, alice):
    make_interval(make_workload(team=vision, owner=alice, flavor=h100), at("2026-10-15 11:30"), at("2026-10-15 12:30"))
    Rate.objects.create(flavor=h100, price_per_gpu_hour=Decimal("2.00"), effective_from=at("2026-10-15 12:00"))

    metering.rollups_refresh(until=at("2026-10-16 00:00"))

    assert {(r.hour, r.rate_id is None): r.unit_seconds for r in UsageHour.objects.all()} == {
        (at("2026-10-15 11:00"), True): 1800, (at("2026-10-15 12:00"), False): 1800}


def test_the_day_the_clocks_go_back_in_berlin_has_25_hours_and_each_second_once(settings, h100, vision, alice):
    settings.BILLING_TIME_ZONE = "Europe/Berlin"
    berlin = ZoneInfo("Europe/Berlin")
    # 25 October 2026: 03:00 CEST becomes 02:00 CET. A pod runs from 00:30 to 04:30 local (UTC 22:30 to 03:30): 5 h.
    start = dt.datetime(2026, 10, 25, 0, 30, tzinfo=berlin)
    end = dt.datetime(2026, 10, 25, 4, 30, tzinfo=berlin)
    assert end.astimezone(dt.UTC) - start.astimezone(dt.UTC) == dt.timedelta(hours=5)
    make_interval(make_workload(team=vision, owner=alice, flavor=h100), start, end)
    day = (dt.datetime(2026, 10, 25, tzinfo=berlin), dt.datetime(2026, 10, 26, tzinfo=berlin))

    metering.rollups_refresh(until=day[0])  # metering begins at the day's start
    metering.rollups_refresh(until=at("2026-10-26 00:00"))

    hours = usage()
    assert sum(hours.values()) == 5 * 3600
    local = [(h.astimezone(berlin).strftime("%H:%M %Z"), s) for h, s in hours.items()]
    assert local == [("00:00 CEST", 1800), ("01:00 CEST", 3600), ("02:00 CEST", 3600), ("02:00 CET", 3600),
                     ("03:00 CET", 3600), ("04:00 CET", 1800)]
    assert CapacityHour.objects.filter(hour__gte=day[0], hour__lt=day[1], flavor=h100).count() == 25
    assert metering.recompute(start=day[0], end=day[1]) == []


def test_the_day_the_clocks_go_forward_in_berlin_has_23_hours(settings, h100, vision, alice):
    settings.BILLING_TIME_ZONE = "Europe/Berlin"
    berlin = ZoneInfo("Europe/Berlin")
    make_interval(make_workload(team=vision, owner=alice, flavor=h100), dt.datetime(2026, 3, 29, 1, 30, tzinfo=berlin),
                  dt.datetime(2026, 3, 29, 3, 30, tzinfo=berlin))  # 01:30 CET to 03:30 CEST is one hour
    day = (dt.datetime(2026, 3, 29, tzinfo=berlin), dt.datetime(2026, 3, 30, tzinfo=berlin))

    metering.rollups_refresh(until=day[0])
    metering.rollups_refresh(until=at("2026-03-30 00:00"))

    assert sum(usage().values()) == 3600
    assert CapacityHour.objects.filter(hour__gte=day[0], hour__lt=day[1], flavor=h100).count() == 23


def test_a_flavor_nobody_used_has_capacity_rows_and_no_usage(h100, vision, alice):
    idle = FlavorFactory.create(name="L4", slug="l4", resource_name="nvidia.com/l4", capacity_units=3)
    make_interval(make_workload(team=vision, owner=alice, flavor=h100), at("2026-10-02 10:00"), at("2026-10-02 11:00"))

    metering.rollups_refresh(until=at("2026-10-02 12:00"))

    assert not UsageHour.objects.filter(flavor=idle).exists()
    assert dict(CapacityHour.objects.filter(flavor=idle).values_list("hour", "unit_seconds")) == {
        at("2026-10-02 10:00"): 3 * 3600, at("2026-10-02 11:00"): 3 * 3600}


def test_the_open_hour_counts_capacity_up_to_the_refresh(h100, vision, alice):
    make_interval(make_workload(team=vision, owner=alice, flavor=h100), at("2026-10-02 10:00"))

    metering.rollups_refresh(until=at("2026-10-02 10:45"))

    assert dict(CapacityHour.objects.filter(flavor=h100).values_list("hour", "unit_seconds")) == {
        at("2026-10-02 10:00"): 8 * 2700}


def test_the_refresh_never_meters_past_now(h100, vision, alice, monkeypatch):
    now = at("2026-10-02 10:30")
    monkeypatch.setattr(timezone, "now", lambda: now)
    make_interval(make_workload(team=vision, owner=alice, flavor=h100), at("2026-10-02 10:00"))

    metering.rollups_refresh(until=at("2026-10-31 00:00"))

    assert usage() == {at("2026-10-02 10:00"): 1800}
    assert metering.watermark() == now


def test_recompute_names_a_rollup_someone_changed(h100, vision, alice):
    make_interval(make_workload(team=vision, owner=alice, flavor=h100), at("2026-10-02 10:00"), at("2026-10-02 11:00"))
    metering.rollups_refresh(until=at("2026-10-02 12:00"))
    UsageHour.objects.update(unit_seconds=3599)

    differences = metering.recompute(start=at("2026-10-01 00:00"), end=at("2026-11-01 00:00"))

    assert differences == [
        "2026-10-02 10:00 vision H100 alice guaranteed no rate 1/1: the rollup holds 3599 unit-seconds, recomputed 3600.",
        # the levels summed from the complete hours no longer match the hourly row either
        "2026-10 vision H100 guaranteed no rate 1/1: the monthly rollup holds 3600 unit-seconds, the hourly rows add up to 3599.",
        "2026-10-02 10:00 H100: the flavor's hourly use holds 3600 unit-seconds, the teams' rows add up to 3599."]


HOUR = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize("priced", [True, False])
def test_the_database_refuses_a_second_rollup_row_for_the_same_key(vision, h100, priced):
    """One row per hour × team × flavor × person × borrowed × rate × fraction, a missing rate
    included, on SQLite (an expression index) as on PostgreSQL (NULLS NOT DISTINCT)."""
    account = Account.for_team(vision)
    rate = Rate.objects.create(flavor=h100, price_per_gpu_hour=Decimal("2"), effective_from=HOUR) if priced else None
    key = {"hour": HOUR, "account": account, "flavor": h100, "owner_key": None, "owner_username": "alice", "borrowed": False,
           "rate": rate, "fraction_numerator": 1, "fraction_denominator": 1}
    UsageHour.objects.create(**key, unit_seconds=60)
    with pytest.raises(IntegrityError), transaction.atomic():
        UsageHour.objects.create(**key, unit_seconds=60)
    assert UsageHour.objects.get(**key).unit_seconds == 60


def test_two_people_of_one_name_in_one_hour_are_two_rows_and_one_person_is_one(vision, h100):
    account = Account.for_team(vision)
    key = {"hour": HOUR, "account": account, "flavor": h100, "owner_username": "alice", "borrowed": False, "rate": None,
           "fraction_numerator": 1, "fraction_denominator": 1}
    UsageHour.objects.create(**key, owner_key=7, unit_seconds=60)
    UsageHour.objects.create(**key, owner_key=8, unit_seconds=60)  # a later alice: her own row
    with pytest.raises(IntegrityError), transaction.atomic():
        UsageHour.objects.create(**key, owner_key=8, unit_seconds=60)
    assert UsageHour.objects.filter(hour=HOUR).count() == 2

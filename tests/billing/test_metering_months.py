"""The monthly level of the rollups (UsageMonth) and each flavor's hourly use (FlavorHour): they hold
exactly the hourly rows of the complete hours, through every path that writes hourly rows, and
billing_verify names them when they drift."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from billing import metering
from billing.models import Account, FlavorHour, MeteringState, Rate, UsageHour, UsageMonth
from tests.billing.metering_helpers import account, at, make_interval, make_workload
from tests.factories import FlavorFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def months() -> dict[tuple[str, str, bool], int]:
    return {(f"{row.month:%Y-%m}", row.account.slug, row.borrowed): row.unit_seconds
            for row in UsageMonth.objects.select_related("account")}


def flavor_hours() -> dict[dt.datetime, int]:
    return dict(FlavorHour.objects.values_list("hour", "unit_seconds"))


def play_a_month_end_with_late_and_closed_intervals() -> None:
    """Hourly rows written by every kind of refresh: the open hour, hours completing, a month end
    crossed, a late interval in an hour completed long ago, one closed before the watermark, a
    switch to borrowed quota and a team deleted with hours behind it. Checked by hand after each."""
    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=8)
    vision, speech = TeamFactory.create(slug="vision", name="Vision"), TeamFactory.create(slug="speech", name="Speech")
    alice = UserFactory.create(username="alice")
    Rate.objects.create(flavor=h100, price_per_gpu_hour=Decimal("2.00"), effective_from=at("2026-10-01 00:00"))
    running = make_interval(make_workload(team=vision, owner=alice, flavor=h100, units=2), at("2026-10-31 22:30"))

    metering.rollups_refresh(until=at("2026-10-31 22:50"))  # only the open hour: nothing is complete yet
    assert months() == {} and flavor_hours() == {}
    assert MeteringState.objects.get().months_through == at("2026-10-31 22:00")

    metering.rollups_refresh(until=at("2026-11-01 00:20"))  # 22:00 and 23:00 complete, October with them
    assert months() == {("2026-10", "vision", False): 2 * 1800 + 2 * 3600}
    assert flavor_hours() == {at("2026-10-31 22:00"): 2 * 1800, at("2026-10-31 23:00"): 2 * 3600}

    # Seen late: Speech ran 1 GPU on Oct 15, 10:00-11:00; Vision's pod ended at 23:30, in an hour complete already.
    make_interval(make_workload(team=speech, owner=alice, flavor=h100), at("2026-10-15 10:00"), at("2026-10-15 11:00"))
    running.ended_at = at("2026-10-31 23:30")
    running.save(update_fields=["ended_at"])
    borrowing = make_interval(make_workload(team=speech, owner=alice, flavor=h100, on_borrowed=True),
                              at("2026-11-01 00:30"))
    metering.rollups_refresh(until=at("2026-11-01 00:40"))
    assert months() == {("2026-10", "vision", False): 2 * 1800 + 2 * 1800, ("2026-10", "speech", False): 3600}
    assert flavor_hours()[at("2026-10-15 10:00")] == 3600

    borrowing.ended_at = at("2026-11-01 01:30")
    borrowing.save(update_fields=["ended_at"])
    speech.delete()  # its account and hours stay
    metering.rollups_refresh(until=at("2026-11-01 02:05"))  # November's 00:00 and 01:00 complete
    assert months() == {("2026-10", "vision", False): 7200, ("2026-10", "speech", False): 3600,
                        ("2026-11", "speech", True): 3600}
    assert flavor_hours() == {at("2026-10-15 10:00"): 3600, at("2026-10-31 22:00"): 3600,
                              at("2026-10-31 23:00"): 3600, at("2026-11-01 00:00"): 1800, at("2026-11-01 01:00"): 1800}
    # (from Oct 31: capacity is recorded from the first refresh on, so Oct 15 has none to check against)
    assert metering.recompute(start=at("2026-10-31 00:00"), end=at("2026-12-01 00:00")) == []


def test_the_monthly_level_holds_the_complete_hours_through_every_kind_of_refresh():
    play_a_month_end_with_late_and_closed_intervals()


def test_a_state_from_before_the_monthly_level_is_filled_from_the_hourly_rows_on_the_next_refresh():
    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=8)
    vision = TeamFactory.create(slug="vision", name="Vision")
    make_interval(make_workload(team=vision, owner=UserFactory.create(username="alice"), flavor=h100),
                  at("2026-10-07 08:00"), at("2026-10-07 10:00"))
    metering.rollups_refresh(until=at("2026-10-07 12:00"))
    UsageMonth.objects.all().delete()
    FlavorHour.objects.all().delete()
    MeteringState.objects.update(months_through=None)  # what the migration leaves behind

    metering.rollups_refresh(until=at("2026-10-07 12:01"))

    assert months() == {("2026-10", "vision", False): 7200}
    assert flavor_hours() == {at("2026-10-07 08:00"): 3600, at("2026-10-07 09:00"): 3600}


@pytest.mark.parametrize("drift", ["month", "flavor-hour"])
def test_billing_verify_fails_when_the_monthly_level_drifts_from_the_hourly_rows(drift, capsys):
    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=8)
    vision = TeamFactory.create(slug="vision", name="Vision")
    make_interval(make_workload(team=vision, owner=UserFactory.create(username="alice"), flavor=h100),
                  at("2026-10-07 08:00"), at("2026-10-07 10:00"))
    metering.rollups_refresh(until=at("2026-10-07 12:00"))
    call_command("billing_verify", "--month", "2026-10")
    if drift == "month":
        UsageMonth.objects.update(unit_seconds=7199)
    else:
        FlavorHour.objects.filter(hour=at("2026-10-07 09:00")).delete()

    with pytest.raises(CommandError, match="1 difference"):
        call_command("billing_verify", "--month", "2026-10")

    said = capsys.readouterr().out
    assert ("2026-10 vision H100 guaranteed no rate 1/1: the monthly rollup holds 7199 unit-seconds, the hourly rows "
            "add up to 7200." in said) if drift == "month" else \
        ("2026-10-07 09:00 H100: the flavor's hourly use holds 0 unit-seconds, the teams' rows add up to 3600." in said)


def test_the_overview_adds_the_open_hour_to_the_complete_ones_once_in_queries_that_do_not_grow_with_teams(
        client, finance_user):
    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=10)
    Rate.objects.create(flavor=h100, price_per_gpu_hour=Decimal("2.00"), effective_from=at("2026-10-01 00:00"))
    vision = TeamFactory.create(slug="vision", name="Vision")
    make_interval(make_workload(team=vision, owner=UserFactory.create(username="alice"), flavor=h100, units=2),
                  at("2026-10-07 08:00"))
    metering.rollups_refresh(until=at("2026-10-07 10:30"))  # 08:00 and 09:00 complete, 10:00 open for 30 min
    assert months() == {("2026-10", "vision", False): 2 * 7200}
    client.force_login(finance_user)
    client.get(reverse("billing:my-usage"))  # the session is saved once, on the first request

    with CaptureQueriesContext(connection) as few:
        html = client.get(reverse("billing:finance-overview"), {"month": "2026-10"}).content.decode()
    with CaptureQueriesContext(connection) as team_few:
        assert client.get(reverse("billing:team-usage", args=["vision"]), {"month": "2026-10"}).status_code == 200

    assert 'data-testid="overview-total">10.00 USD<' in html  # 2 GPUs × 2.5 h × 2.00
    assert "5.00 GPU-hours this month" in html
    unallocated = html.split('data-testid="unallocated"')[1].split("</table>")[0]
    assert ">20.00<" in unallocated  # 10 GPUs × 2.5 h metered − 5 used
    for n in range(10):
        make_interval(make_workload(team=TeamFactory.create(slug=f"t{n}", name=f"T{n}"), owner=UserFactory.create(),
                                    flavor=h100), at("2026-10-03 08:00"), at("2026-10-07 09:30"))
    metering.rollups_refresh(until=at("2026-10-07 10:40"))
    with CaptureQueriesContext(connection) as many:
        html = client.get(reverse("billing:finance-overview"), {"month": "2026-10"}).content.decode()
    assert html.count('href="/billing/teams/') == 11
    assert len(many) == len(few), [query["sql"] for query in many.captured_queries]
    with CaptureQueriesContext(connection) as team_many:
        assert client.get(reverse("billing:team-usage", args=["vision"]), {"month": "2026-10"}).status_code == 200
    assert len(team_many) == len(team_few), [query["sql"] for query in team_many.captured_queries]
    assert account(vision).pk  # the account metering made


def test_hourly_rows_written_without_metering_are_read_hourly(client, finance_user):
    """Without a watermark nothing is complete: rows written by hand (tests, imports) count in full."""
    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=10)
    rate = Rate.objects.create(flavor=h100, price_per_gpu_hour=Decimal("2.00"), effective_from=at("2026-10-01 00:00"))
    vision = TeamFactory.create(slug="vision", name="Vision")
    UsageHour.objects.create(hour=at("2026-10-07 08:00"), account=Account.for_team(vision), flavor=h100,
                             owner_username="alice", rate=rate, fraction_numerator=1, fraction_denominator=1,
                             unit_seconds=3600)
    client.force_login(finance_user)
    html = client.get(reverse("billing:finance-overview"), {"month": "2026-10"}).content.decode()
    assert 'data-testid="overview-total">2.00 USD<' in html


@pytest.mark.parametrize(("start", "end"), [
    ("2026-10-01 00:00", "2026-11-01 00:00"),  # a whole month: its level alone
    ("2026-10-01 00:00", "2026-12-01 00:00"),  # two months: October's level, November's level and open hours
    ("2026-11-01 00:00", "2026-11-02 00:00"),  # the open month's first day: its level stops inside it
    ("2026-11-01 00:00", "2026-11-01 01:00"),  # a piece that ends before months_through: hourly rows only
    ("2026-10-01 00:00", "2026-10-16 00:00"),  # a past month's first half: its level holds too much
    ("2026-10-15 00:00", "2026-11-01 01:30"),  # begins mid-month: hourly rows, then November up to 01:30
    ("2026-10-31 23:00", "2026-11-01 00:00"),  # one hour
])
def test_usage_read_from_the_monthly_level_equals_the_hourly_rows_for_any_range(start, end):
    from billing.usage.rollups import line_fields, rollup_sums

    play_a_month_end_with_late_and_closed_intervals()  # months_through 2026-11-01 02:00
    fields = line_fields("flavor_id", "borrowed")
    hourly = (UsageHour.objects.filter(hour__gte=at(start), hour__lt=at(end))
              .values(*fields).annotate(unit_seconds=Sum("unit_seconds")).order_by())

    with CaptureQueriesContext(connection) as read:
        found = list(rollup_sums(start=at(start), end=at(end), fields=fields))

    assert summed(found, fields) == summed(hourly, fields) and found
    assert len(read) == 1  # one statement, months_through read inside it
    month_begins_inside = start.endswith("-01 00:00") or start < "2026-11-01 00:00" < end
    assert ("billing_usagemonth" in read.captured_queries[0]["sql"]) == month_begins_inside


def summed(rows: Iterable[dict[str, Any]], fields: tuple[str, ...]) -> dict[tuple[Any, ...], int]:
    """Unit-seconds per key: rows of one key (a month's level and its open hours) add up."""
    sums: dict[tuple[Any, ...], int] = defaultdict(int)
    for row in rows:
        sums[tuple(row[field] for field in fields)] += row["unit_seconds"]
    return {key: value for key, value in sums.items() if value}


def test_the_finance_usage_api_reads_the_monthly_level_not_a_month_of_hourly_rows(client, finance_user):
    play_a_month_end_with_late_and_closed_intervals()
    UsageHour.objects.filter(hour__lt=at("2026-11-01 00:00")).update(unit_seconds=0)  # the level must be what is read
    client.force_login(finance_user)
    answer = client.get("/api/billing/usage/", {"start": "2026-10-01", "end": "2026-10-31", "by": "team"}).json()
    assert {row["team"]: row["gpu_hours"] for row in answer["rows"]} == {"vision": "2.00", "speech": "1.00"}


def test_the_overview_is_worked_out_with_the_cyclic_collector_paused_and_turns_it_back_on(monkeypatch):
    import gc

    from billing.usage import overview

    seen: list[bool] = []
    tallied = overview._all_accounts_month

    def all_accounts_month(**kwargs: dt.datetime) -> object:
        seen.append(gc.isenabled())
        return tallied(**kwargs)

    monkeypatch.setattr(overview, "_all_accounts_month", all_accounts_month)
    enabled = gc.isenabled()
    gc.enable()
    try:
        overview.finance_overview(month=dt.date(2026, 10, 1))
        assert seen == [False, False] and gc.isenabled()
    finally:
        if not enabled:
            gc.disable()

"""End to end through the metering engine: pods' run intervals become rollups, and the month's
statement bills them; with the flavor's idle policy set to share, idle capacity is split among
the teams by guarantee, and teams plus unallocated equal the metered capacity exactly."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from billing import metering
from billing.models import CapacityHour, IdlePolicy, StatementLine
from billing.statements.services import statement_close
from tests.billing.factories import rate
from tests.billing.metering_helpers import at, make_interval, make_workload
from tests.factories import FlavorFactory, QuotaGrantFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_intervals_metered_into_rollups_are_billed_and_idle_capacity_is_shared_by_guarantee(finance_user):
    h100 = FlavorFactory.create(name="H100 80GB", slug="h100-80gb", capacity_units=16)
    rate(h100, "2.00", effective_from=at("2026-09-01 00:00"))
    IdlePolicy.objects.create(flavor=h100, mode=IdlePolicy.Mode.SHARE_BY_GUARANTEE)
    vision, speech = TeamFactory.create(slug="vision"), TeamFactory.create(slug="speech")
    QuotaGrantFactory(team=vision, flavor=h100, units=4, valid_from=at("2026-09-01 00:00"))
    QuotaGrantFactory(team=speech, flavor=h100, units=12, valid_from=at("2026-09-01 00:00"))
    alice = UserFactory.create(username="alice")
    # Across midnight: one hour of 2 GPUs in October.
    make_interval(make_workload(team=vision, owner=alice, flavor=h100, units=2), at("2026-10-10 23:30"),
                  at("2026-10-11 00:30"))
    # Across the month's end: only its first hour is October's.
    make_interval(make_workload(team=speech, owner=alice, flavor=h100, units=1, name="eval"), at("2026-10-31 23:00"),
                  at("2026-11-01 01:00"))
    metering.rollups_refresh(until=at("2026-11-02 00:00"))

    statement = statement_close(actor=finance_user, month=dt.date(2026, 10, 1))

    usage = {(line.account_slug, line.guaranteed_unit_seconds, line.amount)
             for line in statement.lines.filter(kind=StatementLine.Kind.USAGE)}
    assert usage == {("vision", 7200, Decimal("4.00")), ("speech", 3600, Decimal("2.00"))}
    capacity = sum(CapacityHour.objects.filter(hour__gte=statement.period_start, hour__lt=statement.period_end)
                   .values_list("unit_seconds", flat=True))
    assert capacity > 0
    shares = {line.account_slug: line.guaranteed_unit_seconds
              for line in statement.lines.filter(kind=StatementLine.Kind.IDLE_SHARE)}
    idle = capacity - 7200 - 3600
    assert sum(shares.values()) + sum(statement.lines.filter(kind=StatementLine.Kind.UNALLOCATED)
                                      .values_list("guaranteed_unit_seconds", flat=True)) == idle
    # Guarantees of 4 and 12 units: a quarter and three quarters of the idle capacity, to the second.
    assert abs(shares["vision"] - idle / 4) <= 1 and abs(shares["speech"] - 3 * idle / 4) <= 1
    every_line = sum(line.guaranteed_unit_seconds + line.borrowed_unit_seconds for line in statement.lines.all())
    assert every_line == capacity  # conservation, exactly
    idle_charged = sum(line.amount for line in statement.lines.filter(kind=StatementLine.Kind.IDLE_SHARE))
    assert statement.charged_total == Decimal("6.00") + idle_charged

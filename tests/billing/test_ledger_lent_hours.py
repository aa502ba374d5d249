"""Lent hours are rolled up when metering refreshes an hour (LentHour), by the one rule in
`billing.ledger`: a team that borrowed a flavor in an hour lent none of it in that hour, however
idle its guarantee looks over the whole hour. Numbers are hand-computed in unit-seconds."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from billing import ledger, metering
from billing.models import LentHour
from tests.billing.metering_helpers import account, at, make_interval, make_workload
from tests.factories import FlavorFactory, QuotaGrantFactory, TeamFactory, UserFactory

HOUR = (at("2026-10-06 10:00"), at("2026-10-06 11:00"))
HALF = at("2026-10-06 10:30")


def test_a_team_that_borrowed_in_an_hour_lends_none_of_that_flavor_in_it():
    hour = HOUR[0]
    # Vision (account 1) is guaranteed 4 and ran 4 on it for half the hour, then borrowed 2 for that
    # half; Speech (2) is guaranteed 2 and idle; Audio (3) has no guarantee and borrowed 1 all hour.
    usage = [(hour, 1, 7, False, 4 * 1800), (hour, 1, 7, True, 2 * 1800), (hour, 3, 7, True, 3600)]
    guarantees = [(hour, 1, 7, 4 * 3600, True), (hour, 2, 7, 2 * 3600, True)]
    # Borrowed 3,600 + 3,600 = 7,200. Vision's guarantee looks 7,200 idle over the hour, but it was
    # itself borrowing: only Speech lent, min(7,200, its idle 7,200) = 7,200. (The old rule split it
    # 3,600 : 3,600 and credited Vision with lending to itself.)
    assert ledger.lent_rows(usage=usage, guarantees=guarantees) == {(hour, 2, 7): 7_200}
    # Alone, the borrower's idle-looking guarantee lent nothing: nobody lent that borrowing.
    assert ledger.lent_rows(usage=usage[:2], guarantees=guarantees[:1]) == {}
    # Another flavor or another hour of the same team is not touched by the rule.
    later = hour + dt.timedelta(hours=1)
    assert ledger.lent_rows(usage=[*usage, (later, 3, 7, True, 600)],
                            guarantees=[*guarantees, (later, 1, 7, 4 * 3600, True), (hour, 1, 8, 3600, True)]) == {
        (hour, 2, 7): 7_200, (later, 1, 7): 600}


@pytest.fixture
def borrowing_lender(db):
    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=8)
    vision, speech, audio = (TeamFactory.create(slug=s, name=s.title()) for s in ("vision", "speech", "audio"))
    for team, units in ((vision, 4), (speech, 2)):
        QuotaGrantFactory.create(team=team, flavor=h100, units=units, valid_from=at("2026-09-01 00:00"))
    alice = UserFactory.create(username="alice")
    make_interval(make_workload(team=vision, owner=alice, flavor=h100, units=4), HALF, HOUR[1])
    make_interval(make_workload(team=vision, owner=alice, flavor=h100, units=2, on_borrowed=True), HALF, HOUR[1])
    make_interval(make_workload(team=audio, owner=alice, flavor=h100, units=1, on_borrowed=True), *HOUR)
    return h100, vision, speech, audio


def test_the_ledger_never_credits_a_borrower_with_lending_its_own_borrowing(borrowing_lender):
    h100, vision, speech, audio = borrowing_lender
    metering.rollups_refresh(until=HOUR[0])
    metering.rollups_refresh(until=at("2026-10-06 10:20"))
    # Mid-hour only Audio borrowed (1 × 1,200 s) and Vision's 4 were idle: Vision lent, 4 : 2 of it.
    assert ledger.lent(start=HOUR[0], end=HOUR[1]) == {(account(vision).pk, h100.pk): 800,
                                                        (account(speech).pk, h100.pk): 400}
    metering.rollups_refresh(until=HOUR[1])

    # Once Vision borrowed in the hour, the hour's 7,200 borrowed unit-seconds were all Speech's.
    assert ledger.lent(start=HOUR[0], end=HOUR[1]) == {(account(speech).pk, h100.pk): 7_200}
    assert ledger.lent(start=HOUR[0], end=HOUR[1], account_ids=[account(vision).pk]) == {}
    assert list(LentHour.objects.values_list("hour", "account_id", "flavor_id", "unit_seconds")) == [
        (HOUR[0], account(speech).pk, h100.pk, 7_200)]
    assert metering.recompute(start=HOUR[0], end=HOUR[1]) == []


def test_a_teams_lent_hours_are_one_query_over_its_own_rows(borrowing_lender, django_assert_num_queries):
    h100, _, speech, _ = borrowing_lender
    metering.rollups_refresh(until=HOUR[0])
    metering.rollups_refresh(until=HOUR[1])
    speech_id = account(speech).pk
    with django_assert_num_queries(1):
        assert ledger.lent(start=at("2026-10-01 00:00"), end=at("2026-11-01 00:00"),
                           account_ids=[speech_id]) == {(speech_id, h100.pk): 7_200}


def test_verification_reports_a_lent_row_that_differs_from_the_rule(borrowing_lender):
    _, vision, speech, _ = borrowing_lender
    metering.rollups_refresh(until=HOUR[0])
    metering.rollups_refresh(until=HOUR[1])
    LentHour.objects.filter(account=account(speech)).update(unit_seconds=3_600)
    LentHour.objects.create(hour=HOUR[0], account=account(vision), flavor_id=LentHour.objects.get().flavor_id,
                            unit_seconds=3_600)

    assert metering.recompute(start=HOUR[0], end=HOUR[1]) == [
        "2026-10-06 10:00 vision H100: the lent rollup holds 3600 unit-seconds, recomputed 0.",
        "2026-10-06 10:00 speech H100: the lent rollup holds 3600 unit-seconds, recomputed 7200.",
    ]


def test_an_interval_closed_late_in_an_old_hour_recomputes_that_hours_lent_rows(db):
    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=8)
    vision, audio = (TeamFactory.create(slug=s, name=s.title()) for s in ("vision", "audio"))
    QuotaGrantFactory.create(team=vision, flavor=h100, units=4, valid_from=at("2026-09-01 00:00"))
    alice = UserFactory.create(username="alice")
    borrowing = make_interval(make_workload(team=audio, owner=alice, flavor=h100, units=2, on_borrowed=True), HOUR[0])
    metering.rollups_refresh(until=HOUR[0])
    metering.rollups_refresh(until=at("2026-10-06 13:00"))
    assert ledger.lent(start=HOUR[0], end=HOUR[1]) == {(account(vision).pk, h100.pk): 7_200}

    # The sync learns only now that the pod ended at 10:15.
    borrowing.ended_at = at("2026-10-06 10:15")
    borrowing.save(update_fields=["ended_at"])
    metering.rollups_refresh(until=at("2026-10-06 13:05"))

    assert ledger.lent(start=HOUR[0], end=at("2026-10-06 14:00")) == {(account(vision).pk, h100.pk): 1_800}
    assert metering.recompute(start=HOUR[0], end=at("2026-10-06 14:00")) == []


def test_a_departments_pool_covers_borrowing_before_any_team_is_counted_as_its_lender():
    hour = HOUR[0]
    # Audio (3) borrowed 3 all hour; Speech (2) is guaranteed 2 and idle; departments pool 2 all hour.
    usage = [(hour, 3, 7, True, 3 * 3600)]
    guarantees = [(hour, 2, 7, 2 * 3600, True)]
    # 10,800 borrowed: the pools' 7,200 first, so Speech lent the other 3,600.
    assert ledger.lent_rows(usage=usage, guarantees=guarantees, pools={(hour, 7): 2 * 3600}) == {(hour, 2, 7): 3_600}
    # A pool as big as the borrowing leaves nothing lent by a team; a pool of another flavor or hour changes nothing.
    assert ledger.lent_rows(usage=usage, guarantees=guarantees, pools={(hour, 7): 4 * 3600}) == {}
    assert ledger.lent_rows(usage=usage, guarantees=guarantees, pools={(hour, 8): 4 * 3600, (HOUR[1], 7): 3600}) == {
        (hour, 2, 7): 7_200}


def test_metering_counts_what_was_pooled_in_each_hour_from_the_pools_history(db):
    from tenants import services as tenant_services
    from tenants.models import Department, DepartmentPool

    h100 = FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=8)
    speech, audio = (TeamFactory.create(slug=s, name=s.title()) for s in ("speech", "audio"))
    QuotaGrantFactory.create(team=speech, flavor=h100, units=2, valid_from=at("2026-09-01 00:00"))
    admin = UserFactory.create(username="root", is_platform_admin=True)
    research = tenant_services.department_save(actor=admin, department=Department(name="Research", slug="research"),
                                               pool={h100: 2})
    # The pool held 2 from 10:30 to 11:30 (a row ended and none after: as the service records a change).
    DepartmentPool.objects.filter(department=research).update(valid_from=HALF, ended_at=at("2026-10-06 11:30"))
    alice = UserFactory.create(username="alice")
    make_interval(make_workload(team=audio, owner=alice, flavor=h100, units=2, on_borrowed=True), HOUR[0],
                  at("2026-10-06 12:00"))
    metering.rollups_refresh(until=HOUR[0])
    metering.rollups_refresh(until=at("2026-10-06 12:00"))
    # 10:00: 7,200 borrowed, the pool held 2 × 1,800 = 3,600 of it, Speech lent 3,600. 11:00 the same (to 11:30).
    assert list(LentHour.objects.order_by("hour").values_list("hour", "account_id", "unit_seconds")) == [
        (HOUR[0], account(speech).pk, 3_600), (HOUR[1], account(speech).pk, 3_600)]
    assert metering.recompute(start=HOUR[0], end=at("2026-10-06 12:00")) == []
    # A stored row counting the pool as Speech's lending is caught.
    LentHour.objects.filter(hour=HOUR[0]).update(unit_seconds=7_200)
    assert metering.recompute(start=HOUR[0], end=HOUR[1]) == [
        "2026-10-06 10:00 speech H100: the lent rollup holds 7200 unit-seconds, recomputed 3600."]


BEFORE = [("billing", "0006_statements")]
AFTER = [("billing", "0007_lent_hours")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_lent_hours_of_the_hours_already_rolled_up():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    flavor = old.get_model("tenants", "Flavor").objects.create(
        name="H100", slug="h100", resource_name="nvidia.com/gpu", gpu_model="H100", capacity_units=8)
    account_model = old.get_model("billing", "Account")
    vision, speech, audio = (account_model.objects.create(slug=s, name=s.title()) for s in ("vision", "speech", "audio"))
    usage, guarantee = old.get_model("billing", "UsageHour"), old.get_model("billing", "GuaranteeHour")
    for acc, borrowed, seconds in ((vision, False, 4 * 1800), (vision, True, 2 * 1800), (audio, True, 3600)):
        usage.objects.create(hour=HOUR[0], account=acc, flavor=flavor, owner_username="alice", borrowed=borrowed,
                             fraction_numerator=1, fraction_denominator=1, unit_seconds=seconds)
    for acc, units in ((vision, 4), (speech, 2)):
        guarantee.objects.create(hour=HOUR[0], account=acc, flavor=flavor, unit_seconds=units * 3600, lends_idle=True)

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps

    assert list(new.get_model("billing", "LentHour").objects.values_list("hour", "account_id", "unit_seconds")) == [
        (HOUR[0], speech.pk, 7_200)]
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

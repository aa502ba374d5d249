"""Usage history outlives what produced it: deleting a workload, template, user or team never
deletes or changes metered hours; the verify command says when rollups and intervals disagree."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management import CommandError, call_command
from django.db.models import ProtectedError

from billing import metering
from billing.models import Account, GuaranteeHour, UsageHour
from billing.periods import month_bounds
from jobs.models import RunInterval, WorkloadTemplate
from portal.models import User
from tests.billing.metering_helpers import account, at, make_interval, make_workload, total, usage
from tests.factories import FlavorFactory, QuotaGrantFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db
OCTOBER = month_bounds(dt.date(2026, 10, 1))


@pytest.fixture
def h100(db):
    return FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=8)


@pytest.fixture
def vision(db):
    return TeamFactory.create(slug="vision", name="Vision", cost_center="CC-100")


@pytest.fixture
def alice(db):
    return UserFactory.create(username="alice")


def _rows() -> list[tuple[object, ...]]:
    return sorted(UsageHour.objects.values_list("hour", "account_id", "flavor_id", "owner_username", "borrowed",
                                                "unit_seconds"))


def test_an_account_is_made_with_its_team_and_follows_its_name_and_cost_center(vision):
    made = account(vision)
    assert (made.slug, made.name, made.cost_center, made.team_id) == ("vision", "Vision", "CC-100", vision.pk)

    vision.name, vision.cost_center = "Computer Vision", "CC-200"
    vision.save()

    made.refresh_from_db()
    assert (made.name, made.cost_center) == ("Computer Vision", "CC-200")
    assert Account.for_team(vision) == made
    assert Account.objects.count() == 1


def test_deleting_a_workload_keeps_its_intervals_and_hours(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100, units=2)
    make_interval(workload, at("2026-10-03 10:00"), at("2026-10-03 12:00"))
    metering.rollups_refresh(until=at("2026-10-04 00:00"))
    before = _rows()

    workload.delete()
    metering.rollups_refresh(until=at("2026-10-05 00:00"))

    interval = RunInterval.objects.get()
    assert interval.workload is None and interval.team == vision and interval.owner_username == "alice"
    assert _rows() == before and total() == 2 * 2 * 3600
    assert metering.recompute(start=OCTOBER[0], end=OCTOBER[1]) == []


def test_deleting_a_running_workload_ends_its_pods_then_and_keeps_what_they_used(h100, vision, alice, monkeypatch):
    workload = make_workload(team=vision, owner=alice, flavor=h100)
    make_interval(workload, at("2026-10-03 10:00"))
    monkeypatch.setattr("django.utils.timezone.now", lambda: at("2026-10-03 10:30"))

    workload.delete()
    metering.rollups_refresh(until=at("2026-10-03 10:30"))
    monkeypatch.setattr("django.utils.timezone.now", lambda: at("2026-10-05 00:00"))
    metering.rollups_refresh()

    assert RunInterval.objects.get().ended_at == at("2026-10-03 10:30")
    assert usage() == {at("2026-10-03 10:00"): 1800}  # not metered on for ever by a pod nobody will read again


def test_deleting_a_template_is_refused_while_workloads_use_it_and_never_touches_hours(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100)
    make_interval(workload, at("2026-10-03 10:00"), at("2026-10-03 11:00"))
    metering.rollups_refresh(until=at("2026-10-04 00:00"))
    before = _rows()
    template = WorkloadTemplate.objects.get()

    with pytest.raises(ProtectedError):
        template.delete()
    workload.delete()
    template.delete()
    metering.rollups_refresh(until=at("2026-10-05 00:00"))

    assert _rows() == before and total() == 3600


def test_deleting_a_user_keeps_their_name_on_the_hours(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100)
    make_interval(workload, at("2026-10-03 10:00"), at("2026-10-03 11:00"))
    metering.rollups_refresh(until=at("2026-10-04 00:00"))
    before = _rows()

    workload.delete()
    User.objects.filter(pk=alice.pk).delete()
    metering.rollups_refresh(until=at("2026-10-05 00:00"))

    assert RunInterval.objects.get().owner is None
    assert _rows() == before and UsageHour.objects.get().owner_username == "alice"
    assert metering.recompute(start=OCTOBER[0], end=OCTOBER[1]) == []


def test_a_team_deleted_mid_month_keeps_its_account_hours_and_guarantees(h100, vision, alice, monkeypatch):
    QuotaGrantFactory.create(team=vision, flavor=h100, units=4, valid_from=at("2026-09-01 00:00"))
    workload = make_workload(team=vision, owner=alice, flavor=h100, units=2)
    make_interval(workload, at("2026-10-10 08:00"), at("2026-10-10 10:00"))
    make_interval(workload, at("2026-10-15 09:00"))  # still running when the team goes
    metering.rollups_refresh(until=at("2026-10-10 00:00"))
    metering.rollups_refresh(until=at("2026-10-15 10:00"))
    kept = account(vision)
    guaranteed = GuaranteeHour.objects.filter(account=kept).count()
    assert guaranteed == (15 - 10) * 24 + 10  # from the first refresh's hour to 10:00 on the 15th

    monkeypatch.setattr("django.utils.timezone.now", lambda: at("2026-10-15 10:00"))
    vision.delete()
    monkeypatch.setattr("django.utils.timezone.now", lambda: at("2026-11-02 00:00"))
    metering.rollups_refresh()

    kept.refresh_from_db()
    assert kept.team is None and kept.team_deleted_at == at("2026-10-15 10:00")
    assert (kept.slug, kept.name, kept.cost_center) == ("vision", "Vision", "CC-100")
    assert total(account=kept) == 2 * 2 * 3600 + 2 * 3600
    assert GuaranteeHour.objects.filter(account=kept).count() == guaranteed
    assert metering.recompute(start=OCTOBER[0], end=OCTOBER[1]) == []


def test_billing_verify_passes_when_the_rollups_equal_a_recomputation(h100, vision, alice, capsys):
    make_interval(make_workload(team=vision, owner=alice, flavor=h100), at("2026-10-03 10:00"), at("2026-10-03 11:00"))
    metering.rollups_refresh(until=at("2026-11-01 00:00"))

    call_command("billing_verify", "--month", "2026-10")

    assert "equal a recomputation" in capsys.readouterr().out


def test_billing_verify_fails_with_the_difference_in_words(h100, vision, alice, capsys):
    make_interval(make_workload(team=vision, owner=alice, flavor=h100), at("2026-10-03 10:00"), at("2026-10-03 11:00"))
    metering.rollups_refresh(until=at("2026-11-01 00:00"))
    UsageHour.objects.update(unit_seconds=100)

    with pytest.raises(CommandError) as failed:
        call_command("billing_verify", "--start", "2026-10-03T00:00", "--end", "2026-10-04T00:00")

    assert failed.value.returncode == 1
    # the hourly row, and the monthly level and the flavor's hourly use that no longer add up to it
    assert "3 difference(s)" in str(failed.value)
    expected = ("2026-10-03 10:00 vision H100 alice guaranteed no rate 1/1: the rollup holds 100 unit-seconds, "
                "recomputed 3600.")
    assert expected in capsys.readouterr().out


@pytest.mark.parametrize(("arguments", "sentence"), [
    (["--month", "October"], "is not a month"),
    (["--start", "2026-10-02T00:00", "--end", "2026-10-01T00:00"], "must come after its start"),
    ([], "Give the period"),
    (["--month", "2026-10", "--start", "2026-10-01T00:00"], "not both"),
])
def test_billing_verify_refuses_a_period_it_cannot_read(arguments, sentence):
    with pytest.raises(CommandError, match=sentence):
        call_command("billing_verify", *arguments)

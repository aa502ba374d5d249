"""GPU energy per team and hour: metered from telemetry once each hour is over, idempotent, patient
with an outage, and read back as kWh and kg CO₂e by one rounding rule."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured

from billing import energy
from billing.models import EnergyHour, EnergyState
from portal.health import ENERGY_METER, heartbeat_at
from portal.metrics import reset_metrics
from portal.metrics.base import kwh
from portal.metrics.prometheus import PrometheusMetrics
from portal.metrics.simulated import SimulatedMetrics, SimulatedPod
from portal.settings import _emission_factor
from tests.billing.factories import account
from tests.conftest import login
from tests.helpers import api

pytestmark = pytest.mark.django_db
UTC = dt.UTC
NOW = dt.datetime(2026, 10, 20, 12, 20, tzinfo=UTC)
# An H100 (700 W) half busy: 12 % idle draw and 80 % of the limit at full engine, 364 W.
WATTS = 700 * (0.12 + 0.80 * 0.5)


@pytest.fixture
def door(team):
    """One of the team's H100s, half busy from 08:00 to 10:00 on the 20th; another team's pod beside."""
    pods = [SimulatedPod(team.namespace, "wl-1-a", "training", 1, dt.datetime(2026, 10, 20, 8, tzinfo=UTC).timestamp(),
                         running=False, ended_at=dt.datetime(2026, 10, 20, 10, tzinfo=UTC).timestamp(),
                         unit_milliwatts=700_000),
            SimulatedPod("gp-somebody-else", "wl-9-a", "training", 1, NOW.timestamp() - 3 * 3600, unit_milliwatts=700_000)]
    door = SimulatedMetrics(pods=lambda: pods, clock=lambda: NOW.timestamp())
    door.set_engine_active(namespace=team.namespace, pod="wl-1-a", percent=50)
    reset_metrics(door)
    EnergyState.objects.create(pk=1, metered_through=dt.datetime(2026, 10, 20, 6, tzinfo=UTC))
    yield door
    reset_metrics(None)


def test_each_complete_hour_is_metered_once_per_team(team, door):
    vision = account(team)
    assert energy.energy_meter(now=NOW) == 6  # 06:00 to 12:00; the open hour waits
    rows = {row.hour.hour: row.watt_hours for row in EnergyHour.objects.filter(account=vision)}
    assert set(rows) == {8, 9}
    assert all(value == pytest.approx(Decimal(WATTS), abs=Decimal("0.01")) for value in rows.values())
    assert EnergyHour.objects.count() == 2  # nobody's namespace has no account and is not kept
    assert EnergyState.objects.get().metered_through == dt.datetime(2026, 10, 20, 12, tzinfo=UTC)

    assert heartbeat_at(ENERGY_METER) == NOW  # read up to the last complete hour: the alert's sign of life
    assert energy.energy_meter(now=NOW) == 0  # twice is once
    assert energy.energy_meter(now=NOW + dt.timedelta(hours=1)) == 1
    assert {row.hour.hour for row in EnergyHour.objects.filter(account=vision)} == {8, 9}


def test_a_teams_month_is_its_metered_hours_in_kwh_and_kg_co2e_by_one_rounding(team, door, settings):
    settings.PORTAL_EMISSION_FACTOR_KG_PER_KWH = Decimal("0.4")
    energy.energy_meter(now=NOW)
    month = energy.energy_report(accounts=[account(team)], start=dt.datetime(2026, 10, 1, tzinfo=UTC),
                                 end=dt.datetime(2026, 11, 1, tzinfo=UTC))
    assert [(t.slug, t.kwh) for t in month.teams] == [("vision", Decimal("0.73"))]
    assert month.kwh == Decimal("0.73")  # 728 Wh
    assert month.kg_co2e == Decimal("0.29")  # 0.728 kWh × 0.4, rounded once
    assert month.through == dt.datetime(2026, 10, 20, 12, tzinfo=UTC) and not month.unavailable
    assert kwh(Decimal("1234.565")) == Decimal("1.23") and kwh(Decimal("1235.000")) == Decimal("1.24")


def test_an_outage_leaves_the_hours_for_a_later_run_and_says_why(team, door):
    reset_metrics(PrometheusMetrics("http://127.0.0.1:9", timeout=0.5, max_attempts=1))
    assert energy.energy_meter(now=NOW) == 0
    state = EnergyState.objects.get()
    assert state.metered_through == dt.datetime(2026, 10, 20, 6, tzinfo=UTC) and "127.0.0.1:9" in state.unavailable
    assert not EnergyHour.objects.exists() and heartbeat_at(ENERGY_METER) is None
    month = energy.energy_report(accounts=[account(team)], start=dt.datetime(2026, 10, 1, tzinfo=UTC),
                                 end=dt.datetime(2026, 11, 1, tzinfo=UTC))
    assert month.kwh == 0 and month.through == dt.datetime(2026, 10, 20, 6, tzinfo=UTC)

    reset_metrics(door)  # Prometheus is back: the hours it missed are read now
    assert energy.energy_meter(now=NOW) == 6
    assert EnergyState.objects.get().unavailable == ""
    assert EnergyHour.objects.filter(account=account(team)).count() == 2


def test_a_long_gap_is_caught_up_a_bounded_number_of_hours_per_run(team, door):
    EnergyState.objects.filter(pk=1).update(metered_through=NOW - dt.timedelta(days=3, minutes=20))
    assert energy.energy_meter(now=NOW) == energy.MAX_HOURS_PER_RUN
    assert energy.energy_meter(now=NOW) == 72 - energy.MAX_HOURS_PER_RUN
    assert EnergyHour.objects.filter(account=account(team)).count() == 2


def test_without_telemetry_there_is_no_energy_and_the_page_says_so(team, settings):
    from portal.metrics.off import NoMetrics

    reset_metrics(NoMetrics())
    try:
        assert energy.energy_meter(now=NOW) == 0
        month = energy.energy_report(accounts=[account(team)], start=NOW - dt.timedelta(days=1), end=NOW)
        assert month.unavailable == "GPU power telemetry is not set up."
    finally:
        reset_metrics(None)


@pytest.mark.parametrize(("raw", "expected"), [("", None), ("0.233", Decimal("0.233")), ("0", Decimal(0))])
def test_the_emission_factor_is_a_number_of_kg_per_kwh_or_nothing(raw, expected):
    assert _emission_factor(raw) == expected


@pytest.mark.parametrize("raw", ["abc", "-0.1", "7", "NaN", "Infinity"])
def test_a_wrong_emission_factor_stops_the_start_in_words(raw):
    with pytest.raises(ImproperlyConfigured, match="kg CO₂e per kWh"):
        _emission_factor(raw)


def test_the_usage_page_and_the_api_give_the_same_kwh_and_only_to_who_may_see_it(
        team, other_team, member, outsider, finance_user, door, settings):
    settings.PORTAL_EMISSION_FACTOR_KG_PER_KWH = Decimal("0.4")
    energy.energy_meter(now=NOW)
    page = login(member).get("/billing/teams/vision/?month=2026-10").content.decode()
    assert "0.73 kWh" in page and "0.29 kg CO₂e" in page and "metered through 20 Oct 12:00" in page

    mine = api(member).get("/api/billing/usage/?month=2026-10").json()["energy"]
    assert mine["kwh"] == "0.73" and mine["kg_co2e"] == "0.29" and mine["emission_factor_kg_per_kwh"] == "0.4000"
    assert mine["teams"] == [{"team": "vision", "kwh": "0.73", "kg_co2e": "0.29"}]
    assert mine["metered_through"].startswith("2026-10-20T12:00:00")
    assert api(outsider).get("/api/billing/usage/?month=2026-10").json()["energy"]["teams"] == []
    assert api(outsider).get("/api/billing/usage/?month=2026-10&team=vision").status_code == 404
    assert login(outsider).get("/billing/teams/vision/?month=2026-10").status_code == 404
    assert [t["team"] for t in api(finance_user).get("/api/billing/usage/?month=2026-10").json()["energy"]["teams"]] == [
        "vision"]
    overview = login(finance_user).get("/billing/finance/?month=2026-10").content.decode()
    assert '<td class="num" data-testid="row-energy">0.73</td>' in overview
    assert '<span class="stat-value">0.73 kWh</span><span class="stat-label">GPU energy, 0.29 kg CO₂e' in overview


def test_a_page_says_why_there_is_no_energy_before_the_first_hour_is_metered(team, member, door):
    EnergyState.objects.filter(pk=1).update(metered_through=None)
    page = login(member).get("/billing/teams/vision/?month=2026-10").content.decode()
    assert "GPU energy: Not metered yet: energy is read once each hour is over." in page


def test_a_closed_month_keeps_each_teams_energy_sealed_on_its_page_csv_pdf_and_api(
        team, lead, finance_user, door, settings, flavor):
    from django.db import DatabaseError, transaction

    from billing.models import StatementEnergy
    from billing.statements import services as statements
    from tests.billing.factories import rate, usage

    settings.PORTAL_EMISSION_FACTOR_KG_PER_KWH = Decimal("0.4")
    h100 = rate(flavor, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    usage(account=account(team), flavor=flavor, hour=dt.datetime(2026, 10, 20, 8, tzinfo=UTC), gpu_seconds=7200, rate=h100)
    energy.energy_meter(now=NOW)
    statement = statements.statement_close(actor=finance_user, month=dt.date(2026, 10, 1))
    (row,) = StatementEnergy.objects.filter(statement=statement)
    assert (row.account_slug, row.kwh, row.kg_co2e, row.emission_factor) == ("vision", Decimal("0.73"), Decimal("0.29"),
                                                                             Decimal("0.4"))

    settings.PORTAL_EMISSION_FACTOR_KG_PER_KWH = Decimal("0.9")  # a later factor changes no closed month
    page = login(lead).get("/billing/statements/2026-10/").content.decode()
    assert "GPU energy: 0.73 kWh, 0.29 kg CO₂e at 0.4 kg per kWh" in page
    assert "metered through 2026-10-20 12:00 when the month closed" in page
    csv = login(finance_user).get("/billing/statements/2026-10/csv/").content.decode().splitlines()
    assert "energy,2026-10,USD,vision,Vision,,,,,,,,,,,,,,,,0.73,0.29,,," in [line.replace("CC-100", "") for line in csv]
    assert csv[-1].startswith("total_energy,2026-10,USD,") and csv[-1].endswith(",0.73,0.29,,,")
    body = api(lead).get("/api/billing/statements/2026-10/").json()
    assert (body["kwh"], body["kg_co2e"]) == ("0.73", "0.29")
    assert [(t["team"], t["kwh"]) for t in body["teams"]] == [("vision", "0.73")]

    with pytest.raises(DatabaseError, match="a closed statement never changes"), transaction.atomic():
        StatementEnergy.objects.filter(pk=row.pk).update(kwh=Decimal("0.01"))
    with pytest.raises(DatabaseError, match="a closed statement never changes"), transaction.atomic():
        row.delete()

"""Allocated vs busy GPU-hours per team and month, next to cost: the rollups against telemetry."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from billing.usage.efficiency import team_month_efficiency
from portal.metrics import reset_metrics
from portal.metrics.simulated import SimulatedMetrics, SimulatedPod
from tests.billing.factories import account, rate, usage
from tests.conftest import login
from tests.factories import FlavorFactory

pytestmark = pytest.mark.django_db
UTC = dt.UTC
NOW = dt.datetime(2026, 10, 20, 12, tzinfo=UTC)


@pytest.fixture
def half_busy(team):
    """One of the team's GPUs, half busy for the two hours from 08:00 on the 20th."""
    pod = SimulatedPod(team.namespace, "wl-1-a", "training", 1, NOW.timestamp() - 4 * 3600, running=False,
                       ended_at=NOW.timestamp() - 2 * 3600)
    door = SimulatedMetrics(pods=lambda: [pod], clock=lambda: NOW.timestamp())
    door.set_engine_active(namespace=team.namespace, pod="wl-1-a", percent=50)
    reset_metrics(door)
    yield door
    reset_metrics(None)


def test_a_team_that_held_four_gpu_hours_and_used_one_is_25_percent_busy(team, flavor, half_busy):
    half_busy.pods = lambda: [SimulatedPod(team.namespace, "wl-1-a", "training", 2, NOW.timestamp() - 4 * 3600,
                                           running=False, ended_at=NOW.timestamp() - 2 * 3600)]
    half_busy.set_engine_active(namespace=team.namespace, pod="wl-1-a", percent=25)
    vision = account(team)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 20, 8, tzinfo=UTC), gpu_seconds=7200)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 20, 9, tzinfo=UTC), gpu_seconds=7200)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 9, 30, 9, tzinfo=UTC), gpu_seconds=7200)  # another month
    found = team_month_efficiency(team=team, account=vision, month=dt.date(2026, 10, 1), cost=Decimal("8.00"), now=NOW)
    assert found.allocated_hours == 4
    assert found.busy_hours == pytest.approx(1.0, abs=0.01)
    assert found.coverage == pytest.approx(100, abs=0.3)
    assert found.percent == pytest.approx(25, abs=0.3)
    assert found.idle_cost == pytest.approx(Decimal("6.00"), abs=Decimal("0.03"))


def test_hours_without_telemetry_are_neither_busy_nor_idle(team, flavor, half_busy):
    """Four unit-hours held, telemetry for two of them (one GPU, half busy): 50 % busy over the
    covered half, and only the covered half's idle time is priced (the old figure: 25 % busy,
    6.00 of 8.00 idle, blamed the team for the exporter's silence)."""
    vision = account(team)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 20, 8, tzinfo=UTC), gpu_seconds=7200)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 20, 9, tzinfo=UTC), gpu_seconds=7200)
    found = team_month_efficiency(team=team, account=vision, month=dt.date(2026, 10, 1), cost=Decimal("8.00"), now=NOW)
    assert found.covered_hours == pytest.approx(2.0, abs=0.01)
    assert found.coverage == pytest.approx(50, abs=0.3)
    assert found.percent == pytest.approx(50, abs=0.3)
    assert found.idle_cost == pytest.approx(Decimal("2.00"), abs=Decimal("0.03"))


def test_a_month_of_history_with_no_telemetry_at_all_has_no_efficiency_figure(team, flavor, half_busy):
    half_busy.pods = list  # the runs predate telemetry (or the exporter was down all month)
    vision = account(team)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 3, 8, tzinfo=UTC), gpu_seconds=36000)
    found = team_month_efficiency(team=team, account=vision, month=dt.date(2026, 10, 1), cost=Decimal("100.00"), now=NOW)
    assert found.allocated_hours == 10
    assert found.percent is None and found.idle_cost is None
    assert found.unavailable == "No GPU metrics for this month."


def test_no_metrics_is_said_instead_of_a_figure(team, flavor, half_busy):
    half_busy.set_outage(True)
    found = team_month_efficiency(team=team, account=account(team), month=dt.date(2026, 10, 1), cost=Decimal(0), now=NOW)
    assert found.percent is None and found.unavailable == "No GPU metrics for this month."


def test_the_team_usage_page_shows_efficiency_next_to_cost_and_is_404_to_another_team(team, lead, outsider, gpu_metrics):
    page = login(lead).get(f"/billing/teams/{team.slug}/").content.decode()
    assert 'data-testid="efficiency"' in page and "GPU efficiency" in page
    assert login(outsider).get(f"/billing/teams/{team.slug}/").status_code == 404


def test_the_team_page_shows_the_months_allocated_and_busy_hours_next_to_cost(team, lead, outsider, flavor, half_busy):
    vision = account(team)
    price = rate(flavor, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 20, 8, tzinfo=UTC), gpu_seconds=7200, rate=price)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 20, 9, tzinfo=UTC), gpu_seconds=7200, rate=price)
    asked = []
    real = half_busy.device_hours

    def counted(**kwargs):
        asked.append(kwargs)
        return real(**kwargs)

    half_busy.device_hours = counted
    client = login(lead)
    assert f'hx-get="/billing/teams/{team.slug}/efficiency/"' in client.get(f"/teams/{team.slug}/").content.decode()
    fragment = client.get(f"/billing/teams/{team.slug}/efficiency/?month=2026-10", HTTP_HX_REQUEST="true")
    body = fragment.content.decode()
    assert fragment.status_code == 200 and "<html" not in body and len(asked) == 1
    assert "GPU efficiency in October 2026" in body
    assert "4.0 device-hours held by the team's pods" in body and "1.0 device-hours of GPU engine active" in body
    assert 'data-testid="efficiency-coverage">2.0 device-hours reported (50 % of the allocated time)' in body
    assert "hours without metrics are neither busy nor idle" in body
    assert 'data-testid="efficiency-percent">50 % busy</dd>' in body
    assert 'data-testid="efficiency-cost">8.00 USD, of which idle GPUs ≈ 2.0' in body
    assert login(outsider).get(f"/billing/teams/{team.slug}/efficiency/").status_code == 404


def test_the_team_page_efficiency_refuses_a_month_that_is_not_one_in_words(team, lead):
    response = login(lead).get(f"/billing/teams/{team.slug}/efficiency/?month=someday")
    assert response.status_code == 400 and "month" in response.content.decode().lower()


def test_a_memory_sliced_gpu_is_one_device_whatever_gib_the_pod_holds(team, half_busy):
    """A pod holding all 16 GiB of a T4 (aliyun.com/gpu-mem, 1/16 per unit) for 2 h at 50 %: two
    device-hours held, half busy, half the cost idle (the old figure compared 32 GiB-hours with 2
    device-hours: coverage 6.25 % and idle 0.25 of 8.00)."""
    t4 = FlavorFactory.create(name="T4 16GB by GiB", slug="t4-gib", resource_name="aliyun.com/gpu-mem",
                              sharing_mode="gpu-memory", gpu_model="NVIDIA T4", fraction_denominator=16, capacity_units=64)
    vision = account(team)
    usage(account=vision, flavor=t4, hour=dt.datetime(2026, 10, 20, 8, tzinfo=UTC), unit_seconds=16 * 3600)
    usage(account=vision, flavor=t4, hour=dt.datetime(2026, 10, 20, 9, tzinfo=UTC), unit_seconds=16 * 3600)
    found = team_month_efficiency(team=team, account=vision, month=dt.date(2026, 10, 1), cost=Decimal("8.00"), now=NOW)
    assert found.allocated_hours == 2
    assert found.coverage == pytest.approx(100, abs=0.3) and found.percent == pytest.approx(50, abs=0.3)
    assert found.idle_cost == pytest.approx(Decimal("4.00"), abs=Decimal("0.03"))


def test_a_team_mixing_whole_gpus_and_memory_slices_sums_device_hours(team, flavor, half_busy):
    t4 = FlavorFactory.create(name="T4 16GB by GiB", slug="t4-gib", resource_name="aliyun.com/gpu-mem",
                              sharing_mode="gpu-memory", gpu_model="NVIDIA T4", fraction_denominator=16, capacity_units=64)
    vision = account(team)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 20, 8, tzinfo=UTC), gpu_seconds=3600)
    usage(account=vision, flavor=t4, hour=dt.datetime(2026, 10, 20, 9, tzinfo=UTC), unit_seconds=8 * 3600)
    found = team_month_efficiency(team=team, account=vision, month=dt.date(2026, 10, 1), cost=Decimal("8.00"), now=NOW)
    assert found.allocated_hours == 1.5  # an H100-hour and half a T4 for an hour


def test_a_percent_over_too_little_telemetry_is_no_headline(team, lead, flavor, half_busy):
    """The report: "87 %" busy in large type on 0.2 of 607.7 allocated device-hours."""
    vision = account(team)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 3, 8, tzinfo=UTC), gpu_seconds=100 * 3600)
    found = team_month_efficiency(team=team, account=vision, month=dt.date(2026, 10, 1), cost=Decimal("8.00"), now=NOW)
    assert found.percent == pytest.approx(50, abs=0.3) and found.coverage == pytest.approx(2, abs=0.1)
    assert not found.headline
    page = login(lead).get(f"/billing/teams/{team.slug}/?month=2026-10").content.decode()
    assert 'data-testid="efficiency-thin">GPU efficiency: too little telemetry to judge the month (2.0 of 100.0' in page
    assert '<span class="stat-value">50 %</span>' not in page

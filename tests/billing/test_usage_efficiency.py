"""Allocated vs busy GPU-hours per team and month, next to cost: the rollups against telemetry."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from billing.efficiency import team_month_efficiency
from portal.metrics import reset_metrics
from portal.metrics.simulated import SimulatedMetrics, SimulatedPod
from tests.billing.factories import account, usage
from tests.conftest import login

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
    vision = account(team)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 20, 8, tzinfo=UTC), gpu_seconds=7200)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 10, 20, 9, tzinfo=UTC), gpu_seconds=7200)
    usage(account=vision, flavor=flavor, hour=dt.datetime(2026, 9, 30, 9, tzinfo=UTC), gpu_seconds=7200)  # another month
    found = team_month_efficiency(team=team, account=vision, month=dt.date(2026, 10, 1), cost=Decimal("8.00"), now=NOW)
    assert found.allocated_hours == 4
    assert found.busy_hours == pytest.approx(1.0, abs=0.01)
    assert found.percent == pytest.approx(25, abs=0.3)
    assert found.idle_cost == pytest.approx(Decimal("6.00"), abs=Decimal("0.03"))


def test_no_metrics_is_said_instead_of_a_figure(team, flavor, half_busy):
    half_busy.set_outage(True)
    found = team_month_efficiency(team=team, account=account(team), month=dt.date(2026, 10, 1), cost=Decimal(0), now=NOW)
    assert found.percent is None and found.unavailable == "No GPU metrics for this month."


def test_the_team_usage_page_shows_efficiency_next_to_cost_and_is_404_to_another_team(team, lead, outsider, gpu_metrics):
    page = login(lead).get(f"/billing/teams/{team.slug}/").content.decode()
    assert 'data-testid="efficiency"' in page and "GPU efficiency" in page
    assert login(outsider).get(f"/billing/teams/{team.slug}/").status_code == 404

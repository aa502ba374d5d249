"""A team lead watches the budget bar on the team usage page move after a workload runs: the
status sync records the run interval, the metering engine rolls it up, the bar reads the rollups."""

from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal
from typing import Any

import pytest
from django.db.models import Sum
from django.utils import timezone

from billing import metering, periods
from billing.budgets import services as budgets
from billing.models import Rate, UsageHour
from jobs import services, sync
from jobs.models import RunInterval, Workload, WorkloadKind
from portal.kube import gateway
from portal.kube.simulated import SimulatedGateway
from tenants import reconcile
from tenants.models import Membership
from tests.browsing import SHOTS, htmx_settled, log_in, sync_api
from tests.factories import FlavorFactory, MembershipFactory, QuotaGrantFactory, TeamFactory, UserFactory
from tests.helpers import launch

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def site(simulated: SimulatedGateway) -> dict[str, Any]:
    vision = TeamFactory.create(slug="vision", name="Computer Vision")
    h100 = FlavorFactory.create(name="H100 80GB", slug="h100-80gb", resource_name="nvidia.com/gpu", capacity_units=16)
    lena = UserFactory.create(username="lena")
    alice = UserFactory.create(username="alice")
    admin = UserFactory.create(username="root", is_platform_admin=True)
    finance = UserFactory.create(username="fiona", is_finance=True)
    MembershipFactory(team=vision, user=lena, role=Membership.Role.LEAD)
    MembershipFactory(team=vision, user=alice, role=Membership.Role.MEMBER)
    QuotaGrantFactory(team=vision, flavor=h100, units=4)
    reconcile.platform_reconcile()
    reconcile.team_reconcile(team_id=vision.pk)
    vision.refresh_from_db()
    # 3,600 USD a GPU-hour is one dollar a GPU-second: a run of a few seconds moves the bar visibly.
    Rate.objects.create(flavor=h100, price_per_gpu_hour=Decimal(3600), currency="USD",
                        effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    budgets.budget_set(actor=finance, team=vision, amount="200", currency="USD")
    template = services.template_create(
        user=admin, slug="pytorch-train", name="PyTorch training", kind=WorkloadKind.TRAINING, flavors=[h100],
        image="pytorch/pytorch:2.5", command=["python", "train.py"], default_units=2, max_units=8, parameters=[],
    )
    return {"team": vision, "flavor": h100, "template": template, "alice": alice}


def test_a_lead_sees_the_budget_bar_move_after_a_workload_runs(browser, live_server, site, simulated,
                                                               django_capture_on_commit_callbacks):
    expect = sync_api.expect
    SHOTS.mkdir(parents=True, exist_ok=True)
    lena = log_in(browser, live_server, "lena")
    lena.goto(f"{live_server.url}/billing/teams/vision/")
    bar = lena.locator("[data-testid=budget-bar]")
    expect(bar.locator("[data-testid=budget-used]")).to_have_text("0.00 USD of 200.00 USD used in "
                                                                   f"{periods.current_month():%B %Y} (0 %)")
    expect(bar.locator("[data-testid=budget-forecast]")).to_have_text("Nothing spent yet this month.")
    assert bar.locator("rect").get_attribute("width") == "0"

    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(site["alice"], site["team"], site["template"], site["flavor"])
    deadline = time.monotonic() + 30
    while Workload.objects.get(pk=workload.pk).phase != Workload.Phase.SUCCEEDED:
        assert time.monotonic() < deadline, "the workload did not finish on the simulated cluster"
        gateway().advance(5)  # type: ignore[attr-defined]
        sync.sync_all()
    # The simulated cluster's clock runs ahead of the portal's (advance() moves only it), so the pod
    # may have started in the portal's future; metering counts up to the portal's now.
    started = RunInterval.objects.get(workload=workload).started_at
    while timezone.now() < started + dt.timedelta(seconds=2):
        time.sleep(0.2)
    metering.rollups_refresh()
    unit_seconds = UsageHour.objects.aggregate(total=Sum("unit_seconds"))["total"] or 0
    assert unit_seconds > 0
    spent = Decimal(unit_seconds)  # 2 GPUs × seconds × 1 USD a GPU-second
    percent = int(spent * 100 // 200)

    lena.reload()
    htmx_settled(lena)
    used = bar.locator("[data-testid=budget-used]")
    expect(used).to_contain_text(f"{spent:,.2f} USD of 200.00 USD used in")
    expect(used).to_contain_text(f"({percent} %)")
    assert bar.locator("rect").get_attribute("width") == str(min(percent, 100))
    expect(bar.locator("[data-testid=budget-forecast]")).to_contain_text("at this rate:")
    lena.screenshot(path=str(SHOTS / "budget_bar.png"), full_page=True)

    lena.click("text=Budget and alerts")
    expect(lena.locator("h1")).to_have_text("Budget of vision")
    expect(lena.locator("input[name=amount]")).to_have_count(0)  # leads see the budget; finance sets it

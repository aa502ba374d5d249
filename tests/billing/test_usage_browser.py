"""The finance journey in a real browser: the overview lists every team, and a team's page shows
its numbers and its daily chart, drawn on the server (the SVG is in the page without JavaScript);
one run's cost is the same in every part of the team page; finance sets an idle policy in place."""

from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import metering, periods
from billing.models import IdlePolicy
from jobs import services, sync
from jobs.models import RunInterval, Workload, WorkloadKind
from portal.kube import gateway
from tenants.models import Membership
from tests.billing.factories import account, rate, usage
from tests.browsing import htmx_settled, log_in, sync_api
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.helpers import launch, make_ready

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_finance_goes_from_the_overview_to_a_teams_page_and_reads_its_numbers_and_chart(browser, live_server, flavor):
    UserFactory.create(username="fiona", is_finance=True)
    vision, speech = TeamFactory.create(slug="vision", name="Vision"), TeamFactory.create(slug="speech", name="Speech")
    h100 = rate(flavor, "2.50", effective_from=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    start, _ = periods.month_bounds(periods.current_month())
    usage(account=account(vision), flavor=flavor, hour=start, gpu_seconds=8 * 3600, owner="alice", rate=h100)
    usage(account=account(vision), flavor=flavor, hour=start + dt.timedelta(hours=1), gpu_seconds=2 * 3600, owner="bob",
          borrowed=True, rate=h100)
    usage(account=account(speech), flavor=flavor, hour=start, gpu_seconds=3600, owner="sam", rate=h100)

    page = log_in(browser, live_server, "fiona")
    page.click("nav >> text=Finance")
    overview = page.locator("[data-testid=overview-teams]")
    sync_api.expect(overview).to_contain_text("Vision")
    sync_api.expect(overview).to_contain_text("Speech")
    sync_api.expect(page.locator("[data-testid=overview-total]")).to_have_text("27.50 USD")

    overview.locator("a", has_text="Vision").click()
    page.wait_for_url(f"{live_server.url}/billing/teams/vision/**")
    sync_api.expect(page.locator("[data-testid=total-hours]")).to_have_text("10.00")
    sync_api.expect(page.locator("[data-testid=total-cost]")).to_have_text("25.00 USD")
    sync_api.expect(page.locator("[data-testid=by-person]")).to_contain_text("alice")
    sync_api.expect(page.locator("[data-testid=ledger]")).to_contain_text("you borrowed 2 H100 80GB GPU-hours")
    chart = page.locator("svg[data-testid=daily-chart]")
    sync_api.expect(chart).to_be_visible()
    first_day = chart.locator("rect").first
    assert int(first_day.get_attribute("height") or 0) == 120  # the only busy day is the tallest bar
    assert first_day.bounding_box()["height"] > 50  # and the browser draws it
    assert "10.00 GPU-hours" in (chart.locator("g title").first.text_content() or "")
    assert "sam" not in page.content()


def test_one_runs_cost_reads_the_same_in_top_workloads_by_person_by_flavor_and_the_total(
        browser, live_server, team, flavor, simulated, django_capture_on_commit_callbacks):
    """The reported mismatch, on the simulated cluster whose clock runs ahead of the portal's: the
    run is rolled up, then the page is read a few seconds later; every figure stops at the same
    instant, the metering watermark."""
    lena, alice = UserFactory.create(username="lena"), UserFactory.create(username="alice")
    MembershipFactory(team=team, user=lena, role=Membership.Role.LEAD)
    MembershipFactory(team=team, user=alice, role=Membership.Role.MEMBER)
    make_ready(team, flavor, units=4)
    rate(flavor, "3600", effective_from=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))  # a dollar a GPU-second
    template = services.template_create(
        user=UserFactory.create(username="root", is_platform_admin=True), slug="train", name="Training",
        kind=WorkloadKind.TRAINING, flavors=[flavor], image="pytorch/pytorch:2.5", command=["python", "train.py"],
        default_units=2, max_units=8, parameters=[])
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(alice, team, template, flavor)
    deadline = time.monotonic() + 30
    while Workload.objects.get(pk=workload.pk).phase != Workload.Phase.SUCCEEDED:
        assert time.monotonic() < deadline, "the workload did not finish on the simulated cluster"
        gateway().advance(5)  # type: ignore[attr-defined]
        sync.sync_all()
    started = RunInterval.objects.get(workload=workload).started_at
    while timezone.now() < started + dt.timedelta(seconds=2):  # the pod may have started in the portal's future
        time.sleep(0.2)
    metering.rollups_refresh()
    time.sleep(2)  # the page is read after the refresh, while the run's end is still ahead of the portal's clock

    page = log_in(browser, live_server, "lena")
    page.goto(f"{live_server.url}/billing/teams/{team.slug}/")
    top = page.locator("[data-testid=top-workloads] tbody tr td.num").last.inner_text()
    person = page.locator("[data-testid=by-person] tbody tr td.num").last.inner_text()
    by_flavor = page.locator("[data-testid=by-flavor] tbody tr td.num").last.inner_text()
    total = page.locator("[data-testid=total-cost]").inner_text()
    assert Decimal(top) > 0
    assert top == person == by_flavor and total == f"{top} USD", (top, person, by_flavor, total)


def test_finance_shares_a_flavors_idle_capacity_from_the_rate_card_in_place(browser, live_server, flavor):
    UserFactory.create(username="fiona", is_finance=True)
    page = log_in(browser, live_server, "fiona")
    page.goto(f"{live_server.url}/billing/rates/")
    row = page.locator(f"[data-testid=idle-policy-{flavor.slug}]")
    sync_api.expect(row.locator("select")).to_have_value("apart")
    row.locator("select").select_option("share")
    row.locator("button", has_text="Save").click()
    htmx_settled(page)
    sync_api.expect(page.locator("[data-testid=idle-saved]")).to_have_text(
        "Saved: share among teams by guaranteed quota.")
    assert page.url == f"{live_server.url}/billing/rates/"  # swapped in place, no reload
    assert IdlePolicy.objects.get(flavor=flavor).mode == IdlePolicy.Mode.SHARE_BY_GUARANTEE
    page.reload()
    sync_api.expect(page.locator(f"[data-testid=idle-policy-{flavor.slug}] select")).to_have_value("share")

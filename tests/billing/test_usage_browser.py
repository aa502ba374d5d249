"""The finance journey in a real browser: the overview lists every team, and a team's page shows
its numbers and its daily chart, drawn on the server (the SVG is in the page without JavaScript)."""

from __future__ import annotations

import datetime as dt

import pytest

from billing import periods
from tests.billing.factories import account, rate, usage
from tests.browsing import log_in, sync_api
from tests.factories import TeamFactory, UserFactory

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

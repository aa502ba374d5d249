"""The Content-Security-Policy in a real browser: no page the portal serves trips it, and the
pages' own script (static/portal/portal.js) and htmx still work under it."""

from __future__ import annotations

from typing import Any

import pytest

from tenants.models import Membership
from tests.browsing import htmx_settled, log_in, sync_api
from tests.factories import FlavorFactory, MembershipFactory, QuotaGrantFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAGES = ["/", "/teams/", "/teams/vision/", "/capacity/", "/requests/", "/requests/new/", "/approvals/", "/audit/",
         "/templates/", "/launch/", "/workloads/", "/tokens/", "/notifications/", "/platform/people/", "/admin/", "/api/teams/",
         "/api/docs/", "/api/redoc/"]


@pytest.fixture
def site(db: Any) -> None:
    vision = TeamFactory(slug="vision", name="Computer Vision")
    h100 = FlavorFactory(name="H100 80GB", slug="h100-80gb", capacity_units=16)
    FlavorFactory(name="L4", slug="l4", capacity_units=8)
    root = UserFactory(username="root", is_platform_admin=True, is_staff=True)
    MembershipFactory(team=vision, user=root, role=Membership.Role.LEAD)
    QuotaGrantFactory(team=vision, flavor=h100, units=2)


def test_no_page_trips_the_content_security_policy_or_the_permissions_policy(browser, live_server, site):
    page = log_in(browser, live_server, "root")
    refused: list[str] = []
    # Chromium says so in the console when a policy refuses something, or names a feature it does not know.
    page.on("console", lambda message: refused.append(f"{page.url}: {message.text}")
            if "Content Security Policy" in message.text or "Permissions-Policy" in message.text
            or "Permissions policy" in message.text else None)
    for path in PAGES:
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
    # Redoc's "API docs by Redocly" logo comes from its CDN; kept out, as every other site is.
    assert [line for line in refused if "https://cdn.redoc.ly/" not in line] == []


def test_the_pages_own_script_and_htmx_work_under_the_policy(browser, live_server, site):
    expect = sync_api.expect
    page = log_in(browser, live_server, "root")
    page.goto(f"{live_server.url}/requests/new/")
    assert page.evaluate("() => typeof htmx") == "object"
    hidden_before = page.locator(".lines .line[hidden]").count()
    page.click("#add-line")
    expect(page.locator(".lines .line[hidden]")).to_have_count(hidden_before - 1)
    line = page.locator(".line").first
    line.locator("select[name=flavor]").select_option("h100-80gb")
    line.locator("input[name=units]").press_sequentially("3", delay=50)
    expect(line.locator("[data-testid=quota-preview]")).to_contain_text("16 units in the cluster")
    htmx_settled(page)
    bar = page.goto(f"{live_server.url}/teams/vision/")
    assert bar is not None and "Content-Security-Policy" in {k.title() for k in bar.headers}
    expect(page.locator("svg.bar rect.mine").first).to_have_attribute("width", "12")

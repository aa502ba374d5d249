"""The quota story in a real browser: Debian's Chromium driven by Playwright against a live server."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tenants import services
from tenants.models import Department, Membership, QuotaRequest
from tests.browsing import PASSWORD, SHOTS, htmx_settled, log_in, sync_api  # noqa: F401
from tests.factories import (
    FlavorFactory,
    MembershipFactory,
    QuotaGrantFactory,
    TeamFactory,
    UserFactory,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]



@pytest.fixture
def site(db: Any) -> dict[str, Any]:
    vision = TeamFactory(slug="vision", name="Computer Vision", cost_center="CC-4100")
    nlp = TeamFactory(slug="nlp", name="Language Models")
    h100 = FlavorFactory(name="H100 80GB", slug="h100-80gb", resource_name="nvidia.com/gpu", capacity_units=16)
    FlavorFactory(name="A100 1g.10gb", slug="a100-1g10gb", resource_name="nvidia.com/mig-1g.10gb", sharing_mode="mig",
                  fraction_denominator=7, capacity_units=56)
    lena = UserFactory(username="lena", first_name="Lena", last_name="Lead")
    alice = UserFactory(username="alice", first_name="Alice", last_name="Scientist")
    MembershipFactory(team=vision, user=lena, role=Membership.Role.LEAD)
    MembershipFactory(team=vision, user=alice)
    QuotaGrantFactory(team=vision, flavor=h100, units=2)
    QuotaGrantFactory(team=nlp, flavor=h100, units=8)
    return {"team": vision, "flavor": h100}


def test_the_quota_story_in_a_browser(browser, live_server, site):
    expect = sync_api.expect
    SHOTS.mkdir(parents=True, exist_ok=True)

    alice = log_in(browser, live_server, "alice")
    expect(alice.locator("h1")).to_contain_text("Alice Scientist")
    alice.screenshot(path=str(SHOTS / "dashboard.png"), full_page=True)

    alice.click("nav >> text=Request quota")
    expect(alice.locator("#id_team")).to_have_value("vision")
    first_line = alice.locator(".line").first
    first_line.locator("select[name=flavor]").select_option("h100-80gb")
    units = first_line.locator("input[name=units]")
    preview = first_line.locator("[data-testid=quota-preview]")

    units.press_sequentially("9", delay=50)
    expect(preview).to_contain_text("16 units in the cluster, 10 guaranteed, 6 free.")
    expect(preview).to_have_class(re.compile(r"\bbad\b"))
    units.fill("")
    units.press_sequentially("4", delay=50)
    expect(preview).to_contain_text("vision holds 2; after this request 6.")
    expect(preview).to_have_class(re.compile(r"\bgood\b"))

    alice.click("#add-line")
    expect(alice.locator(".line").nth(1)).to_be_visible()
    alice.fill("#id_justification", "Training the new detector on the spring data set.")
    alice.screenshot(path=str(SHOTS / "request_form.png"), full_page=True)
    alice.click("button:has-text('Submit request')")
    alice.wait_for_url(f"{live_server.url}/teams/vision/")
    qr = QuotaRequest.objects.get()
    expect(alice.locator(".flash.success")).to_contain_text(f"Request #{qr.pk} filed: +4 H100 80GB for vision")

    lena = log_in(browser, live_server, "lena")
    expect(lena.locator("[data-testid=inbox-count]")).to_contain_text("1")
    lena.click("nav >> text=Approvals")
    row = lena.locator(f"#approval-{qr.pk}")
    expect(row).to_contain_text("+4 H100 80GB")
    lena.screenshot(path=str(SHOTS / "approvals.png"), full_page=True)
    lena.evaluate("window.__noReload = 'still here'")
    row.locator("input[name=note]").fill("Enjoy")
    row.locator("button:has-text('Approve')").click()
    expect(lena.locator(f"#approval-{qr.pk} [data-testid=row-status]")).to_have_text("Approved")
    expect(lena.locator(f"#approval-{qr.pk}")).to_contain_text("Enjoy")
    assert lena.evaluate("window.__noReload") == "still here"

    lena.click(f"#approval-{qr.pk} >> text=Computer Vision")
    expect(lena.locator("[data-testid=guarantee-h100-80gb]")).to_contain_text("6 guaranteed")
    expect(lena.locator("#audit")).to_contain_text(f"lena approved request #{qr.pk}: +4 H100 80GB for vision")
    lena.screenshot(path=str(SHOTS / "team.png"), full_page=True)

    alice.reload()
    expect(alice.locator("[data-testid=unread-count]")).to_have_text("1")
    alice.click(".bell")
    expect(alice.locator("#notification-list")).to_contain_text(f"lena approved your request #{qr.pk}")


def test_a_lead_manages_members_in_place(browser, live_server, site):
    expect = sync_api.expect
    UserFactory(username="bob")
    lena = log_in(browser, live_server, "lena")
    lena.goto(f"{live_server.url}/teams/vision/")
    lena.evaluate("window.__noReload = 1")
    lena.fill("#id_username", "bob")
    lena.click("#members button:has-text('Add')")
    expect(lena.locator("#members")).to_contain_text("Added bob to vision as member.")
    lena.fill("#id_username", "nobody")
    lena.click("#members button:has-text('Add')")
    expect(lena.locator("#members [role=alert]")).to_contain_text("There is no active account “nobody” you can add")
    htmx_settled(lena)
    bob = Membership.objects.get(user__username="bob")
    with lena.expect_response(lambda r: f"/members/{bob.pk}/role/" in r.url) as answer:
        lena.select_option(f"#member-{bob.pk} select[name=role]", "lead")
    assert answer.value.status == 200, answer.value.text()
    expect(lena.locator("#members")).to_contain_text("bob is now team lead.")
    assert lena.evaluate("window.__noReload") == 1
    assert Membership.objects.get(pk=bob.pk).role == Membership.Role.LEAD


def test_a_lead_caps_the_gpus_each_person_holds_in_place(browser, live_server, site):
    from decimal import Decimal

    from tenants.models import Team

    expect = sync_api.expect
    lena = log_in(browser, live_server, "lena")
    lena.goto(f"{live_server.url}/teams/vision/")
    lena.evaluate("window.__noReload = 1")
    lena.fill("#id_person_gpu_limit", "a lot")
    lena.click("[data-testid=person-limit-form] button:has-text('Save')")
    expect(lena.locator("#members [role=alert]")).to_contain_text("“a lot” is not a number of GPUs")
    expect(lena.locator("#id_person_gpu_limit")).to_have_value("a lot")  # what was typed stays
    lena.fill("#id_person_gpu_limit", "1.5")
    lena.click("[data-testid=person-limit-form] button:has-text('Save')")
    expect(lena.locator("#members")).to_contain_text("Each person of vision may now hold at most 1.5 GPUs at once.")
    assert lena.evaluate("window.__noReload") == 1
    assert Team.objects.get(slug="vision").person_gpu_limit == Decimal("1.50")
    # A member reads the cap; there is no form for her.
    alice = log_in(browser, live_server, "alice")
    alice.goto(f"{live_server.url}/teams/vision/")
    expect(alice.locator("[data-testid=person-limit]")).to_contain_text("Each person may hold at most 1.5 GPUs at once")
    expect(alice.locator("[data-testid=person-limit-form]")).to_have_count(0)


def test_two_approval_levels_in_a_browser(browser, live_server, site):
    """The lead approves part of a request for the team, and the department's head, who is in no
    team, finds it in her inbox with what the lead approved and grants it in place."""
    admin = UserFactory.create(username="root", is_platform_admin=True)
    hana = UserFactory.create(username="hana")
    research = services.department_save(actor=admin, department=Department(name="AI Research", slug="research",
                                                                            head_approves=True), heads=[hana])
    services.team_update(actor=admin, team=site["team"], department=research)
    alice = site["team"].memberships.get(role=Membership.Role.MEMBER).user
    qr = services.quota_request_create(requester=alice, team=site["team"],
                                       lines=[services.LineInput(flavor=site["flavor"], units=4)],
                                       justification="The spring data set.")
    expect = sync_api.expect

    lena = log_in(browser, live_server, "lena")
    lena.click("nav >> text=Approvals")
    row = lena.locator(f"#approval-{qr.pk}")
    expect(row.locator("[data-testid=passes-to-head]")).to_contain_text("a head of AI Research then decides")
    row.locator(f"input[name=units-{site['flavor'].pk}]").fill("3")
    row.locator("button:has-text('Approve')").click()
    expect(lena.locator(f"#approval-{qr.pk} [data-testid=row-status]")).to_have_text("Waits for the department head")
    expect(lena.locator(f"#approval-{qr.pk} [data-testid=endorsement]")).to_contain_text("+3 of +4 H100 80GB")

    head = log_in(browser, live_server, "hana")
    expect(head.locator("[data-testid=inbox-count]")).to_contain_text("1")
    head.click("nav >> text=Approvals")
    row = head.locator(f"#approval-{qr.pk}")
    expect(row.locator("[data-testid=endorsement]")).to_contain_text("lena approved it for the team")
    expect(row.locator(f"input[name=units-{site['flavor'].pk}]")).to_have_value("3")
    head.screenshot(path=str(SHOTS / "approvals_head.png"), full_page=True)
    row.locator("button:has-text('Approve')").click()
    expect(head.locator(f"#approval-{qr.pk} [data-testid=row-status]")).to_have_text("Approved")
    assert list(QuotaRequest.objects.get(pk=qr.pk).grants.values_list("units", flat=True)) == [3]

    alice_page = log_in(browser, live_server, "alice")
    alice_page.click(".bell")
    expect(alice_page.locator("#notification-list")).to_contain_text(f"hana approved your request #{qr.pk}")

"""The portal on a phone, in a real browser (Debian's Chromium, 390 px wide): the navigation folds
behind a Menu button, no page is wider than the screen, and a lead reaches Approve and Reject.
One browser serves the whole module, to keep its seconds few."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jobs import services as job_services
from jobs.models import Workload, WorkloadKind
from portal.kube.simulated import SimulatedGateway
from portal.notifications import notify
from tenants import services as tenant_services
from tenants.models import Membership
from tenants.services import LineInput
from tests.browsing import CHROMIUM, CHROMIUM_ARGS, PASSWORD, SHOTS, log_in, sync_api
from tests.factories import FlavorFactory, MembershipFactory, TeamFactory, UserFactory
from tests.helpers import make_ready

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def site(simulated: SimulatedGateway) -> dict[str, Any]:
    vision = TeamFactory.create(slug="vision", name="Computer Vision", cost_center="CC-4100-RESEARCH-AND-DEVELOPMENT")
    h100 = FlavorFactory.create(name="H100 80GB", slug="h100-80gb", capacity_units=16)
    root = UserFactory.create(username="root", is_platform_admin=True)
    lena = UserFactory.create(username="lena", first_name="Lena", last_name="Lead")
    alice = UserFactory.create(username="alice", first_name="Alice", last_name="Scientist")
    MembershipFactory.create(team=vision, user=lena, role=Membership.Role.LEAD)
    MembershipFactory.create(team=vision, user=alice)
    make_ready(vision, h100, 4)
    template = job_services.template_create(
        user=root, slug="pytorch-train", name="PyTorch distributed training with a long name", flavors=[h100],
        kind=WorkloadKind.TRAINING, description="Single-node training with torchrun.",
        image="registry.example.com/research/pytorch/pytorch-with-extras:2.5.1-cuda12.4-cudnn9-runtime",
        command=["python", "train.py"], args=["--epochs", "{epochs}"], default_units=1, max_units=8,
        parameters=[{"name": "epochs", "type": "int", "default": 10, "min": 1, "max": 1000},
                    {"name": "image_tag", "type": "choice", "default": "2.5", "choices": ["2.4", "2.5", "2.6-nightly"]}],
    )
    qr = tenant_services.quota_request_create(
        requester=alice, team=vision, lines=[LineInput(flavor=h100, units=2)],
        justification="Training the new detector on the spring data set, which needs two more GPUs for a month.",
    )
    workload = job_services.workload_launch(user=alice, request=job_services.LaunchRequest(
        team=vision, template=template, flavor=h100, units=1, name="detector-with-a-rather-long-name-for-a-phone"))
    return {"request": qr, "template": template, "team": vision, "flavor": h100, "alice": alice, "workload": workload}


def _phone(browser: Any, live_server: Any, username: str, *, fake_clock: bool = False) -> Any:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page = context.new_page()
    if fake_clock:  # the page's timers (htmx polls, portal.js) run when the test moves this clock
        page.clock.install()
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


def _overflow(page: Any) -> int:
    return page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")


MEMBER_PAGES = ["/", "/teams/", "/teams/vision/", "/workloads/", "/launch/", "/templates/", "/requests/",
                "/requests/new/", "/notifications/", "/tokens/", "/audit/", "/billing/me/", "/no/such/page/"]


def test_on_a_phone_no_page_is_wider_than_the_screen_and_the_menu_folds(browser, live_server, site):
    expect = sync_api.expect
    SHOTS.mkdir(parents=True, exist_ok=True)
    alice = _phone(browser, live_server, "alice")
    nav, toggle = alice.locator("#site-nav"), alice.locator(".nav-toggle")
    expect(nav).to_be_hidden()
    toggle.click()
    expect(nav).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    alice.click("#site-nav >> text=Workloads")
    alice.wait_for_url(f"{live_server.url}/workloads/")

    wide = {}
    for path in [*MEMBER_PAGES, f"/workloads/{site['workload'].pk}/", f"/workloads/{site['workload'].pk}/logs/"]:
        alice.goto(f"{live_server.url}{path}")
        if _overflow(alice) > 0:
            wide[path] = _overflow(alice)
            alice.screenshot(path=str(SHOTS / f"phone{path.replace('/', '_')}.png"), full_page=True)
    assert wide == {}, f"pages wider than 390 px by so many pixels: {wide}"


def test_on_a_phone_a_lead_reaches_approve_and_reject(browser, live_server, site):
    expect = sync_api.expect
    lena = _phone(browser, live_server, "lena")
    lena.goto(f"{live_server.url}/approvals/")
    assert _overflow(lena) <= 0
    row = lena.locator(f"#approval-{site['request'].pk}")
    for name in ("Approve", "Reject"):
        button = row.get_by_role("button", name=name)
        expect(button).to_be_in_viewport()
        box = button.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    lena.screenshot(path=str(SHOTS / "phone_approvals.png"), full_page=True)
    row.get_by_role("button", name="Approve").click()
    expect(row.locator("[data-testid=row-status]")).to_have_text("Approved")


def test_the_keyboard_finds_a_skip_link_first_and_a_visible_focus_ring(browser, live_server, site):
    alice = _phone(browser, live_server, "alice")
    alice.keyboard.press("Tab")
    focused = alice.evaluate("() => [document.activeElement.className, getComputedStyle(document.activeElement).outlineStyle,"
                             " getComputedStyle(document.activeElement).outlineWidth]")
    assert focused == ["skip-link", "solid", "3px"]
    alice.keyboard.press("Enter")
    assert alice.evaluate("() => document.activeElement.id") == "main"


def test_the_bell_the_workload_list_and_relative_times_move_on_an_open_page(browser, live_server, site):
    expect = sync_api.expect
    alice = _phone(browser, live_server, "alice", fake_clock=True)
    alice.goto(f"{live_server.url}/workloads/?phase=failed")  # nothing active in view: the slow poll
    expect(alice.locator("#workload-rows")).to_contain_text("No workloads match")
    expect(alice.locator("[data-testid=unread-count]")).to_have_count(0)
    Workload.objects.filter(pk=site["workload"].pk).update(phase=Workload.Phase.FAILED)
    notify(recipients=[site["alice"]], message="lena approved your request.")
    alice.clock.run_for(21_000)
    expect(alice.locator("#workload-rows")).to_contain_text(f"#{site['workload'].pk}")
    expect(alice.locator("[data-testid=unread-count]")).to_have_text("1")

    alice.goto(f"{live_server.url}/notifications/")
    when = alice.locator("#notification-list time[data-ago]").first
    expect(when).to_have_text("just now")
    alice.clock.run_for(3 * 60_000 + 31_000)
    expect(when).to_have_text("3\u00a0minutes ago")


def test_a_new_tokens_copy_button_puts_it_on_the_clipboard(browser, live_server, site):
    expect = sync_api.expect
    alice = _phone(browser, live_server, "alice")
    alice.goto(f"{live_server.url}/tokens/")
    alice.fill("#id_name", "laptop")
    alice.click("button:has-text('Create token')")
    secret = alice.locator("[data-testid=secret]").inner_text().strip()
    alice.click("[data-copy=new-secret]")
    expect(alice.locator("[data-copy=new-secret]")).to_have_text("Copied")
    assert alice.evaluate("() => navigator.clipboard.readText()") == secret


CARDS_SPILLING = "() => [...document.querySelectorAll('.template-card')].filter(c => c.scrollWidth > c.clientWidth).length"


def test_template_cards_hold_their_long_image_names_and_choices(browser, live_server, site):
    for page in (log_in(browser, live_server, "alice"), _phone(browser, live_server, "alice")):
        page.goto(f"{live_server.url}/templates/")
        assert page.locator(".template-card").count() == 1
        assert page.evaluate(CARDS_SPILLING) == 0
        assert _overflow(page) <= 0

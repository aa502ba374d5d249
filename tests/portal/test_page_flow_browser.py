"""Pages that survive what people do between requests, in a real browser (Debian's Chromium):
Back after an htmx swap that changed the address, a session that ended while a page was open,
typing in the launch form. One browser serves the module, to keep its seconds few."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.sessions.models import Session

from jobs import services as job_services
from jobs.models import Workload, WorkloadKind
from portal.kube.simulated import SimulatedGateway
from portal.models import ApiToken
from tenants import services as tenant_services
from tenants.models import Membership, QuotaRequest
from tenants.services import LineInput
from tests.browsing import CHROMIUM, CHROMIUM_ARGS, PASSWORD, htmx_settled, log_in, sync_api
from tests.factories import FlavorFactory, MembershipFactory, TeamFactory, UserFactory
from tests.helpers import TRAINING_PARAMS, make_ready

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(autouse=True)
def _pages_closed(browser: Any, live_server: Any, transactional_db: Any) -> Iterator[None]:
    """Each test's pages go with it (after it, before the database is emptied): a page left open
    keeps polling the live server while the next test's rows are flushed."""
    yield
    for context in browser.contexts:
        context.close()


@pytest.fixture
def site(simulated: SimulatedGateway) -> dict[str, Any]:
    vision = TeamFactory.create(slug="vision", name="Computer Vision")
    h100 = FlavorFactory.create(name="H100 80GB", slug="h100-80gb", capacity_units=16)
    root = UserFactory.create(username="root", is_platform_admin=True)
    alice = UserFactory.create(username="alice")
    MembershipFactory.create(team=vision, user=alice, role=Membership.Role.MEMBER)
    make_ready(vision, h100, 4)
    template = job_services.template_create(
        user=root, slug="pytorch-train", name="PyTorch training", kind=WorkloadKind.TRAINING, flavors=[h100],
        image="pytorch/pytorch:2.5", command=["python", "train.py"], args=["--epochs", "{epochs}"],
        default_units=1, max_units=8, parameters=TRAINING_PARAMS,
    )
    job_services.workload_launch(user=alice, request=job_services.LaunchRequest(
        team=vision, template=template, flavor=h100, units=1, name="detector"))
    return {"team": vision, "flavor": h100, "template": template, "alice": alice}


def test_back_after_a_filter_changed_the_address_shows_the_whole_page(browser, live_server, site):
    expect = sync_api.expect
    alice = log_in(browser, live_server, "alice")
    alice.goto(f"{live_server.url}/workloads/")
    alice.select_option("#id_phase", "failed")
    alice.wait_for_url("**/workloads/?*phase=failed*")
    expect(alice.locator("#workload-rows")).to_contain_text("No workloads match")
    htmx_settled(alice)
    alice.click("#site-nav >> text=Teams")
    alice.wait_for_url(f"{live_server.url}/teams/")
    alice.go_back()
    alice.wait_for_url("**/workloads/?*phase=failed*")
    expect(alice.locator("#site-nav")).to_be_visible()
    expect(alice.locator("h1")).to_have_text("Workloads")
    expect(alice.locator("#id_phase")).to_have_value("failed")


def test_back_after_a_template_swap_on_the_launch_form_shows_the_whole_page(browser, live_server, site):
    expect = sync_api.expect
    alice = log_in(browser, live_server, "alice")
    alice.goto(f"{live_server.url}/launch/?team=vision")
    alice.select_option("#id_template", str(site["template"].pk))
    alice.wait_for_url(f"**/launch/?*template={site['template'].pk}*")
    expect(alice.locator("#id_units")).to_be_visible()
    htmx_settled(alice)
    alice.click("#site-nav >> text=Teams")
    alice.wait_for_url(f"{live_server.url}/teams/")
    alice.go_back()
    alice.wait_for_url(f"**/launch/?*template={site['template'].pk}*")
    expect(alice.locator("#site-nav")).to_be_visible()
    expect(alice.locator("h1")).to_have_text("Launch a workload")


def test_typing_in_the_launch_form_logs_no_aborted_requests(browser, live_server, site):
    expect = sync_api.expect
    alice = log_in(browser, live_server, "alice")
    logged: list[str] = []
    alice.on("console", lambda message: logged.append(message.text) if message.type in ("error", "warning") else None)
    alice.goto(f"{live_server.url}/launch/?team=vision&template={site['template'].pk}")
    expect(alice.locator("[data-testid=hint-verdict]")).to_contain_text("Fits your guarantee")
    # A person types at their own pace over a network that takes its time, and moves on with Tab:
    # each pause and each change asks for the hint while the last answer is still on its way.
    alice.context.new_cdp_session(alice).send("Network.emulateNetworkConditions", {
        "offline": False, "latency": 400, "downloadThroughput": -1, "uploadThroughput": -1})
    for field, typed in (("#id_units", "2"), ("#id_cpu", "12"), ("#id_memory_gib", "64"), ("#id_p_epochs", "250"),
                         ("#id_units", "3")):
        alice.locator(field).select_text()
        for delay in (40, 310, 150):
            alice.locator(field).press_sequentially(typed, delay=delay)
            alice.locator(field).select_text()
        alice.locator(field).press_sequentially(typed, delay=0)
        alice.keyboard.press("Tab")
    expect(alice.locator("[data-testid=hint-gpus]")).to_contain_text("= 3 physical GPUs")
    htmx_settled(alice)
    assert logged == []


def _end_sessions() -> None:
    """The session ends on the server while the page stays open (idle timeout, absolute lifetime)."""
    Session.objects.all().delete()


def _sign_in_again(page: Any, username: str) -> None:
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")


def test_an_htmx_request_after_the_session_ended_signs_in_and_comes_back_to_the_page(browser, live_server, site):
    expect = sync_api.expect
    alice = log_in(browser, live_server, "alice")
    alice.goto(f"{live_server.url}/workloads/?team=vision")
    htmx_settled(alice)
    _end_sessions()
    alice.select_option("#id_phase", "failed")  # the filter asks for a fragment
    alice.wait_for_url("**/login/?next=*")
    expect(alice.locator("h1")).to_have_text("Log in")
    expect(alice.locator("[data-testid=sign-in-to-return]")).to_be_visible()
    assert alice.locator("#workload-rows").count() == 0  # a whole page, not a login form in a card
    _sign_in_again(alice, "alice")
    alice.wait_for_url(f"{live_server.url}/workloads/?team=vision")
    expect(alice.locator("#site-nav")).to_be_visible()


def test_a_form_sent_after_the_session_ended_comes_back_filled_in_and_unsent(browser, live_server, site):
    expect = sync_api.expect
    alice = log_in(browser, live_server, "alice")
    form_page = f"/launch/?team=vision&template={site['template'].pk}"
    alice.goto(f"{live_server.url}{form_page}")
    alice.fill("#id_name", "spring-detector")
    alice.fill("#id_units", "2")
    alice.fill("#id_p_epochs", "250")
    # The hint asks 300 ms after the last keystroke, or at once when a field is left (which drops
    # the pending ask). Leaving the field and waiting for every ask to be answered means none is
    # left to find the session ended: the send below is what finds it.
    with alice.expect_response(lambda answer: "p_epochs=250" in answer.url):
        alice.locator("#id_p_epochs").blur()
    htmx_settled(alice)
    _end_sessions()
    alice.click("button:has-text('Launch')")
    alice.wait_for_url("**/login/?next=*")
    expect(alice.locator("[data-draft-note]")).to_be_visible()
    _sign_in_again(alice, "alice")
    alice.wait_for_url(f"{live_server.url}{form_page}")
    expect(alice.locator("[data-testid=draft-restored]")).to_contain_text("This form was not sent")
    expect(alice.locator("#id_name")).to_have_value("spring-detector")
    expect(alice.locator("#id_units")).to_have_value("2")
    expect(alice.locator("#id_p_epochs")).to_have_value("250")
    assert not Workload.objects.filter(name="spring-detector").exists()  # filled in, never sent for you
    alice.click("button:has-text('Launch')")
    alice.wait_for_url("**/workloads/*/")
    assert Workload.objects.get(name="spring-detector").units == 2


def test_what_is_typed_survives_the_launch_hint_finding_the_session_ended(browser, live_server, site):
    # Nothing is sent: the hint asks as the person types, finds the session gone and leads to the
    # login page; the form comes back as it was typed, still unsent.
    expect = sync_api.expect
    alice = log_in(browser, live_server, "alice")
    form_page = f"/launch/?team=vision&template={site['template'].pk}"
    alice.goto(f"{live_server.url}{form_page}")
    alice.fill("#id_name", "autumn-detector")
    # The hint asks for the name while signed in. Leaving the field asks at once (a change), so it
    # is left here and answered before the session ends: otherwise that ask, sent with the units
    # still at 1, can be the one that finds the session ended while the 3 is being typed (CI, under load).
    with alice.expect_response(lambda answer: "name=autumn-detector" in answer.url):
        alice.locator("#id_name").blur()
    htmx_settled(alice)
    _end_sessions()
    alice.fill("#id_units", "3")
    alice.wait_for_url("**/login/?next=*")
    expect(alice.locator("[data-draft-note]")).to_be_visible()
    _sign_in_again(alice, "alice")
    alice.wait_for_url(f"{live_server.url}{form_page}")
    expect(alice.locator("[data-testid=draft-restored]")).to_be_visible()
    expect(alice.locator("#id_name")).to_have_value("autumn-detector")
    expect(alice.locator("#id_units")).to_have_value("3")
    assert not Workload.objects.filter(name="autumn-detector").exists()


def test_an_htmx_form_sent_after_the_session_ended_keeps_what_was_typed(browser, live_server, site):
    expect = sync_api.expect
    lena = UserFactory.create(username="lena")
    MembershipFactory.create(team=site["team"], user=lena, role=Membership.Role.LEAD)
    qr = tenant_services.quota_request_create(requester=site["alice"], team=site["team"],
                                              lines=[LineInput(flavor=site["flavor"], units=2)], justification="Spring data")
    page = log_in(browser, live_server, "lena")
    page.goto(f"{live_server.url}/approvals/")
    row = page.locator(f"#approval-{qr.pk}")
    row.locator("input[name=note]").fill("Granted for the spring run")
    _end_sessions()
    row.get_by_role("button", name="Approve").click()
    page.wait_for_url("**/login/?next=*")
    _sign_in_again(page, "lena")
    page.wait_for_url(f"{live_server.url}/approvals/")
    expect(page.locator(f"#approval-{qr.pk} input[name=note]")).to_have_value("Granted for the spring run")
    expect(page.locator("[data-testid=draft-restored]")).to_be_visible()
    qr.refresh_from_db()
    assert qr.status == QuotaRequest.Status.PENDING


def test_a_page_open_from_before_the_last_sign_in_leads_back_to_its_form_with_what_was_typed(browser, live_server, site):
    expect = sync_api.expect
    alice = log_in(browser, live_server, "alice")
    alice.goto(f"{live_server.url}/tokens/")
    alice.fill("#id_name", "laptop")
    # Signing in again in another tab gives the browser a new CSRF token; this page still has the old one.
    other = alice.context.new_page()
    other.goto(f"{live_server.url}/")
    other.click("button:has-text('Log out')")
    other.wait_for_url(f"{live_server.url}/login/")
    _sign_in_again(other, "alice")
    other.wait_for_url(f"{live_server.url}/")
    alice.click("button:has-text('Create token')")
    expect(alice.locator("h1")).to_contain_text("This form was not sent")
    alice.click("[data-testid=back-to-form]")
    alice.wait_for_url(f"{live_server.url}/tokens/")
    expect(alice.locator("#id_name")).to_have_value("laptop")
    assert not ApiToken.objects.exists()

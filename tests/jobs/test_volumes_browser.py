"""A member's data volumes in a real browser: from the team page to its volumes, she makes one,
is refused in words beyond the quota, grows it and deletes it, each answered in place (htmx)."""

from __future__ import annotations

import pytest

from portal.kube import ObjectRef, gateway
from portal.kube.simulated import SimulatedGateway
from tenants import reconcile
from tenants.models import Membership
from tests.browsing import htmx_settled, log_in, sync_api
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_member_makes_grows_and_deletes_a_data_volume_in_the_browser(browser, live_server, simulated: SimulatedGateway):
    team = TeamFactory.create(slug="vision", name="Computer Vision", storage_quota={"standard": 100})
    MembershipFactory(team=team, user=UserFactory.create(username="alice"), role=Membership.Role.MEMBER)
    reconcile.team_reconcile(team_id=team.pk)

    page = log_in(browser, live_server, "alice")
    page.goto(f"{live_server.url}/teams/vision/")
    page.click("a:has-text('Data volumes')")
    page.wait_for_url(f"{live_server.url}/teams/vision/volumes/")
    volumes = page.locator("#volumes")
    sync_api.expect(volumes).to_contain_text("has no data volume yet")

    page.fill("#id_name", "imagenet")
    page.fill("#id_size_gib", "120")
    page.click("button:has-text('Make volume')")
    htmx_settled(page)
    sync_api.expect(page.locator("#volumes [role=alert]").first).to_contain_text(
        "120 GiB of standard is more than vision has left of its storage quota (100 GiB of 100 GiB)")
    assert gateway().get(ObjectRef("v1", "PersistentVolumeClaim", "imagenet", team.namespace)) is None

    page.fill("#id_size_gib", "40")
    page.click("button:has-text('Make volume')")
    htmx_settled(page)
    sync_api.expect(page.get_by_test_id("volume-done")).to_have_text("Made the volume imagenet (40 GiB of standard).")
    sync_api.expect(page.get_by_test_id("storage-quota")).to_contain_text("60 GiB")

    page.fill("input[aria-label='New size of imagenet in GiB']", "50")
    page.click("#volume-imagenet button:has-text('Grow')")
    htmx_settled(page)
    sync_api.expect(page.get_by_test_id("volume-done")).to_have_text("imagenet now asks for 50 GiB.")
    claim = gateway().get(ObjectRef("v1", "PersistentVolumeClaim", "imagenet", team.namespace))
    assert claim is not None and claim["spec"]["resources"]["requests"]["storage"] == "50Gi"

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#volume-imagenet button:has-text('Delete')")
    htmx_settled(page)
    sync_api.expect(page.get_by_test_id("volume-done")).to_have_text("Deleted the volume imagenet and its data.")
    sync_api.expect(volumes).to_contain_text("has no data volume yet")
    assert gateway().get(ObjectRef("v1", "PersistentVolumeClaim", "imagenet", team.namespace)) is None

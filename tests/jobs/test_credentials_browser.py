"""A member's credentials in a real browser: from the team page she keeps an S3 key (the form
shows only the chosen kind's inputs), is refused a public key where the private one goes without
the key being put back into the page, rotates the S3 key and deletes it, each answered in place."""

from __future__ import annotations

import pytest

from jobs.models import TeamCredential
from portal.kube import ObjectRef, gateway
from portal.kube.simulated import SimulatedGateway
from tenants import reconcile
from tenants.models import Membership
from tests.browsing import htmx_settled, log_in, sync_api
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"


def test_a_member_keeps_rotates_and_deletes_a_credential_in_the_browser(browser, live_server, simulated: SimulatedGateway):
    team = TeamFactory.create(slug="vision", name="Computer Vision")
    MembershipFactory(team=team, user=UserFactory.create(username="alice"), role=Membership.Role.MEMBER)
    reconcile.team_reconcile(team_id=team.pk)

    page = log_in(browser, live_server, "alice")
    page.goto(f"{live_server.url}/teams/vision/")
    page.click("a:has-text('Credentials')")
    page.wait_for_url(f"{live_server.url}/teams/vision/credentials/")
    form = page.get_by_test_id("credential-form")
    sync_api.expect(form.locator("#id_secret_access_key")).to_be_visible()
    sync_api.expect(form.locator("#id_private_key")).to_be_hidden()

    page.fill("#id_name", "repo")
    page.select_option("#id_kind", "git-ssh")
    sync_api.expect(form.locator("#id_private_key")).to_be_visible()
    sync_api.expect(form.locator("#id_secret_access_key")).to_be_hidden()
    page.fill("#id_private_key", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPUBLICHALF alice@laptop")
    page.click("button:has-text('Keep credential')")
    htmx_settled(page)
    sync_api.expect(page.get_by_test_id("error-private_key")).to_contain_text("paste the whole private key")
    assert "PUBLICHALF" not in page.content()
    assert not TeamCredential.objects.exists()

    page.fill("#id_name", "datalake")
    page.select_option("#id_kind", "s3")
    page.fill("#id_access_key_id", "AKIAIOSFODNN7EXAMPLE")
    page.fill("#id_secret_access_key", SECRET)
    page.click("button:has-text('Keep credential')")
    htmx_settled(page)
    sync_api.expect(page.get_by_test_id("credential-done")).to_contain_text("Kept the S3 access key datalake (key …MPLE)")
    assert SECRET not in page.content()
    credential = TeamCredential.objects.get()
    assert gateway().get(ObjectRef("v1", "Secret", credential.secret_name, team.namespace)) is not None

    page.click("#credential-datalake summary:has-text('Rotate')")
    page.fill("#id_datalake_access_key_id", "AKIAROTATED00002")
    page.fill("#id_datalake_secret_access_key", "an0ther/secret")
    page.click("#credential-datalake button:has-text('Write the new values')")
    htmx_settled(page)
    sync_api.expect(page.get_by_test_id("credential-done")).to_contain_text("Rotated datalake (key …0002)")
    sync_api.expect(page.locator("#credential-datalake")).to_contain_text("rotated by alice")

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#credential-datalake button:has-text('Delete')")
    htmx_settled(page)
    sync_api.expect(page.get_by_test_id("credential-done")).to_have_text("Deleted the credential datalake.")
    assert gateway().get(ObjectRef("v1", "Secret", credential.secret_name, team.namespace)) is None

"""Each kind launched from the browser, on the simulated cluster and on the real control plane:
the member fills the launch form, lands on the workload page and sees it running."""

from __future__ import annotations

import re
import time

import pytest

from jobs import sync
from jobs.models import Workload
from portal.kube.simulated import SimulatedGateway
from tests.browsing import log_in, sync_api
from tests.contract.scenarios import HOLD, KUEUE_KINDS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("kind", KUEUE_KINDS)
def test_a_member_launches_each_kind_from_the_browser_and_sees_it_run(kind, cluster, site, templates, browser, live_server,
                                                                      settings):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team = site.team("browser", gpus=4)
    lead = team.memberships.get().user
    page = log_in(browser, live_server, lead.username)

    page.goto(f"{live_server.url}/launch/?team={team.slug}&template={templates[kind].pk}")
    page.select_option("#id_flavor", site.flavor.slug)
    page.fill("#id_units", "1")
    sync_api.expect(page.locator("[data-testid=hint-verdict]")).to_contain_text("Fits your guarantee")
    page.click("button:has-text('Launch')")
    page.wait_for_url(re.compile(r"/workloads/\d+/$"))
    workload = Workload.objects.get(team=team)
    assert workload.kind == kind

    deadline = time.monotonic() + 60
    while True:
        if isinstance(cluster.gateway, SimulatedGateway):
            cluster.gateway.advance(1)
        sync.sync_all()
        try:
            sync_api.expect(page.locator("#workload-live [data-testid=phase]")).to_have_text("Running", timeout=4000)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
    sync_api.expect(page.locator("#workload-live [data-testid=pod]").first).to_be_visible()

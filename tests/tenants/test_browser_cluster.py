"""The quota story ends in a real cluster: a lead approves in the browser and, within seconds,
the team's ClusterQueue and ResourceQuota on the real control plane hold the new numbers and
the team page says "In sync"."""

from __future__ import annotations

import time
import uuid

import pytest

from portal.kube import ObjectRef, gateway, reset_gateway
from portal.kube.kubernetes import KubernetesGateway
from tenants import reconcile, services
from tenants.models import Membership
from tenants.queueing.kueue import KUEUE
from tests.browsing import log_in, sync_api
from tests.factories import FlavorFactory, MembershipFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def real_cluster(control_plane, settings):
    suffix = uuid.uuid4().hex[:6]
    settings.PORTAL_COHORT = f"browser-{suffix}"
    reset_gateway(KubernetesGateway.from_kubeconfig(str(control_plane.kubeconfig_path)))
    yield suffix
    reset_gateway(None)


def test_an_approval_in_the_browser_reaches_the_real_cluster_within_seconds(browser, live_server, real_cluster):
    suffix = real_cluster
    flavor = FlavorFactory.create(name="H100 80GB", slug=f"h100-{suffix}", resource_name="nvidia.com/gpu", capacity_units=16)
    team = TeamFactory.create(slug=f"vision-{suffix}", name="Computer Vision")
    lena, alice = UserFactory.create(username="lena"), UserFactory.create(username="alice")
    MembershipFactory(team=team, user=lena, role=Membership.Role.LEAD)
    MembershipFactory(team=team, user=alice)
    reconcile.platform_reconcile()
    reconcile.team_reconcile(team_id=team.pk)
    qr = services.quota_request_create(requester=alice, team=team, justification="New detector",
                                       lines=[services.LineInput(flavor=flavor, units=6)])

    page = log_in(browser, live_server, "lena")
    page.goto(f"{live_server.url}/approvals/")
    started = time.monotonic()
    page.click(f"#approval-{qr.pk} button:has-text('Approve')")
    sync_api.expect(page.locator(f"#approval-{qr.pk}")).to_contain_text("Approved")

    cq = gateway().get(ObjectRef(KUEUE, "ClusterQueue", team.slug))
    rq = gateway().get(ObjectRef("v1", "ResourceQuota", "gpu-portal", team.slug))
    local_queue = gateway().get(ObjectRef(KUEUE, "LocalQueue", "default", team.slug))
    reached = time.monotonic() - started
    assert cq is not None and rq is not None and local_queue is not None
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "6"
    assert not [key for key in rq["spec"]["hard"] if "nvidia.com" in key]  # the queue bounds GPUs, not the quota
    assert local_queue["spec"]["clusterQueue"] == team.slug
    assert reached < 5, f"the cluster held the new quota only after {reached:.1f}s"

    page.goto(f"{live_server.url}/teams/{team.slug}/")
    sync_api.expect(page.locator("[data-testid=sync-state]")).to_have_text("In sync")
    sync_api.expect(page.locator("#cluster [data-testid=usage-row]").first).to_contain_text("6")

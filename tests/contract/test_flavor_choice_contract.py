"""The flavor a member picks is the flavor that runs and is billed, on both clusters.

Two flavors on one resource name (an A100 beside the site's H100, both `nvidia.com/gpu`) are
alternatives in a team's ClusterQueue, so Kueue would admit a launch on either. A launch holds
its pods to the flavor it names (jobs.manifests.Placement); one that explicitly accepts several
runs on the one Kueue admits, and everything downstream follows that one. Each scenario checks
the pod's node, the team queue's usage, the launch hint, the workload page, the API, the run
interval's flavor and the rate its hours are metered at, against each other."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db.models import Min

from billing import metering
from billing.models import Account, Rate
from billing.periods import hour_floor
from jobs import selectors, services, sync
from jobs.models import RunInterval, Workload
from portal.kube import gateway
from tenants import services as tenant_services
from tenants.models import Flavor
from tests.contract.scenarios import HOLD, launch, pods_of, queue_usage, running
from tests.helpers import api, ensure_priced

pytestmark = pytest.mark.django_db


@pytest.fixture
def a100(cluster, site, django_capture_on_commit_callbacks) -> Flavor:
    """A second flavor on the H100's resource name, on nodes of its own, at another price."""
    with django_capture_on_commit_callbacks(execute=True):
        flavor = tenant_services.flavor_save(actor=site.admin, flavor=Flavor(
            name=cluster.unique("A100"), slug=cluster.unique("a100"), resource_name="nvidia.com/gpu", gpu_model="A100",
            capacity_units=8, node_labels={"gpu-portal.io/test-flavor": cluster.unique("a100")},
        ))
    cluster.add_gpu_node(cluster.unique("a100-node"), labels={"gpu-portal.io/test-flavor": flavor.slug},
                         allocatable={"nvidia.com/gpu": 8})
    ensure_priced(flavor, "3.00")
    return flavor


def node_flavor(node_name: str) -> str:
    (node,) = [n for n in gateway().list("v1", "Node")[0] if n["metadata"]["name"] == node_name]
    return str(node["metadata"]["labels"]["gpu-portal.io/test-flavor"])


def says_borrowed(client: Any, workload: Workload) -> tuple[bool, bool]:
    """What the workload page and the API say about running on borrowed capacity."""
    page = client.get(f"/workloads/{workload.pk}/").content.decode()
    answer = client.get(f"/api/workloads/{workload.pk}/").json()
    return "Runs on <strong>borrowed</strong> capacity" in page, answer["on_borrowed"]


def closed(*workloads: Workload) -> bool:
    sync.sync_all()
    return not RunInterval.objects.filter(workload__in=workloads, ended_at__isnull=True).exists()


def billed(team: Any) -> set[tuple[str, str, bool]]:
    """(flavor, price per GPU-hour, borrowed) of each hourly usage row metering makes of the team's
    running pods' first minute, by metering's own row builder (the intervals and the rate card
    alone decide it; the simulated cluster's clock runs ahead of the wall's, a second a poll)."""
    first = RunInterval.objects.filter(team=team).aggregate(first=Min("started_at"))["first"]
    until = first + dt.timedelta(minutes=1)
    rows = metering.usage_rows(metering.Window(hour_floor(first), until), until=until)
    account = Account.for_team(team)
    flavors = {f.pk: f.slug for f in Flavor.objects.all()}
    prices = {r.pk: str(r.price_per_gpu_hour) for r in Rate.objects.all()}
    return {(flavors[flavor_id], prices[rate_id] if rate_id is not None else "unpriced", borrowed)
            for (_, account_id, flavor_id, _, _, borrowed, rate_id, _, _) in rows if account_id == account.pk}


def test_a_launch_on_one_of_two_flavors_of_a_resource_runs_is_counted_and_billed_on_it(
        cluster, site, a100, templates, settings, django_capture_on_commit_callbacks):
    # The scenario that failed: the team holds H100 quota only and launches on A100, which
    # another team lends. Before, Kueue admitted it on the team's own H100: the pod ran on an H100
    # node, the queue counted an H100, and billing recorded A100 hours at the price of nothing.
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    template = templates["training"]
    services.template_revise(user=site.admin, template=template, flavors=[site.flavor, a100])
    team = site.team("pick", gpus=2)
    lender = site.team("lend")
    site.grant(lender, lender.memberships.get().user, 2, of=a100)
    lead = team.memberships.get().user

    hint = cluster.wait_for(lambda: (h := selectors.launch_hint(team=team, flavor=a100, units=1)).would_borrow and h,
                            what="the launch hint to see the lender's idle A100")
    assert not hint.fits_guarantee and not hint.would_wait

    on_a100 = launch(team, lead, template, a100, django_capture_on_commit_callbacks, units=1)
    on_h100 = launch(team, lead, template, site.flavor, django_capture_on_commit_callbacks, units=1)
    cluster.wait_for(lambda: running(on_a100) and running(on_h100), what="both launches to run")

    assert {node_flavor(p["spec"]["nodeName"]) for p in pods_of(on_a100)} == {a100.slug}
    assert {node_flavor(p["spec"]["nodeName"]) for p in pods_of(on_h100)} == {site.flavor.slug}
    assert cluster.wait_for(lambda: queue_usage(team.slug, a100.slug) == (1, 1) and
                            queue_usage(team.slug, site.flavor.slug) == (1, 0), what="the queue to count each flavor")

    client = api(lead)
    assert says_borrowed(client, on_a100) == (True, True)
    assert says_borrowed(client, on_h100) == (False, False)
    assert (on_a100.flavor, on_h100.flavor) == (a100, site.flavor)
    assert billed(team) == {(a100.slug, "3.0000", True), (site.flavor.slug, "1.0000", False)}

    for workload in (on_a100, on_h100):
        with django_capture_on_commit_callbacks(execute=True):
            services.workload_stop(user=lead, workload=workload)
    cluster.wait_for(lambda: closed(on_a100, on_h100), what="their run intervals to close")
    assert {(i.workload_id, i.flavor.slug) for i in RunInterval.objects.filter(workload__in=[on_a100, on_h100])} == {
        (on_a100.pk, a100.slug), (on_h100.pk, site.flavor.slug)}


def test_a_launch_that_accepts_either_flavor_follows_the_one_kueue_admits(
        cluster, site, a100, templates, settings, django_capture_on_commit_callbacks):
    # The team's H100 guarantee is in use; "any whole GPU of either flavor" is then admitted on the
    # A100 another team lends, and the workload, its queue usage, its page and its billing say A100.
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    template = templates["training"]
    services.template_revise(user=site.admin, template=template, flavors=[site.flavor, a100])
    team = site.team("either", gpus=1)
    lender = site.team("lend2")
    site.grant(lender, lender.memberships.get().user, 2, of=a100)
    lead = team.memberships.get().user

    first = launch(team, lead, template, site.flavor, django_capture_on_commit_callbacks, units=1)
    cluster.wait_for(lambda: running(first), what="the first launch to take the H100 guarantee")
    either = launch(team, lead, template, site.flavor, django_capture_on_commit_callbacks, units=1, also_accept=(a100,))
    cluster.wait_for(lambda: running(either), what="the launch accepting either flavor to run")

    assert either.flavor == a100
    assert {node_flavor(p["spec"]["nodeName"]) for p in pods_of(either)} == {a100.slug}
    # Kueue writes a ClusterQueue's usage after it admits, so the count is waited for, not read once.
    assert cluster.wait_for(lambda: queue_usage(team.slug, a100.slug) == (1, 1), what="the queue to count the A100")
    assert says_borrowed(api(lead), either) == (True, True)
    assert api(lead).get(f"/api/workloads/{either.pk}/").json()["accepted_flavors"] == sorted([a100.slug, site.flavor.slug])
    assert billed(team) == {(a100.slug, "3.0000", True), (site.flavor.slug, "1.0000", False)}

    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=either)
    cluster.wait_for(lambda: closed(either), what="its run interval to close")
    (interval,) = RunInterval.objects.filter(workload=either)
    assert interval.flavor == a100

"""The nodes behind the catalog, on both clusters (issue 24 §5): a node whose devices turn
unhealthy (its allocatable drops below its capacity, as a device plugin reports it) is on the nodes
page, with the unhealthy count and the flavor's warning, after one node check; a running
workload is shown on the node its pod runs on."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs import services
from portal.kube import gateway
from tenants import nodes
from tenants.models import GpuNode
from tests.conftest import login
from tests.contract.scenarios import HOLD, launch, pods_of, running

pytestmark = pytest.mark.django_db


def site_node(cluster, site) -> str:
    (name,) = [n["metadata"]["name"] for n in gateway().list("v1", "Node")[0]
               if (n["metadata"].get("labels") or {}).get("gpu-portal.io/test-flavor") == site.flavor.slug
               and n["metadata"]["name"] == cluster.unique("gpu-node")]
    return name


def test_unhealthy_devices_show_after_one_check_and_the_workload_on_the_node(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    node = site_node(cluster, site)
    nodes.check_flavors(flavors=[site.flavor])
    assert GpuNode.objects.get(name=node).gpus["nvidia.com/gpu"] == [8, 8]

    team = site.team("nodes", gpus=2)
    lead = team.memberships.get().user
    workload = launch(team, lead, templates["training"], site.flavor, django_capture_on_commit_callbacks, units=2)
    cluster.wait_for(lambda: running(workload), what="the training job to run")
    (pod,) = pods_of(workload)

    cluster.set_allocatable(node, {"nvidia.com/gpu": 6})
    verdict = nodes.check_flavors(flavors=[site.flavor])[site.flavor.pk]
    assert f"Node {node}: 2 of 8 nvidia.com/gpu are unhealthy (allocatable below capacity)." in verdict.warnings
    assert GpuNode.objects.get(name=node).gpus["nvidia.com/gpu"] == [8, 6]

    page = login(site.admin).get(reverse("tenants:node-list") + f"?flavor={site.flavor.slug}").content.decode()

    def row_of(name: str) -> str:
        row = page[page.index(f'data-testid="node-{name}"'):]
        return row[:row.index("</tr>")]

    assert "6 of 8" in row_of(node) and "2 unhealthy" in row_of(node)
    # On the node its pod runs on (the simulated cluster also has the node it makes from the catalog).
    assert f">{workload.name}</a>" in row_of(pod["spec"]["nodeName"])
    assert f"{team.slug} · 2 units" in row_of(pod["spec"]["nodeName"])

    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=workload)

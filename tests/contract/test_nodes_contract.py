"""The nodes behind the catalog, on both clusters (issue 24 §5): a node whose devices turn
unhealthy (its allocatable drops below its capacity, as a device plugin reports it) is on the nodes
page, with the unhealthy count and the flavor's warning, after one node check; a running
workload is shown on the node its pod runs on."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs import services, sync
from jobs.models import RunInterval, Workload
from portal.kube import ObjectRef, gateway
from tenants import nodes
from tenants import services as tenant_services
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


def test_a_drain_cordons_the_node_and_stops_the_portals_workloads_there_closing_their_intervals(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team = site.team("drain", gpus=2)
    lead = team.memberships.get().user
    workload = launch(team, lead, templates["training"], site.flavor, django_capture_on_commit_callbacks, units=2)
    cluster.wait_for(lambda: running(workload), what="the training job to run")
    (pod,) = pods_of(workload)
    node_name = pod["spec"]["nodeName"]
    nodes.check_flavors(flavors=[site.flavor])
    taints_before = (gateway().get(ObjectRef("v1", "Node", node_name)) or {}).get("spec", {}).get("taints") or []

    with django_capture_on_commit_callbacks(execute=True):
        stopped = services.node_drain(actor=site.admin, node=GpuNode.objects.get(name=node_name))
    assert [w.pk for w in stopped] == [workload.pk]
    node = gateway().get(ObjectRef("v1", "Node", node_name)) or {}
    assert node["spec"]["unschedulable"] is True
    # Only spec.unschedulable was written: the taints others own are all still there.
    assert all(taint in (node["spec"].get("taints") or []) for taint in taints_before)
    cluster.wait_for(lambda: closed(workload), what="the drained workload's interval to close")
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.STOPPED
    assert pods_of(workload) == [] or all(p["metadata"].get("deletionTimestamp") for p in pods_of(workload))

    tenant_services.node_cordon(actor=site.admin, node=GpuNode.objects.get(name=node_name), cordoned=False)
    assert not (gateway().get(ObjectRef("v1", "Node", node_name)) or {})["spec"].get("unschedulable")


def closed(workload: Workload) -> bool:
    sync.sync_all()
    return not RunInterval.objects.filter(workload=workload, ended_at__isnull=True).exists()


def test_the_gpu_stack_pod_on_a_node_is_seen_by_the_next_check(cluster, site, settings):
    # The GPU operator's device plugin, as a pod on the site's node: the next check finds it there, and
    # finds none on a node without one.
    settings.PORTAL_DEVICE_PLUGIN_POD_LABELS = (("app", cluster.unique("device-plugin")),)
    node = site_node(cluster, site)
    namespace = cluster.unique("gpu-operator")
    gateway().apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    plugin = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "device-plugin", "namespace": namespace, "labels": {"app": cluster.unique("device-plugin")}},
              "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                       "containers": [{"name": "plugin", "image": "registry.example.com/device-plugin:1",
                                       "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}}
    gateway().apply(plugin)
    try:
        def seen() -> str:
            nodes.check_flavors(flavors=[site.flavor])
            return str(GpuNode.objects.get(name=node).stack.get("device plugin", ""))
        assert cluster.wait_for(lambda: seen() == "running" and seen(), what="the device plugin pod to run and be seen")
        elsewhere = GpuNode.objects.exclude(name=node).values_list("stack", flat=True)
        assert all(stack.get("device plugin") in ("none", "running", None) for stack in elsewhere)
    finally:
        gateway().delete(ObjectRef("v1", "Namespace", namespace))

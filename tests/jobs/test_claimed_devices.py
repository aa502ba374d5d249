"""A workload on a flavor claimed through a DRA DeviceClass, on the simulated cluster the portal
makes from its catalog: the catalog's nodes publish the class's devices, the workload's pod gets
its units of them, and its page says which."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse

from jobs import services as job_services
from jobs import sync
from jobs.models import Workload, WorkloadKind
from portal.kube import gateway
from portal.kube.dra import RESOURCE_API
from tenants import nodes
from tests.conftest import login
from tests.factories import FlavorFactory
from tests.helpers import launch, make_ready

pytestmark = pytest.mark.django_db


def test_a_pod_on_a_device_class_gets_devices_its_node_publishes_and_its_page_names_them(
        team, member, admin_user, simulated, gpu_metrics, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = {"gpu-portal.io/simulated-run-seconds": "86400"}  # both train all day
    flavor = FlavorFactory.create(name="H100 DRA", slug="h100-dra", resource_name="dra.nvidia.com/gpu",
                                  device_class_name="gpu.nvidia.com", capacity_units=8, node_labels={"pool": "dra"})
    make_ready(team, flavor, units=4)
    (slice_,) = gateway().list(RESOURCE_API, "ResourceSlice")[0]
    assert (slice_["spec"]["driver"], len(slice_["spec"]["devices"])) == ("gpu.nvidia.com", 8)
    # The nodes page counts the devices the node publishes, as it counts a device plugin's.
    nodes.check_flavors()
    (pool,) = [pool for pool in nodes.nodes_picture().pools if pool.flavor == flavor]
    assert (pool.capacity, pool.offered, pool.unhealthy) == (8, 8, 0)
    assert pool.nodes[0].node.gpus["dra.nvidia.com/gpu"] == [8, 8]
    template = job_services.template_create(
        user=admin_user, slug="train", name="Train", kind=WorkloadKind.TRAINING, flavors=[flavor],
        image="pytorch/pytorch:2.5", command=["python", "train.py"], default_units=1, max_units=8)
    with django_capture_on_commit_callbacks(execute=True):
        first = launch(member, team, template, flavor, units=3)
        second = launch(member, team, template, flavor, units=1)
    simulated.advance(1)
    sync.sync_all()
    for workload in (first, second):
        workload.refresh_from_db()
        assert workload.phase == Workload.Phase.RUNNING, workload.reason
    page = login(member).get(reverse("jobs:workload-live", args=[first.pk])).content.decode()
    assert "Devices its claims got" in page
    node = slice_["spec"]["nodeName"]
    assert f"gpu.nvidia.com {node}/gpu-0, gpu.nvidia.com {node}/gpu-1, gpu.nvidia.com {node}/gpu-2" in page
    # No two pods get one device.
    other = login(member).get(reverse("jobs:workload-live", args=[second.pk])).content.decode()
    assert f"gpu.nvidia.com {node}/gpu-3" in other
    assert first.intervals.get().units == 3 and second.intervals.get().units == 1
    # DCGM reports a pod's DRA GPUs as it does a device plugin's: three of them, all the pod's.
    simulated.advance(600)
    interval = first.intervals.get()
    hours = gpu_metrics.device_hours(namespaces=[team.namespace], start=interval.started_at,
                                     end=interval.started_at + dt.timedelta(minutes=10))
    assert hours[team.namespace].covered == pytest.approx(4 / 6, rel=0.15)  # 3 + 1 devices for ten minutes

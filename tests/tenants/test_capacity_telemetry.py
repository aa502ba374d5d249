"""The admin capacity page's GPUs now: per node held vs busy, hottest GPUs, XIDs; platform admins only."""

from __future__ import annotations

import pytest

from jobs import sync
from tests.conftest import login
from tests.helpers import launch

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_job(ready_team, member, training, flavor, simulated, gpu_metrics, django_capture_on_commit_callbacks, settings):
    settings.PORTAL_POD_ANNOTATIONS = {"gpu-portal.io/simulated-run-seconds": "86400"}
    with django_capture_on_commit_callbacks(execute=True):
        job = launch(member, ready_team, training, flavor, units=2)
    simulated.advance(1)
    sync.sync_all()
    simulated.advance(60)
    return job


def test_admins_see_each_nodes_held_and_busy_gpus_the_hottest_and_xids(running_job, admin_user, gpu_metrics):
    pod = running_job.intervals.get().pod_name
    gpu_metrics.set_engine_active(namespace="vision", pod=pod, percent=61)
    gpu_metrics.set_xid(namespace="vision", pod=pod, code=79)
    page = login(admin_user).get("/capacity/").content.decode()
    node = running_job.intervals.get().node
    assert 'data-testid="node-telemetry"' in page
    assert f"<tr><td>{node}</td><td class=\"num\">2</td><td class=\"num\">2</td>" in page
    assert "61 %" in page and f"vision/{pod}" in page
    assert '<td class="num">1</td></tr>' in page  # one XID on that node


def test_no_metrics_is_said_on_the_capacity_page(running_job, admin_user, gpu_metrics):
    gpu_metrics.set_outage(True)
    assert "No GPU metrics" in login(admin_user).get("/capacity/").content.decode()


def test_only_platform_admins_see_the_capacity_page(running_job, member, lead):
    assert login(member).get("/capacity/").status_code == 403
    assert login(lead).get("/capacity/").status_code == 403


def test_held_gpus_are_shown_per_flavor_of_their_workload_and_a_stranger_pod_apart(running_job, admin_user, flavor,
                                                                                 gpu_metrics):
    from portal.metrics.base import GpuReading
    from tenants import telemetry_selectors

    pod = running_job.intervals.get().pod_name
    gpu_metrics.set_engine_active(namespace="vision", pod=pod, percent=40)
    found = telemetry_selectors.cluster_telemetry()
    assert [(f.flavor, f.held, round(f.busy_percent or 0)) for f in found.flavors] == [(flavor.name, 2, 40)]

    stranger = GpuReading(node="n9", gpu="GPU-x", namespace="kube-system", pod="someone-else", engine_active=90.0)
    assert [(f.flavor, f.held) for f in telemetry_selectors._by_flavor([stranger])] == [("(not a portal workload)", 1)]
    page = login(admin_user).get("/capacity/").content.decode()
    assert 'data-testid="flavor-telemetry"' in page and f"<tr><td>{flavor.name}</td><td class=\"num\">2</td>" in page

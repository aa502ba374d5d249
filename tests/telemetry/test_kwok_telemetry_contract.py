"""Telemetry end to end on real parts: a workload launched through the portal on the real control
plane runs on a KWOK GPU node; the DCGM stand-in, fed from the cluster's pods as dcgm-exporter
is from the kubelet (`KwokFeed`), reports its GPUs under the pod's real name and node; the real
Prometheus scrapes them; and the portal joins them back to the workload by the pod names its
status sync recorded: the workload list's GPU use, and the capacity page's held GPUs per flavor."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jobs import manifests, sync
from jobs.models import Workload
from jobs.telemetry import gpu_use
from portal.kube import gateway, reset_gateway
from portal.kube.kubernetes import KubernetesGateway
from portal.metrics import reset_metrics
from portal.metrics.prometheus import PrometheusMetrics
from tenants import telemetry_selectors
from tests.contract.conftest import ClusterUnderTest, site, templates  # noqa: F401 - the contract fixtures
from tests.contract.scenarios import HOLD, launch
from tests.telemetry.dcgm_exporter import KwokFeed

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


@pytest.fixture
def cluster(settings: Any, db: Any, control_plane: Any) -> Iterator[ClusterUnderTest]:
    under_test = ClusterUnderTest("real", KubernetesGateway.from_kubeconfig(str(control_plane.kubeconfig_path)),
                                  control_plane)
    settings.PORTAL_COHORT = under_test.unique("cohort")
    reset_gateway(under_test.gateway)
    yield under_test
    reset_gateway(None)


@pytest.fixture
def prometheus(prometheus_server: Any) -> Iterator[PrometheusMetrics]:
    door = PrometheusMetrics(prometheus_server.url, timeout=5)
    reset_metrics(door)
    yield door
    reset_metrics(None)


def _portal_pods() -> list[dict[str, Any]]:
    return [pod for pod in gateway().list("v1", "Pod")[0] if manifests.WORKLOAD_LABEL in (pod["metadata"].get("labels") or {})]


def test_a_busy_job_on_a_kwok_node_reads_busy_through_prometheus_and_follows_it_going_idle(
        cluster, site, templates, prometheus, dcgm_exporter, settings, django_capture_on_commit_callbacks):  # noqa: F811
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team = site.team("gpu-use", gpus=2)
    workload = launch(team, team.memberships.get().user, templates["training"], site.flavor,
                      django_capture_on_commit_callbacks, units=2)

    def running() -> bool:
        sync.sync_all()
        workload.refresh_from_db()
        return workload.phase == Workload.Phase.RUNNING and workload.intervals.filter(ended_at__isnull=True).exists()

    cluster.wait_for(running, what="the job to run with its interval recorded")
    pod = workload.intervals.get().pod_name
    feed = KwokFeed(dcgm_exporter, _portal_pods).start()
    try:
        feed.set_busy(workload.k8s_name, 0.87)
        cluster.wait_for(lambda: _near(gpu_use(workloads=[workload])[workload.pk].percent, 87),
                         what="87 % GPU use read back through Prometheus", timeout=30)
        held = {f.flavor: f for f in telemetry_selectors.cluster_telemetry().flavors}
        assert held[site.flavor.name].held == 2 and _near(held[site.flavor.name].busy_percent, 87)
        assert {(g.namespace, g.pod) for g in dcgm_exporter.gpus.values() if g.pod == pod} == {(team.namespace, pod)}

        # Gone idle: the 5-minute average the list shows starts falling at once.
        feed.set_busy(workload.k8s_name, 0.01)
        cluster.wait_for(lambda: (gpu_use(workloads=[workload])[workload.pk].percent or 100) < 80,
                         what="the job going idle read back", timeout=30)
    finally:
        feed.stop()


def _near(value: float | None, expected: float, tolerance: float = 1.5) -> bool:
    return value is not None and abs(value - expected) <= tolerance


def test_two_teams_on_one_time_sliced_card_each_read_the_card_hold_half_of_it_and_see_it_shared(
        cluster, site, templates, prometheus, dcgm_exporter, settings, django_capture_on_commit_callbacks):  # noqa: F811
    """A T4 shared four ways on a KWOK node, one replica each for two teams' trainings: the stand-in
    reports the card once per replica, as busy as both pods together (60 %). Through the real
    Prometheus and its recording rules each pod reads the card's 60 %, holds half of the card, and
    its page says two pods share it and gives it half of the card's 60 W."""
    from jobs import services
    from tests.contract.test_shared_flavor_contract import t4_pool

    settings.PORTAL_POD_ANNOTATIONS = HOLD
    flavor = t4_pool(cluster, site, django_capture_on_commit_callbacks, gpus=1)
    template = templates["training"]
    services.template_revise(user=site.admin, template=template, flavors=[site.flavor, flavor])
    workloads = []
    for name in ("ts-busy", "ts-idle"):
        team = site.team(name)
        lead = team.memberships.get().user
        site.grant(team, lead, 1, of=flavor)
        workloads.append(launch(team, lead, template, flavor, django_capture_on_commit_callbacks, units=1))

    def running() -> bool:
        sync.sync_all()
        for workload in workloads:
            workload.refresh_from_db()
        return all(w.phase == Workload.Phase.RUNNING and w.intervals.filter(ended_at__isnull=True).exists()
                   for w in workloads)

    cluster.wait_for(running, what="both trainings to run with their intervals recorded")
    feed = KwokFeed(dcgm_exporter, _portal_pods, resource="nvidia.com/gpu.shared", replicas=4)
    feed.set_busy(workloads[0].k8s_name, 0.6)
    feed.set_busy(workloads[1].k8s_name, 0.0)
    feed.start()
    try:
        cluster.wait_for(lambda: all(_near(gpu_use(workloads=[w])[w.pk].percent, 60) for w in workloads),
                         what="both pods reading the card's 60 % through Prometheus", timeout=30)
        pods = {w.intervals.get().pod_name for w in workloads}
        pattern = "|".join(sorted(pods))
        shares = prometheus.query(f'namespace_pod_gpu:dcgm_device_share:ratio{{pod=~"{pattern}"}}')
        assert sorted((r["metric"]["pod"], float(r["value"][1])) for r in shares) == sorted((p, 0.5) for p in pods)
        for workload in workloads:
            picture = cluster.wait_for(lambda w=workload: _shared_picture(w), what="the page to see the card shared",
                                       timeout=30)
            assert picture.charts[2].latest == "30 W"  # half of the card's 60 W
    finally:
        feed.stop()


def _shared_picture(workload: Workload) -> Any:
    from jobs.telemetry import workload_telemetry

    picture = workload_telemetry(workload=workload)
    return picture if "with up to 2 pods on it" in picture.shared else None

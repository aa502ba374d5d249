"""Idle reclaim on both metrics doors: the sweep reads the real Prometheus (scraping the DCGM
stand-in) exactly as it reads the simulated door."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.utils import timezone

from jobs import reclaim, services
from jobs.models import RunInterval, Workload, WorkloadKind
from portal.metrics import PodKey
from tests.factories import TeamFactory
from tests.helpers import launch

pytestmark = pytest.mark.django_db
MIN = dt.timedelta(minutes=1)


@pytest.fixture
def team(telemetry):
    # The session's Prometheus outlives the test: each test's team has a namespace of its own.
    return TeamFactory(slug=telemetry.namespace())


@pytest.fixture
def on_pods(telemetry, ready_team, member, admin_user, flavor, settings):
    """Running workloads of the team whose pods report to the door under test."""
    settings.PORTAL_NOTEBOOK_STATUS_URL = "http://127.0.0.1:9/{namespace}/{name}"  # Jupyter unreachable: the GPU decides
    team = ready_team

    def run(kind: str, engine_active: float) -> Workload:
        template = services.template_create(user=admin_user, slug=f"t-{uuid.uuid4().hex[:6]}", name=kind, kind=kind,
                                            flavors=[flavor], image="pytorch/pytorch:2.5", port=8888, idle_minutes=60
                                            if kind == WorkloadKind.NOTEBOOK else 0)
        workload = launch(member, team, template, flavor)
        Workload.objects.filter(pk=workload.pk).update(phase=Workload.Phase.RUNNING)
        pod = f"{workload.k8s_name}-{uuid.uuid4().hex[:5]}"
        RunInterval.objects.create(workload=workload, pod_uid=str(uuid.uuid4()), pod_name=pod, node="gpu-node-1",
                                   resource_name=flavor.resource_name, units=1, started_at=timezone.now() - 10 * MIN)
        telemetry.run_pod(team.namespace, pod, kind=kind, engine_active=engine_active)
        workload.refresh_from_db()
        return workload

    return run


def _reporting(telemetry, namespace: str, *workloads: Workload) -> None:
    pods = {PodKey(namespace, w.intervals.get().pod_name) for w in workloads}
    telemetry.scraped()
    telemetry.eventually(lambda: telemetry.door.engine_active(namespaces=[namespace], window=reclaim.SAMPLE_WINDOW),
                         lambda a: pods <= set(a.by_pod), what="every pod reports")


def test_an_idle_notebook_is_warned_kept_once_then_stopped_while_a_busy_job_runs_on(telemetry, on_pods, member, team,
                                                                                      django_capture_on_commit_callbacks):
    notebook = on_pods(WorkloadKind.NOTEBOOK, 0.004)
    job = on_pods(WorkloadKind.TRAINING, 0.93)
    _reporting(telemetry, team.namespace, notebook, job)
    t0 = timezone.now()
    first = reclaim.idle_sweep(now=t0)
    assert (first.idle, first.busy) == ([notebook.pk], [job.pk])
    assert reclaim.idle_sweep(now=t0 + 61 * MIN).warned == [notebook.pk]
    reclaim.workload_keep_running(user=member, workload=notebook, now=t0 + 62 * MIN)
    assert reclaim.idle_sweep(now=t0 + 63 * MIN).kept == [notebook.pk]
    assert reclaim.idle_sweep(now=t0 + 123 * MIN).warned == [notebook.pk]  # a window after the keep
    with django_capture_on_commit_callbacks(execute=False):
        assert reclaim.idle_sweep(now=t0 + 139 * MIN).stopped == [notebook.pk]
    notebook.refresh_from_db()
    job.refresh_from_db()
    assert notebook.phase == Workload.Phase.STOPPED and notebook.reason.startswith("Stopped: idle")
    assert job.phase == Workload.Phase.RUNNING


def test_an_exporter_outage_never_stops_anything(telemetry, on_pods, team):
    notebook = on_pods(WorkloadKind.NOTEBOOK, 0.004)
    _reporting(telemetry, team.namespace, notebook)
    t0 = timezone.now()
    reclaim.idle_sweep(now=t0)
    assert reclaim.idle_sweep(now=t0 + 61 * MIN).warned == [notebook.pk]
    telemetry.outage(True)
    telemetry.scraped()
    sweep = telemetry.eventually(lambda: reclaim.idle_sweep(now=t0 + 80 * MIN), lambda s: bool(s.no_metrics),
                                 what="the sweep sees no metrics")
    assert sweep.no_metrics == [notebook.pk] and sweep.stopped == []
    notebook.refresh_from_db()
    assert notebook.phase == Workload.Phase.RUNNING

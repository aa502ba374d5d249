"""The workload page's GPU charts: server-drawn SVG from one metrics query, a plain verdict, the
shared-GPU caveat, "no metrics", and another team's workload answering 404."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db.models import F
from django.utils import timezone

from jobs import sync, telemetry
from jobs.models import Workload
from portal.metrics.base import Point
from portal.metrics.simulated import BUSY_POWER_SHARE, IDLE_POWER_SHARE
from tests.conftest import login
from tests.factories import FlavorFactory
from tests.helpers import launch, make_ready

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_job(ready_team, member, training, flavor, simulated, gpu_metrics, django_capture_on_commit_callbacks, settings):
    settings.PORTAL_POD_ANNOTATIONS = {"gpu-portal.io/simulated-run-seconds": "86400"}  # trains all day
    with django_capture_on_commit_callbacks(execute=True):
        job = launch(member, ready_team, training, flavor)
    simulated.advance(1)
    sync.sync_all()
    job.refresh_from_db()
    assert job.phase == Workload.Phase.RUNNING
    simulated.advance(600)  # ten minutes of telemetry
    return job


def _later() -> dt.datetime:
    return timezone.now() + dt.timedelta(minutes=10)


def test_a_busy_job_gets_four_charts_and_says_how_busy_it_is(running_job):
    picture = telemetry.workload_telemetry(workload=running_job, now=_later())
    assert [c.title for c in picture.charts] == ["GPU engine active", "Memory used of total", "Power",
                                                  "Hottest GPU's temperature"]
    assert picture.verdict.startswith("Busy ") and "% of its GPU time" in picture.verdict
    assert all(c.path.count(",") >= 10 for c in picture.charts)  # a point every 15 s over ten minutes
    assert picture.charts[1].latest.endswith("of 80.0 GiB")  # an H100 80GB, as the catalog has it


def test_the_energy_its_gpus_drew_is_the_power_chart_summed_and_the_fragment_says_it(running_job, member):
    picture = telemetry.workload_telemetry(workload=running_job, now=_later())
    # Ten minutes of an H100 at 80-95 % engine: 12 % + 80 % × busy of 700 W, about 0.1 kWh.
    assert picture.kwh is not None and Decimal("0.09") <= picture.kwh <= Decimal("0.11")
    running_job.intervals.update(started_at=F("started_at") - dt.timedelta(minutes=10))
    fragment = login(member).get(f"/workloads/{running_job.pk}/telemetry/", HTTP_HX_REQUEST="true").content.decode()
    assert "Energy so far: " in fragment and " kWh, its GPUs' draw (DCGM power)." in fragment


def test_an_idle_job_says_for_how_long(running_job, gpu_metrics):
    pod = running_job.intervals.get().pod_name
    gpu_metrics.set_engine_active(namespace="vision", pod=pod, percent=0.5)
    assert telemetry.workload_telemetry(workload=running_job, now=_later()).verdict.startswith("Idle for 9 minutes")


def test_how_long_idle_is_read_from_the_samples_times_not_their_count():
    # 40 idle samples 15 s apart span 585 s, 9.75 minutes; counting them as 40 steps said 10. How
    # many samples fall in a span depends on where the 15 s grid falls, so the count made the
    # verdict flip between 9 and 10 minutes for the same idle time.
    samples = [Point(1000.0 + 15 * i, 0.5) for i in range(40)]
    verdict = telemetry._verdict([Point(985.0, 90.0), *samples], running=True, threshold=5)
    assert verdict.startswith("Idle for 9 minutes")


def test_no_metrics_is_said_in_words(running_job, gpu_metrics):
    gpu_metrics.set_outage(True)
    picture = telemetry.workload_telemetry(workload=running_job, now=_later())
    assert picture.charts == () and picture.unavailable.startswith("No metrics")


def test_a_time_sliced_gpu_says_whose_figures_they_are_alone_on_the_card_and_beside_a_neighbour(
        team, member, training, simulated, gpu_metrics, admin_user, django_capture_on_commit_callbacks, settings):
    settings.PORTAL_POD_ANNOTATIONS = {"gpu-portal.io/simulated-run-seconds": "86400"}  # both train all day
    shared = FlavorFactory.create(name="T4 shared", slug="t4-shared", resource_name="nvidia.com/gpu.shared",
                                  sharing_mode="time-sliced", fraction_denominator=4, capacity_units=8)
    make_ready(team, shared)
    from jobs import services

    version = services.template_revise(user=admin_user, template=training, flavors=[shared])
    assert version.flavors.count() == 1
    with django_capture_on_commit_callbacks(execute=True):
        first = launch(member, team, training, shared)
    simulated.advance(1)
    sync.sync_all()
    # Each pod keeps the card 60 % busy: alone it draws for 60 %, with its neighbour for 100 % (capped).
    gpu_metrics.set_engine_active(namespace=team.namespace, pod=first.intervals.get().pod_name, percent=60)
    simulated.advance(300)
    alone = telemetry.workload_telemetry(workload=first, now=_later())
    assert "shared (time-sliced)" in alone.shared and "no other pod was on this workload's card" in alone.shared
    power_alone = float(alone.charts[2].latest.removesuffix(" W"))

    with django_capture_on_commit_callbacks(execute=True):
        second = launch(member, team, training, shared)
    simulated.advance(1)
    sync.sync_all()
    gpu_metrics.set_engine_active(namespace=team.namespace, pod=second.intervals.get().pod_name, percent=60)
    simulated.advance(300)
    card_busy = power_alone * (IDLE_POWER_SHARE + BUSY_POWER_SHARE) / (IDLE_POWER_SHARE + BUSY_POWER_SHARE * 0.6)
    for job in (first, second):
        beside = telemetry.workload_telemetry(workload=job, now=_later() + dt.timedelta(minutes=5))
        assert "with up to 2 pods on it" in beside.shared and "cannot be told from its neighbours'" in beside.shared
        # The card draws for 100 % busy now, and each pod is given half of it.
        assert float(beside.charts[2].latest.removesuffix(" W")) == pytest.approx(card_busy / 2, rel=0.02)


def test_the_page_loads_the_charts_as_a_fragment_that_refreshes_while_it_runs(running_job, member):
    # The page draws up to the wall clock: its pod started ten minutes before it.
    running_job.intervals.update(started_at=F("started_at") - dt.timedelta(minutes=10))
    client = login(member)
    page = client.get(f"/workloads/{running_job.pk}/").content.decode()
    assert f'hx-get="/workloads/{running_job.pk}/telemetry/"' in page and 'hx-trigger="load, every 30s"' in page
    fragment = client.get(f"/workloads/{running_job.pk}/telemetry/", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.count("<polyline") == 4 and 'hx-trigger="every 30s"' in fragment and "Busy " in fragment
    assert "<svg" in client.get(f"/workloads/{running_job.pk}/telemetry/").content.decode()  # the real href works too


def test_a_run_of_seconds_says_when_its_charts_come_instead_of_drawing_empty_ones(running_job, member):
    # The page draws up to the wall clock: its pod started half a minute before it, two or three samples.
    running_job.intervals.update(started_at=timezone.now() - dt.timedelta(seconds=30))
    fragment = login(member).get(f"/workloads/{running_job.pk}/telemetry/", HTTP_HX_REQUEST="true").content.decode()
    assert '<p class="muted" data-testid="charts-later">Charts appear after its first minutes of running.</p>' in fragment
    assert "<svg" not in fragment
    assert "GPU engine active: <strong>" in fragment and "Busy " in fragment  # its latest figures and verdict still


def test_a_finished_run_too_short_for_charts_says_so(running_job):
    start = running_job.intervals.get().started_at
    running_job.phase = Workload.Phase.SUCCEEDED
    picture = telemetry.workload_telemetry(workload=running_job, now=start + dt.timedelta(seconds=40))
    assert picture.early == "It ran too briefly for charts: these are its last figures."
    assert telemetry.workload_telemetry(workload=running_job, now=_later()).early == ""  # ten minutes draw


def test_another_team_gets_404_for_the_charts(running_job, outsider):
    assert login(outsider).get(f"/workloads/{running_job.pk}/telemetry/").status_code == 404
    assert login(outsider).get(f"/workloads/{running_job.pk}/telemetry/", HTTP_HX_REQUEST="true").status_code == 404


def test_the_workload_list_shows_each_running_workloads_gpu_use_from_one_query(
        running_job, member, gpu_metrics, ready_team, training, flavor, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        queued = launch(member, ready_team, training, flavor, units=4)  # waits: the team's quota is in use
    pod = running_job.intervals.get().pod_name
    gpu_metrics.set_engine_active(namespace="vision", pod=pod, percent=42.4)
    asked = []
    real = gpu_metrics.engine_active

    def counted(**kwargs):
        asked.append(kwargs)
        return real(**kwargs)

    gpu_metrics.engine_active = counted
    page = login(member).get("/workloads/").content.decode()
    assert '<td class="num nowrap" data-testid="gpu-use">42 %' in page
    assert len(asked) == 1
    assert queued.phase != Workload.Phase.RUNNING


def test_the_workload_list_says_no_metrics_rather_than_idle(running_job, member, gpu_metrics):
    gpu_metrics.set_outage(True)
    assert '<td class="num nowrap" data-testid="gpu-use">no metrics' in login(member).get("/workloads/").content.decode()


# --- The team page's running workloads --------------------------------------------------------------


def test_the_team_page_shows_each_running_workloads_gpu_use_from_one_query(
        running_job, member, gpu_metrics, ready_team, training, flavor, simulated, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        second = launch(member, ready_team, training, flavor)
    simulated.advance(1)
    sync.sync_all()
    second.refresh_from_db()
    assert second.phase == Workload.Phase.RUNNING
    simulated.advance(600)  # its pod reports once it has run a while
    gpu_metrics.set_engine_active(namespace="vision", pod=running_job.intervals.get().pod_name, percent=42.4)
    gpu_metrics.set_engine_active(namespace="vision", pod=second.intervals.get().pod_name, percent=7)
    asked = []
    real = gpu_metrics.engine_active

    def counted(**kwargs):
        asked.append(kwargs)
        return real(**kwargs)

    gpu_metrics.engine_active = counted
    client = login(member)
    assert 'hx-get="/teams/vision/gpu-use/"' in client.get("/teams/vision/").content.decode()
    fragment = client.get("/teams/vision/gpu-use/", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in fragment and len(asked) == 1
    rows = fragment.split('data-testid="team-gpu-use"')[1]
    assert rows.index(f"/workloads/{second.pk}/") < rows.index(f"/workloads/{running_job.pk}/")
    assert '<td class="num nowrap" data-testid="gpu-use">7 %' in rows
    assert '<td class="num nowrap" data-testid="gpu-use">42 %' in rows
    assert "<html" in client.get("/teams/vision/gpu-use/").content.decode()  # the real href works too


def test_the_team_gpu_use_says_no_metrics_and_is_404_to_another_team(running_job, member, outsider, gpu_metrics):
    gpu_metrics.set_outage(True)
    assert 'data-testid="gpu-use">no metrics' in login(member).get("/teams/vision/gpu-use/").content.decode()
    assert login(outsider).get("/teams/vision/gpu-use/").status_code == 404
    assert login(outsider).get("/teams/vision/gpu-use/", HTTP_HX_REQUEST="true").status_code == 404
    assert login(outsider).get("/teams/nonexistent/gpu-use/").status_code == 404

"""Idle GPUs reclaimed by policy: the template's choice within the platform's bounds, the sweep
(one metrics query), the warning with Keep running, the action and its reason, and "no metrics"."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone
from kombu.exceptions import OperationalError

from jobs import reclaim, services, sync, tasks
from jobs.idle_policy import IdleAction, effective_policy
from jobs.models import IdleDefaults, Workload, WorkloadIdleState, WorkloadKind
from portal.errors import DomainError
from portal.kube import ObjectRef, gateway
from portal.metrics import reset_metrics
from portal.models import AuditEvent, Notification
from tests.conftest import login
from tests.helpers import api, launch

pytestmark = pytest.mark.django_db
MIN = dt.timedelta(minutes=1)


def _running(simulated, django_capture_on_commit_callbacks, *launches):
    with django_capture_on_commit_callbacks(execute=True):
        workloads = [do() for do in launches]
    simulated.advance(1)
    sync.sync_all()
    simulated.advance(20)  # the exporter's first scrape of the new pods
    for workload in workloads:
        workload.refresh_from_db()
        assert workload.phase == Workload.Phase.RUNNING
    return workloads


def _set(gpu_metrics, workload: Workload, percent: float) -> None:
    for interval in workload.intervals.filter(ended_at__isnull=True):
        gpu_metrics.set_engine_active(namespace=workload.team.namespace, pod=interval.pod_name, percent=percent)


@pytest.fixture
def stopping_training(admin_user, flavor):
    return services.template_create(
        user=admin_user, slug="sweep", name="Sweep", kind=WorkloadKind.TRAINING, flavors=[flavor], image="pytorch/pytorch:2.5",
        idle_threshold_percent=10, idle_window_minutes=20, idle_action=IdleAction.STOP, idle_grace_minutes=10)


@pytest.fixture
def idle_job(ready_team, member, stopping_training, flavor, simulated, gpu_metrics, django_capture_on_commit_callbacks):
    (job,) = _running(simulated, django_capture_on_commit_callbacks,
                      lambda: launch(member, ready_team, stopping_training, flavor, parameters={}))
    _set(gpu_metrics, job, 2)
    return job


# --- The policy: a template's choice within the platform's bounds ------------------------------------


def test_a_template_without_its_own_policy_takes_the_platforms_default(training):
    policy = effective_policy(training.current, IdleDefaults.current())
    assert (policy.threshold_percent, policy.window_minutes, policy.action, policy.grace_minutes) == (5, 30, "notify", 15)


@pytest.mark.parametrize(("fields", "words"), [
    ({"idle_threshold_percent": 50}, "between 1 and 20 %"),
    ({"idle_window_minutes": 5}, "between 10 and 1440 minutes"),
    ({"idle_grace_minutes": 100_000}, "between 5 and 240 minutes"),
    ({"idle_action": "scale_to_min"}, "Only inference servers can be scaled down"),
    ({"idle_action": "explode"}, "must be one of notify, stop, scale_to_min"),
    ({"idle_window_minutes": "30"}, "must be a whole number"),
])
def test_a_template_policy_outside_the_platforms_bounds_is_refused_in_words(admin_user, flavor, fields, words):
    with pytest.raises(DomainError, match=words):
        services.template_create(user=admin_user, slug="t", name="T", kind=WorkloadKind.TRAINING, flavors=[flavor],
                                 image="pytorch/pytorch:2.5", **fields)


def test_platform_admins_set_the_default_and_bounds_and_owners_choose_within_them(admin_user, lead, team, training, flavor):
    with pytest.raises(PermissionDenied):
        reclaim.idle_defaults_set(user=lead, threshold_percent=3)
    with pytest.raises(DomainError, match="default idle threshold must lie between 1 and 20"):
        reclaim.idle_defaults_set(user=admin_user, threshold_percent=30)
    reclaim.idle_defaults_set(user=admin_user, threshold_percent=8, max_threshold_percent=10, allowed_actions=["notify"])
    assert AuditEvent.objects.get(action="idle_defaults.set").message.startswith(
        "root set the platform's idle policy: idle when its GPUs are under 8 % engine active for 30 minutes")
    assert effective_policy(training.current, IdleDefaults.current()).threshold_percent == 8
    with pytest.raises(DomainError, match="allows only these idle actions: notify"):
        services.template_revise(user=admin_user, template=training, idle_action=IdleAction.STOP)
    with pytest.raises(DomainError, match="between 1 and 10 %"):
        services.template_revise(user=admin_user, template=training, idle_threshold_percent=15)
    assert services.template_revise(user=admin_user, template=training, idle_threshold_percent=9).idle_threshold_percent == 9


# --- The sweep ---------------------------------------------------------------------------------------


def test_an_idle_job_is_warned_once_kept_once_then_stopped_with_the_reason(
        idle_job, member, django_capture_on_commit_callbacks):
    t0 = timezone.now()
    assert reclaim.idle_sweep(now=t0).idle == [idle_job.pk]
    assert reclaim.idle_sweep(now=t0 + 19 * MIN).warned == []
    with django_capture_on_commit_callbacks(execute=True):
        assert reclaim.idle_sweep(now=t0 + 21 * MIN).warned == [idle_job.pk]
    assert reclaim.idle_sweep(now=t0 + 22 * MIN).warned == []  # once per window
    assert Notification.objects.filter(recipient=member).count() == 1

    reclaim.workload_keep_running(user=member, workload=idle_job, now=t0 + 25 * MIN)
    assert AuditEvent.objects.filter(action="workload.kept_running", actor=member).count() == 1
    with pytest.raises(DomainError, match="already kept running"):
        reclaim.workload_keep_running(user=member, workload=idle_job, now=t0 + 26 * MIN)
    assert reclaim.idle_sweep(now=t0 + 32 * MIN).kept == [idle_job.pk]  # past the old due time: kept
    assert reclaim.idle_sweep(now=t0 + 45 * MIN).stopped == []  # the kept window (20 min) is not over

    assert reclaim.idle_sweep(now=t0 + 46 * MIN).warned == []  # idle since 27 (the sample after the keep at 25)
    assert reclaim.idle_sweep(now=t0 + 47 * MIN).warned == [idle_job.pk]  # a fresh window has passed
    with django_capture_on_commit_callbacks(execute=True):
        assert reclaim.idle_sweep(now=t0 + 57 * MIN).stopped == [idle_job.pk]
    idle_job.refresh_from_db()
    assert idle_job.phase == Workload.Phase.STOPPED
    assert idle_job.reason == ("Stopped: idle 30 minutes with its GPUs under 10 % engine active "
                               "(the idle policy of Sweep v1)")
    assert gateway().get(ObjectRef("batch/v1", "Job", idle_job.k8s_name, "vision")) is None


def test_an_idle_stop_the_broker_does_not_take_is_recorded_and_its_objects_removed_by_the_next_pass(
        idle_job, monkeypatch, django_capture_on_commit_callbacks):
    # As a person's stop: the sweep that stops it answers, the workload is marked unsent, and the
    # resubmit pass removes its objects, instead of an error after the commit and a Job left running.
    refused = OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    monkeypatch.setattr(tasks.workload_teardown, "apply_async", lambda *args, **kwargs: (_ for _ in ()).throw(refused))
    t0 = timezone.now()
    reclaim.idle_sweep(now=t0)
    with django_capture_on_commit_callbacks(execute=True):
        reclaim.idle_sweep(now=t0 + 21 * MIN)
    with django_capture_on_commit_callbacks(execute=True):
        assert reclaim.idle_sweep(now=t0 + 31 * MIN).stopped == [idle_job.pk]
    idle_job.refresh_from_db()
    assert idle_job.phase == Workload.Phase.STOPPED and idle_job.unsent_since is not None
    assert gateway().get(ObjectRef("batch/v1", "Job", idle_job.k8s_name, "vision")) is not None

    monkeypatch.undo()
    tasks.workloads_resubmit_lost()
    idle_job.refresh_from_db()
    assert idle_job.unsent_since is None
    assert gateway().get(ObjectRef("batch/v1", "Job", idle_job.k8s_name, "vision")) is None


def test_an_exporter_outage_is_no_metrics_and_never_stops_anything(idle_job, gpu_metrics):
    t0 = timezone.now()
    reclaim.idle_sweep(now=t0)
    assert reclaim.idle_sweep(now=t0 + 21 * MIN).warned == [idle_job.pk]
    gpu_metrics.set_outage(True)
    sweep = reclaim.idle_sweep(now=t0 + 40 * MIN)
    assert sweep.no_metrics == [idle_job.pk] and sweep.stopped == []
    state = WorkloadIdleState.objects.get(workload=idle_job)
    assert state.engine_active is None and state.warned_at is None  # the warning is withdrawn
    gpu_metrics.set_outage(False)
    assert reclaim.idle_sweep(now=t0 + 41 * MIN).stopped == []  # idle again from here: a full window before a warning
    idle_job.refresh_from_db()
    assert idle_job.phase == Workload.Phase.RUNNING


def test_a_failing_metrics_query_judges_nothing(idle_job):
    class Broken:
        def engine_active(self, **kwargs):
            from portal.metrics import MetricsError

            raise MetricsError("Prometheus at http://p:9090 could not be reached: refused")

    reset_metrics(Broken())  # type: ignore[arg-type]
    sweep = reclaim.idle_sweep(now=timezone.now() + dt.timedelta(days=1))
    assert sweep.error.startswith("Prometheus at http://p:9090") and sweep.idle == [] and sweep.stopped == []


def test_a_busy_job_is_not_idle_and_the_sweep_asks_once_for_every_workload(
        ready_team, member, training, stopping_training, flavor, simulated, gpu_metrics, django_capture_on_commit_callbacks):
    jobs = _running(simulated, django_capture_on_commit_callbacks,
                    *[lambda: launch(member, ready_team, training, flavor) for _ in range(3)])
    asked: list[dict] = []
    real = gpu_metrics.engine_active

    def counted(**kwargs):
        asked.append(kwargs)
        return real(**kwargs)

    gpu_metrics.engine_active = counted
    sweep = reclaim.idle_sweep()
    assert sorted(sweep.busy) == sorted(j.pk for j in jobs)  # simulated training keeps its GPUs busy
    assert len(asked) == 1 and asked[0]["namespaces"] == {"vision"}


def test_an_idle_inference_server_scales_down_to_its_minimum_replicas(
        ready_team, member, admin_user, flavor, simulated, gpu_metrics, django_capture_on_commit_callbacks):
    vllm = services.template_create(
        user=admin_user, slug="vllm", name="vLLM", kind=WorkloadKind.INFERENCE, flavors=[flavor], image="vllm/vllm:1",
        port=8000, parameters=[{"name": "workers", "type": "int", "default": 1, "min": 1, "max": 4}],
        idle_action=IdleAction.SCALE_TO_MIN)
    (server,) = _running(simulated, django_capture_on_commit_callbacks,
                         lambda: launch(member, ready_team, vllm, flavor, parameters={"workers": 3}))
    assert server.workers == 3
    _set(gpu_metrics, server, 1)
    t0 = timezone.now()
    reclaim.idle_sweep(now=t0)
    assert reclaim.idle_sweep(now=t0 + 31 * MIN).warned == [server.pk]
    with django_capture_on_commit_callbacks(execute=True):
        assert reclaim.idle_sweep(now=t0 + 47 * MIN).scaled == [server.pk]
    server.refresh_from_db()
    assert server.workers == 1 and server.phase == Workload.Phase.RUNNING
    deployment = gateway().get(ObjectRef("apps/v1", "Deployment", server.k8s_name, "vision"))
    assert deployment is not None and deployment["spec"]["replicas"] == 1
    assert "scaled from 3 to 1 replicas: idle 47 minutes" in AuditEvent.objects.get(action="workload.scaled_idle").message


# --- The page, the button and the API; another team's workload is 404 --------------------------------


def test_the_owner_sees_the_warning_and_keeps_it_running_from_the_page(idle_job, member):
    t0 = timezone.now()
    reclaim.idle_sweep(now=t0)
    reclaim.idle_sweep(now=t0 + 21 * MIN)
    client = login(member)
    page = client.get(f"/workloads/{idle_job.pk}/live/", HTTP_HX_REQUEST="true").content.decode()
    assert "Idle 21 minutes" in page and 'data-testid="keep-running"' in page and "unless it is kept running" in page
    answer = client.post(f"/workloads/{idle_job.pk}/keep-running/", HTTP_HX_REQUEST="true").content.decode()
    assert "Kept running by alice" in answer
    again = client.post(f"/workloads/{idle_job.pk}/keep-running/", HTTP_HX_REQUEST="true").content.decode()
    assert "already kept running until" in again


def test_a_workload_without_metrics_says_so_on_its_page(idle_job, member, gpu_metrics):
    gpu_metrics.set_outage(True)
    reclaim.idle_sweep()
    page = login(member).get(f"/workloads/{idle_job.pk}/").content.decode()
    assert "No metrics" in page and "never judged idle" in page


def test_keep_running_is_404_to_another_team_on_the_page_and_the_api(idle_job, outsider):
    t0 = timezone.now()
    reclaim.idle_sweep(now=t0)
    reclaim.idle_sweep(now=t0 + 21 * MIN)
    assert login(outsider).post(f"/workloads/{idle_job.pk}/keep-running/").status_code == 404
    assert api(outsider).post(f"/api/workloads/{idle_job.pk}/keep-running/").status_code == 404
    assert WorkloadIdleState.objects.get(workload=idle_job).warned_at is not None


def test_the_api_keeps_a_warned_workload_running_and_refuses_one_not_warned(idle_job, member):
    assert api(member).post(f"/api/workloads/{idle_job.pk}/keep-running/").status_code == 400
    t0 = timezone.now()
    reclaim.idle_sweep(now=t0)
    reclaim.idle_sweep(now=t0 + 21 * MIN)
    answer = api(member).post(f"/api/workloads/{idle_job.pk}/keep-running/")
    assert answer.status_code == 200, answer.content
    assert WorkloadIdleState.objects.get(workload=idle_job).kept_by == member


def test_on_a_shared_card_a_pod_is_judged_by_the_card_so_only_a_card_all_idle_is_reclaimed(
        team, member, admin_user, simulated, gpu_metrics, django_capture_on_commit_callbacks, settings):
    """DCGM reports a time-sliced card whole to every pod on it: an idle pod beside a busy one
    reads busy and is not stopped; once the whole card idles, both are idle."""
    from tests.factories import FlavorFactory
    from tests.helpers import make_ready

    settings.PORTAL_POD_ANNOTATIONS = {"gpu-portal.io/simulated-run-seconds": "86400"}
    shared = FlavorFactory.create(name="T4 shared", slug="t4-shared", resource_name="nvidia.com/gpu.shared",
                                  sharing_mode="time-sliced", fraction_denominator=4, capacity_units=8)
    make_ready(team, shared)
    template = services.template_create(
        user=admin_user, slug="shared-sweep", name="Shared sweep", kind=WorkloadKind.TRAINING, flavors=[shared],
        image="pytorch/pytorch:2.5", idle_threshold_percent=10, idle_window_minutes=20, idle_action=IdleAction.STOP,
        idle_grace_minutes=10)
    idle, busy = _running(simulated, django_capture_on_commit_callbacks,
                          lambda: launch(member, team, template, shared, parameters={}),
                          lambda: launch(member, team, template, shared, parameters={}))
    _set(gpu_metrics, idle, 2)
    _set(gpu_metrics, busy, 90)
    sweep = reclaim.idle_sweep(now=timezone.now())
    assert sorted(sweep.busy) == sorted([idle.pk, busy.pk]) and sweep.idle == []
    assert WorkloadIdleState.objects.get(workload=idle).engine_active == pytest.approx(92)

    _set(gpu_metrics, busy, 1)
    assert sorted(reclaim.idle_sweep(now=timezone.now()).idle) == sorted([idle.pk, busy.pk])

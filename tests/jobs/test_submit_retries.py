"""What the workload tasks do when the cluster refuses or stays away: a refused submission
fails the workload at once with the reason; an outage is retried a few times, then recorded."""

from __future__ import annotations

import pytest

from jobs import kinds, services, tasks
from jobs.models import Workload, WorkloadKind
from portal.kube import ObjectRef, ref_of, reset_gateway
from portal.models import AuditEvent
from portal.tasks import CLUSTER_TASK_RETRIES
from tests.helpers import launch
from tests.scripted_gateway import ScriptedGateway, refusal, unavailable

pytestmark = pytest.mark.django_db

INVALID = "rejected as invalid: spec.template.spec.containers[0].image: Required value"


@pytest.fixture(autouse=True)
def _retries_run_at_once(settings):
    # Eager Celery runs a retry at once, in place of queueing it, but only when it does not
    # propagate the Retry to the caller: as in a worker, the caller gets the task's result.
    settings.CELERY_TASK_EAGER_PROPAGATES = False


def submit(cluster, member, team, training, flavor, capture) -> Workload:
    reset_gateway(cluster)
    with capture(execute=True):
        workload = launch(member, team, training, flavor)
    workload.refresh_from_db()
    return workload


def test_a_submission_the_cluster_refuses_fails_at_once_with_the_reason(
    ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks
):
    cluster = ScriptedGateway(simulated, always=refusal(INVALID))

    workload = submit(cluster, member, ready_team, training, flavor, django_capture_on_commit_callbacks)

    assert cluster.writes.count("apply") == 1
    assert workload.submit_attempts == 1
    assert workload.phase == Workload.Phase.FAILED
    assert workload.reason == f"The cluster did not take it: {INVALID}"
    assert [t.phase for t in workload.transitions.all()] == ["submitting", "failed"]


def test_a_submission_during_an_outage_is_retried_a_bounded_number_of_times_then_fails_with_the_reason(
    ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks
):
    cluster = ScriptedGateway(simulated, always=unavailable("etcdserver: request timed out"))

    workload = submit(cluster, member, ready_team, training, flavor, django_capture_on_commit_callbacks)

    assert cluster.writes.count("apply") == 1 + CLUSTER_TASK_RETRIES
    assert workload.submit_attempts == 1 + CLUSTER_TASK_RETRIES
    assert (workload.phase, workload.reason) == (
        Workload.Phase.FAILED, "The cluster did not take it: etcdserver: request timed out")


def test_a_submission_that_outlasts_a_short_outage_is_queued(
    ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks
):
    cluster = ScriptedGateway(simulated, unavailable())

    workload = submit(cluster, member, ready_team, training, flavor, django_capture_on_commit_callbacks)

    assert cluster.failures == 1 and workload.submit_attempts == 1
    assert workload.phase == Workload.Phase.QUEUED
    assert simulated.get(ObjectRef("batch/v1", "Job", workload.k8s_name, "vision")) is not None


def test_a_change_the_cluster_refuses_is_audited_and_leaves_the_running_workload_alone(
    ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks
):
    workload = submit(simulated, member, ready_team, training, flavor, django_capture_on_commit_callbacks)
    cluster = ScriptedGateway(simulated, always=refusal("rejected as invalid: spec.parallelism: Invalid value"))
    reset_gateway(cluster)

    tasks.workload_apply.delay(workload.pk)

    workload.refresh_from_db()
    assert cluster.attempts == 1
    assert workload.phase == Workload.Phase.QUEUED
    event = AuditEvent.objects.get(action="workload.apply_refused")
    assert event.message == (f"The cluster did not take the change of {workload.name}: "
                             "rejected as invalid: spec.parallelism: Invalid value")
    assert event.team_id == ready_team.pk and event.actor is None


def test_a_removal_the_cluster_refuses_is_audited_once_with_the_reason(
    ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks
):
    workload = submit(simulated, member, ready_team, training, flavor, django_capture_on_commit_callbacks)
    cluster = ScriptedGateway(simulated, always=refusal('jobs.batch "wl-1" is forbidden', status=403))
    reset_gateway(cluster)

    tasks.workload_teardown.delay(workload.pk)

    assert cluster.attempts == 1
    (event,) = AuditEvent.objects.filter(action="workload.teardown_refused")
    assert event.message == f"The cluster did not take the removal of {workload.name}: jobs.batch \"wl-1\" is forbidden"


def test_a_submission_refused_after_some_of_its_objects_were_taken_leaves_none_of_them(
    ready_team, member, admin_user, flavor, simulated, django_capture_on_commit_callbacks
):
    """An inference server is a Deployment and a Service: the Deployment taken and the Service
    refused must not leave a Deployment running (and holding quota) behind a failed workload."""
    serve = services.template_create(
        user=admin_user, slug="vllm", name="vLLM", kind=WorkloadKind.INFERENCE, flavors=[flavor], image="vllm/vllm:1",
        command=["vllm", "serve"], port=8000, max_units=8)
    reset_gateway(ScriptedGateway(simulated, None, refusal(INVALID)))
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, serve, flavor)
    workload.refresh_from_db()
    wanted = kinds.workload_objects(spec=services.workload_spec(workload))
    assert len(wanted) >= 2 and workload.phase == Workload.Phase.FAILED
    assert workload.reason == f"The cluster did not take it: {INVALID}"
    assert [obj for obj in wanted if simulated.get(ref_of(obj)) is not None] == []

"""A launch no worker takes does not sit 'Submitting' in silence: the periodic pass says why and
sends it again."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError

from jobs import services as job_services
from jobs import tasks
from jobs.models import Workload, WorkloadKind
from portal.kube import ObjectRef
from tests.helpers import launch

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    """What the pass hands to the broker, held back so the workload stays as no worker left it."""
    calls: list[tuple[Any, dict[str, Any]]] = []
    monkeypatch.setattr(tasks.workload_submit, "apply_async", lambda args, **kwargs: calls.append((args, kwargs)))
    return calls


def _created_minutes_ago(workload: Workload, minutes: float) -> None:
    Workload.objects.filter(pk=workload.pk).update(created_at=timezone.now() - dt.timedelta(minutes=minutes))


def test_a_workload_submitting_beyond_the_bound_says_why_on_its_page_and_in_the_api(
        ready_team, member, training, flavor, sent, as_user):
    workload = launch(member, ready_team, training, flavor)
    _created_minutes_ago(workload, 5)

    assert tasks.workloads_resubmit_lost() == 1

    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.SUBMITTING
    assert workload.reason == ("Not submitted yet: no worker has taken it for 5 minutes; "
                               "the portal's worker may be down — it is being retried.")
    assert sent == [((workload.pk,), {"expires": tasks.RESUBMIT_EXPIRES_SECONDS})]
    client = as_user(member)
    assert client.get(f"/api/workloads/{workload.pk}/").json()["reason"] == workload.reason
    assert "no worker has taken it for 5 minutes" in client.get(f"/workloads/{workload.pk}/").content.decode()


def test_a_workload_within_the_bound_is_left_alone(ready_team, member, training, flavor, sent, settings):
    settings.PORTAL_SUBMITTING_BOUND_SECONDS = 120
    workload = launch(member, ready_team, training, flavor)
    _created_minutes_ago(workload, 1)

    assert tasks.workloads_resubmit_lost() == 0

    workload.refresh_from_db()
    assert workload.reason == ""
    assert sent == []


def test_the_reason_counts_the_attempts_a_worker_already_made(ready_team, member, training, flavor, sent):
    workload = launch(member, ready_team, training, flavor)
    Workload.objects.filter(pk=workload.pk).update(submit_attempts=3)
    _created_minutes_ago(workload, 3)

    tasks.workloads_resubmit_lost()

    workload.refresh_from_db()
    assert workload.reason.startswith("Not submitted yet: no worker has taken it for 3 minutes (3 attempts so far);")


def test_a_resubmitted_workload_is_submitted_and_its_reason_replaced(ready_team, member, training, flavor, simulated):
    workload = launch(member, ready_team, training, flavor)
    _created_minutes_ago(workload, 4)

    tasks.workloads_resubmit_lost()

    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.QUEUED
    assert workload.reason == "Waiting for Kueue to admit it"


def test_a_launch_the_broker_does_not_take_is_recorded_answered_and_sent_by_the_next_pass(
        ready_team, member, training, flavor, simulated, monkeypatch, as_user, settings,
        django_capture_on_commit_callbacks):
    # Redis down: publishing raises what kombu raises for a refused connection.
    settings.PORTAL_SUBMITTING_BOUND_SECONDS = 120
    refused = OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    monkeypatch.setattr(tasks.workload_submit, "apply_async", lambda *args, **kwargs: (_ for _ in ()).throw(refused))
    client = as_user(member)

    with django_capture_on_commit_callbacks(execute=True) as sends:
        response = client.post("/api/workloads/", {"team": ready_team.slug, "template": training.slug,
                                                   "flavor": flavor.slug, "units": 1}, content_type="application/json")

    assert response.status_code == 201, response.content
    assert len(sends) == 1
    workload = Workload.objects.get(pk=response.json()["id"])
    assert workload.phase == Workload.Phase.SUBMITTING and workload.unsent_since is not None
    assert "task queue did not answer" in client.get(f"/workloads/{workload.pk}/").content.decode()

    # The broker is back: the next pass sends it at once, though it is far younger than the bound.
    monkeypatch.undo()
    assert tasks.workloads_resubmit_lost() == 1
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.QUEUED
    assert workload.unsent_since is None
    assert tasks.workloads_resubmit_lost() == 0


def test_a_stop_the_broker_does_not_take_is_recorded_and_its_objects_removed_by_the_next_pass(
        ready_team, member, training, flavor, simulated, monkeypatch, django_capture_on_commit_callbacks):
    workload = launch(member, ready_team, training, flavor)
    tasks.workload_submit(workload.pk)
    assert simulated.list("batch/v1", "Job", namespace=ready_team.namespace)[0]
    refused = OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    monkeypatch.setattr(tasks.workload_teardown, "apply_async", lambda *args, **kwargs: (_ for _ in ()).throw(refused))

    with django_capture_on_commit_callbacks(execute=True):
        job_services.workload_stop(user=member, workload=workload)

    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.STOPPED and workload.unsent_since is not None
    assert simulated.list("batch/v1", "Job", namespace=ready_team.namespace)[0]  # still holding its GPUs

    monkeypatch.undo()
    tasks.workloads_resubmit_lost()
    workload.refresh_from_db()
    assert workload.unsent_since is None
    assert simulated.list("batch/v1", "Job", namespace=ready_team.namespace)[0] == []


def test_a_scale_the_broker_does_not_take_is_recorded_and_applied_by_the_next_pass(
        ready_team, member, admin_user, flavor, simulated, monkeypatch, django_capture_on_commit_callbacks):
    vllm = job_services.template_create(
        user=admin_user, slug="vllm", name="vLLM", kind=WorkloadKind.INFERENCE, flavors=[flavor], image="vllm/vllm:1",
        port=8000, parameters=[{"name": "workers", "type": "int", "default": 1, "min": 1, "max": 4}])
    server = launch(member, ready_team, vllm, flavor)
    tasks.workload_submit(server.pk)
    Workload.objects.filter(pk=server.pk).update(phase=Workload.Phase.RUNNING)
    server.refresh_from_db()
    refused = OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    monkeypatch.setattr(tasks.workload_apply, "apply_async", lambda *args, **kwargs: (_ for _ in ()).throw(refused))

    with django_capture_on_commit_callbacks(execute=True):
        job_services.workload_scale(user=member, workload=server, replicas=3)

    server.refresh_from_db()
    assert server.workers == 3 and server.unsent_since is not None
    deployment = simulated.get(ObjectRef("apps/v1", "Deployment", server.k8s_name, ready_team.namespace))
    assert deployment["spec"]["replicas"] == 1  # the change has not reached the cluster

    monkeypatch.undo()
    tasks.workloads_resubmit_lost()
    server.refresh_from_db()
    assert server.unsent_since is None
    deployment = simulated.get(ObjectRef("apps/v1", "Deployment", server.k8s_name, ready_team.namespace))
    assert deployment["spec"]["replicas"] == 3

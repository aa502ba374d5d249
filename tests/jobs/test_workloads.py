"""Launching workloads: every refusal says what to change; a launch becomes objects in the
cluster and the status sync follows it to the end, recording each pod's run interval."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from jobs import services, sync
from jobs.models import RunInterval, Workload, WorkloadKind
from portal.errors import DomainError
from portal.kube import ObjectRef, gateway
from portal.models import AuditEvent
from tests.factories import QuotaGrantFactory
from tests.helpers import launch

pytestmark = pytest.mark.django_db

def test_a_training_launch_runs_to_success_and_records_its_run_interval(ready_team, member, training, flavor, simulated,
                                                                         django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, flavor, units=2, parameters={"epochs": 3})

    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.QUEUED
    job = gateway().get(ObjectRef("batch/v1", "Job", workload.k8s_name, "vision"))
    assert job is not None
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["--epochs", "3", "--lr", "0.001"]
    assert {"name": "TAG", "value": "2.5"} in container["env"]

    simulated.advance(1)
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING
    simulated.advance(40)
    sync.sync_all()
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.SUCCEEDED
    assert [t.phase for t in workload.transitions.all()] == ["submitting", "queued", "running", "succeeded"]
    (interval,) = RunInterval.objects.filter(workload=workload)
    assert (interval.units, interval.resource_name) == (2, "nvidia.com/gpu")
    assert interval.ended_at is not None and interval.ended_at > interval.started_at


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"parameters": {"epochs": 0}}, "epochs must be between 1 and 1000"),
    ({"parameters": {"epochs": "many"}}, "epochs must be a whole number"),
    ({"parameters": {"image_tag": "latest"}}, "image_tag must be one of 2.4, 2.5"),
    ({"parameters": {"command": "rm -rf /"}}, "no parameter command"),
    ({"units": 9}, "between 1 and 8"),
    ({"units": 0}, "between 1 and 8"),
    ({"cpu": 1000}, "CPU cores must be between"),
])
def test_launches_outside_the_template_are_refused_and_create_nothing(ready_team, member, training, flavor, kwargs, message):
    with pytest.raises(DomainError, match=message):
        launch(member, ready_team, training, flavor, **kwargs)
    assert not Workload.objects.exists()


def test_a_flavor_the_template_does_not_allow_is_refused(ready_team, member, training, mig_flavor):
    with pytest.raises(DomainError, match="cannot run on A100 1g.10gb; choose one of: H100 80GB"):
        launch(member, ready_team, training, mig_flavor)


def test_more_units_than_the_team_could_ever_get_is_refused(ready_team, member, training, flavor):
    ready_team.may_borrow = False
    ready_team.save()
    with pytest.raises(DomainError, match="more than vision could ever get at once \\(4\\)"):
        launch(member, ready_team, training, flavor, units=5)


def test_a_team_whose_namespace_is_not_ready_cannot_launch(team, member, training, flavor):
    QuotaGrantFactory(team=team, flavor=flavor, units=4)
    with pytest.raises(DomainError, match="not ready in the cluster yet"):
        launch(member, team, training, flavor)


def test_a_template_not_visible_to_the_team_is_refused(ready_team, member, admin_user, flavor, other_team):
    private = services.template_create(user=admin_user, slug="speech-only", name="Speech only", kind="training",
                                       owner_team=other_team, flavors=[flavor], image="x")
    with pytest.raises(DomainError, match="not available to vision"):
        launch(member, ready_team, private, flavor)


def test_an_outsider_cannot_launch_for_a_team(ready_team, outsider, training, flavor):
    with pytest.raises(PermissionDenied):
        launch(outsider, ready_team, training, flavor)


def test_a_launch_the_cluster_refuses_is_failed_with_the_reason_never_lost(ready_team, member, admin_user, flavor,
                                                                         django_capture_on_commit_callbacks):
    bad = services.template_create(user=admin_user, slug="bad-image", name="Bad", kind="training", flavors=[flavor],
                                   image="pytorch/pytorch:2.5", command=["python"], parameters=[])
    gateway().delete(ObjectRef("v1", "Namespace", "vision"))  # the namespace vanished under the portal
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, bad, flavor)
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.FAILED
    assert "The cluster did not take it" in workload.reason and "not found" in workload.reason


def test_stopping_removes_every_object_and_closes_the_interval(ready_team, member, training, flavor, simulated,
                                                              django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, flavor)
    simulated.advance(1)
    sync.sync_all()
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=member, workload=workload)
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.STOPPED
    assert gateway().get(ObjectRef("batch/v1", "Job", workload.k8s_name, "vision")) is None
    assert gateway().list("v1", "Pod", namespace="vision")[0] == []
    assert RunInterval.objects.get(workload=workload).ended_at is not None


def test_editing_a_template_makes_a_new_version_and_running_workloads_keep_theirs(ready_team, member, admin_user, training,
                                                                                  flavor):
    first = launch(member, ready_team, training, flavor)
    services.template_revise(user=admin_user, template=training, image="pytorch/pytorch:2.6")
    second = launch(member, ready_team, training, flavor)
    assert (first.template_version.number, first.template_version.image) == (1, "pytorch/pytorch:2.5")
    assert (second.template_version.number, second.template_version.image) == (2, "pytorch/pytorch:2.6")


@pytest.fixture
def inference(admin_user, flavor):
    return services.template_create(
        user=admin_user, slug="vllm", name="vLLM", kind=WorkloadKind.INFERENCE, flavors=[flavor], image="vllm/vllm-openai:v0.6.3",
        port=8000, parameters=[{"name": "workers", "type": "int", "default": 1, "min": 1, "max": 4}],
    )


def test_an_inference_server_scales_within_its_bounds_and_the_team_quota(ready_team, member, inference, flavor, simulated,
                                                                         django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        server = launch(member, ready_team, inference, flavor, units=2)
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_scale(user=member, workload=server, replicas=3)
    deployment = gateway().get(ObjectRef("apps/v1", "Deployment", server.k8s_name, "vision"))
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 3
    assert AuditEvent.objects.filter(action="workload.scaled").get().message.endswith("from 1 to 3 replicas")

    with pytest.raises(DomainError, match="between 1 and 4"):
        services.workload_scale(user=member, workload=server, replicas=5)
    ready_team.may_borrow = False
    ready_team.save()
    with pytest.raises(DomainError, match="need 6 H100 80GB units; vision could get at most 4"):
        services.workload_scale(user=member, workload=server, replicas=3)


def test_only_inference_servers_scale(ready_team, member, training, flavor):
    job = launch(member, ready_team, training, flavor)
    with pytest.raises(DomainError, match="Only inference servers"):
        services.workload_scale(user=member, workload=job, replicas=2)

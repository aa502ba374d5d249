"""The platform admin's pages for teams and the GPU catalog: each page and action for each role,
isolation (another team's is 404), refusals in words that save nothing, and the audit trail."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from django.urls import reverse

from portal.models import AuditEvent
from tenants.models import Flavor, Team
from tests.conftest import login
from tests.factories import QuotaGrantFactory

pytestmark = pytest.mark.django_db


def team_form(**changes: Any) -> dict[str, Any]:
    data = {"slug": "nlp", "name": "NLP", "cost_center": "CC-7", "description": "Language models", "may_borrow": "on",
            "lends_idle": "", "fair_share_weight": "1", "cpu_limit_cores": "32", "memory_limit_gib": "256", "pod_limit": "40"}
    data.update(changes)
    return {key: value for key, value in data.items() if value != ""}


def flavor_form(**changes: Any) -> dict[str, Any]:
    data = {"name": "L4", "slug": "l4", "resource_name": "nvidia.com/gpu", "sharing_mode": "exclusive",
            "gpu_model": "NVIDIA L4", "fraction_numerator": "1", "fraction_denominator": "1", "capacity_units": "8",
            "node_labels": '{"nvidia.com/gpu.product": "NVIDIA-L4"}', "tolerations": "[]", "is_active": "on"}
    data.update(changes)
    return data


# --- Who may open what --------------------------------------------------------------------------


@pytest.fixture
def people(admin_user, lead, member, finance_user, outsider) -> dict[str, Any]:
    return {"admin": admin_user, "lead": lead, "member": member, "finance": finance_user, "outsider": outsider}


@pytest.mark.parametrize("who", ["lead", "member", "finance"])
def test_only_platform_admins_open_the_team_and_catalog_pages(people, team, flavor, who):
    client = login(people[who])
    for url in (reverse("tenants:team-create"), reverse("tenants:team-edit", args=[team.slug]),
                reverse("tenants:team-delete", args=[team.slug]), reverse("tenants:flavor-list"),
                reverse("tenants:flavor-create"), reverse("tenants:flavor-edit", args=[flavor.slug])):
        assert client.get(url).status_code == 403, url
    assert client.post(reverse("tenants:team-create"), team_form()).status_code == 403
    assert client.post(reverse("tenants:team-delete", args=[team.slug]), {"confirm": team.slug}).status_code == 403
    assert client.post(reverse("tenants:flavor-create"), flavor_form()).status_code == 403
    assert client.post(reverse("tenants:flavor-edit", args=[flavor.slug]), flavor_form(slug=flavor.slug)).status_code == 403
    assert Team.objects.filter(slug=team.slug).exists() and not Team.objects.filter(slug="nlp").exists()
    assert not Flavor.objects.filter(slug="l4").exists()


def test_another_teams_edit_and_delete_pages_are_404_to_a_lead(outsider, team):
    client = login(outsider)
    assert client.get(reverse("tenants:team-edit", args=[team.slug])).status_code == 404
    assert client.post(reverse("tenants:team-delete", args=[team.slug]), {"confirm": team.slug}).status_code == 404
    assert Team.objects.filter(pk=team.pk).exists()


def test_admins_see_the_create_and_catalog_links_and_members_do_not(admin_user, member, team):
    assert reverse("tenants:team-create") in login(admin_user).get(reverse("tenants:team-list")).content.decode()
    assert reverse("tenants:team-edit", args=[team.slug]) in login(admin_user).get(
        reverse("tenants:team-detail", args=[team.slug])).content.decode()
    page = login(member).get(reverse("tenants:team-detail", args=[team.slug])).content.decode()
    assert reverse("tenants:team-edit", args=[team.slug]) not in page


# --- Teams --------------------------------------------------------------------------------------


def test_an_admin_creates_a_team_with_its_policy_and_it_is_audited(admin_user):
    response = login(admin_user).post(reverse("tenants:team-create"), team_form())
    assert response.status_code == 302 and response["Location"] == reverse("tenants:team-detail", args=["nlp"])
    team = Team.objects.get(slug="nlp")
    assert (team.name, team.cost_center, team.may_borrow, team.lends_idle, team.cpu_limit_cores, team.pod_limit) == (
        "NLP", "CC-7", True, False, 32, 40)
    event = AuditEvent.objects.get(action="team.created")
    assert event.message == "root created team nlp (NLP)" and event.data["lends_idle"] == "False"


def test_a_bad_slug_is_refused_in_words_and_the_form_keeps_what_was_typed(admin_user, team):
    response = login(admin_user).post(reverse("tenants:team-create"), team_form(slug="Kube-System!"))
    assert response.status_code == 400
    body = response.content.decode()
    assert "is not a valid name" in body and 'value="Language models"' not in body and "Language models" in body
    response = login(admin_user).post(reverse("tenants:team-create"), team_form(slug=team.slug))
    assert response.status_code == 400 and "already exists" in response.content.decode()
    assert Team.objects.count() == 1


def test_an_admin_edits_a_teams_policy_and_the_slug_stays(admin_user, team):
    response = login(admin_user).post(reverse("tenants:team-edit", args=[team.slug]),
                                      team_form(slug="renamed", name="Vision Lab", pod_limit="12"))
    assert response.status_code == 302
    team.refresh_from_db()
    assert (team.slug, team.name, team.pod_limit, team.lends_idle) == ("vision", "Vision Lab", 12, False)
    assert "pod_limit to 12" in AuditEvent.objects.get(action="team.updated").message


def test_the_delete_confirmation_lists_what_goes_and_what_stays(admin_user, team, member, flavor):
    QuotaGrantFactory(team=team, flavor=flavor, units=4)
    page = login(admin_user).get(reverse("tenants:team-delete", args=[team.slug])).content.decode()
    assert f"Namespace <code>{team.namespace}</code>" in page and "ClusterQueue" in page and "LocalQueue" in page
    assert "1 active quota grant" in page and "0 workload records (0 still active" in page
    assert "Usage history" in page and "Monthly statements" in page


def test_deleting_a_team_needs_its_slug_typed_again(admin_user, team):
    client = login(admin_user)
    response = client.post(reverse("tenants:team-delete", args=[team.slug]), {"confirm": "vison"})
    assert response.status_code == 400 and "Type vision, the team&#x27;s slug, to confirm" in response.content.decode()
    assert Team.objects.filter(pk=team.pk).exists()
    response = client.post(reverse("tenants:team-delete", args=[team.slug]), {"confirm": "vision"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and response.content == b"" and response["HX-Redirect"] == reverse("tenants:team-list")
    assert not Team.objects.filter(pk=team.pk).exists()
    assert AuditEvent.objects.filter(action="team.deleted", team_id=team.pk).exists()


# --- The GPU catalog ----------------------------------------------------------------------------


def test_a_preset_fills_the_flavor_form(admin_user):
    page = login(admin_user).get(reverse("tenants:flavor-create") + "?preset=nvidia-mig-3g.40gb").content.decode()
    assert 'value="nvidia.com/mig-3g.40gb"' in page and 'name="fraction_numerator" value="3"' in page
    assert 'name="fraction_denominator" value="7"' in page and "nvidia.com/mig.strategy" in page
    assert "Hardware-isolated" in page


def test_an_admin_adds_a_flavor_and_it_is_audited(admin_user):
    response = login(admin_user).post(reverse("tenants:flavor-create"), flavor_form())
    assert response.status_code == 302
    flavor = Flavor.objects.get(slug="l4")
    assert flavor.node_labels == {"nvidia.com/gpu.product": "NVIDIA-L4"} and flavor.tolerations == []
    assert AuditEvent.objects.get(action="flavor.created").message == "root added flavor L4 (8 × nvidia.com/gpu)"


def test_a_flavor_may_be_one_gib_of_an_80_gb_card_but_not_a_sliver_finer_than_256(admin_user):
    # Memory-sliced sharing (aliyun.com/gpu-mem) prices per GiB of the card: an H100 80GB is 1/80.
    client = login(admin_user)
    response = client.post(reverse("tenants:flavor-create"), flavor_form(
        name="H100 memory", slug="h100-gpu-mem", resource_name="aliyun.com/gpu-mem", sharing_mode="gpu-memory",
        fraction_denominator="80", capacity_units="640"))
    assert response.status_code == 302
    assert Flavor.objects.get(slug="h100-gpu-mem").fraction == Fraction(1, 80)
    refused = client.post(reverse("tenants:flavor-create"), flavor_form(slug="sliver", fraction_denominator="257"))
    assert refused.status_code == 400 and not Flavor.objects.filter(slug="sliver").exists()
    assert "less than or equal to 256" in refused.content.decode()


def test_lowering_capacity_below_the_guarantees_is_refused_and_saves_nothing(admin_user, flavor, team):
    QuotaGrantFactory(team=team, flavor=flavor, units=12)
    response = login(admin_user).post(reverse("tenants:flavor-edit", args=[flavor.slug]),
                                      flavor_form(name=flavor.name, slug=flavor.slug, capacity_units="10"))
    assert response.status_code == 400
    assert "teams are guaranteed 12 units, so capacity cannot drop to 10" in response.content.decode()
    flavor.refresh_from_db()
    assert flavor.capacity_units == 16 and not AuditEvent.objects.filter(action="flavor.updated").exists()


def test_a_capacity_change_is_audited_with_before_and_after(admin_user, flavor):
    response = login(admin_user).post(reverse("tenants:flavor-edit", args=[flavor.slug]),
                                      flavor_form(name=flavor.name, slug="other", capacity_units="24",
                                                  resource_name=flavor.resource_name, gpu_model=flavor.gpu_model))
    assert response.status_code == 302
    flavor.refresh_from_db()
    assert (flavor.slug, flavor.capacity_units) == ("h100-80gb", 24)
    event = AuditEvent.objects.get(action="flavor.updated")
    assert "capacity_units 16 → 24" in event.message and event.data["capacity_units"] == ["16", "24"]


def test_malformed_node_labels_are_refused_in_words(admin_user):
    response = login(admin_user).post(reverse("tenants:flavor-create"), flavor_form(node_labels='["gpu"]'))
    assert response.status_code == 400 and "Node labels are an object of strings" in response.content.decode()
    assert not Flavor.objects.filter(slug="l4").exists()


def test_a_resource_name_the_api_server_would_refuse_is_refused_in_the_catalog(admin_user):
    response = login(admin_user).post(reverse("tenants:flavor-create"),
                                      flavor_form(resource_name="example.com/" + "g" * 64))
    assert response.status_code == 400 and "is 64 bytes long; Kubernetes allows at most 63" in response.content.decode()

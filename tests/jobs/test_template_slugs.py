"""Template slugs are unique per team (and among the portal's own templates), so choosing one
tells a lead nothing about other teams' templates; templates are addressed by id, and another
team's template is 404 (or, in a launch, "no template you can see") by every address."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from jobs import services
from jobs.models import Workload, WorkloadKind, WorkloadTemplate
from tests.helpers import api, make_ready

pytestmark = pytest.mark.django_db

NOT_FOUND = {"message": "Not found, or not visible to you.", "errors": {}}


def _template_body(slug: str, **extra: Any) -> dict[str, Any]:
    return {"slug": slug, "name": f"Team {slug}", "kind": "training", "flavors": ["h100-80gb"], "image": "vision/x:1", **extra}


@pytest.fixture
def world(admin_user, ready_team, other_team, lead, member, outsider, flavor):
    """A global `foo` and speech's private `foo`, both made before vision's lead picks a slug."""
    global_foo = services.template_create(user=admin_user, slug="foo", name="Global foo", kind=WorkloadKind.TRAINING,
                                          flavors=[flavor], image="global/foo:1")
    speech_foo = services.template_create(user=outsider, slug="foo", name="Speech foo", kind=WorkloadKind.TRAINING,
                                          owner_team=other_team, flavors=[flavor], image="speech/foo:1")
    make_ready(other_team, flavor)
    return {"global": global_foo, "speech": speech_foo}


def test_a_lead_creates_a_slug_another_team_and_the_portal_use_and_nothing_reveals_them(world, lead):
    answer = api(lead).post("/api/templates/", _template_body("foo", owner_team="vision"), format="json")

    assert answer.status_code == 201, answer.json()
    assert "speech" not in answer.content.decode().lower()
    vision_foo = WorkloadTemplate.objects.get(pk=answer.json()["id"])
    assert (vision_foo.slug, vision_foo.owner_team_id) == ("foo", lead.memberships.get().team_id)
    # Taken or not elsewhere, a slug gets the same answer; only the team's own slugs are refused.
    fresh = api(lead).post("/api/templates/", _template_body("bar", owner_team="vision"), format="json")
    assert fresh.status_code == 201
    again = api(lead).post("/api/templates/", _template_body("foo", owner_team="vision"), format="json")
    assert again.status_code == 400
    assert again.json()["errors"] == {"slug": ["vision already has a template named “foo”; choose another slug."]}


def test_each_launch_by_id_uses_the_right_template_and_a_shared_slug_asks_for_the_id(world, lead, member, outsider, flavor):
    vision_foo = services.template_create(user=lead, slug="foo", name="Vision foo", kind=WorkloadKind.TRAINING,
                                          owner_team=lead.memberships.get().team, flavors=[flavor], image="vision/foo:1")
    body = {"team": "vision", "flavor": "h100-80gb", "units": 1}

    launched = {}
    for key, template in (("vision", vision_foo), ("global", world["global"])):
        answer = api(member).post("/api/workloads/", {**body, "template": template.pk}, format="json")
        assert answer.status_code == 201, answer.json()
        assert answer.json()["template_id"] == template.pk
        launched[key] = Workload.objects.get(pk=answer.json()["id"])
    assert launched["vision"].template_version.image == "vision/foo:1"
    assert launched["global"].template_version.image == "global/foo:1"
    speech = api(outsider).post("/api/workloads/", {**body, "team": "speech", "template": world["speech"].pk}, format="json")
    assert speech.status_code == 201 and Workload.objects.get(pk=speech.json()["id"]).template_version.image == "speech/foo:1"

    # By slug, vision sees two templates named foo: it names both, and not speech's.
    ambiguous = api(member).post("/api/workloads/", {**body, "template": "foo"}, format="json")
    assert ambiguous.status_code == 400
    ids = sorted([world["global"].pk, vision_foo.pk])
    assert ambiguous.json()["errors"] == {"template": [
        f"Several templates you can see are named “foo” (ids {ids[0]}, {ids[1]}); name the one you mean by its id."]}


def test_another_teams_template_is_not_found_by_any_address(world, member, as_user):
    speech_foo = world["speech"]
    missing = max(WorkloadTemplate.objects.values_list("pk", flat=True)) + 100

    assert api(member).get(f"/api/templates/{speech_foo.pk}/").json() == NOT_FOUND
    assert api(member).patch(f"/api/templates/{speech_foo.pk}/", {"image": "x:1"}, format="json").status_code == 404
    assert as_user(member).get(reverse("jobs:workload-launch") + f"?team=vision&template={speech_foo.pk}").status_code == 404
    assert as_user(member).get(reverse("jobs:workload-launch") + f"?team=vision&template={missing}").status_code == 404
    # The slug names vision's view of foo (the global one), never speech's.
    assert api(member).get("/api/templates/foo/").json()["id"] == world["global"].pk
    # A launch answers for speech's template exactly as for one that does not exist.

    def refusal(reference: int) -> Any:
        answer = api(member).post("/api/workloads/", {"team": "vision", "template": reference, "flavor": "h100-80gb"},
                                  format="json")
        assert answer.status_code == 400
        return answer.json()["errors"]["template"][0].replace(str(reference), "N")

    assert refusal(speech_foo.pk) == refusal(missing)
    # Lists filtered by it are empty, as for a template that does not exist.
    assert api(member).get("/api/workloads/", {"template": speech_foo.pk}).json()["results"] == []
    assert [t["id"] for t in api(member).get("/api/templates/").json()["results"]] == [world["global"].pk]
    speech_foo.refresh_from_db()
    assert speech_foo.current.image == "speech/foo:1"


def test_an_old_link_by_slug_still_works_and_is_redirected_to_the_id(world, member, as_user, training):
    old = as_user(member).get(reverse("jobs:workload-launch") + "?team=vision&template=pytorch-train")
    assert old.status_code == 302
    assert old.url == reverse("jobs:workload-launch") + f"?team=vision&template={training.pk}"
    assert api(member).get("/api/templates/pytorch-train/").json()["id"] == training.pk
    listed = as_user(member).get(reverse("jobs:template-list")).content.decode()
    assert f'?template={training.pk}"' in listed and f'?template={world["global"].pk}"' in listed


def test_the_database_keeps_slugs_unique_within_a_team_and_among_the_portals_templates(world, other_team):
    with pytest.raises(IntegrityError), transaction.atomic():
        WorkloadTemplate.objects.create(slug="foo", name="Twice", kind="training", owner_team=other_team, is_global=False)
    with pytest.raises(IntegrityError), transaction.atomic():
        WorkloadTemplate.objects.create(slug="foo", name="Twice", kind="training", owner_team=None)


def test_the_launch_page_launches_the_template_its_id_names(world, lead, member, flavor, as_user):
    vision_foo = services.template_create(user=lead, slug="foo", name="Vision foo", kind=WorkloadKind.TRAINING,
                                          owner_team=lead.memberships.get().team, flavors=[flavor], image="vision/foo:1")
    form = {"team": "vision", "flavor": "h100-80gb", "units": "1", "cpu": "4", "memory_gib": "16", "priority": "normal"}
    page = as_user(member).get(reverse("jobs:workload-launch") + "?team=vision").content.decode()
    assert f'<option value="{vision_foo.pk}">Vision foo · Training · vision\'s</option>' in page.replace("&#x27;", "'")
    assert f'value="{world["speech"].pk}"' not in page

    for template in (vision_foo, world["global"]):
        answer = as_user(member).post(reverse("jobs:workload-launch"), {**form, "template": str(template.pk)})
        assert answer.status_code == 302, answer.content.decode()[:2000]
        assert Workload.objects.order_by("-pk").first().template_version.template_id == template.pk  # type: ignore[union-attr]

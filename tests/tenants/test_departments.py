"""Departments (issue 27 §1): a level above teams, realised as a Kueue Cohort under the portal's.
Who may make and change them, on the page and the API; refusals in words that save nothing;
what the cluster is asked for; Volcano's refusal; and the periodic pass pruning a department's
cohort once it is gone."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from portal.errors import DomainError, StateConflict
from portal.kube import ObjectRef, gateway
from portal.models import AuditEvent
from tenants import cluster_selectors, desired, reconcile, services
from tenants.models import Department, Team
from tests.conftest import login
from tests.factories import QuotaGrantFactory

pytestmark = pytest.mark.django_db
COHORT = ("kueue.x-k8s.io/v1beta2", "Cohort")


def department_form(**changes: Any) -> dict[str, Any]:
    data = {"name": "Research", "slug": "research", "borrowing_limit": "4", "lending_limit": "0", "fair_share_weight": "1"}
    data.update(changes)
    return {key: value for key, value in data.items() if value is not None}


@pytest.fixture
def research(admin_user) -> Department:
    return services.department_save(actor=admin_user, department=Department(name="Research", slug="research",
                                                                            borrowing_limit=4, lending_limit=0))


def test_a_team_in_a_department_joins_its_cohort_which_sits_under_the_portals(research, team, admin_user, settings):
    services.team_update(actor=admin_user, team=team, department=research)
    _, spec = desired.team_specs([team.pk])[team.pk]
    assert spec.cohort == f"{settings.PORTAL_COHORT}-research" == research.cohort
    (cohort,) = [o for o in desired.platform_objects() if o["kind"] == "Cohort"]
    assert cohort["metadata"]["name"] == research.cohort and cohort["spec"]["parentName"] == settings.PORTAL_COHORT
    services.team_update(actor=admin_user, team=team, department=None)
    assert desired.team_specs([team.pk])[team.pk][1].cohort == settings.PORTAL_COHORT
    assert AuditEvent.objects.filter(action="team.updated", team_id=team.pk).count() == 2


def test_a_team_in_a_department_still_reads_its_queue_use_and_another_cohorts_queue_does_not(
        research, team, other_team, flavor, admin_user, simulated, settings):
    QuotaGrantFactory(team=team, flavor=flavor, units=3)
    services.team_update(actor=admin_user, team=team, department=research)
    reconcile.platform_reconcile()
    reconcile.cluster_reconcile()
    (row,) = [r for r in cluster_selectors.cluster_queue_usage(slugs=[team.slug])[team.slug] if r.flavor == flavor.slug]
    assert (row.guaranteed, row.in_use) == (3, 0)
    # A queue in a cohort that is neither the portal's nor one of its departments' is not the portal's to count.
    settings.PORTAL_COHORT = "elsewhere"
    read = cluster_selectors.cluster_queue_usage()
    assert team.slug not in read and other_team.slug not in read


def test_the_cohort_is_applied_changed_and_pruned_once_the_department_goes(research, team, flavor, admin_user, simulated):
    reconcile.platform_reconcile()
    ref = ObjectRef(*COHORT, research.cohort)
    assert (gateway().get(ref) or {})["spec"]["resourceGroups"]
    research.borrowing_limit, research.lending_limit, research.fair_share_weight = None, None, Decimal(2)
    services.department_save(actor=admin_user, department=research)
    reconcile.platform_reconcile()
    assert (gateway().get(ref) or {})["spec"] == {"parentName": research.cohort.removesuffix("-research"),
                                                  "fairSharing": {"weight": "2"}}
    # Another's Cohort, without the portal's label, is never touched.
    gateway().apply({"apiVersion": COHORT[0], "kind": COHORT[1], "metadata": {"name": "site-own"}, "spec": {}})
    services.department_delete(actor=admin_user, department=research)
    result = reconcile.cluster_reconcile()
    assert str(ref) in result.deleted and gateway().get(ref) is None
    assert gateway().get(ObjectRef(*COHORT, "site-own")) is not None


def test_a_department_with_teams_cannot_go_and_its_slug_cannot_change(research, team, admin_user):
    services.team_update(actor=admin_user, team=team, department=research)
    with pytest.raises(StateConflict, match=f"still holds {team.slug}; move its teams out first"):
        services.department_delete(actor=admin_user, department=research)
    assert not AuditEvent.objects.filter(action="department.deleted").exists()
    research.slug = "science"
    with pytest.raises(DomainError, match="names its cohort and cannot change"):
        services.department_save(actor=admin_user, department=research)
    assert Department.objects.get().slug == "research"


def test_only_platform_admins_make_departments_and_put_teams_in_them(research, team, lead, finance_user):
    for who in (lead, finance_user):
        with pytest.raises(PermissionDenied):
            services.department_save(actor=who, department=Department(name="Ops", slug="ops"))
        with pytest.raises(PermissionDenied):
            services.team_update(actor=who, team=team, department=research)
    assert Team.objects.get(pk=team.pk).department is None and not Department.objects.filter(slug="ops").exists()


def test_on_volcano_departments_are_refused_in_words(research, team, admin_user, settings):
    settings.PORTAL_QUEUE_BACKEND = "volcano"
    with pytest.raises(DomainError, match="Volcano, has no department level") as refused:
        services.team_update(actor=admin_user, team=team, department=research)
    assert refused.value.field == "department" and Team.objects.get(pk=team.pk).department is None
    with pytest.raises(DomainError, match="teams cannot be put in departments here"):
        services.department_save(actor=admin_user, department=Department(name="Ops", slug="ops"))
    assert not [o for o in desired.platform_objects() if o["kind"] == "Cohort"]
    page = login(admin_user).get(reverse("tenants:department-list"))
    assert b'data-testid="departments-refused"' in page.content


# --- The page --------------------------------------------------------------------------------------


def test_the_page_lists_departments_with_their_teams_and_guarantees_and_makes_one(research, team, other_team,
                                                                                  flavor, admin_user):
    services.team_update(actor=admin_user, team=team, department=research, fair_share_weight=Decimal(2))
    services.team_update(actor=admin_user, team=other_team, department=research)
    QuotaGrantFactory(team=team, flavor=flavor, units=3)
    QuotaGrantFactory(team=other_team, flavor=flavor, units=2)
    client = login(admin_user)
    page = client.get(reverse("tenants:department-list")).content.decode()
    assert f"5 × {flavor.name}" in page and team.name in page and other_team.name in page
    assert "at most 4 units a flavor" in page and "nothing" in page  # lends nothing outside
    assert f"{team.name}</a> <span class=\"muted small\">weight 2</span>" in page
    assert '<td class="num" data-testid="department-weight">1</td>' in page
    made = client.post(reverse("tenants:department-list"), department_form(name="Ops", slug="ops", borrowing_limit="",
                                                                            lending_limit="", fair_share_weight="1.5"))
    assert made.status_code == 302
    ops = Department.objects.get(slug="ops")
    assert (ops.borrowing_limit, ops.lending_limit, ops.fair_share_weight) == (None, None, Decimal("1.5"))
    assert AuditEvent.objects.get(action="department.created", object_id=str(ops.pk)).message.startswith(
        f"{admin_user.username} created department ops")


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"borrowing_limit": "-1"}, "borrowing_limit", "greater than or equal to 0"),
    ({"lending_limit": "two"}, "lending_limit", "whole number"),
    ({"slug": "Not A Slug"}, "slug", "is not a valid name"),
    ({"name": ""}, "name", "This field is required"),
    ({"slug": "research", "name": "Another"}, "slug", "already exists"),
])
def test_bad_input_on_the_page_is_refused_on_its_field_and_saves_nothing(research, admin_user, changes, field, words):
    response = login(admin_user).post(reverse("tenants:department-list"),
                                      department_form(**{"name": "Ops", "slug": "ops", **changes}))
    assert response.status_code == 400
    assert f'data-testid="error-{field}"' in response.content.decode() and words in response.content.decode()
    assert list(Department.objects.values_list("slug", flat=True)) == ["research"]


def test_members_leads_and_finance_cannot_open_the_pages(research, lead, member, finance_user):
    for who in (lead, member, finance_user):
        client = login(who)
        assert client.get(reverse("tenants:department-list")).status_code == 403
        assert client.get(reverse("tenants:department-edit", args=["research"])).status_code == 403
        assert client.post(reverse("tenants:department-delete", args=["research"])).status_code == 403
    assert Department.objects.filter(slug="research").exists()


def test_the_edit_page_changes_limits_and_deletes_only_an_empty_department(research, team, admin_user):
    services.team_update(actor=admin_user, team=team, department=research)
    client = login(admin_user)
    saved = client.post(reverse("tenants:department-edit", args=["research"]),
                        department_form(borrowing_limit="8", slug="other"))  # the slug field is disabled: ignored
    assert saved.status_code == 302
    assert Department.objects.values_list("slug", "borrowing_limit").get() == ("research", 8)
    refused = client.post(reverse("tenants:department-delete", args=["research"]), follow=True)
    assert "move its teams out first" in refused.content.decode() and Department.objects.exists()
    services.team_update(actor=admin_user, team=team, department=None)
    assert client.post(reverse("tenants:department-delete", args=["research"])).status_code == 302
    assert not Department.objects.exists()
    assert login(admin_user).get(reverse("tenants:department-edit", args=["research"])).status_code == 404


# --- The API ---------------------------------------------------------------------------------------


def test_the_api_shows_departments_to_those_who_see_every_team_and_404_to_others(research, team, admin_user,
                                                                                 finance_user, lead):
    services.team_update(actor=admin_user, team=team, department=research)
    body = login(finance_user).get("/api/departments/").json()
    assert [(d["slug"], d["teams"], d["borrowing_limit"], d["lending_limit"]) for d in body["results"]] == [
        ("research", [team.slug], 4, 0)]
    assert login(lead).get("/api/departments/").json()["results"] == []
    assert login(lead).get("/api/departments/research/").status_code == 404
    assert login(lead).get(f"/api/teams/{team.slug}/").json()["department"] == "research"
    assert login(finance_user).post("/api/departments/", {"name": "Ops", "slug": "ops"},
                                    content_type="application/json").status_code == 403


def test_the_api_makes_changes_and_refuses_in_words(research, team, admin_user):
    client = login(admin_user)
    made = client.post("/api/departments/", {"name": "Ops", "slug": "ops", "borrowing_limit": 2},
                       content_type="application/json")
    assert made.status_code == 201 and made.json()["borrowing_limit"] == 2
    refused = client.patch("/api/departments/ops/", {"slug": "dev"}, content_type="application/json")
    assert refused.status_code == 400 and "cannot change" in str(refused.json())
    bad = client.patch("/api/departments/ops/", {"lending_limit": -3}, content_type="application/json")
    assert bad.status_code == 400 and "lending_limit" in bad.json()["errors"]
    moved = client.patch(f"/api/teams/{team.slug}/", {"department": "ops"}, content_type="application/json")
    assert moved.status_code == 200 and moved.json()["department"] == "ops"
    unknown = client.patch(f"/api/teams/{team.slug}/", {"department": "nowhere"}, content_type="application/json")
    assert unknown.status_code == 400 and unknown.json()["errors"]["department"] == [
        "There is no department “nowhere”; /api/departments/ lists them by slug."]
    assert client.delete("/api/departments/ops/").status_code == 409
    client.patch(f"/api/teams/{team.slug}/", {"department": None}, content_type="application/json")
    assert client.delete("/api/departments/ops/").status_code == 204
    assert list(Department.objects.values_list("slug", flat=True)) == ["research"]

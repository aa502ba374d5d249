"""Two approval levels (issue 27 §1): a department's heads decide its teams' quota requests above
their leads. With `head_approves`, a lead's approval is the team's level and passes the request to
a head, who may grant at most what the lead did; a lead's own request goes straight to the heads.
Heads see their department's requests, and no more of its teams; every refusal is in words."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from portal.errors import DomainError, NotAllowed
from portal.models import AuditEvent, Notification
from tenants import selectors, services
from tenants.models import Department, Membership, QuotaGrant, QuotaRequest, Team
from tests.conftest import login
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.helpers import api, file_request

pytestmark = pytest.mark.django_db
HTMX: dict[str, Any] = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def head(db) -> Any:
    return UserFactory(username="hedda")


@pytest.fixture
def research(admin_user, head) -> Department:
    return services.department_save(actor=admin_user, department=Department(name="Research", slug="research",
                                                                            head_approves=True), heads=[head])


@pytest.fixture
def vision(team, research, admin_user) -> Team:
    return services.team_update(actor=admin_user, team=team, department=research)


def granted(team: Team) -> list[tuple[str, int]]:
    return list(QuotaGrant.objects.filter(team=team).values_list("flavor__slug", "units"))


def inbox(user: Any) -> list[int]:
    return list(selectors.approvals_inbox(user=user).values_list("pk", flat=True))


def unread(user: Any) -> list[str]:
    return list(Notification.objects.filter(recipient=user, read_at__isnull=True).values_list("message", flat=True))


# --- The flow ------------------------------------------------------------------------------------


def test_a_leads_approval_passes_the_request_to_the_head_who_grants_at_most_what_the_lead_did(
        vision, lead, member, head, flavor):
    qr = file_request(vision, member, flavor, units=4)
    assert inbox(lead) == [qr.pk] and inbox(head) == []
    assert any("asks for +4 H100 80GB" in message for message in unread(lead))

    passed = services.quota_request_approve(quota_request=qr, approver=lead, note="3 is enough", units={flavor.pk: 3})
    assert passed.status == QuotaRequest.Status.PENDING and passed.waits_for_head
    assert (passed.endorsed_by, passed.endorsement_note) == (lead, "3 is enough")
    assert list(qr.lines.values_list("endorsed_units", "approved_units")) == [(3, None)]
    assert granted(vision) == []
    assert inbox(lead) == [] and inbox(head) == [qr.pk]
    assert unread(lead) == []  # the lead's notice of it is read: it left their inbox
    assert unread(head) == [(f"lena, a lead of vision, approved +3 H100 80GB (of +4 asked) for vision (request #{qr.pk}); "
                             "as head of Research, you decide. Note: 3 is enough")]
    assert f"lena approved your request #{qr.pk} for the team; a head of Research decides it now." in unread(member)
    assert AuditEvent.objects.get(action="quota_request.endorsed").message == (
        f"lena approved request #{qr.pk} for the team (+3 H100 80GB (of +4 asked) for vision); it goes to the head of Research")

    # The lead is done: neither they nor another lead decides it now.
    with pytest.raises(NotAllowed, match=f"A lead approved request #{qr.pk} for the team; a head of Research decides"):
        services.quota_request_approve(quota_request=qr, approver=lead)
    with pytest.raises(NotAllowed):
        services.quota_request_reject(quota_request=qr, approver=lead)
    with pytest.raises(DomainError, match="approve between 1 and the 3 of 4 units a lead approved, or reject"):
        services.quota_request_approve(quota_request=qr, approver=head, units={flavor.pk: 4})
    assert granted(vision) == [] and QuotaRequest.objects.get(pk=qr.pk).is_pending

    approved = services.quota_request_approve(quota_request=qr, approver=head)
    assert approved.status == QuotaRequest.Status.APPROVED and approved.decided_by == head
    assert granted(vision) == [(flavor.slug, 3)]
    assert list(qr.lines.values_list("endorsed_units", "approved_units")) == [(3, 3)]
    assert unread(head) == []


def test_a_leads_own_request_goes_straight_to_the_heads_and_they_may_grant_fewer(vision, lead, head, flavor):
    other_lead = UserFactory(username="otto")
    MembershipFactory(team=vision, user=other_lead, role=Membership.Role.LEAD)
    qr = file_request(vision, lead, flavor, units=4)
    assert qr.waits_for_head and qr.endorsed_by == lead
    assert inbox(other_lead) == [] and inbox(head) == [qr.pk]
    assert unread(other_lead) == []
    assert unread(head) == [f"lena asks for +4 H100 80GB for vision (request #{qr.pk}); as head of Research, you decide."]
    services.quota_request_approve(quota_request=qr, approver=head, units={flavor.pk: 2})
    assert granted(vision) == [(flavor.slug, 2)]


def test_a_superusers_approval_decides_though_django_grants_them_every_permission(vision, lead, member, head, flavor):
    root = UserFactory.create(username="su", is_superuser=True)
    qr = file_request(vision, member, flavor, units=2)
    assert not login(root).get(reverse("tenants:approvals")).content.decode().count("Your approval is the team's")
    approved = services.quota_request_approve(quota_request=qr, approver=root)
    assert approved.status == QuotaRequest.Status.APPROVED and approved.endorsed_by is None
    assert granted(vision) == [(flavor.slug, 2)]


def test_a_platform_admins_request_is_not_a_leads_approval(vision, admin_user, lead, head, flavor):
    qr = file_request(vision, admin_user, flavor)
    assert qr.endorsed_by is None and not qr.waits_for_head
    assert inbox(lead) == [qr.pk] and inbox(head) == []


def test_a_head_rejects_and_the_requester_hears_it(vision, lead, member, head, flavor):
    qr = file_request(vision, member, flavor, units=4)
    services.quota_request_approve(quota_request=qr, approver=lead)
    rejected = services.quota_request_reject(quota_request=qr, approver=head, note="Next quarter")
    assert rejected.status == QuotaRequest.Status.REJECTED and granted(vision) == []
    assert f"hedda rejected your request #{qr.pk}: Next quarter." in unread(member)


def test_a_head_may_decide_before_the_lead_and_a_platform_admin_at_either_level(vision, lead, member, head, flavor,
                                                                                 admin_user):
    first = file_request(vision, member, flavor, units=1)
    services.quota_request_approve(quota_request=first, approver=head)
    assert QuotaRequest.objects.get(pk=first.pk).status == QuotaRequest.Status.APPROVED
    second = file_request(vision, member, flavor, units=1)
    services.quota_request_approve(quota_request=second, approver=admin_user)
    assert QuotaRequest.objects.get(pk=second.pk).status == QuotaRequest.Status.APPROVED
    assert granted(vision) == [(flavor.slug, 1), (flavor.slug, 1)]


def test_with_one_level_a_leads_approval_decides_and_a_head_may_still_decide(vision, research, lead, member, head,
                                                                             flavor, admin_user):
    research.head_approves = False
    services.department_save(actor=admin_user, department=research)
    qr = file_request(vision, member, flavor, units=2)
    assert not qr.waits_for_head and inbox(head) == []  # a head's inbox holds what is passed to them
    services.quota_request_approve(quota_request=qr, approver=lead)
    assert granted(vision) == [(flavor.slug, 2)]
    other = file_request(vision, member, flavor, units=1)
    services.quota_request_reject(quota_request=other, approver=head)
    assert QuotaRequest.objects.get(pk=other.pk).status == QuotaRequest.Status.REJECTED


def test_a_leads_approval_that_does_not_fit_is_refused_and_passes_nothing_on(vision, lead, member, head, flavor):
    qr = file_request(vision, member, flavor, units=16)
    QuotaGrant.objects.create(team=TeamFactory.create(), flavor=flavor, units=8)  # someone else now holds half
    with pytest.raises(DomainError, match="at most 8 more can be approved"):
        services.quota_request_approve(quota_request=qr, approver=lead)
    qr.refresh_from_db()
    assert qr.endorsed_at is None and inbox(head) == [] and inbox(lead) == [qr.pk]


def test_a_head_of_another_department_sees_and_decides_nothing_of_it(vision, member, lead, flavor, admin_user):
    stranger = UserFactory.create(username="sven")
    services.department_save(actor=admin_user, department=Department(name="Ops", slug="ops"), heads=[stranger])
    qr = file_request(vision, lead, flavor)
    assert inbox(stranger) == []
    with pytest.raises(PermissionDenied):
        services.quota_request_approve(quota_request=qr, approver=stranger)
    client = login(stranger)
    assert client.get(reverse("tenants:quota-request-detail", args=[qr.pk])).status_code == 404
    assert client.post(reverse("tenants:quota-request-approve", args=[qr.pk])).status_code == 404
    assert api(stranger).get(f"/api/quota-requests/{qr.pk}/").status_code == 404
    assert api(stranger).post(f"/api/quota-requests/{qr.pk}/approve/", {}, format="json").status_code == 404
    assert QuotaRequest.objects.get(pk=qr.pk).is_pending


def test_heading_a_department_shows_its_requests_not_its_teams(vision, lead, head, flavor):
    qr = file_request(vision, lead, flavor)
    client = login(head)
    assert client.get(reverse("tenants:team-detail", args=[vision.slug])).status_code == 404
    assert api(head).get(f"/api/teams/{vision.slug}/").status_code == 404
    assert api(head).get("/api/workloads/").json()["results"] == []
    page = client.get(reverse("tenants:quota-request-detail", args=[qr.pk])).content.decode()
    assert "For Vision (Research)" in page and reverse("tenants:team-detail", args=[vision.slug]) not in page
    assert "Waiting for a head of Research: hedda." in page
    listed = client.get(reverse("tenants:quota-request-list")).content.decode()
    assert f"#{qr.pk}" in listed and "with the department head" in listed
    assert reverse("tenants:team-detail", args=[vision.slug]) not in listed


# --- The pages -----------------------------------------------------------------------------------


def test_the_inbox_tells_the_lead_it_passes_on_and_shows_the_head_what_the_lead_approved(vision, lead, member, head,
                                                                                        flavor):
    qr = file_request(vision, member, flavor, units=4)
    lead_page = login(lead).get(reverse("tenants:approvals")).content.decode()
    assert "Your approval is the team's; a head of Research then decides." in lead_page
    row = login(lead).post(reverse("tenants:quota-request-approve", args=[qr.pk]),
                           {f"units-{flavor.pk}": "3", "note": "fits"}, **HTMX).content.decode()
    assert "Waits for the department head" in row and "<strong>lena</strong> approved it for the team" in row

    client = login(head)
    assert 'href="/approvals/"' in client.get(reverse("tenants:dashboard")).content.decode()  # the menu offers it
    page = client.get(reverse("tenants:approvals")).content.decode()
    assert f'id="approval-{qr.pk}"' in page and "+3 of +4 H100 80GB" in page and "“fits”" in page
    assert 'max="3"' in page and "Your approval is the team's" not in page
    assert reverse("tenants:team-detail", args=[vision.slug]) not in page  # the team's name, not a link to it
    done = client.post(reverse("tenants:quota-request-approve", args=[qr.pk]), {f"units-{flavor.pk}": "3"},
                       **HTMX).content.decode()
    assert 'data-testid="row-status">Approved' in done and granted(vision) == [(flavor.slug, 3)]


def test_the_api_says_who_decides_now_and_a_leads_approval_answers_pending(vision, lead, member, head, flavor):
    qr = file_request(vision, member, flavor, units=4)
    assert api(member).get(f"/api/quota-requests/{qr.pk}/").json()["waits_for"] == "lead"
    passed = api(lead).post(f"/api/quota-requests/{qr.pk}/approve/",
                            {"lines": [{"flavor": flavor.pk, "units": 2}]}, format="json")
    assert passed.status_code == 200
    body = passed.json()
    assert (body["status"], body["waits_for"], body["endorsed_by"]) == ("pending", "department head", "lena")
    assert [(line["endorsed_units"], line["approved_units"]) for line in body["lines"]] == [(2, None)]
    refused = api(lead).post(f"/api/quota-requests/{qr.pk}/approve/", {}, format="json")
    assert refused.status_code == 403 and "a head of Research decides it now" in str(refused.json())
    assert [r["id"] for r in api(head).get("/api/quota-requests/").json()["results"]] == [qr.pk]
    done = api(head).post(f"/api/quota-requests/{qr.pk}/approve/", {}, format="json").json()
    assert (done["status"], done["waits_for"], done["decided_by"]) == ("approved", None, "hedda")


# --- Naming the heads ------------------------------------------------------------------------------


def test_the_department_page_names_its_heads_and_turns_on_two_levels(research, admin_user, head):
    client = login(admin_user)
    page = client.get(reverse("tenants:department-list")).content.decode()
    assert "a lead, then a head" in page and "heads: hedda" in page
    form = {"name": "Research", "borrowing_limit": "", "lending_limit": "", "fair_share_weight": "1",
            "heads": "hedda, root ", "head_approves": "on"}
    assert client.post(reverse("tenants:department-edit", args=["research"]), form).status_code == 302
    assert sorted(research.heads.values_list("username", flat=True)) == ["hedda", "root"]
    assert "heads hedda, root" in AuditEvent.objects.filter(action="department.updated").latest("pk").message
    edit = client.get(reverse("tenants:department-edit", args=["research"])).content.decode()
    assert 'value="hedda, root"' in edit


@pytest.mark.parametrize(("heads", "two_levels", "words"), [
    ("hedda, nobody", "on", "No active user is called “nobody”: name heads by their usernames."),
    ("", "on", "Two approval levels need a head to decide after the lead: name at least one."),
])
def test_bad_heads_are_refused_on_their_field_and_save_nothing(research, admin_user, head, heads, two_levels, words):
    form = {"name": "Renamed", "borrowing_limit": "", "lending_limit": "", "fair_share_weight": "1", "heads": heads,
            "head_approves": two_levels}
    response = login(admin_user).post(reverse("tenants:department-edit", args=["research"]), form)
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-testid="error-heads"' in page and words in page
    research.refresh_from_db()
    assert research.name == "Research" and list(research.heads.all()) == [head]


def test_the_api_names_heads_and_refuses_unknown_ones(research, admin_user, head, finance_user):
    client = api(admin_user)
    made = client.post("/api/departments/", {"name": "Ops", "slug": "ops", "heads": ["hedda"], "head_approves": True},
                       format="json")
    assert made.status_code == 201 and (made.json()["heads"], made.json()["head_approves"]) == (["hedda"], True)
    bad = client.patch("/api/departments/ops/", {"heads": ["ghost"]}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"]["heads"] == [
        "No active user is called “ghost”: name heads by their usernames."]
    none_left = client.patch("/api/departments/ops/", {"heads": []}, format="json")
    assert none_left.status_code == 400 and "name at least one" in str(none_left.json())
    kept = client.patch("/api/departments/ops/", {"borrowing_limit": 3}, format="json")
    assert kept.status_code == 200 and kept.json()["heads"] == ["hedda"]
    assert api(finance_user).patch("/api/departments/ops/", {"heads": ["fiona"]}, format="json").status_code == 403
    assert list(Department.objects.get(slug="ops").heads.values_list("username", flat=True)) == ["hedda"]

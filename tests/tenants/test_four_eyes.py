"""Four eyes on quota: whoever files a request is not the one who approves it, on by default; a
platform admin may turn it off for a team, and a site for the teams it creates."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from portal.errors import NotAllowed
from portal.models import AuditEvent
from tenants import services
from tenants.models import Membership, QuotaGrant, QuotaRequest, Team
from tests.factories import MembershipFactory, UserFactory
from tests.helpers import api, file_request

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def four_eyes(team: Team) -> Team:
    assert team.requires_second_approver is True  # every new team's, unless the site says otherwise
    return team


@pytest.fixture
def without_four_eyes(team: Team) -> Team:
    """A team whose four eyes a platform admin turned off."""
    team.requires_second_approver = False
    team.save(update_fields=["requires_second_approver"])
    return team


def sentence(qr: QuotaRequest, filer: str) -> str:
    return f"Vision asks for a second person to approve quota: someone other than {filer}, who filed #{qr.pk}, must decide."


def test_a_lead_who_filed_a_request_cannot_approve_it_when_the_team_asks_for_four_eyes(four_eyes, lead, flavor):
    qr = file_request(four_eyes, lead, flavor)
    with pytest.raises(NotAllowed) as refused:
        services.quota_request_approve(quota_request=qr, approver=lead)
    assert refused.value.message == sentence(qr, "lena")
    qr.refresh_from_db()
    assert qr.status == QuotaRequest.Status.PENDING
    assert not QuotaGrant.objects.exists()


def test_not_even_a_platform_admin_approves_their_own_request_when_the_team_asks_for_four_eyes(
        four_eyes, admin_user, flavor):
    qr = file_request(four_eyes, admin_user, flavor)
    with pytest.raises(NotAllowed) as refused:
        services.quota_request_approve(quota_request=qr, approver=admin_user)
    assert refused.value.message == sentence(qr, "root")
    assert not admin_user.has_perm("tenants.approve_quotarequest", qr)


def test_a_second_lead_approves_what_the_first_lead_filed(four_eyes, lead, flavor):
    second = UserFactory.create(username="omar")
    MembershipFactory(team=four_eyes, user=second, role=Membership.Role.LEAD)
    qr = file_request(four_eyes, lead, flavor)
    approved = services.quota_request_approve(quota_request=qr, approver=second)
    assert approved.status == QuotaRequest.Status.APPROVED
    assert approved.decided_by == second


def test_the_filer_may_still_reject_their_own_request_under_four_eyes(four_eyes, lead, flavor):
    qr = file_request(four_eyes, lead, flavor)
    rejected = services.quota_request_reject(quota_request=qr, approver=lead)
    assert rejected.status == QuotaRequest.Status.REJECTED


def test_a_new_team_asks_for_four_eyes_whoever_creates_it(admin_user):
    made_by_service = services.team_create(actor=admin_user, slug="nlp", name="NLP")
    made_by_api = api(admin_user).post("/api/teams/", {"slug": "speech", "name": "Speech"}, format="json")
    form = Client()
    form.force_login(admin_user)
    page = form.get(reverse("tenants:team-create")).content.decode()

    assert made_by_service.requires_second_approver is True
    assert made_by_api.status_code == 201 and made_by_api.json()["requires_second_approver"] is True
    assert re.search(r'<input type="checkbox" name="requires_second_approver"[^>]* checked', page)


def test_a_site_may_create_its_teams_without_four_eyes(admin_user, settings):
    settings.PORTAL_QUOTA_FOUR_EYES_DEFAULT = False

    assert services.team_create(actor=admin_user, slug="nlp", name="NLP").requires_second_approver is False


def test_a_lead_approves_their_own_request_where_a_platform_admin_turned_four_eyes_off(without_four_eyes, lead, flavor):
    qr = file_request(without_four_eyes, lead, flavor)
    assert services.quota_request_approve(quota_request=qr, approver=lead).status == QuotaRequest.Status.APPROVED


def test_four_eyes_turned_on_after_filing_still_stops_the_filer(without_four_eyes, lead, flavor):
    qr = file_request(without_four_eyes, lead, flavor)
    Team.objects.filter(pk=without_four_eyes.pk).update(requires_second_approver=True)
    with pytest.raises(NotAllowed):
        services.quota_request_approve(quota_request=qr, approver=lead)


def test_the_api_refuses_the_filer_with_the_sentence_and_lets_another_approver_through(four_eyes, lead, admin_user, flavor):
    qr = file_request(four_eyes, lead, flavor)
    refused = api(lead).post(f"/api/quota-requests/{qr.pk}/approve/", {}, format="json")
    assert refused.status_code == 403
    assert refused.json()["message"] == sentence(qr, "lena")
    approved = api(admin_user).post(f"/api/quota-requests/{qr.pk}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.json()
    assert approved.json()["status"] == "approved"


def test_a_platform_admin_turns_four_eyes_off_and_on_through_the_api_and_a_lead_cannot(team, lead, admin_user):
    assert api(lead).patch("/api/teams/vision/", {"requires_second_approver": False}, format="json").status_code == 403
    response = api(admin_user).patch("/api/teams/vision/", {"requires_second_approver": False}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["requires_second_approver"] is False
    team.refresh_from_db()
    assert team.requires_second_approver is False
    assert AuditEvent.objects.filter(action="team.updated", message__contains="requires_second_approver to False").exists()
    assert api(lead).patch("/api/teams/vision/", {"requires_second_approver": True}, format="json").status_code == 403
    assert api(admin_user).patch("/api/teams/vision/", {"requires_second_approver": True}, format="json").status_code == 200
    assert AuditEvent.objects.filter(action="team.updated", message__contains="requires_second_approver to True").exists()


def test_the_approvals_page_offers_the_filer_no_approve_button_but_says_who_must_decide(four_eyes, lead, member, flavor,
                                                                                        as_user):
    own = file_request(four_eyes, lead, flavor)
    theirs = file_request(four_eyes, member, flavor, units=2)
    page = as_user(lead).get(reverse("tenants:approvals")).content.decode()
    assert sentence(own, "lena") in page
    assert reverse("tenants:quota-request-approve", args=[own.pk]) not in page
    assert reverse("tenants:quota-request-approve", args=[theirs.pk]) in page


def test_the_request_page_tells_the_filer_who_must_decide_and_a_forced_post_is_refused_in_the_row(four_eyes, lead, flavor,
                                                                                                  as_user):
    qr = file_request(four_eyes, lead, flavor)
    lena = as_user(lead)
    detail = lena.get(reverse("tenants:quota-request-detail", args=[qr.pk])).content.decode()
    assert sentence(qr, "lena") in detail
    assert reverse("tenants:quota-request-approve", args=[qr.pk]) not in detail
    row = lena.post(reverse("tenants:quota-request-approve", args=[qr.pk]), {}, **HTMX)
    assert row.status_code == 200
    assert row.content.decode().count(sentence(qr, "lena")) == 1
    qr.refresh_from_db()
    assert qr.status == QuotaRequest.Status.PENDING


def test_a_platform_admin_turns_four_eyes_on_in_the_admin_through_the_service(without_four_eyes, lead, admin_user, as_user):
    team = without_four_eyes
    lead_membership = Membership.objects.get(team=team, user=lead)
    data = {
        "name": "Vision", "cost_center": team.cost_center, "description": "",
        "may_borrow": "on", "lends_idle": "on", "fair_share_weight": "1", "cpu_limit_cores": "64", "memory_limit_gib": "512",
        "pod_limit": "100",
        "requires_second_approver": "on",
        "memberships-TOTAL_FORMS": "1", "memberships-INITIAL_FORMS": "1",
        "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000",
        "memberships-0-id": str(lead_membership.pk), "memberships-0-team": str(team.pk),
        "memberships-0-user": str(lead.pk), "memberships-0-role": "lead",
    }
    response = as_user(admin_user).post(reverse("admin:tenants_team_change", args=[team.pk]), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    team.refresh_from_db()
    assert team.requires_second_approver is True
    assert AuditEvent.objects.filter(action="team.updated", message__contains="requires_second_approver to True").exists()

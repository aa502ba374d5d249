"""A quota request's notifications follow the request: the deciders' are read once it is decided
or withdrawn, and nobody is told of a decision they made themselves."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.models import Notification
from tenants import services
from tenants.models import Membership, QuotaRequest
from tests.conftest import login
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def second_lead(team):
    user = UserFactory(username="leo")
    MembershipFactory(team=team, user=user, role=Membership.Role.LEAD)
    return user


def _request(team, requester, flavor) -> QuotaRequest:
    return services.quota_request_create(requester=requester, team=team, justification="Spring data set",
                                         lines=[services.LineInput(flavor=flavor, units=2)])


def _unread(user) -> list[str]:
    return list(Notification.objects.for_user(user).unread().values_list("message", flat=True))


@pytest.mark.parametrize("decide", [
    lambda qr, lead, member: services.quota_request_approve(quota_request=qr, approver=lead),
    lambda qr, lead, member: services.quota_request_reject(quota_request=qr, approver=lead, note="Not now"),
    lambda qr, lead, member: services.quota_request_cancel(quota_request=qr, actor=member),
], ids=["approved", "rejected", "withdrawn"])
def test_every_leads_notification_of_a_request_is_read_once_it_is_decided(team, member, lead, second_lead, flavor, decide):
    qr = _request(team, member, flavor)
    assert len(_unread(lead)) == 1 and len(_unread(second_lead)) == 1
    decide(qr, lead, member)
    assert _unread(lead) == [] and _unread(second_lead) == []


def test_the_requester_still_hears_of_the_decision(team, member, lead, flavor):
    qr = _request(team, member, flavor)
    services.quota_request_approve(quota_request=qr, approver=lead)
    assert _unread(member) == [f"lena approved your request #{qr.pk}: +2 H100 80GB for vision."]


def test_a_lead_who_approves_their_own_request_is_not_told_they_did(team, lead, second_lead, flavor):
    team.requires_second_approver = False
    team.save()
    qr = _request(team, lead, flavor)
    services.quota_request_approve(quota_request=qr, approver=lead)
    assert _unread(lead) == []
    assert _unread(second_lead) == []  # told of the request, which no longer waits for them


def test_another_requests_notifications_stay_unread(team, member, lead, flavor):
    first, second = _request(team, member, flavor), _request(team, member, flavor)
    services.quota_request_reject(quota_request=first, approver=lead)
    assert _unread(lead) == [f"alice asks for +2 H100 80GB for vision (request #{second.pk})."]


def test_a_leads_notification_opens_the_requests_row_in_the_inbox(team, member, lead, flavor):
    qr = _request(team, member, flavor)
    note = Notification.objects.get(recipient=lead)
    response = login(lead).get(reverse("notification-open", args=[note.pk]))
    assert response["Location"] == f"/approvals/#approval-{qr.pk}"

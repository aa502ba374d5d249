"""Reservations (issue 27 §4): quota requested for a later window, checked against what is already
promised for every moment of it, approved like any other request, shown on the team page, and
applied and removed on time by the grants pass."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.errors import DomainError
from portal.models import AuditEvent, Notification
from tenants import selectors, services
from tenants.models import QuotaGrant, QuotaRequest, Team
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db



def reserve(team, requester, flavor, units, *, starts_in: int, lasts: int | None = None) -> QuotaRequest:
    starts_on = timezone.localdate() + dt.timedelta(days=starts_in)
    return services.quota_request_create(
        requester=requester, team=team, lines=[services.LineInput(flavor=flavor, units=units)],
        justification="The December deadline", starts_on=starts_on,
        ends_on=starts_on + dt.timedelta(days=lasts - 1) if lasts else None)


def another_team(slug: str):
    team = TeamFactory(slug=slug, name=slug.title(), requires_second_approver=False)
    lead = UserFactory(username=f"{slug}-lead")
    MembershipFactory(team=team, user=lead, role="lead")
    return team, lead


def test_a_reservation_is_approved_for_its_window_and_waits_until_its_first_day(team, member, lead, flavor, as_user):
    qr = reserve(team, member, flavor, 8, starts_in=10, lasts=7)
    first, last = qr.starts_on, qr.ends_on
    assert first is not None and last is not None
    assert AuditEvent.objects.get(action="quota_request.created").message == (
        f"alice requested +8 H100 80GB for vision from {first.isoformat()} through {last.isoformat()} (request #{qr.pk})")
    services.quota_request_approve(quota_request=qr, approver=lead)

    grant = QuotaGrant.objects.get(request=qr)
    assert grant.valid_until is not None
    assert timezone.localtime(grant.valid_from).date() == first and timezone.localtime(grant.valid_from).hour == 0
    assert timezone.localtime(grant.valid_until).date() == last + dt.timedelta(days=1)
    assert grant.began_at is None and not grant.is_active
    assert selectors.team_guarantees(team=team) == {}  # nothing until its first day
    page = as_user(member).get(reverse("tenants:team-detail", args=["vision"])).content.decode()
    assert 'data-testid="reserved-grants"' in page and first.isoformat() in page
    assert f"reserved from {first.isoformat()}" in as_user(lead).get(
        reverse("tenants:quota-request-detail", args=[qr.pk])).content.decode()


@pytest.mark.parametrize(("starts_in", "lasts", "units", "words", "field"), [
    (0, 3, 4, "starts on a later day", "starts_on"),
    (-2, 10, 4, "starts on a later day", "starts_on"),
    (5, None, -2, "given back from now", "starts_on"),
])
def test_a_bad_reservation_is_refused_in_words_and_nothing_is_filed(team, member, flavor, starts_in, lasts, units, words,
                                                                     field):
    with pytest.raises(DomainError, match=words) as refused:
        reserve(team, member, flavor, units, starts_in=starts_in, lasts=lasts)
    assert refused.value.field == field
    assert not QuotaRequest.objects.exists()


def test_a_reservation_ending_before_it_starts_is_refused(team, member, flavor):
    starts_on = timezone.localdate() + dt.timedelta(days=5)
    with pytest.raises(DomainError, match="is before the first") as refused:
        services.quota_request_create(requester=member, team=team, lines=[services.LineInput(flavor=flavor, units=2)],
                                      justification="x", starts_on=starts_on, ends_on=starts_on - dt.timedelta(days=1))
    assert refused.value.field == "ends_on"


def test_approval_counts_what_is_promised_for_every_moment_of_the_window(team, member, lead, flavor):
    # 16 H100 units. vision reserves 10 for days 10-19.
    services.quota_request_approve(quota_request=reserve(team, member, flavor, 10, starts_in=10, lasts=10), approver=lead)
    nlp, nlp_lead = another_team("nlp")
    # nlp asks 8 for days 15-24: on days 15-19, 10 + 8 would be 18 of 16.
    overlapping = reserve(nlp, nlp_lead, flavor, 8, starts_in=15, lasts=10)
    assert overlapping.starts_on is not None and overlapping.ends_on is not None
    with pytest.raises(DomainError) as refused:
        services.quota_request_approve(quota_request=overlapping, approver=nlp_lead)
    assert refused.value.message == (
        f"Cannot approve request #{overlapping.pk}: H100 80GB has 16 units and teams are promised up to 10 of them from "
        f"{overlapping.starts_on.isoformat()} through {overlapping.ends_on.isoformat()} (reservations included); +8 would "
        "make 18, so at most 6 more can be approved.")
    # The same 8 after vision's window: nothing else is promised then.
    services.quota_request_approve(quota_request=reserve(nlp, nlp_lead, flavor, 8, starts_in=20, lasts=5), approver=nlp_lead)
    # Permanent quota from now must fit beside every reservation to come: 10 are promised on days 10-19.
    recsys, recsys_lead = another_team("recsys")
    permanent = services.quota_request_create(requester=recsys_lead, team=recsys, justification="x",
                                              lines=[services.LineInput(flavor=flavor, units=7)])
    with pytest.raises(DomainError, match="promised up to 10 of them now and later"):
        services.quota_request_approve(quota_request=permanent, approver=recsys_lead)
    fits = services.quota_request_create(requester=recsys_lead, team=recsys, justification="x",
                                         lines=[services.LineInput(flavor=flavor, units=6)])
    services.quota_request_approve(quota_request=fits, approver=recsys_lead)
    assert selectors.committed_peak(flavor_id=flavor.pk, start=timezone.now(), end=None) == 16


def test_the_grants_pass_begins_a_reservation_on_its_first_day_and_ends_it_after_its_last(
        team, member, lead, flavor, django_capture_on_commit_callbacks):
    services.quota_request_approve(quota_request=reserve(team, member, flavor, 8, starts_in=3, lasts=2), approver=lead)
    grant = QuotaGrant.objects.get()
    version = Team.objects.get(pk=team.pk).config_version
    before = grant.valid_from - dt.timedelta(seconds=1)
    assert services.quota_grants_expire(now=before) == services.ExpiryResult(ended=0, warned=0, begun=0)

    with django_capture_on_commit_callbacks(execute=False):
        assert services.quota_grants_expire(now=grant.valid_from).begun == 1
    assert services.quota_grants_expire(now=grant.valid_from).begun == 0  # once
    grant.refresh_from_db()
    assert grant.began_at == grant.valid_from
    assert Team.objects.get(pk=team.pk).config_version == version + 1  # its queue gets it now
    assert selectors.guarantees_by_flavor(team_ids=[team.pk]).get((team.pk, flavor.pk)) is None  # not yet, by the clock
    assert QuotaGrant.objects.active(at=grant.valid_from).get() == grant
    event = AuditEvent.objects.get(action="quota_grant.began")
    assert event.message == (f"Reserved grant of +8 H100 80GB for vision began through "
                             f"{(timezone.localdate() + dt.timedelta(days=4)).isoformat()} (request #{grant.request_id})")
    assert Notification.objects.filter(recipient=member, message__startswith="The reserved +8 H100 80GB").exists()

    assert grant.valid_until is not None
    after = grant.valid_until + dt.timedelta(seconds=1)
    assert services.quota_grants_expire(now=after).ended == 1
    grant.refresh_from_db()
    assert grant.ended_at == after


def test_grants_made_without_a_request_are_never_begun_again(team, flavor):
    from tests.factories import QuotaGrantFactory

    QuotaGrantFactory(team=team, flavor=flavor, units=2)
    assert services.quota_grants_expire().begun == 0


def test_the_api_files_a_reservation_and_says_its_window(team, member, flavor):
    from tests.helpers import api

    starts_on = timezone.localdate() + dt.timedelta(days=7)
    response = api(member).post("/api/quota-requests/", {
        "team": "vision", "lines": [{"flavor": flavor.pk, "units": 4}], "justification": "deadline",
        "starts_on": starts_on.isoformat(), "ends_on": (starts_on + dt.timedelta(days=2)).isoformat()}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["starts_on"] == starts_on.isoformat()
    refused = api(member).post("/api/quota-requests/", {
        "team": "vision", "lines": [{"flavor": flavor.pk, "units": 4}], "justification": "deadline",
        "starts_on": timezone.localdate().isoformat()}, format="json")
    assert refused.status_code == 400 and "later day" in refused.json()["message"]


def test_the_capacity_calendar_shows_each_months_peak_of_promises_and_what_is_reserved(team, member, lead, flavor,
                                                                                    admin_user, as_user):
    from tests.factories import QuotaGrantFactory

    QuotaGrantFactory(team=team, flavor=flavor, units=4)  # running, permanent
    nlp, nlp_lead = another_team("nlp")
    # Reserved for 5 days in the month after next: 4 + 10 at its peak.
    next_month = (timezone.localdate().replace(day=1) + dt.timedelta(days=32)).replace(day=1)
    first = (next_month + dt.timedelta(days=32)).replace(day=1) + dt.timedelta(days=9)
    reservation = services.quota_request_create(
        requester=nlp_lead, team=nlp, lines=[services.LineInput(flavor=flavor, units=10)], justification="deadline",
        starts_on=first, ends_on=first + dt.timedelta(days=4))
    services.quota_request_approve(quota_request=reservation, approver=nlp_lead)

    months, rows = selectors.capacity_calendar()
    assert len(months) == 12 and months[2] == first.replace(day=1)
    (row,) = [r for r in rows if r.flavor == flavor]
    assert [(cell.peak, cell.reserved) for cell in row.cells[:4]] == [(4, 0), (4, 0), (14, 10), (4, 0)]
    page = as_user(admin_user).get(reverse("tenants:capacity-calendar")).content.decode()
    assert 'data-testid="calendar-h100-80gb"' in page and "+10 reserved" in page
    assert as_user(member).get(reverse("tenants:capacity-calendar")).status_code == 403

"""Renewing temporary quota: a request prefilled from the grants that are ending, decided like
any other, whose approval continues those grants without a gap and without counting them twice."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.errors import DomainError
from portal.models import AuditEvent
from tenants import selectors, services
from tenants.models import QuotaGrant, QuotaRequest
from tests.conftest import login
from tests.helpers import api, file_request

pytestmark = pytest.mark.django_db


def approved_temporary(team, member, lead, flavor, *, units=16, days=2):
    qr = file_request(team, member, flavor, units, ends_on=timezone.localdate() + dt.timedelta(days=days))
    return services.quota_request_approve(quota_request=qr, approver=lead)


def test_an_ending_grant_shows_renew_and_a_distant_one_does_not(team, member, lead, flavor, mig_flavor):
    ending = approved_temporary(team, member, lead, flavor, units=4, days=1)
    approved_temporary(team, member, lead, mig_flavor, units=7, days=30)

    page = login(member).get(reverse("tenants:team-detail", args=[team.slug])).content.decode()

    assert page.count('data-testid="renew"') == 1
    assert f"?renew={ending.pk}" in page


def test_renew_opens_the_request_form_prefilled_with_the_same_lines_and_a_later_end(team, member, lead, flavor):
    old = approved_temporary(team, member, lead, flavor, units=6, days=2)

    form = login(member).get(reverse("tenants:quota-request-create") + f"?renew={old.pk}").context["form"]

    assert [(row.flavor, row.units) for row in form.line_rows if not row.is_blank] == [("h100-80gb", "6")]
    assert form.initial["renews"] == old.pk and form.initial["team"] == "vision"
    assert form.initial["ends_on"] == old.ends_on + dt.timedelta(days=2)
    assert form.initial["justification"].startswith(f"Renewal of request #{old.pk}: ")


def test_a_renewal_of_a_full_flavor_is_approved_and_continues_the_grant_without_a_gap(team, member, lead, flavor):
    old = approved_temporary(team, member, lead, flavor, units=16)  # the whole flavor
    new_end = old.ends_on + dt.timedelta(days=14)
    renewal = file_request(team, member, flavor, 16, ends_on=new_end, renews=old)

    services.quota_request_approve(quota_request=renewal, approver=lead)

    assert selectors.team_guarantees(team=team) == {flavor.pk: 16}
    running = QuotaGrant.objects.active().get()
    assert running.request_id == renewal.pk
    assert timezone.localtime(running.valid_until).date() == new_end + dt.timedelta(days=1)
    old.refresh_from_db()
    assert old.status == QuotaRequest.Status.EXPIRED
    assert AuditEvent.objects.get(action="quota_grant.renewed").message == (
        f"Temporary grant of +16 H100 80GB for vision (request #{old.pk}) continues as request #{renewal.pk}"
    )
    approved = AuditEvent.objects.filter(action="quota_request.approved").first()
    assert approved is not None and f"renewing request #{old.pk}" in approved.message


def test_the_inbox_counts_a_renewal_of_a_full_flavor_as_fitting_as_its_approval_does(team, member, lead, flavor,
                                                                                     simulated):
    old = approved_temporary(team, member, lead, flavor, units=16)  # the whole flavor
    assert old.ends_on is not None
    file_request(team, member, flavor, 16, ends_on=old.ends_on + dt.timedelta(days=14), renews=old)

    row = login(lead).get(reverse("tenants:approvals")).content.decode()

    assert "vision holds 16, uses 0 now; 16 after." in row
    assert "The cluster's 16 are 16 held (16 of them by what this renews), 16 free." in row
    assert "Fits." in row and "Nothing fits" not in row


def test_a_renewal_asking_for_more_than_the_flavor_has_is_refused_with_the_numbers(team, other_team, member, lead, flavor):
    old = approved_temporary(team, member, lead, flavor, units=10)
    QuotaGrant.objects.create(team=other_team, flavor=flavor, units=6)
    assert old.ends_on is not None
    renewal = file_request(team, member, flavor, 10, ends_on=old.ends_on + dt.timedelta(days=7), renews=old)
    services.quota_request_approve(quota_request=renewal, approver=lead)  # 10 for 10: fits

    bigger = file_request(team, member, flavor, 11, ends_on=old.ends_on + dt.timedelta(days=14), renews=renewal)
    with pytest.raises(DomainError, match=r"teams already hold 6; \+11 would make 17, so at most 10 more"):
        services.quota_request_approve(quota_request=bigger, approver=lead)
    assert selectors.team_guarantees(team=team) == {flavor.pk: 10}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ends_on": None}, "A renewal needs a new end date"),
        ({"ends_on": "same"}, "The new end date must be after"),
    ],
)
def test_a_renewal_must_end_later_than_what_it_renews(team, member, lead, flavor, change, message):
    old = approved_temporary(team, member, lead, flavor, units=4)
    ends_on = old.ends_on if change["ends_on"] == "same" else None
    with pytest.raises(DomainError, match=message):
        file_request(team, member, flavor, 4, ends_on=ends_on, renews=old)


def test_only_running_temporary_quota_of_the_same_team_can_be_renewed(team, other_team, member, lead, flavor):
    permanent = services.quota_request_approve(quota_request=file_request(team, member, flavor, 2), approver=lead)
    later = timezone.localdate() + dt.timedelta(days=20)
    with pytest.raises(DomainError, match="nothing to renew"):
        file_request(team, member, flavor, 2, ends_on=later, renews=permanent)

    old = approved_temporary(team, member, lead, flavor, units=4)
    other_team.memberships.create(user=lead, role="lead")
    other_lead = type(lead).objects.get(pk=lead.pk)  # a lead of both teams, so only the team rule can refuse
    with pytest.raises(DomainError, match="is for another team"):
        file_request(other_team, other_lead, flavor, 4, ends_on=later, renews=old)


def test_the_form_files_a_renewal_and_the_api_names_what_it_renews(team, member, lead, flavor):
    old = approved_temporary(team, member, lead, flavor, units=4)
    later = (old.ends_on + dt.timedelta(days=10)).isoformat()

    response = login(member).post(reverse("tenants:quota-request-create"), {
        "team": "vision", "flavor": ["h100-80gb"], "units": ["4"], "justification": "still training",
        "ends_on": later, "renews": str(old.pk)})

    assert response.status_code == 302
    renewal = QuotaRequest.objects.get(renews=old)
    assert api(member).get(f"/api/quota-requests/{renewal.pk}/").json()["renews"] == old.pk


def test_another_teams_request_cannot_be_renewed_or_even_seen(team, member, lead, flavor, outsider):
    old = approved_temporary(team, member, lead, flavor, units=4)

    assert login(outsider).get(reverse("tenants:quota-request-create") + f"?renew={old.pk}").status_code == 404
    answer = api(outsider).post("/api/quota-requests/", {
        "team": "speech", "lines": [{"flavor": flavor.pk, "units": 4}], "justification": "mine now",
        "ends_on": (old.ends_on + dt.timedelta(days=3)).isoformat(), "renews": old.pk}, format="json")
    assert answer.status_code == 404
    assert not QuotaRequest.objects.filter(renews=old).exists()

"""Quota as a person reads it: end dates in the words of the request, one grant line per flavor,
notifications that lead to the decided request and are read once it is seen."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.models import Notification
from portal.templatetags.portal_time import after, ago, ago_text
from tenants import selectors, services
from tenants.models import QuotaGrant
from tests.conftest import login
from tests.factories import QuotaGrantFactory
from tests.helpers import api, file_request

pytestmark = pytest.mark.django_db


def test_ago_says_minutes_and_just_now_never_zero_minutes():
    now = timezone.now()
    assert ago_text(now - dt.timedelta(minutes=3), now=now) == "3\xa0minutes ago"
    assert ago_text(now - dt.timedelta(hours=2, minutes=59), now=now) == "2\xa0hours ago"
    assert ago_text(now - dt.timedelta(seconds=20), now=now) == "just now"
    assert ago_text(now + dt.timedelta(minutes=2), now=now) == "just now"  # a clock a little ahead
    html = str(ago(now - dt.timedelta(minutes=3)))
    assert html.startswith('<time datetime="') and "data-ago" in html and "3\xa0minutes ago" in html


def test_a_run_under_a_minute_ended_under_a_minute_after_launch_not_zero_minutes():
    launched = timezone.now()
    assert after(launched + dt.timedelta(seconds=33), launched) == "under a minute"
    assert after(launched + dt.timedelta(minutes=61), launched) == "1\xa0hour, 1\xa0minute"
    assert after(None, launched) == ""


def test_a_request_until_the_14th_grants_through_the_14th_and_ends_at_the_following_midnight(
        team, lead, member, flavor, settings):
    settings.TIME_ZONE = "Europe/Berlin"
    last = timezone.localdate() + dt.timedelta(days=20)
    qr = file_request(team, member, flavor, units=2, ends_on=last)
    services.quota_request_approve(quota_request=qr, approver=lead)
    grant = QuotaGrant.objects.get(request=qr)
    assert grant.last_day == last
    berlin = zoneinfo.ZoneInfo("Europe/Berlin")
    assert grant.valid_until == dt.datetime.combine(last + dt.timedelta(days=1), dt.time.min, tzinfo=berlin)
    assert grant.is_active

    page = login(member).get(f"/requests/{qr.pk}/").content.decode()
    assert f"through {last:%Y-%m-%d}" in page and f"{last + dt.timedelta(days=1):%Y-%m-%d}" not in page
    team_page = login(member).get(f"/teams/{team.slug}/").content.decode()
    # Not the midnight it ends at (the audit trail's own times may read 00:00 just after midnight).
    assert f"through {last:%Y-%m-%d}" in team_page and f"{last + dt.timedelta(days=1):%Y-%m-%d}" not in team_page
    assert api(member).get(f"/api/grants/{grant.pk}/").json()["last_day"] == last.isoformat()


def test_ten_plus_one_grants_read_as_one_line_per_flavor(team, member, flavor):
    ends = timezone.now() + dt.timedelta(days=10)
    for _ in range(8):
        QuotaGrantFactory(team=team, flavor=flavor, units=1)
    QuotaGrantFactory(team=team, flavor=flavor, units=1, valid_until=ends)
    QuotaGrantFactory(team=team, flavor=flavor, units=1, valid_until=ends)
    (line,) = selectors.team_grants(team=team).lines
    assert line.units == 10
    assert [(part.units, part.last_day) for part in line.parts] == [
        (8, None), (2, timezone.localtime(ends - dt.timedelta(microseconds=1)).date())]
    html = login(member).get(f"/teams/{team.slug}/").content.decode()
    table = html[html.index('class="compact grants"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr data-testid=") == 1 and "+10" in table and "+8" in table and "+2" in table


def test_a_decision_notifies_with_a_link_to_the_request_and_opening_it_reads_the_notification(team, lead, member, flavor):
    qr = file_request(team, member, flavor, units=1)
    services.quota_request_approve(quota_request=qr, approver=lead)
    note = Notification.objects.get(recipient=member)
    assert note.url == reverse("tenants:quota-request-detail", args=[qr.pk]) and note.read_at is None
    login(member).get(note.url)
    note.refresh_from_db()
    assert note.read_at is not None


def test_a_rejection_links_to_the_request_too(team, lead, member, flavor):
    qr = file_request(team, member, flavor, units=1)
    services.quota_request_reject(quota_request=qr, approver=lead, note="not now")
    assert Notification.objects.get(recipient=member).url == f"/requests/{qr.pk}/"


# --- Approving with the numbers in view, and fewer than asked ---------------------------------------

HTMX: dict[str, Any] = {"HTTP_HX_REQUEST": "true"}


def test_the_inbox_shows_the_teams_holding_use_and_whether_it_fits(team, other_team, lead, member, flavor, simulated):
    QuotaGrantFactory(team=team, flavor=flavor, units=4)
    QuotaGrantFactory(team=other_team, flavor=flavor, units=10)  # flavor has 16: 2 left
    qr = file_request(team, member, flavor, units=2)
    too_big = services.quota_request_create(
        requester=member, team=team, lines=[services.LineInput(flavor=flavor, units=2)], justification="more")
    QuotaGrantFactory(team=other_team, flavor=flavor, units=1)  # now only 1 left
    html = login(lead).get("/approvals/").content.decode()
    row = html[html.index(f'id="approval-{qr.pk}"'):html.index(f'id="approval-{too_big.pk}"')]
    assert "vision holds 4, uses 0 now; 6 after." in row
    assert f"The cluster's {flavor.capacity_units} are 15 held, 1 free." in row
    assert "Only 1 fits: grant fewer, or reject." in row
    assert f'name="units-{flavor.pk}"' in row and 'max="2"' in row


def test_the_inbox_says_when_the_cluster_is_silent_about_current_use(team, lead, member, flavor, monkeypatch):
    from portal.kube import KubeError
    from tenants import cluster_selectors

    def silent(**kwargs):
        raise KubeError("connection refused")

    monkeypatch.setattr(cluster_selectors, "cluster_queue_usage", silent)
    file_request(team, member, flavor, units=2)
    html = login(lead).get("/approvals/").content.decode()
    assert "current use unknown: the cluster did not answer" in html and "Fits." in html


def test_a_lead_grants_fewer_units_than_asked_from_the_inbox(team, lead, member, flavor, simulated):
    qr = file_request(team, member, flavor, units=4)
    row = login(lead).post(f"/requests/{qr.pk}/approve/", {"note": "two for now", f"units-{flavor.pk}": "2"},
                           **HTMX).content.decode()
    assert "+2 of +4" in row and "Approved" in row
    grant = QuotaGrant.objects.get(request=qr)
    assert grant.units == 2 and qr.lines.get().approved_units == 2
    note = Notification.objects.get(recipient=member)
    assert f"approved your request #{qr.pk}: +2 {flavor.name} (of +4 asked) for vision." in note.message
    from portal.models import AuditEvent
    event = AuditEvent.objects.get(action="quota_request.approved")
    assert event.data["fewer_than_asked"] == {flavor.slug: {"asked": 4, "approved": 2}}


@pytest.mark.parametrize("typed, refusal", [
    ("5", "approve between 1 and the 4 units asked"),
    ("0", "approve between 1 and the 4 units asked"),
    ("two", "“two” is not a whole number of units to grant"),
])
def test_granting_outside_what_was_asked_is_refused_in_the_row_keeping_what_was_typed(team, lead, member, flavor, simulated,
                                                                                      typed, refusal):
    qr = file_request(team, member, flavor, units=4)
    row = login(lead).post(f"/requests/{qr.pk}/approve/", {f"units-{flavor.pk}": typed}, **HTMX).content.decode()
    assert refusal in row and f'value="{typed}"' in row
    qr.refresh_from_db()
    assert qr.is_pending and not QuotaGrant.objects.exists()


def test_the_api_approves_fewer_units_per_line(team, lead, member, flavor, simulated):
    qr = file_request(team, member, flavor, units=4)
    response = api(lead).post(f"/api/quota-requests/{qr.pk}/approve/",
                              {"note": "", "lines": [{"flavor": flavor.pk, "units": 3}]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["lines"][0]["approved_units"] == 3
    assert QuotaGrant.objects.get(request=qr).units == 3


def test_the_api_refuses_a_line_the_request_does_not_have(team, lead, member, flavor, mig_flavor, simulated):
    qr = file_request(team, member, flavor, units=4)
    response = api(lead).post(f"/api/quota-requests/{qr.pk}/approve/",
                              {"lines": [{"flavor": mig_flavor.pk, "units": 1}]}, format="json")
    assert response.status_code == 400 and "has no line for flavor" in response.json()["message"]


def test_giving_back_units_cannot_be_cut(team, lead, member, flavor, simulated):
    QuotaGrantFactory(team=team, flavor=flavor, units=4)
    qr = file_request(team, member, flavor, units=-2)
    with pytest.raises(Exception, match="giving back 2 units is approved as asked or rejected"):
        services.quota_request_approve(quota_request=qr, approver=lead, units={flavor.pk: -1})

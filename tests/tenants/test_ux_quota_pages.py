"""Quota as a person reads it: end dates in the words of the request, one grant line per flavor,
notifications that lead to the decided request and are read once it is seen."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.models import Notification
from portal.templatetags.portal_time import ago, ago_text
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
    assert f"through {last:%Y-%m-%d}" in team_page and "00:00" not in team_page
    assert api(member).get(f"/api/grants/{grant.pk}/").json()["last_day"] == last.isoformat()


def test_ten_plus_one_grants_read_as_one_line_per_flavor(team, member, flavor):
    ends = timezone.now() + dt.timedelta(days=10)
    for _ in range(8):
        QuotaGrantFactory(team=team, flavor=flavor, units=1)
    QuotaGrantFactory(team=team, flavor=flavor, units=1, valid_until=ends)
    QuotaGrantFactory(team=team, flavor=flavor, units=1, valid_until=ends)
    (line,) = selectors.team_grant_lines(team=team)
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

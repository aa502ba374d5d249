"""What a browser is told to refuse, and how long a signed-in session lives without use."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.conf import settings as django_settings
from django.contrib.sessions.models import Session
from django.http import HttpResponse
from django.test import RequestFactory
from django.utils import timezone

from portal.security import ContentSecurityPolicyMiddleware, csp_relaxed, parse_policy

TEMPLATES = Path(django_settings.BASE_DIR) / "templates"
STRICT = {
    "default-src": ["'self'"], "script-src": ["'self'"], "style-src": ["'self'"], "img-src": ["'self'", "data:"],
    "frame-ancestors": ["'none'"], "base-uri": ["'self'"], "form-action": ["'self'"], "object-src": ["'none'"],
}
PAGES = [
    "/", "/teams/", "/teams/vision/", "/teams/vision/cluster/", "/capacity/", "/requests/", "/requests/new/",
    "/approvals/", "/audit/", "/templates/", "/launch/", "/workloads/", "/tokens/", "/notifications/",
    "/admin/", "/api/schema/", "/healthz", "/no-such-page/",
]


def _at(moment: dt.datetime) -> mock._patch:
    """Every reader of the clock (the session store included) sees `moment`."""
    return mock.patch.object(timezone, "now", return_value=moment)


def test_sessions_time_out_after_eight_idle_hours_by_default():
    assert django_settings.SESSION_IDLE_SECONDS == 8 * 60 * 60
    assert django_settings.SESSION_COOKIE_AGE == django_settings.SESSION_IDLE_SECONDS


def test_an_idle_session_expires_and_the_next_page_asks_for_a_login(client, member):
    start = timezone.now()
    with _at(start):
        client.force_login(member)
        assert client.get("/").status_code == 200
    idle = dt.timedelta(seconds=django_settings.SESSION_IDLE_SECONDS)
    with _at(start + idle + dt.timedelta(minutes=1)):
        response = client.get("/")
    assert response.status_code == 302
    assert response.url.startswith(django_settings.LOGIN_URL)


def test_each_request_moves_the_end_of_a_session_so_one_in_use_stays_signed_in(client, member):
    start = timezone.now()
    idle = dt.timedelta(seconds=django_settings.SESSION_IDLE_SECONDS)
    with _at(start):
        client.force_login(member)
    # Past the first idle end (8 h), within the absolute lifetime (12 h).
    for step, at in enumerate((idle - dt.timedelta(minutes=5), idle + dt.timedelta(hours=3)), start=1):
        with _at(start + at):
            assert client.get("/").status_code == 200, f"signed out at step {step}"


def test_sessions_end_twelve_hours_after_sign_in_by_default():
    assert django_settings.SESSION_ABSOLUTE_SECONDS == 12 * 60 * 60


def _polled_until(client: Any, start: dt.datetime, end: dt.timedelta) -> None:
    """The bell's poll every 20 minutes from `start` until `end` later, each answered signed in."""
    at = dt.timedelta()
    while at < end:
        with _at(start + at):
            response = client.get("/notifications/bell/", HTTP_HX_REQUEST="true")
            assert response.status_code == 200 and response.wsgi_request.user.is_authenticated, at
        at += dt.timedelta(minutes=20)


def test_a_session_in_constant_use_ends_twelve_hours_after_sign_in(client, member):
    start = timezone.now()
    with _at(start):
        client.force_login(member)
    lifetime = dt.timedelta(seconds=django_settings.SESSION_ABSOLUTE_SECONDS)

    _polled_until(client, start, lifetime - dt.timedelta(minutes=1))
    with _at(start + lifetime):
        page = client.get("/")
        poll = client.get("/notifications/bell/", HTTP_HX_REQUEST="true")

    assert page.status_code == 302 and page.url.startswith(django_settings.LOGIN_URL)
    assert not poll.wsgi_request.user.is_authenticated
    assert not Session.objects.filter(expire_date__gt=start + lifetime).exclude(
        session_key=client.session.session_key).exists()  # the old session is gone from the store


def test_the_api_over_an_ended_session_asks_for_credentials(client, member):
    start = timezone.now()
    with _at(start):
        client.force_login(member)
        assert client.get("/api/teams/").status_code == 200
    with _at(start + dt.timedelta(seconds=django_settings.SESSION_ABSOLUTE_SECONDS)):
        response = client.get("/api/teams/")

    assert response.status_code in (401, 403)
    assert response.json()["message"] == "Authentication credentials were not provided."


def test_signing_in_again_while_signed_in_does_not_start_the_lifetime_over(client, member):
    # A silent single sign-on refresh logs the same user in again every few minutes.
    start = timezone.now()
    with _at(start):
        client.force_login(member)
    with _at(start + dt.timedelta(hours=7)):
        assert client.get("/").status_code == 200
    with _at(start + dt.timedelta(hours=11)):
        client.force_login(member)
        assert client.get("/").status_code == 200
    with _at(start + dt.timedelta(hours=12)):
        assert client.get("/").status_code == 302


def test_a_new_sign_in_after_the_end_gets_a_whole_lifetime(client, member, settings):
    start = timezone.now()
    with _at(start):
        client.force_login(member)
    with _at(start + dt.timedelta(hours=7)):
        assert client.get("/").status_code == 200
    with _at(start + dt.timedelta(hours=12)):
        assert client.get("/").status_code == 302
        client.force_login(member)
    for hours in (19, 23):
        with _at(start + dt.timedelta(hours=hours)):
            assert client.get("/").status_code == 200, hours
    with _at(start + dt.timedelta(hours=24)):
        assert client.get("/").status_code == 302


def test_a_session_signed_in_before_lifetimes_were_kept_gets_one_from_its_next_request(client, member):
    start = timezone.now()
    with _at(start):
        client.force_login(member)
        session = client.session
        del session["_portal_signed_in_at"]
        session.save()
    with _at(start + dt.timedelta(hours=7)):
        assert client.get("/").status_code == 200
    with _at(start + dt.timedelta(hours=14)):
        assert client.get("/").status_code == 200
    with _at(start + dt.timedelta(hours=19)):
        assert client.get("/").status_code == 302


def test_a_polling_page_writes_the_session_at_most_once_a_minute(client, member):
    start = timezone.now()
    with _at(start):
        client.force_login(member)
        client.get("/")
    session = Session.objects.get()
    first_end = session.expire_date
    with _at(start + dt.timedelta(seconds=30)):
        client.get("/")
    assert Session.objects.get().expire_date == first_end
    with _at(start + dt.timedelta(seconds=90)):
        client.get("/")
    assert Session.objects.get().expire_date == first_end + dt.timedelta(seconds=90)


@pytest.mark.parametrize("path", PAGES)
def test_every_page_answers_with_the_strict_content_security_policy(as_user, admin_user, team, path):
    response = as_user(admin_user).get(path)
    assert response.status_code in {200, 404}, response.status_code
    assert parse_policy(response.headers["Content-Security-Policy"]) == STRICT


def test_the_login_page_carries_the_policy_too(client, db):
    assert "script-src 'self'" in client.get("/login/").headers["Content-Security-Policy"]


DENIED_FEATURES = {"camera", "microphone", "geolocation", "usb", "payment", "serial", "hid", "display-capture"}


@pytest.mark.parametrize("path", [*PAGES, "/api/docs/", "/static/portal/portal.css"])
def test_every_answer_refuses_the_browser_features_no_page_uses(as_user, admin_user, team, path):
    response = as_user(admin_user).get(path)

    policy = dict(part.strip().split("=", 1) for part in response.headers["Permissions-Policy"].split(","))
    assert {feature for feature, allowed in policy.items() if allowed == "()"} >= DENIED_FEATURES
    assert "clipboard-write" not in policy  # the Copy buttons keep the browser's default: this site only


def test_a_signed_out_answer_carries_the_permissions_policy_too(client, db):
    for path in ("/login/", "/api/schema/", "/no-such-page/"):
        assert "camera=()" in client.get(path).headers["Permissions-Policy"], path


def test_a_site_may_send_no_permissions_policy(client, db, settings):
    settings.PERMISSIONS_POLICY = ""
    assert "Permissions-Policy" not in client.get("/login/").headers


def test_no_page_template_carries_an_inline_script_a_style_attribute_or_an_inline_handler():
    offenders = []
    for template in TEMPLATES.rglob("*.html"):
        text = re.sub(r"{#.*?#}", "", template.read_text())  # a comment may name what it keeps out
        for pattern in (r"<script(?![^>]*\bsrc=)[^>]*>", r"\sstyle=", r"<style\b", r"\son[a-z]+=", r"\bhx-on", r"javascript:"):
            offenders += [f"{template.relative_to(TEMPLATES)}: {m.group(0)}" for m in re.finditer(pattern, text)]
    assert offenders == []


def test_the_api_docs_relax_styles_for_their_own_pages_only_and_keep_scripts_strict(as_user, admin_user):
    client = as_user(admin_user)
    for path in ("/api/docs/", "/api/redoc/"):
        policy = parse_policy(client.get(path).headers["Content-Security-Policy"])
        assert policy["style-src"] == ["'self'", "'unsafe-inline'"]
        assert policy["script-src"] == ["'self'"]
    assert "<script>" not in client.get("/api/docs/").content.decode()
    assert client.get("/api/docs/?script=").status_code == 200


def test_the_browsable_api_allows_inline_styles_but_json_answers_stay_strict(as_user, admin_user):
    client = as_user(admin_user)
    page = parse_policy(client.get("/api/teams/", headers={"Accept": "text/html"}).headers["Content-Security-Policy"])
    assert page["style-src"] == ["'self'", "'unsafe-inline'"]
    assert page["script-src"] == ["'self'"]
    answer = parse_policy(client.get("/api/teams/", headers={"Accept": "application/json"}).headers["Content-Security-Policy"])
    assert answer == STRICT


def test_a_relaxed_directive_the_policy_lacks_starts_from_default_src(settings):
    settings.CONTENT_SECURITY_POLICY = "default-src 'self'; object-src 'none'"
    view = csp_relaxed(worker_src=["blob:"])(lambda request: HttpResponse("ok"))
    response = ContentSecurityPolicyMiddleware(view)(RequestFactory().get("/"))
    assert response.headers["Content-Security-Policy"] == "default-src 'self'; object-src 'none'; worker-src 'self' blob:"


def test_a_site_can_send_the_policy_report_only_or_not_at_all(settings):
    settings.CONTENT_SECURITY_POLICY_REPORT_ONLY = True
    response = ContentSecurityPolicyMiddleware(lambda request: HttpResponse("ok"))(RequestFactory().get("/"))
    assert "Content-Security-Policy" not in response.headers
    assert "script-src 'self'" in response.headers["Content-Security-Policy-Report-Only"]
    settings.CONTENT_SECURITY_POLICY = ""
    response = ContentSecurityPolicyMiddleware(lambda request: HttpResponse("ok"))(RequestFactory().get("/"))
    assert "Content-Security-Policy-Report-Only" not in response.headers
    assert "Content-Security-Policy" not in response.headers

"""What a new user stumbles on, page by page: the navigation offers only what the role can use,
errors are the portal's own pages, and small things (favicon, skip link, sign-in) behave."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import include, path, reverse

from tests.conftest import login
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _nav(response: Any) -> str:
    html = response.content.decode()
    return html[html.index('<nav id="site-nav"'):html.index("</nav>")]


def test_a_member_sees_launch_but_no_approvals(member):
    nav = _nav(login(member).get("/"))
    assert ">Launch<" in nav and ">Request quota<" in nav
    assert ">Approvals<" not in nav


def test_a_lead_sees_approvals(lead):
    assert ">Approvals<" in _nav(login(lead).get("/"))


def test_finance_without_a_team_sees_neither_launch_nor_approvals(finance_user):
    nav = _nav(login(finance_user).get("/"))
    assert ">Launch<" not in nav and ">Request quota<" not in nav and ">Approvals<" not in nav
    assert ">Finance<" in nav


def test_finance_without_a_team_is_offered_no_launch_or_quota_request_on_any_page(finance_user, member):
    # Not only the navigation: the workload list's buttons, its empty state and the dashboard.
    finance, alice = login(finance_user), login(member)

    def main(client: Client, url: str) -> str:
        html = client.get(url).content.decode()
        return html[html.index('<main id="main"'):]

    for url, offered in (("/workloads/", f'href="{reverse("jobs:workload-launch")}"'),
                         ("/", f'href="{reverse("tenants:quota-request-create")}"')):
        assert offered in main(alice, url), url
        assert offered not in main(finance, url), url
    rows = finance.get("/workloads/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="workload-rows").content.decode()
    assert "No workloads yet." in rows and "Launch one" not in rows


def test_every_page_has_a_skip_link_a_favicon_and_a_menu_button(member):
    html = login(member).get("/").content.decode()
    assert '<a class="skip-link" href="#main">' in html and '<main id="main"' in html
    assert 'rel="icon" href="/static/portal/favicon.svg"' in html
    assert 'aria-controls="site-nav"' in html


def test_the_favicon_is_served_with_debug_off(client, settings):
    settings.DEBUG = False
    response = client.get("/static/portal/favicon.svg")
    assert response.status_code == 200
    assert b"<svg" in b"".join(response.streaming_content)


def test_a_missing_page_is_the_portals_own_404_with_navigation(member, settings):
    settings.DEBUG = False
    response = login(member).get("/no/such/page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Nothing here" in html and 'id="site-nav"' in html and "Go to your dashboard" in html


def test_another_teams_workload_404_is_branded_too(outsider, settings):
    settings.DEBUG = False
    response = login(outsider).get("/workloads/999999/")
    assert response.status_code == 404 and "Nothing here" in response.content.decode()


def test_a_logged_out_404_offers_to_log_in(client, settings):
    settings.DEBUG = False
    html = client.get("/nope/").content.decode()
    assert "Nothing here" in html and 'href="/login/"' in html


def _forbidden(request: HttpRequest) -> HttpResponse:
    from django.core.exceptions import PermissionDenied

    raise PermissionDenied


def _broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("boom")


urlpatterns = [path("forbidden/", _forbidden), path("broken/", _broken), path("", include("portal.urls"))]
handler500 = "portal.views.server_error"


@pytest.mark.urls(__name__)
def test_a_refusal_is_the_portals_own_403_with_navigation(member, settings):
    settings.DEBUG = False
    response = login(member).get("/forbidden/")
    assert response.status_code == 403
    html = response.content.decode()
    assert "You may not do that" in html and 'id="site-nav"' in html


@pytest.mark.urls(__name__)
def test_a_crash_is_the_portals_own_500_with_navigation(member, settings):
    settings.DEBUG = False
    client = login(member)
    client.raise_request_exception = False
    response = client.get("/broken/")
    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong on our side" in html and 'id="site-nav"' in html


def test_the_500_page_draws_without_a_request_when_the_request_cannot_be_drawn(rf, monkeypatch):
    from django.template import loader

    from portal.views import server_error

    real = loader.get_template("500.html")

    class BrokenRequestTemplate:
        def render(self, context, request=None):
            if request is not None:
                raise RuntimeError("the database is down")
            return real.render(context)

    monkeypatch.setattr(loader, "get_template", lambda name: BrokenRequestTemplate())
    response = server_error(rf.get("/"))
    assert response.status_code == 500 and "Something went wrong on our side" in response.content.decode()


def test_a_failed_sign_in_keeps_the_username_and_focuses_the_password(client):
    UserFactory(username="alice")
    html = client.post("/login/", {"username": "alice", "password": "wrong"}).content.decode()
    assert "do not match" in html
    assert 'name="username" value="alice"' in html
    password = html[html.index('id="id_password"'):]
    assert "autofocus" in password[:password.index(">")]


def test_a_new_api_token_has_a_copy_button(member):
    html = login(member).post("/tokens/", {"name": "ci", "expires_in_days": "30", "scope": "read"}).content.decode()
    assert 'data-copy="new-secret"' in html and 'id="new-secret"' in html


def test_the_bell_polls_itself_and_answers_the_current_unread_count(member):
    from portal.notifications import notify

    client = login(member)
    page = client.get("/").content.decode()
    assert 'hx-get="/notifications/bell/" hx-trigger="every 20s"' in page
    assert 'data-testid="unread-count"' not in client.get("/notifications/bell/").content.decode()
    notify(recipients=[member], message="Something happened.")
    bell = client.get("/notifications/bell/")
    assert bell["Cache-Control"] == "no-store"
    assert bell.content.decode().lstrip().startswith('<a class="bell" id="bell"')
    assert 'data-testid="unread-count">1<' in bell.content.decode() and "<html" not in bell.content.decode()


def test_a_signed_out_bell_poll_stops_polling_instead_of_showing_a_login_page(client):
    response = client.get("/notifications/bell/")
    assert response.status_code == 286 and response.content == b""

"""Pages that survive what happens between two requests, through Django's test client: answers
that differ for htmx say so to caches, a session that ended sends htmx and form posts to sign in
and back to the page they came from, a stale CSRF token gets the portal's own page, and sign-in
and sign-out say where they lead."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.urls import reverse

from portal.htmx import KEEP_DRAFT_HEADER
from tests.conftest import login
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db

PAGE = "http://testserver/workloads/?phase=failed"
PASSWORD = "correct horse battery staple"  # every factory-made user's


def _next(location: str) -> str:
    parts = urlsplit(location)
    assert parts.path == reverse("login"), location
    return parse_qs(parts.query)["next"][0]


@pytest.mark.parametrize("url", ["/workloads/", "/launch/", "/teams/", "/", "/requests/", "/audit/"])
def test_a_page_that_answers_htmx_with_a_fragment_says_it_varies_by_hx_request(member, url):
    client = login(member)
    page, fragment = client.get(url), client.get(url, HTTP_HX_REQUEST="true")
    for response in (page, fragment):
        assert "HX-Request" in [word.strip() for word in response.headers["Vary"].split(",")], url


def test_an_htmx_request_after_the_session_ended_goes_to_sign_in_and_back_to_its_page(member):
    response = Client().get("/workloads/?phase=failed", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL=PAGE)
    assert response.status_code == 200 and response.content == b""  # nothing to swap into a card
    assert _next(response["HX-Redirect"]) == "/workloads/?phase=failed"
    # Nothing was sent, but the page being left may hold a form half typed (the launch hint asks
    # as the person types): the browser keeps a form only where something in it was typed.
    assert response[KEEP_DRAFT_HEADER] == "true"


def test_an_htmx_fragment_of_a_page_returns_to_the_page_not_the_fragment(member, team):
    response = Client().get(f"/teams/{team.slug}/gpu-use/", HTTP_HX_REQUEST="true",
                            HTTP_HX_CURRENT_URL=f"http://testserver/teams/{team.slug}/")
    assert _next(response["HX-Redirect"]) == f"/teams/{team.slug}/"


def test_an_htmx_post_after_the_session_ended_keeps_its_draft_and_returns_to_its_page(member):
    response = Client().post("/requests/new/", {"justification": "Four more GPUs"}, HTTP_HX_REQUEST="true",
                             HTTP_HX_CURRENT_URL="http://testserver/requests/new/")
    assert _next(response["HX-Redirect"]) == "/requests/new/"
    assert response[KEEP_DRAFT_HEADER] == "true"


@pytest.mark.parametrize("elsewhere", ["https://evil.example/phish", "//evil.example/x", "javascript:alert(1)", ""])
def test_a_page_address_from_another_site_is_never_where_sign_in_leads(member, elsewhere):
    response = Client().get("/workloads/", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL=elsewhere, HTTP_REFERER=elsewhere)
    assert _next(response["HX-Redirect"]) == "/"


def test_a_form_post_after_the_session_ended_returns_to_the_form_page_not_the_post_only_address(member, team):
    response = Client().post(f"/teams/{team.slug}/members/add/", {"username": "bob"},
                             HTTP_REFERER=f"http://testserver/teams/{team.slug}/")
    assert response.status_code == 302
    assert _next(response["Location"]) == f"/teams/{team.slug}/"
    assert response[KEEP_DRAFT_HEADER] == "true"


def test_a_plain_page_asked_signed_out_keeps_djangos_own_next(member):
    response = Client().get("/workloads/?phase=failed")
    assert response.status_code == 302 and _next(response["Location"]) == "/workloads/?phase=failed"


def test_signing_in_goes_back_to_the_page_given_as_next(member):
    response = Client().post("/login/", {"username": "alice", "password": PASSWORD, "next": "/workloads/?phase=failed"})
    assert response.status_code == 302 and response["Location"] == "/workloads/?phase=failed"


def test_the_login_page_passes_next_on_to_single_sign_on(settings, member):
    html = Client().get("/login/?next=/workloads/%3Fphase%3Dfailed").content.decode()
    assert "Sign in to go back to the page you were on." in html
    assert 'name="next" value="/workloads/?phase=failed"' in html


# --- The CSRF failure page ----------------------------------------------------------------------


def test_a_stale_csrf_token_gets_the_portals_page_that_leads_back_to_the_form(member):
    client = login(member, enforce_csrf=True)
    response = client.post("/requests/new/", {"justification": "x"}, HTTP_REFERER="http://testserver/requests/new/?team=vision")
    html = response.content.decode()
    assert response.status_code == 403
    assert "This form was not sent" in html and "Nothing was saved" in html
    assert 'href="/requests/new/?team=vision" data-testid="back-to-form"' in html
    assert '<nav id="site-nav"' in html  # the site's layout, not Django's bare page
    assert response[KEEP_DRAFT_HEADER] == "true"


def test_the_csrf_page_never_leads_to_another_site(member):
    response = login(member, enforce_csrf=True).post("/requests/new/", {}, HTTP_REFERER="https://evil.example/requests/new/")
    assert response.status_code == 403 and "back-to-form" not in response.content.decode()


def test_a_stale_csrf_token_on_an_htmx_form_reloads_its_page_keeping_the_draft(member):
    response = login(member, enforce_csrf=True).post("/requests/new/", {}, HTTP_HX_REQUEST="true")
    assert response.status_code == 403 and response["HX-Refresh"] == "true"
    assert response[KEEP_DRAFT_HEADER] == "true"


# --- Sign-in and sign-out -------------------------------------------------------------------------


def test_signing_out_says_so_on_the_login_page(member):
    client = login(member)
    response = client.post("/logout/", follow=True)
    assert response.redirect_chain[-1][0] == "/login/"
    assert "You are signed out." in response.content.decode()


def test_finance_whose_only_role_is_finance_lands_on_the_finance_overview(finance_user):
    response = Client().post("/login/", {"username": "fiona", "password": PASSWORD, "next": "/"}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("billing:finance-overview")


def test_finance_who_is_also_in_a_team_lands_on_the_dashboard(finance_user, team):
    MembershipFactory(team=team, user=finance_user)
    response = Client().post("/login/", {"username": "fiona", "password": PASSWORD}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("tenants:dashboard")


def test_a_member_lands_on_the_dashboard(member):
    response = Client().post("/login/", {"username": "alice", "password": PASSWORD, "next": "/"}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("tenants:dashboard")


@pytest.mark.parametrize("docs", ["/api/docs/", "/api/redoc/"])
def test_the_api_docs_lead_back_to_the_portal(member, docs):
    html = login(member).get(docs).content.decode()
    assert 'href="/" data-testid="back-to-portal"' in html
    assert 'href="/static/portal/api-docs.css"' in html  # a file: the docs' policy allows no other styles than theirs

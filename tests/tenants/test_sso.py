"""Single sign-on end to end: browserless, but every hop is real HTTP to a real provider."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest
import requests
from django.contrib.auth import get_user_model

from portal import tokens
from portal.models import ApiToken, Notification, SsoIdentity
from portal.notifications import notify
from tenants.models import Membership, Team
from tenants.oidc import RENEW_FIRST, RENEW_FIRST_API
from tests.factories import TeamFactory
from tests.oidc_provider import MockOpenIDProvider

pytestmark = pytest.mark.django_db


@pytest.fixture
def provider(settings):
    with MockOpenIDProvider(client_id="gpu-portal", client_secret="s3cret") as op:
        for name, value in op.settings().items():
            setattr(settings, name, value)
        settings.OIDC_ENABLED = True
        settings.AUTHENTICATION_BACKENDS = ["tenants.oidc.PortalOIDCBackend", *settings.AUTHENTICATION_BACKENDS]
        settings.ROOT_URLCONF = "tests.oidc_urls"
        yield op


def sso_login(client, provider, start_url: str = "/oidc/authenticate/") -> Any:
    start = client.get(start_url)
    assert start.status_code == 302 and start.url.startswith(provider.url)
    # The browser's hop to the provider, which answers with a redirect back to the callback.
    at_provider = requests.get(start.url, allow_redirects=False, timeout=5)
    assert at_provider.status_code == 302
    callback = urlparse(at_provider.headers["Location"])
    return client.get(f"{callback.path}?{callback.query}")


def test_sso_login_creates_the_user_with_roles_and_teams_from_group_claims(client, provider):
    TeamFactory(slug="vision")
    TeamFactory(slug="nlp")
    provider.next_user = {
        "sub": "u-123", "preferred_username": "grace", "email": "grace@example.com", "given_name": "Grace",
        "groups": ["gpu-portal-finance", "team-vision-leads", "team-nlp", "unrelated"],
    }

    done = sso_login(client, provider)

    assert done.status_code == 302 and done.url == "/start/"  # LOGIN_REDIRECT_URL: tenants.views.landing
    user = get_user_model().objects.get(username="grace")
    assert (user.email, user.first_name, user.is_finance, user.is_platform_admin) == ("grace@example.com", "Grace", True, False)
    assert dict(Membership.objects.filter(user=user).values_list("team__slug", "role")) == {"vision": "lead", "nlp": "member"}
    assert client.get("/teams/vision/").status_code == 200


def test_the_next_sso_login_follows_group_changes(client, provider):
    TeamFactory(slug="vision")
    provider.next_user = {"sub": "u-123", "preferred_username": "grace", "email": "grace@example.com",
                          "groups": ["gpu-portal-admins", "team-vision-leads"]}
    sso_login(client, provider)
    user = get_user_model().objects.get(username="grace")
    assert (user.is_platform_admin, user.is_staff, user.is_superuser) == (True, True, False)
    provider.next_user = {**provider.next_user, "groups": []}

    sso_login(client, provider)

    user.refresh_from_db()
    assert (user.is_platform_admin, user.is_staff) == (False, False)
    assert not Membership.objects.filter(user=user).exists()


def test_a_forged_callback_does_not_log_anyone_in(client, provider):
    provider.next_user = {"sub": "u-1", "preferred_username": "mallory", "email": "m@example.com", "groups": []}
    client.get("/oidc/authenticate/")
    response = client.get("/oidc/callback/?code=made-up&state=made-up")
    assert response.status_code == 400  # a state the session never issued is a suspicious request
    assert "_auth_user_id" not in client.session
    assert not get_user_model().objects.filter(username="mallory").exists()


def signed_in_user(client) -> Any:
    user_id = client.session.get("_auth_user_id")
    return get_user_model().objects.get(pk=user_id) if user_id else None


# --- Identity: the issuer and subject, never the username -------------------------------------


def test_a_provider_account_named_admin_does_not_become_the_local_superuser(client, provider):
    admin = get_user_model().objects.create_superuser(username="admin", email="root@example.com", password="pw")
    provider.next_user = {"sub": "u-evil", "preferred_username": "admin", "email": "evil@example.com",
                          "groups": []}

    sso_login(client, provider)

    signed_in = signed_in_user(client)
    assert signed_in is not None and signed_in.pk != admin.pk
    assert (signed_in.username, signed_in.is_superuser, signed_in.has_usable_password()) == ("admin-2", False, False)
    admin.refresh_from_db()
    assert (admin.email, admin.is_superuser) == ("root@example.com", True)
    assert not SsoIdentity.objects.filter(user=admin).exists()


def test_the_same_issuer_and_subject_log_into_the_same_account_after_a_rename_at_the_provider(client, provider):
    provider.next_user = {"sub": "u-123", "preferred_username": "grace", "email": "grace@example.com", "groups": []}
    sso_login(client, provider)
    first = signed_in_user(client)
    client.logout()
    provider.next_user = {**provider.next_user, "preferred_username": "grace.hopper", "email": "gh@example.com"}

    sso_login(client, provider)

    again = signed_in_user(client)
    assert again is not None and again.pk == first.pk
    assert (again.username, again.email) == ("grace", "gh@example.com")
    assert SsoIdentity.objects.get(user=again).subject == "u-123"
    assert SsoIdentity.objects.get(user=again).issuer == provider.url


def test_a_new_subject_with_a_taken_username_gets_an_account_of_its_own(client, provider):
    provider.next_user = {"sub": "u-1", "preferred_username": "sam", "email": "sam1@example.com", "groups": []}
    sso_login(client, provider)
    client.logout()
    provider.next_user = {"sub": "u-2", "preferred_username": "sam", "email": "sam2@example.com", "groups": []}

    sso_login(client, provider)

    assert dict(SsoIdentity.objects.values_list("subject", "user__username")) == {"u-1": "sam", "u-2": "sam-2"}


def test_a_userinfo_answer_about_another_subject_logs_nobody_in(client, provider):
    provider.next_user = {"sub": "u-123", "preferred_username": "grace", "email": "grace@example.com", "groups": []}
    provider.userinfo_overrides = {"sub": "u-somebody-else"}

    sso_login(client, provider)

    assert signed_in_user(client) is None
    assert not SsoIdentity.objects.exists()


def test_single_sign_on_refuses_an_account_that_was_given_a_local_password(client, provider):
    provider.next_user = {"sub": "u-123", "preferred_username": "grace", "email": "grace@example.com", "groups": []}
    sso_login(client, provider)
    client.logout()
    user = get_user_model().objects.get(username="grace")
    user.set_password("local-secret")
    user.save()

    sso_login(client, provider)

    assert signed_in_user(client) is None


def test_an_sso_account_loses_a_superuser_bit_at_its_next_login(client, provider):
    provider.next_user = {"sub": "u-123", "preferred_username": "grace", "email": "grace@example.com", "groups": []}
    sso_login(client, provider)
    get_user_model().objects.filter(username="grace").update(is_superuser=True, is_staff=True)

    sso_login(client, provider)

    user = get_user_model().objects.get(username="grace")
    assert (user.is_superuser, user.is_staff, user.is_platform_admin) == (False, False, False)


def test_an_account_made_by_the_old_username_matching_is_adopted_only_when_the_site_allows_it(
    client, provider, settings,
):
    legacy = get_user_model().objects.create_user(username="grace", email="grace@example.com")
    provider.next_user = {"sub": "u-123", "preferred_username": "grace", "email": "grace@example.com", "groups": []}
    sso_login(client, provider)
    assert signed_in_user(client).username == "grace-2"
    client.logout()
    get_user_model().objects.filter(username="grace-2").delete()
    settings.OIDC_ADOPT_UNLINKED_ACCOUNTS = True

    sso_login(client, provider)

    assert signed_in_user(client).pk == legacy.pk
    assert SsoIdentity.objects.get(user=legacy).subject == "u-123"


@pytest.mark.parametrize("local", [
    {"password": "pw"}, {"is_staff": True}, {"is_superuser": True},
])
def test_adoption_never_takes_an_account_with_a_password_or_admin_bits(client, provider, settings, local):
    settings.OIDC_ADOPT_UNLINKED_ACCOUNTS = True
    admin = get_user_model().objects.create_user(username="admin", email="root@example.com", **local)
    provider.next_user = {"sub": "u-evil", "preferred_username": "admin", "email": "evil@example.com", "groups": []}

    sso_login(client, provider)

    assert signed_in_user(client).pk != admin.pk
    admin.refresh_from_db()
    assert admin.email == "root@example.com"


# --- Groups ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("teams", "expected"), [
    (["ml", "ml-leads"], {"ml-leads": "member"}),
    (["ml"], {"ml": "lead"}),
])
def test_a_group_naming_an_existing_team_is_its_membership_not_a_lead_of_another(client, provider, teams, expected):
    for slug in teams:
        TeamFactory(slug=slug)
    provider.next_user = {"sub": "u-9", "preferred_username": "lee", "email": "lee@example.com",
                          "groups": ["team-ml-leads"]}

    sso_login(client, provider)

    user = get_user_model().objects.get(username="lee")
    assert dict(Membership.objects.filter(user=user).values_list("team__slug", "role")) == expected


def test_a_member_group_and_a_lead_group_for_the_same_team_make_a_lead(client, provider):
    TeamFactory(slug="ml")
    provider.next_user = {"sub": "u-9", "preferred_username": "lee", "email": "lee@example.com",
                          "groups": ["team-ml", "team-ml-leads"]}

    sso_login(client, provider)

    assert dict(Membership.objects.values_list("team__slug", "role")) == {"ml": "lead"}


@pytest.mark.parametrize("groups", [[123], [None], 5, None, {"team-vision": True}, [["team-vision"]]])
def test_a_groups_claim_of_an_odd_shape_logs_in_without_roles(client, provider, groups):
    TeamFactory(slug="vision")
    provider.next_user = {"sub": "u-5", "preferred_username": "odd", "email": "odd@example.com", "groups": groups}

    done = sso_login(client, provider)

    assert done.status_code == 302 and done.url == "/start/"  # LOGIN_REDIRECT_URL: tenants.views.landing
    assert signed_in_user(client).username == "odd"
    assert not Membership.objects.exists()


def test_a_groups_claim_that_is_one_string_counts_as_one_group_and_non_strings_are_skipped(client, provider):
    TeamFactory(slug="vision")
    provider.next_user = {"sub": "u-5", "preferred_username": "odd", "email": "odd@example.com",
                          "groups": "team-vision"}
    sso_login(client, provider)
    assert dict(Membership.objects.values_list("team__slug", "role")) == {"vision": "member"}

    provider.next_user = {**provider.next_user, "groups": [7, None, "team-vision-leads"]}
    sso_login(client, provider)
    assert dict(Membership.objects.values_list("team__slug", "role")) == {"vision": "lead"}


# --- Tokens follow the roles -------------------------------------------------------------------


def test_tokens_are_revoked_when_single_sign_on_takes_away_the_last_role(client, provider):
    TeamFactory(slug="vision")
    provider.next_user = {"sub": "u-123", "preferred_username": "grace", "email": "grace@example.com",
                          "groups": ["team-vision"]}
    sso_login(client, provider)
    token, _ = tokens.api_token_create(user=signed_in_user(client), name="laptop", expires_in_days=30)
    provider.next_user = {**provider.next_user, "groups": ["gpu-portal-finance"]}
    sso_login(client, provider)
    assert ApiToken.objects.usable().filter(pk=token.pk).exists()  # finance is still a role

    provider.next_user = {**provider.next_user, "groups": []}
    sso_login(client, provider)

    token.refresh_from_db()
    assert token.status == "revoked"


# --- Session refresh -------------------------------------------------------------------------


@pytest.fixture
def refreshing(settings, provider):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "tenants.oidc.PortalSessionRefresh"]
    return provider


def expire_id_token(client) -> None:
    session = client.session
    session["oidc_id_token_expiration"] = 0
    session.save()


def follow_to_provider_and_back(client, provider, response) -> Any:
    assert response.status_code == 302 and response.url.startswith(f"{provider.url}/authorize?")
    at_provider = requests.get(response.url, allow_redirects=False, timeout=5)
    callback = urlparse(at_provider.headers["Location"])
    return client.get(f"{callback.path}?{callback.query}")


def test_an_expired_sso_session_refreshes_silently_and_picks_up_group_changes(client, refreshing):
    TeamFactory(slug="vision")
    refreshing.next_user = {"sub": "u-123", "preferred_username": "grace", "email": "grace@example.com",
                            "groups": ["team-vision"]}
    sso_login(client, refreshing)
    assert client.get("/teams/vision/").status_code == 200
    refreshing.next_user = {**refreshing.next_user, "groups": []}
    expire_id_token(client)

    to_provider = client.get("/teams/vision/")

    assert "prompt=none" in to_provider.url
    back = follow_to_provider_and_back(client, refreshing, to_provider)
    assert back.status_code == 302 and back.url == "/teams/vision/"
    assert not Membership.objects.exists()
    assert client.get("/teams/vision/").status_code == 404


def test_a_user_signed_out_at_the_provider_is_signed_out_at_the_next_refresh(client, refreshing):
    refreshing.next_user = {"sub": "u-123", "preferred_username": "grace", "email": "grace@example.com", "groups": []}
    sso_login(client, refreshing)
    refreshing.signed_out = True
    expire_id_token(client)

    follow_to_provider_and_back(client, refreshing, client.get("/"))

    assert signed_in_user(client) is None


def test_htmx_fragments_and_local_accounts_are_not_sent_to_the_provider(client, refreshing, member):
    refreshing.next_user = {"sub": "u-123", "preferred_username": "grace", "email": "grace@example.com", "groups": []}
    sso_login(client, refreshing)
    expire_id_token(client)
    assert client.get("/notifications/", HTTP_HX_REQUEST="true").status_code == 200

    client.logout()
    # How a local account signs in: the password form, answered by Django's own backend.
    client.force_login(member, backend="django.contrib.auth.backends.ModelBackend")
    assert client.get("/notifications/").status_code == 200


# --- Changes wait for a confirmed session -----------------------------------------------------------

ADMIN = {"sub": "u-1", "preferred_username": "ada", "email": "ada@example.com", "groups": ["gpu-portal-admins"]}


def test_after_the_id_token_expired_an_api_change_over_the_session_is_refused_until_it_is_renewed(client, refreshing):
    refreshing.next_user = ADMIN
    sso_login(client, refreshing)
    expire_id_token(client)

    refused = client.post("/api/teams/", {"slug": "nlp", "name": "NLP"}, content_type="application/json")

    assert refused.status_code == 401
    assert refused.json() == {"message": RENEW_FIRST_API, "errors": {}}
    assert not Team.objects.exists()
    follow_to_provider_and_back(client, refreshing, client.get("/teams/"))
    assert client.post("/api/teams/", {"slug": "nlp", "name": "NLP"}, content_type="application/json").status_code == 201


def test_a_page_form_sent_after_the_id_token_expired_changes_nothing_and_goes_back_to_renew(client, refreshing):
    refreshing.next_user = ADMIN
    sso_login(client, refreshing)
    expire_id_token(client)

    sent = client.post("/platform/teams/new/", {"slug": "nlp", "name": "NLP"},
                       HTTP_REFERER="http://testserver/platform/teams/new/")

    assert sent.status_code == 302 and sent.url == "/platform/teams/new/"
    assert not Team.objects.exists()
    back = follow_to_provider_and_back(client, refreshing, client.get(sent.url))
    assert back.url == "/platform/teams/new/"
    assert RENEW_FIRST in client.get(back.url).content.decode()


def test_an_htmx_change_after_the_id_token_expired_is_sent_to_reload_its_page_and_changes_nothing(client, refreshing):
    refreshing.next_user = ADMIN
    sso_login(client, refreshing)
    user = signed_in_user(client)
    notify(recipients=[user], message="Something happened.")
    expire_id_token(client)

    sent = client.post("/notifications/read/", HTTP_HX_REQUEST="true",
                       HTTP_HX_CURRENT_URL="http://testserver/notifications/?page=2")

    assert sent.status_code == 401 and sent["HX-Redirect"] == "/notifications/?page=2"
    assert Notification.objects.filter(recipient=user, read_at__isnull=True).count() == 1


def test_a_change_is_never_sent_back_to_another_site(client, refreshing):
    refreshing.next_user = ADMIN
    sso_login(client, refreshing)
    expire_id_token(client)

    sent = client.post("/platform/teams/new/", {"slug": "nlp", "name": "NLP"}, HTTP_REFERER="https://evil.example/")

    assert sent.status_code == 302 and sent.url == "/"


def test_signing_out_and_local_accounts_need_no_renewal(client, refreshing, member):
    refreshing.next_user = ADMIN
    sso_login(client, refreshing)
    expire_id_token(client)
    assert client.post("/logout/").status_code == 302
    assert signed_in_user(client) is None

    client.force_login(member, backend="django.contrib.auth.backends.ModelBackend")
    session = client.session
    session["oidc_id_token_expiration"] = 0  # whatever it holds, no provider vouches for a local account
    session.save()
    assert client.post("/api/tokens/", {"name": "laptop", "expires_in_days": 7},
                       content_type="application/json").status_code == 201


def test_single_sign_on_from_the_login_page_comes_back_to_the_page_the_session_ended_on(client, provider):
    provider.next_user = {"sub": "u-7", "preferred_username": "grace", "email": "grace@example.com", "groups": []}
    login_page = client.get("/login/?next=/workloads/%3Fphase%3Dfailed").content.decode()
    start_url = "/oidc/authenticate/?next=/workloads/%3Fphase%3Dfailed"
    assert f'href="{start_url}"' in login_page

    done = sso_login(client, provider, start_url)

    assert done.status_code == 302 and done.url == "/workloads/?phase=failed"


def test_a_deactivated_sso_accounts_session_ends_at_its_next_request(client, provider):
    from tenants import people

    provider.next_user = {"sub": "u-8", "preferred_username": "grace", "email": "grace@example.com", "groups": []}
    sso_login(client, provider)
    grace = signed_in_user(client)
    assert client.get("/").status_code == 200
    root = get_user_model().objects.create_user(username="root", is_platform_admin=True)

    people.person_active_set(actor=root, person=grace, active=False)

    assert client.get("/")["Location"].startswith("/login/")


def test_finance_signing_in_through_single_sign_on_lands_on_the_finance_overview(client, provider):
    provider.next_user = {"sub": "u-9", "preferred_username": "fiona", "email": "f@example.com",
                          "groups": ["gpu-portal-finance"]}
    assert 'href="/oidc/authenticate/"' in client.get("/login/?next=/").content.decode()  # the root names no page

    done = sso_login(client, provider)

    assert client.get(done.url)["Location"] == "/billing/finance/"

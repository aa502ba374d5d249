"""Single sign-on end to end: browserless, but every hop is real HTTP to a real provider."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest
import requests
from django.contrib.auth import get_user_model

from tenants.models import Membership
from tests.factories import MembershipFactory, TeamFactory
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


def sso_login(client, provider) -> Any:
    start = client.get("/oidc/authenticate/")
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

    assert done.status_code == 302 and done.url == "/"
    user = get_user_model().objects.get(username="grace")
    assert (user.email, user.first_name, user.is_finance, user.is_platform_admin) == ("grace@example.com", "Grace", True, False)
    assert dict(Membership.objects.filter(user=user).values_list("team__slug", "role")) == {"vision": "lead", "nlp": "member"}
    assert client.get("/teams/vision/").status_code == 200


def test_the_next_sso_login_follows_group_changes(client, provider):
    team = TeamFactory(slug="vision")
    user = get_user_model().objects.create_user(username="grace", email="grace@example.com", is_platform_admin=True)
    MembershipFactory(team=team, user=user, role="lead")
    provider.next_user = {"sub": "u-123", "preferred_username": "grace", "email": "grace@example.com", "groups": []}

    sso_login(client, provider)

    user.refresh_from_db()
    assert not user.is_platform_admin
    assert not Membership.objects.filter(user=user).exists()


def test_a_forged_callback_does_not_log_anyone_in(client, provider):
    provider.next_user = {"sub": "u-1", "preferred_username": "mallory", "email": "m@example.com", "groups": []}
    client.get("/oidc/authenticate/")
    response = client.get("/oidc/callback/?code=made-up&state=made-up")
    assert response.status_code == 400  # a state the session never issued is a suspicious request
    assert "_auth_user_id" not in client.session
    assert not get_user_model().objects.filter(username="mallory").exists()

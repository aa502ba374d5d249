"""Roles outlive a group only as long as the revalidation window: a user whose provider groups
vanished and who never signs in again loses them (and their API tokens) on schedule; local
accounts are never touched."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from portal import tokens
from portal.models import AuditEvent, Notification, SsoIdentity
from tenants import services, tasks
from tenants.models import Membership
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.tenants.test_sso import provider, signed_in_user, sso_login  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db

HOUR = dt.timedelta(hours=1)
# What a configured check answers, by subject: the provider's current claims, or None when it cannot tell.
PROVIDER_SAYS: dict[str, Any] = {}


def provider_check(identity: SsoIdentity) -> dict[str, Any] | None:
    answer = PROVIDER_SAYS.get(identity.subject)
    if isinstance(answer, Exception):
        raise answer
    return answer


@pytest.fixture(autouse=True)
def _window(settings):
    settings.OIDC_REVALIDATE_AFTER = 24 * 3600
    settings.OIDC_REVALIDATE_GRACE = 3600
    settings.OIDC_REVALIDATE_CHECK = ""
    PROVIDER_SAYS.clear()


def token_works(secret: str) -> bool:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    answer = client.get("/api/teams/")
    assert answer.status_code in (200, 401), answer.content
    return answer.status_code == 200


@pytest.fixture
def grace_the_admin(client, provider):  # noqa: F811
    """An SSO platform admin and lead of vision, with a 365-day token, signed in once."""
    TeamFactory(slug="vision")
    provider.next_user = {"sub": "u-123", "preferred_username": "grace", "email": "grace@example.com",
                          "groups": ["gpu-portal-admins", "team-vision-leads"]}
    sso_login(client, provider)
    user = signed_in_user(client)
    assert (user.is_platform_admin, user.is_staff) == (True, True)
    _, secret = tokens.api_token_create(user=user, name="ci", expires_in_days=365)
    assert token_works(secret)
    # The provider removes every group; grace never signs in again, so no login ever tells the portal.
    provider.next_user = {**provider.next_user, "groups": []}
    return user, secret


def test_a_user_whose_groups_vanished_and_who_never_signs_in_loses_admin_lead_and_tokens_within_the_window(
        grace_the_admin):
    user, secret = grace_the_admin
    confirmed = SsoIdentity.objects.get(user=user).confirmed_at

    early = services.sso_identities_revalidate(now=confirmed + 24 * HOUR + 30 * dt.timedelta(minutes=1))
    user.refresh_from_db()
    assert (early.waiting, early.demoted, user.is_platform_admin) == (1, 0, True)  # still in the grace period

    done = services.sso_identities_revalidate(now=confirmed + 25 * HOUR + dt.timedelta(seconds=1))

    user.refresh_from_db()
    assert (done.demoted, user.is_platform_admin, user.is_staff, user.is_finance) == (1, False, False, False)
    assert not Membership.objects.filter(user=user).exists()
    assert not token_works(secret)  # the 365-day token stops working
    event = AuditEvent.objects.get(action="sso_identity.unconfirmed")
    assert "grace lost platform admin, team lead of vision and their API tokens" in event.message
    assert AuditEvent.objects.filter(action="api_token.revoked", message__contains="has not confirmed").count() == 1
    assert AuditEvent.objects.get(action="membership.removed").message.startswith(
        "grace left vision: the identity provider has not confirmed their groups since")
    assert Notification.objects.filter(recipient=user, message__contains="Sign in again").exists()


def test_the_periodic_task_is_on_beats_schedule_and_demotes_once(grace_the_admin):
    user, secret = grace_the_admin
    entry = django_settings.CELERY_BEAT_SCHEDULE["sso-identities-revalidate"]
    assert entry["task"] == tasks.sso_identities_revalidate.name
    # The window plus one beat interval bounds how long a vanished group keeps its rights.
    window = django_settings.OIDC_REVALIDATE_AFTER + django_settings.OIDC_REVALIDATE_GRACE + float(str(entry["schedule"]))
    assert window <= 26 * 3600
    SsoIdentity.objects.filter(user=user).update(confirmed_at=timezone.now() - 26 * HOUR)

    assert tasks.sso_identities_revalidate() == {"confirmed": 0, "demoted": 1, "waiting": 0}
    assert tasks.sso_identities_revalidate() == {"confirmed": 0, "demoted": 0, "waiting": 0}

    assert AuditEvent.objects.filter(action="sso_identity.unconfirmed").count() == 1
    assert not token_works(secret)


def test_signing_in_again_gives_back_what_the_groups_carry_and_restarts_the_window(client, grace_the_admin, provider):  # noqa: F811
    user, _ = grace_the_admin
    SsoIdentity.objects.filter(user=user).update(confirmed_at=timezone.now() - 26 * HOUR)
    assert services.sso_identities_revalidate().demoted == 1
    provider.next_user = {**provider.next_user, "groups": ["team-vision-leads"]}

    sso_login(client, provider)

    user.refresh_from_db()
    assert dict(Membership.objects.filter(user=user).values_list("team__slug", "role")) == {"vision": "lead"}
    assert not user.is_platform_admin
    assert SsoIdentity.objects.get(user=user).confirmed_at > timezone.now() - HOUR
    assert services.sso_identities_revalidate(now=timezone.now() + 23 * HOUR).demoted == 0
    user.refresh_from_db()
    assert Membership.objects.filter(user=user, role="lead").exists()


def test_a_local_account_is_never_touched_however_long_ago_it_signed_in(db):
    team = TeamFactory(slug="vision")
    local = UserFactory.create(username="root", is_platform_admin=True, is_finance=True, is_staff=True,
                        last_login=timezone.now() - dt.timedelta(days=400))
    MembershipFactory(team=team, user=local, role=Membership.Role.LEAD)
    _, secret = tokens.api_token_create(user=local, name="ci", expires_in_days=365)

    result = services.sso_identities_revalidate(now=timezone.now() + dt.timedelta(days=400))

    local.refresh_from_db()
    assert (result.demoted, result.waiting) == (0, 0)
    assert (local.is_platform_admin, local.is_finance, local.is_staff) == (True, True, True)
    assert Membership.objects.filter(user=local, role="lead").exists()
    assert token_works(secret)
    assert not AuditEvent.objects.filter(action="sso_identity.unconfirmed").exists()


def _sso_user(username: str, subject: str, *, groups_age: dt.timedelta) -> Any:
    user = get_user_model().objects.create_user(username=username, is_platform_admin=True, is_staff=True)
    SsoIdentity.objects.create(user=user, issuer="https://id.example.org", subject=subject,
                               confirmed_at=timezone.now() - groups_age)
    return user


def test_a_configured_check_confirms_or_takes_roles_at_once_and_a_silent_provider_gets_the_grace(settings):
    settings.OIDC_REVALIDATE_CHECK = f"{__name__}.provider_check"
    team = TeamFactory(slug="vision")
    kept = _sso_user("kept", "s-kept", groups_age=24 * HOUR + dt.timedelta(minutes=5))
    dropped = _sso_user("dropped", "s-dropped", groups_age=24 * HOUR + dt.timedelta(minutes=5))
    unreachable = _sso_user("unreachable", "s-down", groups_age=24 * HOUR + dt.timedelta(minutes=5))
    MembershipFactory(team=team, user=dropped, role=Membership.Role.LEAD)
    _, dropped_secret = tokens.api_token_create(user=dropped, name="ci", expires_in_days=365)
    PROVIDER_SAYS.update({"s-kept": {"groups": ["gpu-portal-admins"]}, "s-dropped": {"groups": []},
                          "s-down": RuntimeError("provider unreachable")})

    result = services.sso_identities_revalidate()

    assert (result.confirmed, result.demoted, result.waiting) == (2, 0, 1)
    for user in (kept, dropped, unreachable):
        user.refresh_from_db()
    assert (kept.is_platform_admin, dropped.is_platform_admin, unreachable.is_platform_admin) == (True, False, True)
    assert not Membership.objects.filter(user=dropped).exists()
    assert not token_works(dropped_secret)  # no role left: the existing revocation cut the token
    assert SsoIdentity.objects.get(user=kept).confirmed_at > timezone.now() - HOUR

    later = services.sso_identities_revalidate(now=timezone.now() + HOUR)
    unreachable.refresh_from_db()
    assert (later.demoted, unreachable.is_platform_admin) == (1, False)


def test_a_deactivated_account_is_left_alone(db):
    user = _sso_user("gone", "s-gone", groups_age=30 * HOUR)
    user.is_active = False
    user.save()
    assert services.sso_identities_revalidate().demoted == 0
    user.refresh_from_db()
    assert user.is_platform_admin  # inert while deactivated; its tokens are unusable already

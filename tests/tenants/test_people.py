"""People (platform admins): who is finance or platform admin, deactivation, a person's teams and
API tokens, on the page and through the API; refused to everyone else, refused for oneself where
it would lock the platform out, refused in words where single sign-on decides; all audited."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from portal import tokens
from portal.models import ApiToken, AuditEvent, SsoIdentity, User
from tenants.models import Membership, Team
from tests.conftest import login
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.helpers import api

pytestmark = pytest.mark.django_db


@pytest.fixture
def sso_person(db: Any) -> User:
    user = UserFactory.create(username="grace", password=None)
    SsoIdentity.objects.create(user=user, issuer="https://id.example.com", subject="u-123")
    return user


def _role(client: Any, person: User, role: str, value: str) -> Any:
    return client.post(reverse("tenants:person-role", args=[person.pk]), {"role": role, "value": value}, follow=True)


def _active(client: Any, person: User, value: str) -> Any:
    return client.post(reverse("tenants:person-active", args=[person.pk]), {"value": value}, follow=True)


def _events(action: str) -> list[str]:
    return list(AuditEvent.objects.filter(action=action).values_list("message", flat=True))


# --- Happy path ----------------------------------------------------------------------------------


def test_an_admin_makes_a_member_finance_and_takes_it_away_audited(admin_user, member):
    root = login(admin_user)
    page = _role(root, member, "is_finance", "1").content.decode()
    member.refresh_from_db()
    assert member.is_finance and "alice is now finance." in page
    _role(root, member, "is_finance", "0")
    member.refresh_from_db()
    assert not member.is_finance
    assert _events("user.roles_changed") == ["root changed alice's roles: took away finance",
                                             "root changed alice's roles: made finance"]
    event = AuditEvent.objects.filter(action="user.roles_changed").last()
    assert event is not None and event.data == {"before": {"is_platform_admin": False, "is_finance": False},
                                                "after": {"is_platform_admin": False, "is_finance": True}}


def test_a_new_finance_person_reads_the_finance_overview(admin_user, member):
    assert login(member).get(reverse("billing:finance-overview")).status_code == 403
    _role(login(admin_user), member, "is_finance", "1")
    assert login(member).get(reverse("billing:finance-overview")).status_code == 200


def test_a_platform_admin_made_here_reaches_the_django_admin_and_loses_it_with_the_role(admin_user, member):
    root = login(admin_user)
    _role(root, member, "is_platform_admin", "1")
    member.refresh_from_db()
    assert (member.is_platform_admin, member.is_staff) == (True, True)
    _role(root, member, "is_platform_admin", "0")
    member.refresh_from_db()
    assert (member.is_platform_admin, member.is_staff) == (False, False)


def test_deactivating_someone_ends_their_session_and_tokens_and_reconciles_their_teams(admin_user, member, team):
    _, secret = tokens.api_token_create(user=member, name="laptop", expires_in_days=30)
    alice = login(member)
    assert alice.get("/").status_code == 200
    before = Team.objects.get(pk=team.pk).config_version

    page = _active(login(admin_user), member, "0").content.decode()

    member.refresh_from_db()
    assert not member.is_active and "alice is deactivated" in page
    assert Team.objects.get(pk=team.pk).config_version == before + 1  # the RoleBinding drops them
    assert alice.get("/")["Location"].startswith("/login/")
    by_token = APIClient()
    by_token.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    assert by_token.get("/api/teams/").status_code == 401
    assert _events("user.deactivated") == [
        "root deactivated alice's account: they can no longer sign in or use their API tokens"]
    assert Membership.objects.filter(user=member).exists()  # kept, for a return


def test_a_reactivated_person_signs_in_again_with_their_teams(admin_user, member, team):
    root = login(admin_user)
    _active(root, member, "0")
    _active(root, member, "1")
    member.refresh_from_db()
    assert member.is_active and _events("user.reactivated") == ["root reactivated alice's account"]
    assert login(member).get(f"/teams/{team.slug}/").status_code == 200


def test_the_person_page_shows_their_teams_lead_roles_and_tokens_and_revokes_one(admin_user, member, team):
    MembershipFactory(team=TeamFactory(slug="nlp", name="Language"), user=member, role=Membership.Role.LEAD)
    token, _ = tokens.api_token_create(user=member, name="laptop", expires_in_days=30)
    root = login(admin_user)
    page = root.get(reverse("tenants:person-detail", args=[member.pk])).content.decode()
    assert 'href="/teams/vision/#members"' in page and 'href="/teams/nlp/#members"' in page
    assert "Team lead" in page and "laptop" in page

    page = root.post(reverse("tenants:person-token-revoke", args=[member.pk, token.pk]), follow=True).content.decode()

    token.refresh_from_db()
    assert token.revoked_at is not None and "Token “laptop” of alice is revoked." in page
    assert _events("api_token.revoked") == ["root revoked API token “laptop” of alice"]


def test_the_people_list_searches_and_filters(admin_user, member, finance_user, lead):
    root = login(admin_user)

    def names(query: str) -> set[str]:
        html = root.get(f"{reverse('tenants:person-list')}{query}").content.decode()
        return {name for name in ("root", "alice", "fiona", "lena") if f'data-testid="person-{name}"' in html}

    assert names("") == {"root", "alice", "fiona", "lena"}
    assert names("?search=ALI") == {"alice"}
    assert names("?role=finance") == {"fiona"}
    assert names("?role=admin") == {"root"}
    User.objects.filter(pk=lead.pk).update(is_active=False)
    assert names("?active=0") == {"lena"}
    assert names("?role=nonsense") == {"root", "alice", "fiona", "lena"}  # a stale link opens, unfiltered


def test_the_navigation_offers_people_to_platform_admins_only(admin_user, member, lead, finance_user):
    assert ">People<" in login(admin_user).get("/").content.decode()
    for other in (member, lead, finance_user):
        assert ">People<" not in login(other).get("/").content.decode()


def test_the_api_lists_changes_and_revokes(admin_user, member, team):
    token, _ = tokens.api_token_create(user=member, name="ci", expires_in_days=30)
    client = api(admin_user)
    listed = client.get("/api/people/?search=alice").json()
    assert [p["username"] for p in listed["results"]] == ["alice"]
    assert listed["results"][0]["teams"] == [{"team": "vision", "role": "member"}]

    changed = client.patch(f"/api/people/{member.pk}/", {"is_finance": True, "is_active": False}, format="json")

    assert changed.status_code == 200, changed.json()
    assert (changed.json()["is_finance"], changed.json()["is_active"]) == (True, False)
    assert [t["name"] for t in client.get(f"/api/people/{member.pk}/tokens/").json()] == ["ci"]
    revoked = client.post(f"/api/people/{member.pk}/tokens/{token.pk}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    assert client.patch(f"/api/people/{member.pk}/", {"is_active": False}, format="json").status_code == 200  # as asked


# --- Hostile -------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["member", "lead", "finance_user", "outsider"])
def test_nobody_but_a_platform_admin_reaches_people(request, who, admin_user, member):
    user = request.getfixturevalue(who)
    token, _ = tokens.api_token_create(user=member, name="ci", expires_in_days=30)
    client = login(user)
    for url in (reverse("tenants:person-list"), reverse("tenants:person-detail", args=[admin_user.pk])):
        assert client.get(url).status_code == 403, url
    for url, data in ((reverse("tenants:person-role", args=[user.pk]), {"role": "is_platform_admin", "value": "1"}),
                      (reverse("tenants:person-active", args=[admin_user.pk]), {"value": "0"}),
                      (reverse("tenants:person-token-revoke", args=[member.pk, token.pk]), {})):
        assert client.post(url, data).status_code == 403, url
    by_api = api(user)
    assert by_api.get("/api/people/").status_code == 403
    assert by_api.get(f"/api/people/{admin_user.pk}/").status_code == 403
    assert by_api.patch(f"/api/people/{user.pk}/", {"is_platform_admin": True}, format="json").status_code == 403
    assert by_api.post(f"/api/people/{member.pk}/tokens/{token.pk}/revoke/").status_code == 403
    user.refresh_from_db()
    admin_user.refresh_from_db()
    token.refresh_from_db()
    assert not user.is_platform_admin and admin_user.is_active and token.revoked_at is None
    assert not AuditEvent.objects.filter(action__startswith="user.").exists()


def test_an_admin_cannot_take_away_their_own_admin_role(admin_user):
    page = _role(login(admin_user), admin_user, "is_platform_admin", "0").content.decode()
    admin_user.refresh_from_db()
    assert admin_user.is_platform_admin and "You cannot take away your own platform admin role" in page
    answer = api(admin_user).patch(f"/api/people/{admin_user.pk}/", {"is_platform_admin": False}, format="json")
    assert answer.status_code == 403 and "your own platform admin role" in answer.json()["message"]
    assert not AuditEvent.objects.filter(action="user.roles_changed").exists()


def test_an_admin_cannot_deactivate_themselves(admin_user):
    page = _active(login(admin_user), admin_user, "0").content.decode()
    admin_user.refresh_from_db()
    assert admin_user.is_active and "You cannot deactivate your own account" in page
    assert api(admin_user).patch(f"/api/people/{admin_user.pk}/", {"is_active": False}, format="json").status_code == 403


def test_a_role_single_sign_on_decides_is_refused_in_words(admin_user, sso_person):
    root = login(admin_user)
    page = _role(root, sso_person, "is_finance", "1").content.decode()
    sso_person.refresh_from_db()
    assert not sso_person.is_finance
    assert "grace signs in through single sign-on, so the identity provider&#x27;s groups decide whether they are finance" in page
    detail = root.get(reverse("tenants:person-detail", args=[sso_person.pk])).content.decode()
    assert 'data-testid="roles-from-sso"' in detail and "Make finance" not in detail
    answer = api(admin_user).patch(f"/api/people/{sso_person.pk}/", {"is_platform_admin": True}, format="json")
    assert answer.status_code == 403 and answer.json()["errors"] == {"is_platform_admin": [answer.json()["message"]]}
    assert "OIDC_ADMIN_GROUPS" in answer.json()["message"]


def test_single_sign_on_does_not_stop_deactivation(admin_user, sso_person):
    _active(login(admin_user), sso_person, "0")
    sso_person.refresh_from_db()
    assert not sso_person.is_active


def test_a_superuser_is_changed_only_in_the_django_admin(admin_user):
    boss = UserFactory.create(username="boss", is_superuser=True, is_staff=True)
    root = login(admin_user)
    assert "only the Django admin" in _active(root, boss, "0").content.decode()
    assert "only the Django admin" in _role(root, boss, "is_platform_admin", "0").content.decode()
    boss.refresh_from_db()
    assert boss.is_active and boss.is_superuser


def test_a_half_refused_change_changes_nothing(admin_user, sso_person):
    answer = api(admin_user).patch(f"/api/people/{sso_person.pk}/", {"is_active": False, "is_finance": True}, format="json")
    assert answer.status_code == 403
    sso_person.refresh_from_db()
    assert sso_person.is_active and not AuditEvent.objects.filter(action__startswith="user.").exists()


def test_fields_people_cannot_set_are_refused_by_name(admin_user, member):
    answer = api(admin_user).patch(f"/api/people/{member.pk}/", {"is_superuser": True, "username": "x"}, format="json")
    assert answer.status_code == 400
    assert set(answer.json()["errors"]) == {"is_superuser", "username"}


def test_another_persons_token_is_not_found_under_this_person(admin_user, member, lead):
    token, _ = tokens.api_token_create(user=lead, name="ci", expires_in_days=30)
    root = login(admin_user)
    assert root.post(reverse("tenants:person-token-revoke", args=[member.pk, token.pk])).status_code == 404
    assert api(admin_user).post(f"/api/people/{member.pk}/tokens/{token.pk}/revoke/").status_code == 404
    assert ApiToken.objects.get(pk=token.pk).revoked_at is None


def test_a_malformed_action_is_refused_in_words(admin_user, member):
    page = login(admin_user).post(reverse("tenants:person-role", args=[member.pk]),
                                  {"role": "is_superuser", "value": "1"}, follow=True).content.decode()
    assert "Choose a role to give or take away" in page
    member.refresh_from_db()
    assert not member.is_superuser

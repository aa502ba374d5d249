"""API tokens: what a token may do with its scope, and what it may never do (mint another)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from portal import tokens
from portal.errors import NotAllowed
from portal.models import ApiToken
from tests.helpers import api

pytestmark = pytest.mark.django_db


def with_token(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def test_a_token_cannot_create_another_token(member):
    parent, secret = tokens.api_token_create(user=member, name="ci", expires_in_days=1)

    response = with_token(secret).post("/api/tokens/", {"name": "forever", "expires_in_days": 365}, format="json")

    assert response.status_code == 403
    assert response.json()["message"].startswith("An API token cannot create tokens.")
    assert list(ApiToken.objects.filter(user=member)) == [parent]


def test_the_service_refuses_a_token_minted_with_a_token(member):
    parent, _ = tokens.api_token_create(user=member, name="ci", expires_in_days=1)
    with pytest.raises(NotAllowed, match="cannot create tokens"):
        tokens.api_token_create(user=member, name="child", expires_in_days=30, created_with=parent)


def test_a_token_created_over_the_session_keeps_its_chosen_scope(member):
    created = api(member).post("/api/tokens/", {"name": "grafana", "expires_in_days": 30, "scope": "read"}, format="json")

    assert created.status_code == 201, created.json()
    assert created.json()["scope"] == "read"
    assert ApiToken.objects.get(pk=created.json()["id"]).scope == ApiToken.Scope.READ


def test_a_token_without_a_chosen_scope_may_read_and_write(member):
    created = api(member).post("/api/tokens/", {"name": "cli", "expires_in_days": 30}, format="json")
    assert created.json()["scope"] == "write"


def test_an_unknown_scope_is_refused_with_a_sentence(member):
    created = api(member).post("/api/tokens/", {"name": "cli", "expires_in_days": 30, "scope": "admin"}, format="json")
    assert created.status_code == 400
    assert "scope" in created.json()["errors"]


def test_a_read_only_token_reads_but_every_write_answers_403_and_changes_nothing(member):
    token, secret = tokens.api_token_create(user=member, name="grafana", expires_in_days=30, scope="read")
    client = with_token(secret)

    assert client.get("/api/teams/").status_code == 200
    for method in ("post", "put", "patch", "delete"):
        response = getattr(client, method)(f"/api/tokens/{token.pk}/revoke/", {}, format="json")
        assert response.status_code == 403, method
        assert "read-only" in response.json()["message"]
    token.refresh_from_db()
    assert token.revoked_at is None


def test_a_read_and_write_token_may_write(member):
    token, secret = tokens.api_token_create(user=member, name="cli", expires_in_days=30, scope="write")

    response = with_token(secret).post(f"/api/tokens/{token.pk}/revoke/")

    assert response.status_code == 200
    assert response.json()["status"] == "revoked"


def test_the_tokens_page_lets_the_user_choose_a_read_only_scope(member, as_user):
    client = as_user(member)
    page = client.get(reverse("api-tokens")).content.decode()
    assert 'value="read"' in page and 'value="write"' in page

    client.post(reverse("api-tokens"), {"name": "grafana", "expires_in_days": "30", "scope": "read"})

    assert ApiToken.objects.get(user=member).scope == ApiToken.Scope.READ
    assert "Read only" in client.get(reverse("api-tokens")).content.decode()


def test_a_deactivated_users_tokens_stop_working(member):
    _, secret = tokens.api_token_create(user=member, name="cli", expires_in_days=30)
    member.is_active = False
    member.save()

    response = with_token(secret).get("/api/teams/")

    assert response.status_code == 401
    assert "unknown, revoked or expired" in response.json()["message"]


def test_revoking_all_of_a_users_tokens_leaves_the_revoked_and_other_users_alone(member, lead):
    mine, _ = tokens.api_token_create(user=member, name="a", expires_in_days=30)
    already, _ = tokens.api_token_create(user=member, name="b", expires_in_days=30)
    tokens.api_token_revoke(token=already, actor=member)
    theirs, _ = tokens.api_token_create(user=lead, name="c", expires_in_days=30)

    assert tokens.api_tokens_revoke_all(user=member, reason="testing") == 1

    assert {t.name: t.status for t in ApiToken.objects.all()} == {"a": "revoked", "b": "revoked", "c": "active"}

"""Tenant isolation through the API: another team's objects are 404 on every endpoint that takes
an id, lists never show another team's rows, and lists cost the same queries for 1 row or 20."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal import tokens
from portal.models import ApiToken, AuditEvent, Notification
from tenants import services
from tenants.models import Flavor, Membership, QuotaGrant, QuotaRequest, Team
from tests.factories import (
    FlavorFactory,
    MembershipFactory,
    QuotaGrantFactory,
    TeamFactory,
    UserFactory,
)
from tests.helpers import api, file_request

pytestmark = pytest.mark.django_db




def team_objects(team: Team, lead: Any, member: Any, flavor: Flavor) -> dict[str, Any]:
    """One of everything a team or its member owns, by the id the API uses."""
    quota_request = file_request(team, member, flavor)
    token, _ = tokens.api_token_create(user=member, name="laptop", expires_in_days=30)
    return {
        "team": team.slug,
        "membership": Membership.objects.get(team=team, user=member).pk,
        "request": quota_request.pk,
        "grant": QuotaGrantFactory.create(team=team, flavor=flavor, units=2, request=quota_request).pk,
        "event": AuditEvent.objects.get(action="quota_request.created", team_id=team.pk).pk,
        "own_event": AuditEvent.objects.get(action="api_token.created", actor=member).pk,
        "notification": Notification.objects.create(recipient=member, message="Welcome to Vision").pk,
        "token": token.pk,
    }


@pytest.fixture
def objects(team, lead, member, flavor):
    return team_objects(team, lead, member, flavor)


def snapshot() -> dict[str, Any]:
    return {
        "teams": list(Team.objects.values_list("slug", "name", "cost_center", "description")),
        "memberships": list(Membership.objects.values_list("team_id", "user_id", "role")),
        "requests": list(QuotaRequest.objects.values_list("pk", "status", "decision_note")),
        "grants": list(QuotaGrant.objects.values_list("pk", "team_id", "units")),
        "notifications": list(Notification.objects.values_list("pk", "read_at")),
        "tokens": list(ApiToken.objects.values_list("pk", "revoked_at")),
    }


ENDPOINTS_WITH_AN_ID = [
    ("get", "/api/teams/{team}/", None),
    ("patch", "/api/teams/{team}/", {"name": "Taken over"}),
    ("delete", "/api/teams/{team}/", None),
    ("get", "/api/teams/{team}/cluster/", None),
    ("get", "/api/memberships/{membership}/", None),
    ("patch", "/api/memberships/{membership}/", {"role": "lead"}),
    ("delete", "/api/memberships/{membership}/", None),
    ("get", "/api/quota-requests/{request}/", None),
    ("post", "/api/quota-requests/{request}/approve/", {"note": "sure"}),
    ("post", "/api/quota-requests/{request}/reject/", {"note": "no"}),
    ("post", "/api/quota-requests/{request}/cancel/", None),
    ("get", "/api/grants/{grant}/", None),
    ("get", "/api/audit-events/{event}/", None),
    ("get", "/api/audit-events/{own_event}/", None),
    ("get", "/api/notifications/{notification}/", None),
    ("post", "/api/notifications/{notification}/read/", None),
    ("get", "/api/tokens/{token}/", None),
    ("post", "/api/tokens/{token}/revoke/", None),
]
ENDPOINT_IDS = [f"{method} {path}" for method, path, _ in ENDPOINTS_WITH_AN_ID]


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS_WITH_AN_ID, ids=ENDPOINT_IDS)
def test_an_outsider_gets_404_for_every_object_of_another_team(objects, outsider, method, path, body):
    before = snapshot()

    response = getattr(api(outsider), method)(path.format(**objects), body, format="json")

    assert response.status_code == 404
    assert response.json() == {"message": "Not found, or not visible to you.", "errors": {}}
    assert snapshot() == before


# What each role of the owning team (and finance and admins) gets, per endpoint, exactly:
# (member who owns them, team lead, finance, platform admin). 403 is "found, but not yours to
# do"; 404 is for what is someone else's own (their notifications, tokens, events they caused).
ANSWERS: dict[str, tuple[int, int, int, int]] = {
    "get /api/teams/{team}/": (200, 200, 200, 200),
    "patch /api/teams/{team}/": (403, 200, 403, 200),
    "delete /api/teams/{team}/": (403, 403, 403, 204),
    "get /api/teams/{team}/cluster/": (200, 200, 200, 200),
    "get /api/memberships/{membership}/": (200, 200, 200, 200),
    "patch /api/memberships/{membership}/": (403, 200, 403, 200),
    "delete /api/memberships/{membership}/": (403, 204, 403, 204),
    "get /api/quota-requests/{request}/": (200, 200, 200, 200),
    "post /api/quota-requests/{request}/approve/": (403, 200, 403, 200),
    "post /api/quota-requests/{request}/reject/": (403, 200, 403, 200),
    "post /api/quota-requests/{request}/cancel/": (200, 403, 403, 200),
    "get /api/grants/{grant}/": (200, 200, 200, 200),
    "get /api/audit-events/{event}/": (200, 200, 200, 200),
    "get /api/audit-events/{own_event}/": (200, 404, 200, 200),
    "get /api/notifications/{notification}/": (200, 404, 404, 404),
    "post /api/notifications/{notification}/read/": (200, 404, 404, 404),
    "get /api/tokens/{token}/": (200, 404, 404, 404),
    "post /api/tokens/{token}/revoke/": (200, 404, 404, 404),
}
ROLES = ("member", "lead", "finance_user", "admin_user")
ROLE_CASES = [
    pytest.param(method, path, body, role, ANSWERS[f"{method} {path}"][index], id=f"{role} {method} {path}")
    for method, path, body in ENDPOINTS_WITH_AN_ID
    for index, role in enumerate(ROLES)
]


def test_every_endpoint_with_an_id_has_an_answer_for_every_role():
    assert set(ANSWERS) == set(ENDPOINT_IDS)


@pytest.mark.parametrize(("method", "path", "body", "role", "status"), ROLE_CASES)
def test_each_role_gets_exactly_its_answer_on_every_endpoint_with_an_id(request, objects, method, path, body, role, status):
    before = snapshot()

    response = getattr(api(request.getfixturevalue(role)), method)(path.format(**objects), body, format="json")

    assert response.status_code == status, response.content
    if status == 403:
        assert response.json() == {"message": "You are not allowed to do this.", "errors": {}}
        assert snapshot() == before
    elif status == 404:
        assert response.json() == {"message": "Not found, or not visible to you.", "errors": {}}
        assert snapshot() == before


LISTS = ["/api/teams/", "/api/memberships/", "/api/quota-requests/", "/api/grants/", "/api/audit-events/",
         "/api/notifications/", "/api/tokens/"]


def teams_in(path: str, rows: list[dict[str, Any]]) -> set[Any]:
    if path == "/api/teams/":
        return {row["slug"] for row in rows}
    if path == "/api/audit-events/":
        return {row["team_id"] for row in rows if row["team_id"] is not None}
    return {row["team"] for row in rows}


@pytest.fixture
def two_teams(team, other_team, lead, member, outsider, flavor):
    """Both teams own one of everything; the outsider is lead of the other team."""
    mine = team_objects(team, lead, member, flavor)
    MembershipFactory(team=other_team, user=UserFactory(username="olga"))
    theirs = team_objects(other_team, outsider, UserFactory(username="olga"), flavor)
    return mine, theirs


@pytest.mark.parametrize("path", LISTS)
def test_lists_never_show_another_teams_rows(two_teams, outsider, other_team, path):
    response = api(outsider).get(path)

    assert response.status_code == 200
    rows = response.json()["results"]
    if path in {"/api/notifications/", "/api/tokens/"}:
        mine, _ = two_teams
        assert mine["notification"] not in {row["id"] for row in rows}
        assert mine["token"] not in {row["id"] for row in rows}
        return
    assert teams_in(path, rows) == ({other_team.pk} if path == "/api/audit-events/" else {"speech"})


@pytest.mark.parametrize("path", LISTS[1:5])
def test_filtering_a_list_by_a_team_you_cannot_see_shows_nothing(two_teams, outsider, path):
    response = api(outsider).get(path, {"team": "vision"})

    assert response.status_code == 200
    assert response.json()["results"] == []


@pytest.mark.parametrize("who", ["finance_user", "admin_user"])
@pytest.mark.parametrize("path", LISTS[:5])
def test_finance_and_platform_admins_see_every_teams_rows(request, two_teams, team, other_team, who, path):
    rows = api(request.getfixturevalue(who)).get(path).json()["results"]

    expected = {team.pk, other_team.pk} if path == "/api/audit-events/" else {"vision", "speech"}
    assert teams_in(path, rows) == expected


def test_an_outsider_sees_events_they_caused_but_not_the_other_teams(two_teams, outsider):
    mine, theirs = two_teams

    ids = {row["id"] for row in api(outsider).get("/api/audit-events/").json()["results"]}

    assert theirs["event"] in ids
    assert mine["event"] not in ids and mine["own_event"] not in ids


# --- Bounded queries -----------------------------------------------------------------------


def grow(path: str, *, team: Team, member: Any, lead: Any, start: int, rounds: int) -> None:
    """Adds rows to what `path` lists for `member`, each with its own related rows."""
    for n in range(start, start + rounds):
        flavor = FlavorFactory.create(name=f"Flavor {n}", slug=f"flavor-{n}")
        if path == "/api/teams/":
            extra = TeamFactory(slug=f"extra-{n}")
            MembershipFactory(team=extra, user=member)
            MembershipFactory(team=extra, user=UserFactory(username=f"lead-{n}"), role=Membership.Role.LEAD)
            QuotaGrantFactory(team=extra, flavor=flavor, units=1)
        elif path == "/api/memberships/":
            MembershipFactory(team=team, user=UserFactory(username=f"person-{n}"))
        elif path == "/api/quota-requests/":
            file_request(team, member, flavor)
        elif path == "/api/grants/":
            QuotaGrantFactory(team=team, flavor=flavor, units=1)
        elif path == "/api/audit-events/":
            services.team_update(actor=lead, team=team, description=f"round {n}")
        elif path == "/api/notifications/":
            Notification.objects.create(recipient=member, message=f"note {n}")
        elif path == "/api/tokens/":
            tokens.api_token_create(user=member, name=f"script {n}", expires_in_days=5)


@pytest.mark.parametrize("path", [*LISTS, "/api/flavors/"])
def test_a_list_costs_the_same_queries_for_one_row_or_many(team, lead, member, flavor, path, django_assert_max_num_queries):
    path_to_grow = "/api/grants/" if path == "/api/flavors/" else path
    grow(path_to_grow, team=team, member=member, lead=lead, start=0, rounds=1)
    client = api(member)
    with CaptureQueriesContext(connection) as one_row:
        assert client.get(path).status_code == 200

    grow(path_to_grow, team=team, member=member, lead=lead, start=1, rounds=20)

    with django_assert_max_num_queries(len(one_row)):
        response = client.get(path)
    assert len(response.json()["results"]) > 10

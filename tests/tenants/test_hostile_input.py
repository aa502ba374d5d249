"""Team and quota input that once answered 500 or told what it should not (issue 8, findings 13
and 15): each is a clear answer now, and a decision already saved stays saved."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tenants import services
from tenants.models import Membership, QuotaRequest
from tests.factories import UserFactory
from tests.helpers import api, file_request
from tests.tenants.test_sso import provider, sso_login  # noqa: F401 (provider is a fixture)

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("target", ["0", "approvals", "tenants:approvals", "//evil.example.com/", "javascript:alert(1)"])
def test_a_decision_with_a_next_that_is_not_a_local_path_is_saved_and_goes_to_the_request(team, member, lead, flavor,
                                                                                         as_user, target):
    qr = file_request(team, member, flavor, 2)

    response = as_user(lead).post(reverse("tenants:quota-request-approve", args=[qr.pk]), {"next": target})

    assert response.status_code == 302
    assert response["Location"] == reverse("tenants:quota-request-detail", args=[qr.pk])
    qr.refresh_from_db()
    assert qr.status == QuotaRequest.Status.APPROVED


@pytest.mark.parametrize("view", ["tenants:quota-request-reject", "tenants:quota-request-cancel"])
def test_rejecting_or_cancelling_with_next_zero_is_not_a_500(team, member, lead, flavor, as_user, view):
    qr = file_request(team, member, flavor, 2)
    user = member if view.endswith("cancel") else lead

    response = as_user(user).post(reverse(view, args=[qr.pk]), {"next": "0"})

    assert response.status_code == 302
    qr.refresh_from_db()
    assert qr.status != QuotaRequest.Status.PENDING


@pytest.mark.parametrize("groups", [[123], [None], 5, None, [["team-vision"]], {"team-vision": 1}, "team-vision"])
def test_a_groups_claim_that_is_not_a_list_of_strings_is_read_as_the_strings_it_holds(team, groups):
    user = UserFactory.create(username="grace")

    services.memberships_sync_from_groups(user=user, groups=groups)

    expected = ["vision"] if groups == "team-vision" else []
    assert list(Membership.objects.filter(user=user).values_list("team__slug", flat=True)) == expected


@pytest.mark.parametrize("groups", [
    [123, "team-vision"],
    [None, "team-vision"],
    5,
])
def test_an_sso_login_with_a_groups_claim_that_is_not_strings_signs_in(client, provider, team, groups):  # noqa: F811
    provider.next_user = {"sub": "u-9", "preferred_username": "grace", "email": "grace@example.com", "groups": groups}

    done = sso_login(client, provider)

    assert done.status_code == 302 and done.url == "/start/"
    expected = ["vision"] if isinstance(groups, list) else []
    assert list(Membership.objects.filter(user__username="grace").values_list("team__slug", flat=True)) == expected


def test_group_names_come_only_from_the_strings_of_a_claim(team):
    assert services.groups_from_claim(["team-vision", 123, None, ["x"], "gpu-portal-finance"]) == [
        "team-vision", "gpu-portal-finance"]
    assert services.groups_from_claim("team-vision") == ["team-vision"]
    assert services.groups_from_claim(5) == services.groups_from_claim(None) == []


# --- Adding a member does not reveal who has an account ----------------------------------------


@pytest.mark.parametrize("username", ["nobody", "gone"])
def test_a_lead_gets_the_same_answer_for_an_unknown_and_a_deactivated_account(team, lead, username):
    UserFactory(username="gone", is_active=False)

    response = api(lead).post("/api/memberships/", {"team": "vision", "username": username}, format="json")

    assert response.status_code == 400
    assert response.json()["message"] == (f"There is no active account “{username}” you can add; "
                                          "people appear after their first login.")


def test_someone_who_may_not_manage_the_team_learns_nothing_about_the_username(team, member):
    UserFactory(username="known")

    answers = [api(member).post("/api/memberships/", {"team": "vision", "username": name}, format="json")
               for name in ("known", "nobody")]

    assert [answer.status_code for answer in answers] == [403, 403]
    assert answers[0].json() == answers[1].json()


def test_an_outsider_naming_another_team_learns_nothing_about_the_username(team, outsider):
    UserFactory(username="known")

    answers = [api(outsider).post("/api/memberships/", {"team": "vision", "username": name}, format="json")
               for name in ("known", "nobody")]

    assert [answer.status_code for answer in answers] == [400, 400]
    assert answers[0].json() == answers[1].json()


@pytest.mark.parametrize("username", ["nobody", "gone"])
def test_the_members_page_answers_an_unknown_and_a_deactivated_account_alike(team, lead, as_user, username):
    UserFactory(username="gone", is_active=False)

    response = as_user(lead).post(reverse("tenants:membership-add", args=["vision"]), {"username": username, "role": "member"},
                                  HTTP_HX_REQUEST="true")

    assert f"There is no active account “{username}” you can add" in response.content.decode()


@pytest.mark.parametrize("units", ["١٢", "１２", "²"])
def test_units_typed_in_the_request_form_are_ascii_digits(team, member, flavor, as_user, units):
    response = as_user(member).get(reverse("tenants:quota-preview"), {"team": "vision", "flavor": flavor.slug, "units": units})

    assert f"“{units}” is not a whole number of units." in response.content.decode()

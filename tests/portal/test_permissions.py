"""One authorization vocabulary: every "may this user do this" is a `rules` permission, and
every permission is asked somewhere."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin
from django.urls import reverse
from rules.permissions import permissions

from billing.admin import RateAdmin
from billing.models import Rate
from jobs.models import Workload
from portal import tokens
from portal.errors import DomainError
from portal.models import ApiToken
from tenants.models import Team
from tests.factories import UserFactory

ROOT = Path(__file__).resolve().parents[2]
WHO = ["member", "lead", "outsider", "finance_user", "admin_user"]


@pytest.fixture
def superuser(db: Any) -> Any:
    return UserFactory(username="su", is_superuser=True)


def holders(request: Any, perm: str, obj: Any = None) -> set[str]:
    return {who for who in WHO if request.getfixturevalue(who).has_perm(perm, obj)}


@pytest.mark.parametrize(("perm", "expected"), [
    ("portal.read_costs", {"finance_user", "admin_user"}),
    ("tenants.view_all_teams", {"finance_user", "admin_user"}),
    ("tenants.receive_quotarequests", {"lead", "outsider", "admin_user"}),
    ("tenants.manage_flavors", {"admin_user"}),
    ("tenants.manage_teams", {"admin_user"}),
    ("jobs.create_global_template", {"admin_user"}),
    ("billing.set_rates", {"finance_user", "admin_user"}),
    ("portal.open_admin", {"admin_user"}),
])
def test_platform_wide_permissions_belong_to_exactly_these_roles(request, team, perm, expected):
    assert holders(request, perm) == expected


def test_scaling_is_a_permission_of_its_own_held_by_the_owner_the_leads_and_platform_admins(request, team, member):
    server = Workload(team=team, owner=member)

    assert holders(request, "jobs.scale_workload", server) == {"member", "lead", "admin_user"}
    assert holders(request, "jobs.scale_workload", Workload(team=team, owner=UserFactory.create())) == {"lead", "admin_user"}


def test_a_token_is_revoked_by_its_owner_or_a_platform_admin(request, member):
    token, _ = tokens.api_token_create(user=member, name="laptop", expires_in_days=7)

    assert holders(request, "portal.revoke_apitoken", token) == {"member", "admin_user"}


def test_an_inactive_platform_admin_holds_no_platform_permission(admin_user):
    platform = ("tenants.manage_teams", "portal.read_costs", "tenants.view_all_teams")
    assert all(admin_user.has_perm(perm) for perm in platform)

    admin_user.is_active = False

    assert not any(admin_user.has_perm(perm) for perm in platform)


def test_a_superuser_sees_every_team_by_the_same_rule_as_platform_admins(superuser, team, other_team):
    assert superuser.has_perm("tenants.view_all_teams")
    assert set(Team.objects.for_user(superuser)) == {team, other_team}


def test_a_platform_admin_revokes_someone_elses_token_and_a_member_cannot(member, lead, admin_user):
    token, _ = tokens.api_token_create(user=member, name="laptop", expires_in_days=7)

    with pytest.raises(DomainError, match="only revoke your own"):
        tokens.api_token_revoke(token=token, actor=lead)
    tokens.api_token_revoke(token=token, actor=admin_user)
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None


@pytest.mark.parametrize(("who", "shown"), [("member", set()), ("admin_user", {"Capacity", "Admin"})])
def test_the_capacity_and_admin_links_follow_the_permissions(request, as_user, team, who, shown):
    page = as_user(request.getfixturevalue(who)).get(reverse("tenants:dashboard")).content.decode()

    assert {link for link in ("Capacity", "Admin") if f">{link}</a>" in page} == shown


def test_every_permission_is_asked_somewhere_outside_the_rules():
    sources = [path for app in ("portal", "tenants", "jobs", "billing", "templates") for path in (ROOT / app).rglob("*")
               if path.suffix in {".py", ".html"} and path.name != "rules.py"]
    text = "\n".join(path.read_text() for path in sources)
    asked = set(re.findall(r"""["']((?:portal|tenants|jobs|billing)\.[a-z_]+)["']""", text))

    assert sorted(set(permissions) - asked) == []


def test_finance_and_platform_admins_read_the_rate_card_in_the_admin_through_read_costs(rf, finance_user, admin_user, lead):
    rates = RateAdmin(Rate, admin.site)

    def may_view(user: Any) -> bool:
        request = rf.get("/admin/billing/rate/")
        request.user = user
        return rates.has_view_permission(request)

    assert (may_view(finance_user), may_view(admin_user), may_view(lead)) == (True, True, False)

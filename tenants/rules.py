"""Who may do what with teams and quota: the one place these rules live.

Services check them before they write; the API and the templates (`{% has_perm %}`) ask the
same predicates, so a page never offers a button the service would refuse.
"""

from __future__ import annotations

from typing import Any

import rules

from portal.roles import is_finance, is_platform_admin, sees_all_teams
from tenants.models import Membership, QuotaRequest, Team, user_team_roles


def _team_id(obj: Any) -> int | None:
    if obj is None:
        return None
    if isinstance(obj, Team):
        return obj.pk
    return getattr(obj, "team_id", None)


@rules.predicate
def is_team_member(user: Any, obj: Any) -> bool:
    return _team_id(obj) in user_team_roles(user)


@rules.predicate
def is_team_lead(user: Any, obj: Any) -> bool:
    return user_team_roles(user).get(_team_id(obj)) == Membership.Role.LEAD


@rules.predicate
def is_requester(user: Any, quota_request: QuotaRequest | None) -> bool:
    return quota_request is not None and quota_request.requester_id == user.pk


can_view_team = sees_all_teams | is_team_member
can_manage_team = is_platform_admin | is_team_lead
can_request_quota = is_platform_admin | is_team_member
can_decide_quota_request = is_platform_admin | is_team_lead
can_cancel_quota_request = is_platform_admin | is_requester

rules.add_perm("tenants.view_team", can_view_team)
rules.add_perm("tenants.manage_members", can_manage_team)
rules.add_perm("tenants.request_quota", can_request_quota)
rules.add_perm("tenants.decide_quotarequest", can_decide_quota_request)
rules.add_perm("tenants.cancel_quotarequest", can_cancel_quota_request)
rules.add_perm("tenants.manage_flavors", is_platform_admin)
rules.add_perm("tenants.manage_teams", is_platform_admin)
rules.add_perm("tenants.view_all_teams", sees_all_teams)
rules.add_perm("portal.read_costs", is_finance | is_platform_admin)

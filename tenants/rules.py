"""Who may do what with teams and quota: the one place these rules live.

Services check them before they write; the API and the templates (`{% has_perm %}`) ask the
same predicates, so a page never offers a button the service would refuse.
"""

from __future__ import annotations

from typing import Any

import rules

from portal.roles import is_finance, is_platform_admin, sees_all_teams
from tenants.models import Membership, QuotaRequest, Team, headed_team_ids, user_team_roles


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
    team_id = _team_id(obj)
    return team_id is not None and user_team_roles(user).get(team_id) == Membership.Role.LEAD


@rules.predicate
def leads_a_team(user: Any) -> bool:
    return Membership.Role.LEAD in user_team_roles(user).values()


@rules.predicate
def heads_its_department(user: Any, obj: Any) -> bool:
    return _team_id(obj) in headed_team_ids(user)


@rules.predicate
def heads_a_department(user: Any) -> bool:
    return bool(headed_team_ids(user))


@rules.predicate
def passed_to_the_head(user: Any, quota_request: Any) -> bool:
    """A lead approved it in a department with two levels: the team's part is done."""
    return isinstance(quota_request, QuotaRequest) and quota_request.waits_for_head


@rules.predicate
def at_the_teams_level(user: Any, quota_request: Any) -> bool:
    """Pending in a department with two levels, and no lead has approved it yet."""
    return (isinstance(quota_request, QuotaRequest) and quota_request.is_pending and quota_request.needs_head
            and quota_request.endorsed_at is None)


@rules.predicate
def belongs_to_a_team(user: Any) -> bool:
    return bool(user_team_roles(user))


@rules.predicate
def is_requester(user: Any, quota_request: QuotaRequest | None) -> bool:
    return quota_request is not None and quota_request.requester_id == user.pk


@rules.predicate
def filed_it_and_team_wants_four_eyes(user: Any, quota_request: QuotaRequest | None) -> bool:
    return (quota_request is not None and quota_request.requester_id == user.pk
            and quota_request.team.requires_second_approver)


can_manage_team = is_platform_admin | is_team_lead
can_request_quota = is_platform_admin | is_team_member
# A head of the team's department decides at either level; a lead only until a lead has passed it on.
can_decide_quota_request = is_platform_admin | (is_team_lead & ~passed_to_the_head) | heads_its_department
# Rejecting one's own request is withdrawing it, so four eyes only stand between the filer and approval.
can_approve_quota_request = can_decide_quota_request & ~filed_it_and_team_wants_four_eyes
# Who approves only the team's level: a lead's approval then passes the request to a head.
passes_quota_request_to_head = is_team_lead & at_the_teams_level & ~is_platform_admin & ~heads_its_department
can_cancel_quota_request = is_platform_admin | is_requester
# "Is a decider": someone quota requests come to (a lead of some team, a department's head, or a platform admin).
receives_quota_requests = is_platform_admin | leads_a_team | heads_a_department

rules.add_perm("tenants.manage_members", can_manage_team)
rules.add_perm("tenants.request_quota", can_request_quota)
rules.add_perm("tenants.decide_quotarequest", can_decide_quota_request)
rules.add_perm("tenants.approve_quotarequest", can_approve_quota_request)
# Asked as a rule, never through user.has_perm: Django grants an active superuser every permission,
# and this one narrows what an approval does rather than allowing something.
rules.add_perm("tenants.pass_quotarequest_to_head", passes_quota_request_to_head)
rules.add_rule("tenants.pass_quotarequest_to_head", passes_quota_request_to_head)
rules.add_perm("tenants.cancel_quotarequest", can_cancel_quota_request)
rules.add_perm("tenants.receive_quotarequests", receives_quota_requests)
rules.add_perm("tenants.manage_flavors", is_platform_admin)
rules.add_perm("tenants.manage_teams", is_platform_admin)
# Statements bill a team's cost center: the people who answer for the bill set it, not the team's leads.
rules.add_perm("tenants.change_cost_center", is_finance | is_platform_admin)
rules.add_perm("tenants.view_all_teams", sees_all_teams)
# A team's own pages: its members and those who see every team (a department's head sees its requests only).
rules.add_perm("tenants.view_team", sees_all_teams | is_team_member)

"""Who may launch, stop and manage what: the workload rules, next to the team rules.

Priority tiers. Members launch at the tiers the template allows (`allowed_priorities`, low and
normal unless it says otherwise); the team's leads and platform admins may launch at any tier.
A template's managers decide what it offers members: a lead for the team's own templates, a
platform admin for global and shared ones. Whatever the tier, it orders work only inside the
team's own queue: the pod PriorityClasses never preempt (tenants/manifests.py), so only Kueue
evicts, by the ClusterQueue's rules.
"""

from __future__ import annotations

from typing import Any

import rules

from jobs.models import MEMBER_PRIORITIES, Priority
from portal.roles import is_platform_admin
from tenants.rules import belongs_to_a_team, is_team_lead, is_team_member

__all__ = ["LOGS_REFUSAL", "MEMBER_PRIORITIES", "allowed_priorities", "priority_refusal"]

LOGS_REFUSAL = ("A workload's logs are for its team and platform admins: finance sees what a workload costs, "
                "not what it prints.")


@rules.predicate
def is_owner(user: Any, workload: Any) -> bool:
    return workload is not None and getattr(workload, "owner_id", None) == user.pk


@rules.predicate
def opened_by_owner(user: Any, workload: Any) -> bool:
    """A kind its owner alone opens (a notebook runs code as its owner)."""
    return workload is not None and workload.kind_facts.opened_by == "owner"


@rules.predicate
def opened_by_team(user: Any, workload: Any) -> bool:
    """A kind its team opens (an inference server serves its team)."""
    return workload is not None and workload.kind_facts.opened_by == "team"


@rules.predicate
def has_token(user: Any, workload: Any) -> bool:
    return workload is not None and workload.kind_facts.has_token


@rules.predicate
def is_active_user(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_active)


@rules.predicate
def leads_template_team(user: Any, template: Any) -> bool:
    return template is not None and template.owner_team_id is not None and is_team_lead(user, template.owner_team)


can_launch = is_platform_admin | is_team_member
can_stop_workload = is_platform_admin | is_owner | is_team_lead
# The same people as stopping today, but a rule of its own so that the two may part.
can_scale_workload = is_platform_admin | is_owner | is_team_lead
can_manage_template = is_platform_admin | leads_template_team
# Through its Ingress: a notebook runs code as its owner, so only the owner; an inference server
# serves its team. Nobody else, admins and finance included: seeing a workload is not using it.
can_open_workload = is_active_user & ((opened_by_owner & is_owner) | (opened_by_team & is_team_member))
can_reveal_notebook_token = is_active_user & has_token & is_owner
# Keys for programs, on a server its team serves: made and revoked by whoever may open it.
can_manage_endpoint_keys = is_active_user & opened_by_team & is_team_member
# What a workload runs and prints (its launch parameters, its logs) is its team's and platform
# admins': finance sees every workload's cost and the facts that make it (team, owner, flavor,
# units, times, phase), not its code or data. Two rules, so that the two may part.
can_read_workload_logs = is_platform_admin | is_team_member
can_read_workload_parameters = is_platform_admin | is_team_member
# Any tier, whatever the template offers members: for the team (the object) its leads, and platform admins.
can_use_any_priority = is_platform_admin | is_team_lead

rules.add_perm("jobs.launch_workload", can_launch)
# Without a team: whether the navigation offers Launch (and Request quota) at all.
rules.add_perm("jobs.open_launch_form", is_platform_admin | belongs_to_a_team)
rules.add_perm("jobs.stop_workload", can_stop_workload)
rules.add_perm("jobs.scale_workload", can_scale_workload)
rules.add_perm("jobs.manage_template", can_manage_template)
rules.add_perm("jobs.open_workload", can_open_workload)
rules.add_perm("jobs.reveal_notebook_token", can_reveal_notebook_token)
rules.add_perm("jobs.manage_endpoint_keys", can_manage_endpoint_keys)
rules.add_perm("jobs.read_workload_logs", can_read_workload_logs)
rules.add_perm("jobs.read_workload_parameters", can_read_workload_parameters)
rules.add_perm("jobs.create_global_template", is_platform_admin)
rules.add_perm("jobs.manage_image_registries", is_platform_admin)
rules.add_perm("jobs.manage_git_sources", is_platform_admin)
# A team's data volumes: whoever may launch for the team may make, grow and delete them.
rules.add_perm("jobs.manage_volumes", can_launch)
# A team's credentials likewise: kept, rotated and deleted by whoever may launch for the team.
rules.add_perm("jobs.manage_credentials", can_launch)


def allowed_priorities(user: Any, team: Any, version: Any) -> list[str]:
    """The tiers `user` may launch at from this template version in `team`, lowest first."""
    if can_use_any_priority(user, team):
        return list(Priority.values)
    return [tier for tier in Priority.values if tier in (version.allowed_priorities or [])]


def priority_refusal(user: Any, team: Any, version: Any, priority: str) -> str:
    """Why `user` may not launch at `priority` from this version in `team`, in a sentence naming
    the tiers they may use; empty when they may."""
    if priority in Priority.values and priority in (version.allowed_priorities or []):
        # A tier the template offers members is open to everyone who may launch at all, so the
        # user's roles (a query for an owner loaded afresh, as a submission does) need not be read.
        return ""
    allowed = allowed_priorities(user, team, version)
    if priority in allowed:
        return ""
    return (f"You may launch {version.template.name} in {team.slug} at {' or '.join(allowed) or 'no'} priority, not "
            f"{priority}. {why_not(priority)}")


def why_not(priority: str) -> str:
    """Why a tier is missing for a member, for the refusal and for the launch form."""
    return (f"{priority.capitalize()} priority is for the team's leads and platform admins, unless the template "
            "offers it to members.")

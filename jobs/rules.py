"""Who may launch, stop and manage what: the workload rules, next to the team rules."""

from __future__ import annotations

from typing import Any

import rules

from portal.roles import is_platform_admin
from tenants.rules import is_team_lead, is_team_member


@rules.predicate
def is_owner(user: Any, workload: Any) -> bool:
    return workload is not None and getattr(workload, "owner_id", None) == user.pk


@rules.predicate
def is_notebook(user: Any, workload: Any) -> bool:
    return workload is not None and workload.kind == "notebook"


@rules.predicate
def is_inference(user: Any, workload: Any) -> bool:
    return workload is not None and workload.kind == "inference"


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
can_open_workload = is_active_user & ((is_notebook & is_owner) | (is_inference & is_team_member))
can_reveal_notebook_token = is_active_user & is_notebook & is_owner

rules.add_perm("jobs.launch_workload", can_launch)
rules.add_perm("jobs.stop_workload", can_stop_workload)
rules.add_perm("jobs.scale_workload", can_scale_workload)
rules.add_perm("jobs.manage_template", can_manage_template)
rules.add_perm("jobs.open_workload", can_open_workload)
rules.add_perm("jobs.reveal_notebook_token", can_reveal_notebook_token)
rules.add_perm("jobs.create_global_template", is_platform_admin)

"""A person's own interactive servers (notebooks: the kinds only their owner opens) and the
dashboard's "My notebook" button, which opens the newest one still up or starts one.

A person may run several at once, each under its own name (as JupyterHub's named servers): each
is a workload like any other, launched from a template of such a kind. The button starts one only
where there is no choice to make (one team to launch for, one such template, one flavor); with a
choice it goes to the launch form with what is known filled in."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.urls import reverse

from jobs import kinds, selectors, services
from jobs.models import Workload, WorkloadTemplate
from portal.errors import DomainError
from portal.models import User
from tenants.models import Team


def interactive_kinds() -> tuple[str, ...]:
    """The kinds a person opens for themselves: a server only its owner reaches."""
    return kinds.names(serves_http=True, opened_by="owner")


def my_notebooks(*, user: User) -> list[Workload]:
    """The person's notebooks still up or on their way, newest first."""
    return list(selectors.workloads_for_user(user=user).filter(
        owner=user, phase__in=Workload.ACTIVE_PHASES, template_version__template__kind__in=interactive_kinds(),
    ).order_by("-pk"))


@dataclass(frozen=True)
class NotebookOutcome:
    workload: Workload | None = None  # the one to open, or the one just started
    started: bool = False
    launch_url: str = ""  # where to choose, when there is a choice to make (or the launch was refused)
    refusal: str = ""  # why the launch was refused, in the service's words


def _launch_url(template: WorkloadTemplate | None, team: Team | None) -> str:
    query = {key: value for key, value in (("template", template.pk if template else ""), ("team", team.slug if team else ""))
             if value}
    return f"{reverse('jobs:workload-launch')}{'?' + urlencode(query) if query else ''}"


def open_or_start(*, user: User) -> NotebookOutcome:
    """The newest notebook of the person's still up, or one started now from the only template
    and team there are, with the template's defaults; otherwise where to choose. A launch the
    service refuses leads to the form, filled in, with the refusal."""
    up = my_notebooks(user=user)
    if up:
        return NotebookOutcome(workload=up[0])
    teams = selectors.launchable_teams(user)
    templates = [template for template in selectors.templates_for_user(user=user) if template.kind in interactive_kinds()]
    team = teams[0] if len(teams) == 1 else None
    template = templates[0] if len(templates) == 1 else None
    if team is None or template is None:
        return NotebookOutcome(launch_url=_launch_url(template, team))
    flavors = list(template.versions.all()[0].flavors.all())
    if len(flavors) != 1:
        return NotebookOutcome(launch_url=_launch_url(template, team))
    try:
        workload = services.workload_launch(user=user, request=services.LaunchRequest(
            team=team, template=template, flavor=flavors[0]))
    except DomainError as refusal:
        return NotebookOutcome(launch_url=_launch_url(template, team), refusal=refusal.message)
    return NotebookOutcome(workload=workload, started=True)

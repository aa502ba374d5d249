"""The team's data volumes page: list, make, grow, delete. Each view parses, calls one service in
jobs.volumes, and answers with the page (or, for htmx, the volumes card); another team's is 404."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET, require_POST

from jobs import team_pages, volumes
from jobs.forms import VolumeCreateForm, VolumeResizeForm
from jobs.models import TeamVolume
from portal.adapters import HtmxHttpRequest, require_perm, signed_in_user
from portal.errors import DomainError
from tenants.models import Team


def _volume(request: HtmxHttpRequest, slug: str, name: str) -> TeamVolume:
    return get_object_or_404(TeamVolume.objects.for_user(request.user).select_related("team"), team__slug=slug, name=name)


def _answer(request: HtmxHttpRequest, team: Team, *, form: VolumeCreateForm | None = None,
            error: str = "", done: str = "", status: int = 200) -> HttpResponse:
    return team_pages.answer(request, page="jobs/team_volumes.html", card="volumes", route="jobs:team-volumes", team=team,
                             context={"storage": volumes.team_storage(team=team), "form": form or VolumeCreateForm(team=team)},
                             form=form, error=error, done=done, status=status)


@login_required
@require_GET
def team_volumes(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    team = team_pages.visible_team(request, slug)
    require_perm(request.user, "jobs.manage_volumes", team,
                 refusal="A team's data volumes are for its members, leads and platform admins.")
    return _answer(request, team, form=VolumeCreateForm(team=team))


@login_required
@require_POST
def volume_create(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    team = team_pages.visible_team(request, slug)
    require_perm(request.user, "jobs.manage_volumes", team)
    form = VolumeCreateForm(request.POST, team=team)
    if not form.is_valid():
        return _answer(request, team, form=form, status=400)
    try:
        volume = volumes.volume_create(actor=signed_in_user(request), team=team, **form.cleaned_data)
    except DomainError as error:
        form.add_error(error.field if error.field in form.fields else None, error.message)
        return _answer(request, team, form=form, status=error.status_code)
    return _answer(request, team, done=f"Made the volume {volume.name} ({volume.size_gib} GiB of {volume.storage_class}).")


@login_required
@require_POST
def volume_resize(request: HtmxHttpRequest, slug: str, name: str) -> HttpResponse:
    volume = _volume(request, slug, name)
    require_perm(request.user, "jobs.manage_volumes", volume.team)
    form = VolumeResizeForm(request.POST)
    if not form.is_valid():
        problems = " ".join(str(e) for e in form.errors.get("size_gib", []))
        return _answer(request, volume.team, error=f"{name}: {problems}", status=400)
    try:
        volumes.volume_resize(actor=signed_in_user(request), volume=volume, size_gib=form.cleaned_data["size_gib"])
    except DomainError as error:
        return _answer(request, volume.team, error=error.message, status=error.status_code)
    return _answer(request, volume.team, done=f"{name} now asks for {volume.size_gib} GiB.")


@login_required
@require_POST
def volume_delete(request: HtmxHttpRequest, slug: str, name: str) -> HttpResponse:
    volume = _volume(request, slug, name)
    require_perm(request.user, "jobs.manage_volumes", volume.team)
    try:
        volumes.volume_delete(actor=signed_in_user(request), volume=volume)
    except DomainError as error:
        return _answer(request, volume.team, error=error.message, status=error.status_code)
    return _answer(request, volume.team, done=f"Deleted the volume {name} and its data.")

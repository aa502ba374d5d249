"""The team's credentials page: list, keep, rotate, delete. Each view parses, calls one service in
jobs.credentials, and answers with the page (or, for htmx, the credentials card); another team's
is 404. A value typed in is never put back into a page, not even beside a refusal."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET, require_POST

from jobs import credentials, team_pages
from jobs.forms import CredentialCreateForm, CredentialValuesForm
from jobs.models import TeamCredential
from portal.adapters import HtmxHttpRequest, require_perm, signed_in_user
from portal.errors import DomainError
from tenants.models import Team


def _credential(request: HtmxHttpRequest, slug: str, name: str) -> TeamCredential:
    return get_object_or_404(TeamCredential.objects.for_user(request.user).select_related("team"), team__slug=slug, name=name)


def _answer(request: HtmxHttpRequest, team: Team, *, form: CredentialCreateForm | None = None,
            error: str = "", done: str = "", status: int = 200) -> HttpResponse:
    # Each row's Rotate form has inputs of its own ids, for the row's kind only.
    rows = [(row, CredentialValuesForm(auto_id=f"id_{row.credential.name}_%s").inputs(row.credential.kind))
            for row in credentials.team_credentials(team=team)]
    return team_pages.answer(request, page="jobs/team_credentials.html", card="credentials", route="jobs:team-credentials",
                             team=team, context={"rows": rows, "form": form or CredentialCreateForm()},
                             form=form, error=error, done=done, status=status)


@login_required
@require_GET
def team_credentials(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    team = team_pages.visible_team(request, slug)
    require_perm(request.user, "jobs.manage_credentials", team,
                 refusal="A team's credentials are for its members, leads and platform admins.")
    return _answer(request, team, form=CredentialCreateForm())


@login_required
@require_POST
def credential_create(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    team = team_pages.visible_team(request, slug)
    require_perm(request.user, "jobs.manage_credentials", team)
    form = CredentialCreateForm(request.POST)
    if not form.is_valid():
        return _answer(request, team, form=form, status=400)
    try:
        credential = credentials.credential_create(actor=signed_in_user(request), team=team, name=form.cleaned_data["name"],
                                                   kind=form.cleaned_data["kind"], values=form.values())
    except DomainError as error:
        form.add_error(error.field if error.field in form.fields else None, error.message)
        return _answer(request, team, form=form, status=error.status_code)
    return _answer(request, team, done=f"Kept the {credential.get_kind_display()} {credential.name} ({credential.hint}). "
                                       "Its values are not shown again.")


@login_required
@require_POST
def credential_rotate(request: HtmxHttpRequest, slug: str, name: str) -> HttpResponse:
    credential = _credential(request, slug, name)
    require_perm(request.user, "jobs.manage_credentials", credential.team)
    form = CredentialValuesForm(request.POST)
    form.is_valid()  # every field is optional text: the service checks what the kind needs
    try:
        credentials.credential_rotate(actor=signed_in_user(request), credential=credential, values=form.values())
    except DomainError as error:
        return _answer(request, credential.team, error=f"{name}: {error.message}", status=error.status_code)
    return _answer(request, credential.team, done=f"Rotated {name} ({credential.hint}): workloads that mount it get the "
                                                  "new values (as files within a minute, as variables at their next start).")


@login_required
@require_POST
def credential_delete(request: HtmxHttpRequest, slug: str, name: str) -> HttpResponse:
    credential = _credential(request, slug, name)
    require_perm(request.user, "jobs.manage_credentials", credential.team)
    try:
        credentials.credential_delete(actor=signed_in_user(request), credential=credential)
    except DomainError as error:
        return _answer(request, credential.team, error=error.message, status=error.status_code)
    return _answer(request, credential.team, done=f"Deleted the credential {name}.")

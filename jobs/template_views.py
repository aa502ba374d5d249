"""The template editor: platform admins write the portal's own templates (for every team or the
teams they choose) and any team's; a lead writes their team's. Saving publishes a new version
through jobs.services.template_publish, after the cluster admitted what a launch would create
in a dry run; "Preview" shows those objects and the cluster's answer without saving.

A template is looked up among those the user can see (another team's is 404), then the rules
decide whether they may edit it (a member, finance: 403).
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from jobs import selectors, services
from jobs.models import WorkloadTemplate
from jobs.template_forms import TemplateEditorForm, authorable_teams
from portal.adapters import HtmxHttpRequest, require_perm, signed_in_user
from portal.errors import DomainError
from portal.htmx import redirect_page


def _may_author(request: HtmxHttpRequest) -> bool:
    return bool(request.user.has_perm("jobs.create_global_template") or authorable_teams(request.user).exists())


def _editor(request: HtmxHttpRequest, form: TemplateEditorForm, *, template: WorkloadTemplate | None,
            preview: services.TemplatePreview | None = None, error: str | None = None, status: int = 200) -> HttpResponse:
    context: dict[str, Any] = {"form": form, "template": template, "preview": preview, "error": error,
                               "manifests": json.dumps(preview.objects, indent=2) if preview and preview.objects else ""}
    if request.htmx and request.POST.get("action") == "preview":
        # htmx swaps only successful answers: the fragment carries its refusal itself.
        return render(request, "jobs/template_form.html#template-preview", {**context, "fragment": True})
    return render(request, "jobs/template_form.html", context, status=status)


def _handle(request: HtmxHttpRequest, template: WorkloadTemplate | None) -> HttpResponse:
    form = TemplateEditorForm(request.POST or None, user=request.user, template=template)
    if request.method == "GET":
        return _editor(request, form, template=template)
    if not form.is_valid():
        return _editor(request, form, template=template, status=400,
                       error="Not saved: " + " ".join(str(e) for errors in form.errors.values() for e in errors))
    data = form.cleaned_data
    user = signed_in_user(request)
    owner_team = template.owner_team if template else data["owner_team"]
    try:
        fields = form.version_fields()
        if request.POST.get("action") == "preview":
            preview = services.template_preview(user=user, kind=template.kind if template else data["kind"], fields=fields,
                                                flavors=list(data["flavors"]), team=data["check_in"], template=template,
                                                owner_team=owner_team)
            return _editor(request, form, template=template, preview=preview)
        saved, preview = services.template_publish(
            user=user, template=template, check_in=data["check_in"], flavors=list(data["flavors"]), fields=fields,
            kind=data["kind"], slug=data["slug"].strip(), name=data["name"].strip(), description=data["description"].strip(),
            owner_team=owner_team, is_global=data["is_global"], teams=list(data["teams"]))
    except services.DryRunRefused as refused:
        return _editor(request, form, template=template, preview=refused.preview, error=refused.message, status=400)
    except DomainError as error:
        if error.field in form.fields:
            form.add_error(error.field, error.message)
        return _editor(request, form, template=template, error=f"Not saved: {error.message}", status=400)
    checked = f", checked in {preview.team.slug}'s namespace" if preview.team else ", not checked in any namespace"
    messages.success(request, f"Published {saved.name} v{saved.current.number}{checked}.")
    return redirect_page(request, reverse("jobs:template-list"))


@login_required
@require_http_methods(["GET", "POST"])
def template_create(request: HtmxHttpRequest) -> HttpResponse:
    if not _may_author(request):
        raise PermissionDenied
    return _handle(request, None)


@login_required
@require_http_methods(["GET", "POST"])
def template_edit(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    template = get_object_or_404(selectors.templates_with_current_version(user=request.user), pk=pk)
    require_perm(request.user, "jobs.manage_template", template)
    return _handle(request, template)

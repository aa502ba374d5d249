"""The platform admin's page for the idle policy: the default every template version without its
own takes, and the bounds template owners choose within. Kept in the portal so that an admin who
signs in through single sign-on (never staff) needs no Django admin, as tenants/platform_views.py
does for teams and the catalog.

A thin adapter: the form parses, jobs.reclaim.idle_defaults_set decides (who may, each default
within its bounds), saves and audits, the same service the Django admin calls.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from jobs import idle_policy, reclaim
from jobs.forms import IdleDefaultsForm
from jobs.models import IdleDefaults
from portal.adapters import HtmxHttpRequest, add_refusal, require_perm, signed_in_user
from portal.errors import DomainError
from portal.htmx import redirect_page


@login_required
@require_http_methods(["GET", "POST"])
def idle_defaults_edit(request: HtmxHttpRequest) -> HttpResponse:
    require_perm(request.user, "tenants.manage_teams")
    defaults = IdleDefaults.current()
    form = IdleDefaultsForm.for_defaults(defaults, request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            saved = reclaim.idle_defaults_set(user=signed_in_user(request), **form.cleaned_data)
        except DomainError as error:
            add_refusal(form, error)
        else:
            messages.success(request, f"Saved the platform's idle policy: {idle_policy.platform_default(saved).describe()}.")
            return redirect_page(request, reverse("jobs:idle-defaults"))
    status = 400 if request.method == "POST" else 200
    context = {"form": form, "defaults": defaults,
               "policy": idle_policy.platform_default(defaults)}
    return render(request, "jobs/idle_defaults.html", context, status=status)

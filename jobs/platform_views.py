"""The platform admin's pages of jobs: the idle policy (the default every template version without
its own takes, and the bounds template owners choose within), and draining a GPU node of the
portal's workloads. Kept in the portal so that an admin who signs in through single sign-on (never
staff) needs no Django admin, as tenants/platform_views.py does for teams and the catalog.

A thin adapter: the form parses, jobs.reclaim.idle_defaults_set decides (who may, each default
within its bounds), saves and audits, the same service the Django admin calls.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from jobs import idle_policy, reclaim, services
from jobs.forms import IdleDefaultsForm
from jobs.models import IdleDefaults
from portal.adapters import HtmxHttpRequest, add_refusal, require_perm, signed_in_user
from portal.errors import DomainError
from portal.htmx import redirect_page
from portal.kube import KubeError
from tenants.models import GpuNode


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


@login_required
@require_POST
def node_drain(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """Cordons the node and stops the portal's workloads on it; the node's page listed them first."""
    require_perm(request.user, "tenants.manage_flavors")
    node = get_object_or_404(GpuNode, name=name)
    try:
        stopped = services.node_drain(actor=signed_in_user(request), node=node)
    except KubeError as error:
        messages.error(request, f"The cluster did not answer, so {node.name} was not drained: {error}")
    else:
        names = ", ".join(workload.name for workload in stopped)
        messages.success(request, f"Cordoned {node.name} and stopped {len(stopped)} workload{'s' if len(stopped) != 1 else ''}"
                                  f"{': ' + names if names else ''}.")
    return redirect_page(request, reverse("tenants:node-detail", args=[node.name]))

"""The platform admin's pages for teams and the GPU catalog, so that running the platform needs
no Django admin (an admin who signs in through single sign-on need not be staff).

Thin adapters, as tenants/views.py: a form parses, one service decides, audits and queues the
cluster work (the same services the API and the Django admin call). Who may is asked of the
rules before a form is even shown; a team is looked up among the teams the user can see, so
another team's is 404.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from portal.adapters import HtmxHttpRequest, add_refusal, require_perm, signed_in_user
from portal.errors import DomainError, StateConflict
from portal.health import NODE_CHECK, heartbeat_at
from portal.htmx import redirect_page
from portal.kube import KubeError
from tenants import catalog, cluster_selectors, desired, nodes, selectors, services, telemetry_selectors
from tenants.forms import DepartmentForm, FlavorForm, TeamForm
from tenants.models import Department, Flavor, GpuNode, Team

# --- Teams ---------------------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def team_create(request: HtmxHttpRequest) -> HttpResponse:
    require_perm(request.user, "tenants.manage_teams")
    form = TeamForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            team = services.team_create(actor=signed_in_user(request), slug=data["slug"], name=data["name"],
                                        cost_center=data["cost_center"], description=data["description"],
                                        **{name: data[name] for name in services.POLICY_FIELDS})
        except DomainError as error:
            add_refusal(form, error)
        else:
            messages.success(request, f"Created team {team.slug}; its namespace and queue are being applied.")
            return redirect_page(request, reverse("tenants:team-detail", args=[team.slug]))
    status = 400 if request.method == "POST" else 200
    return render(request, "tenants/team_form.html", {"form": form, "team": None}, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def team_edit(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    require_perm(request.user, "tenants.manage_teams")
    form = TeamForm(request.POST or None, instance=Team.objects.get(pk=team.pk))
    if request.method == "POST" and form.is_valid():
        try:
            services.team_update(actor=signed_in_user(request), team=team, **form.changes())
        except DomainError as error:
            add_refusal(form, error)
        else:
            messages.success(request, f"Saved team {team.slug}.")
            return redirect_page(request, reverse("tenants:team-detail", args=[team.slug]))
    status = 400 if request.method == "POST" else 200
    return render(request, "tenants/team_form.html", {"form": form, "team": team}, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def team_delete(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """GET shows what goes and what stays; POST, with the team's slug typed again, deletes."""
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    require_perm(request.user, "tenants.manage_teams")
    error = None
    if request.method == "POST":
        if request.POST.get("confirm", "").strip() != team.slug:
            error = f"Type {team.slug}, the team's slug, to confirm: nothing was deleted."
        else:
            services.team_delete(actor=signed_in_user(request), team=team)
            messages.success(request, f"Deleted team {slug}; its namespace and workloads are being removed from the cluster.")
            return redirect_page(request, reverse("tenants:team-list"))
    picture = desired.team_deletion_picture(team=team)
    return render(request, "tenants/team_delete.html", {"team": team, "picture": picture, "error": error},
                  status=400 if error else 200)


# --- Departments ---------------------------------------------------------------------------------


def _departments_page(request: HtmxHttpRequest, form: DepartmentForm, *, department: Department | None,
                      status: int = 200) -> HttpResponse:
    refusal = services.departments_refused()
    rows = selectors.department_rows() if department is None else []
    return render(request, "tenants/departments.html",
                  {"form": form, "department": department, "rows": rows, "refusal": refusal}, status=status)


def _department_form(request: HtmxHttpRequest, department: Department | None) -> HttpResponse:
    """The form of a new department (None) or of one to change: saved through the service, or
    shown again with the refusal on its field."""
    form = DepartmentForm(request.POST or None, instance=department)
    if request.method == "POST" and form.is_valid():
        try:
            saved = services.department_save(actor=signed_in_user(request), department=form.instance,
                                             heads=form.cleaned_data["heads"], pool=form.pool())
        except DomainError as error:
            add_refusal(form, error)
        else:
            messages.success(request, f"Saved department {saved.name}." if department else
                             f"Created department {saved.name}; put teams in it from their edit pages.")
            return redirect_page(request, reverse("tenants:department-list"))
    stored = Department.objects.get(pk=department.pk) if department else None  # not what the form just typed
    return _departments_page(request, form, department=stored, status=400 if request.method == "POST" else 200)


@login_required
@require_http_methods(["GET", "POST"])
def department_list(request: HtmxHttpRequest) -> HttpResponse:
    """The departments with their teams and guarantees, and a form for a new one."""
    require_perm(request.user, "tenants.manage_teams")
    return _department_form(request, None)


@login_required
@require_http_methods(["GET", "POST"])
def department_edit(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    require_perm(request.user, "tenants.manage_teams")
    return _department_form(request, get_object_or_404(Department, slug=slug))


@login_required
@require_POST
def department_delete(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    require_perm(request.user, "tenants.manage_teams")
    department = get_object_or_404(Department, slug=slug)
    try:
        services.department_delete(actor=signed_in_user(request), department=department)
    except StateConflict as refusal:
        messages.error(request, refusal.message)
        return redirect_page(request, reverse("tenants:department-edit", args=[slug]))
    messages.success(request, f"Deleted department {department.name}.")
    return redirect_page(request, reverse("tenants:department-list"))


# --- The GPU catalog -----------------------------------------------------------------------------


@login_required
@require_GET
def flavor_list(request: HtmxHttpRequest) -> HttpResponse:
    require_perm(request.user, "tenants.manage_flavors")
    guaranteed = selectors.flavor_guaranteed_totals()
    flavors = list(Flavor.objects.order_by("-is_active", "name"))
    priced = selectors.PRICED_FLAVORS.call([flavor.pk for flavor in flavors])
    runtime = cluster_selectors.runtime_class_flags(flavors=flavors)
    rows = [(flavor, guaranteed.get(flavor.pk, 0), flavor.pk in priced, runtime.get(flavor.pk, "")) for flavor in flavors]
    return render(request, "tenants/flavor_list.html", {"rows": rows, "presets": catalog.PRESETS})


NODES_PAGE_SIZE = 50  # a page of 500 GPU nodes shows its pools' summary and 50 of them at a time


@login_required
@require_http_methods(["GET", "POST"])
def node_list(request: HtmxHttpRequest) -> HttpResponse:
    """The nodes behind the catalog, as the last node check kept them; "Check now" runs one."""
    require_perm(request.user, "tenants.manage_flavors")
    if request.method == "POST":
        try:
            nodes.check_flavors()
        except KubeError as error:
            messages.error(request, f"The cluster did not answer, so the nodes were not checked: {error}")
        else:
            messages.success(request, "Checked the nodes against the catalog just now.")
        return redirect_page(request, reverse("tenants:node-list"))
    picture = nodes.nodes_picture()
    flavor, attention = request.GET.get("flavor", ""), request.GET.get("attention") == "1"
    listed = Paginator(picture.listed(flavor=flavor, attention=attention), NODES_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "tenants/nodes.html", {"picture": picture, "listed": listed, "flavor": flavor,
                                                  "attention": attention})


@login_required
@require_GET
def node_detail(request: HtmxHttpRequest, name: str) -> HttpResponse:
    """One node: its GPUs, state, labels and taints, and the portal's workloads a drain would stop."""
    require_perm(request.user, "tenants.manage_flavors")
    row = nodes.node_row(name)
    if row is None:
        raise Http404("No GPU node of that name in the last node check.")
    return render(request, "tenants/node_detail.html", {
        "row": row, "checked_at": heartbeat_at(NODE_CHECK), "xids": nodes.XIDS_ON_NODE.call(name),
        "telemetry": telemetry_selectors.node_telemetry(node=name)})


@login_required
@require_POST
def node_cordon(request: HtmxHttpRequest, name: str) -> HttpResponse:
    require_perm(request.user, "tenants.manage_flavors")
    node = get_object_or_404(GpuNode, name=name)
    cordoned = request.POST.get("cordoned") != "0"
    try:
        services.node_cordon(actor=signed_in_user(request), node=node, cordoned=cordoned)
    except KubeError as error:
        messages.error(request, f"The cluster did not answer, so {node.name} was not changed: {error}")
    else:
        messages.success(request, f"{'Cordoned' if cordoned else 'Made schedulable again'}: {node.name}.")
    return redirect_page(request, reverse("tenants:node-detail", args=[node.name]))


def _flavor_page(request: HtmxHttpRequest, form: FlavorForm, *, flavor: Flavor | None,
                 preset: catalog.FlavorPreset | None = None, status: int = 200) -> HttpResponse:
    modes = [(label, catalog.ISOLATION[mode], catalog.ATTRIBUTION[mode]) for mode, label in Flavor.SharingMode.choices]
    context = {"form": form, "flavor": flavor, "presets": catalog.PRESETS, "preset": preset, "modes": modes,
               "guaranteed": selectors.flavor_guaranteed_totals().get(flavor.pk, 0) if flavor else 0,
               "runtime_problem": cluster_selectors.runtime_class_flags(flavors=[flavor]).get(flavor.pk) if flavor else "",
               "plugin_config": nodes.device_plugin_config(flavor) if flavor else None}
    return render(request, "tenants/flavor_form.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def flavor_create(request: HtmxHttpRequest) -> HttpResponse:
    """?preset=<key> fills the form from one of the catalog's presets; the admin reviews and saves."""
    require_perm(request.user, "tenants.manage_flavors")
    if request.method == "GET":
        preset = catalog.PRESETS_BY_KEY.get(request.GET.get("preset", ""))
        return _flavor_page(request, FlavorForm(initial=preset.form_initial() if preset else None), flavor=None,
                            preset=preset)
    form = FlavorForm(request.POST)
    if form.is_valid():
        try:
            flavor = services.flavor_save(actor=signed_in_user(request), flavor=form.instance)
        except DomainError as error:
            add_refusal(form, error)
        else:
            messages.success(request, f"Added flavor {flavor.name}: {flavor.capacity_units} × {flavor.resource_name}.")
            return redirect_page(request, reverse("tenants:flavor-list"))
    return _flavor_page(request, form, flavor=None, status=400)


@login_required
@require_http_methods(["GET", "POST"])
def flavor_edit(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    require_perm(request.user, "tenants.manage_flavors")
    flavor = get_object_or_404(Flavor, slug=slug)
    form = FlavorForm(request.POST or None, instance=flavor)
    if request.method == "POST" and form.is_valid():
        try:
            services.flavor_save(actor=signed_in_user(request), flavor=form.instance)
        except DomainError as error:
            add_refusal(form, error)
        else:
            messages.success(request, f"Saved flavor {flavor.name}.")
            return redirect_page(request, reverse("tenants:flavor-list"))
    status = 400 if request.method == "POST" else 200
    return _flavor_page(request, form, flavor=Flavor.objects.get(pk=flavor.pk), status=status)

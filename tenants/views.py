"""The team and quota pages. Each view parses, calls one service or selector, and renders.

Objects are always looked up through `for_user` querysets, so another team's object is 404.
For htmx requests a view answers with just the fragment it changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from portal.adapters import HtmxHttpRequest, add_refusal, page, require_perm, whole_number
from portal.errors import DomainError
from portal.notifications import notifications_mark_read_about
from portal.roles import is_finance, is_platform_admin
from tenants import cluster_selectors, selectors, services, telemetry_selectors
from tenants.filters import AuditEventFilter, QuotaRequestFilter
from tenants.forms import DecisionForm, MembershipAddForm, MembershipRoleForm, QuotaRequestForm
from tenants.models import Flavor, QuotaRequest, Team, user_team_roles


def _visible_team(request: HtmxHttpRequest, slug: str) -> Team:
    return get_object_or_404(Team.objects.for_user(request.user), slug=slug)


def _visible_request(request: HtmxHttpRequest, pk: int) -> QuotaRequest:
    return get_object_or_404(selectors.quota_requests_for_user(user=request.user), pk=pk)


def _safe_next(request: HtmxHttpRequest) -> str | None:
    """A path on this site to go back to, or None. Only an absolute path is taken: redirect()
    reads anything else ("0", "approvals") as a URL name, and a name it cannot reverse is a 500
    after the decision was already saved."""
    target = request.POST.get("next") or ""
    local = target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if local else None


# --- Dashboard and teams ----------------------------------------------------------------------


@dataclass(frozen=True)
class FlavorStanding:
    """A flavor's capacity as the dashboard shows it: all teams' guarantee and the user's teams' share."""

    capacity: selectors.FlavorCapacity
    mine: int
    by_team: list[tuple[Team, int]]

    @property
    def mine_percent(self) -> int:
        total = self.capacity.capacity
        return min(round(100 * self.mine / total), 100) if total and self.mine > 0 else 0


@login_required
@require_GET
def landing(request: HtmxHttpRequest) -> HttpResponse:
    """Where sign-in leads when no page was asked for (LOGIN_REDIRECT_URL): someone whose only
    role is finance starts on the finance overview, the page of their work; everyone else on
    the dashboard, which finance can still open from the navigation."""
    user = request.user
    if is_finance(user) and not is_platform_admin(user) and not user_team_roles(user):
        return redirect("billing:finance-overview")
    return redirect("tenants:dashboard")


@login_required
@require_GET
def dashboard(request: HtmxHttpRequest) -> HttpResponse:
    user = request.user
    roles = user_team_roles(user)
    # The selector's Count annotations drop Meta.ordering, so the order is stated here.
    my_teams = list(selectors.teams_for_user(user=user).filter(pk__in=list(roles)).order_by("name"))
    teams_by_id = {team.pk: team for team in my_teams}
    held = selectors.guarantees_by_flavor(team_ids=list(teams_by_id))
    standings = []
    for capacity in selectors.flavor_capacities():
        by_team = [(teams_by_id[team_id], units) for (team_id, flavor_id), units in held.items()
                   if flavor_id == capacity.flavor.pk and units]
        standings.append(FlavorStanding(capacity=capacity, mine=sum(units for _, units in by_team), by_team=by_team))
    context = {
        "my_teams": [(team, roles[team.pk]) for team in my_teams],
        "standings": standings,
        "my_pending": list(
            selectors.quota_requests_for_user(user=user, status=QuotaRequest.Status.PENDING).filter(requester=user)[:10]
        ),
        "inbox_count": selectors.approvals_inbox(user=user).count() if user.has_perm("tenants.receive_quotarequests") else None,
    }
    return render(request, "tenants/dashboard.html", context)


@login_required
@require_GET
def team_list(request: HtmxHttpRequest) -> HttpResponse:
    teams = page(selectors.teams_for_user(user=request.user).order_by("name", "pk"), request.GET.get("page"))
    roles = user_team_roles(request.user)
    context = {"teams": teams, "rows": [(team, roles.get(team.pk)) for team in teams]}
    template = "tenants/team_list.html#team-rows" if request.htmx else "tenants/team_list.html"
    return render(request, template, context)


def _team_context(
    request: HtmxHttpRequest, team: Team, *, requests_page: str | None = None, audit_page: str | None = None
) -> dict[str, Any]:
    return {
        "team": team,
        "members": selectors.team_members(team=team),
        "member_form": MembershipAddForm(),
        "person_cap": selectors.person_gpu_cap(team=team),
        "capacities": selectors.flavor_capacities(team=team),
        **_grants_context(team),
        **_team_requests_context(request, team, requests_page),
        **_team_audit_context(request, team, audit_page),
    }


def _grants_context(team: Team) -> dict[str, Any]:
    grants = selectors.team_grants(team=team)
    return {"grant_lines": grants.lines, "reserved_grants": grants.reserved}


def _team_requests_context(request: HtmxHttpRequest, team: Team, number: str | None) -> dict[str, Any]:
    return {
        "requests": page(selectors.quota_requests_for_user(user=request.user, team=team), number),
        "rows_url": reverse("tenants:team-requests", args=[team.slug]),
        "hide_team": True,
    }


def _team_audit_context(request: HtmxHttpRequest, team: Team, number: str | None) -> dict[str, Any]:
    return {
        "events": page(selectors.audit_events_for_user(user=request.user, team=team), number),
        "events_url": reverse("tenants:team-audit", args=[team.slug]),
    }


@login_required
@require_GET
def team_detail(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    team = _visible_team(request, slug)
    return render(request, "tenants/team_detail.html", _team_context(request, team))


@login_required
@require_GET
def team_requests(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    team = _visible_team(request, slug)
    number = request.GET.get("page")
    if request.htmx:
        return render(request, "tenants/quota_request_list.html#request-rows",
                      {"team": team, **_team_requests_context(request, team, number)})
    return render(request, "tenants/team_detail.html", _team_context(request, team, requests_page=number))


@login_required
@require_GET
def team_audit(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    team = _visible_team(request, slug)
    number = request.GET.get("page")
    if request.htmx:
        return render(request, "tenants/audit.html#audit-rows", _team_audit_context(request, team, number))
    return render(request, "tenants/team_detail.html", _team_context(request, team, audit_page=number))


@login_required
@require_GET
def team_cluster(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """The team's live cluster picture; the team page loads it after it renders."""
    team = _visible_team(request, slug)
    picture = cluster_selectors.team_cluster_picture(team=team)
    if request.htmx:
        return render(request, "tenants/team_detail.html#cluster-state", {"team": team, "picture": picture})
    return render(request, "tenants/team_detail.html", {**_team_context(request, team), "picture": picture})


@login_required
@require_GET
def cluster_capacity(request: HtmxHttpRequest) -> HttpResponse:
    require_perm(request.user, "tenants.manage_flavors")
    flavors, unreachable = cluster_selectors.cluster_capacity_picture()
    return render(request, "tenants/capacity.html", {"flavors": flavors, "unreachable": unreachable,
                                                     "telemetry": telemetry_selectors.cluster_telemetry()})


@login_required
@require_GET
def capacity_calendar(request: HtmxHttpRequest) -> HttpResponse:
    """Each GPU flavor's promises over the coming twelve months: what teams hold and have reserved."""
    require_perm(request.user, "tenants.manage_flavors")
    months, rows = selectors.capacity_calendar()
    return render(request, "tenants/capacity_calendar.html", {"months": months, "rows": rows})


def _members_response(request: HtmxHttpRequest, team: Team, *, form: MembershipAddForm | None = None,
                      error: str | None = None, done: str | None = None, typed: dict[str, str] | None = None) -> HttpResponse:
    if request.htmx:
        context = {"team": team, "members": selectors.team_members(team=team), "member_form": form or MembershipAddForm(),
                   "member_error": error, "member_done": done, "cap_typed": typed,
                   "person_cap": selectors.person_gpu_cap(team=team)}
        return render(request, "tenants/team_detail.html#members", context)
    if error:
        messages.error(request, error)
    if done:
        messages.success(request, done)
    return redirect("tenants:team-detail", team.slug)


@login_required
@require_POST
def team_person_limit(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """A lead's per-person GPU limit, from the members card; tenants.services.team_update reads and audits it."""
    team = _visible_team(request, slug)
    require_perm(request.user, "tenants.manage_members", team)
    typed = {field: request.POST.get(field, "") for field in services.PERSON_CAP_FIELDS}
    try:
        team = services.team_update(actor=request.user, team=team, **typed)
    except DomainError as error:
        return _members_response(request, team, error=error.message, typed=typed)
    cap = selectors.person_gpu_cap(team=team)
    done = (f"Each person of {team.slug} may now hold at most {cap.words} at once." if cap is not None
            else f"{team.slug} has no per-person GPU limit now.")
    return _members_response(request, team, done=done)


@login_required
@require_POST
def membership_add(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    team = _visible_team(request, slug)
    require_perm(request.user, "tenants.manage_members", team)
    form = MembershipAddForm(request.POST)
    if not form.is_valid():
        return _members_response(request, team, form=form, error=None if request.htmx else _form_error_text(form))
    try:
        membership = services.membership_add_by_username(actor=request.user, team=team, username=form.cleaned_data["username"],
                                                         role=form.cleaned_data["role"])
    except DomainError as error:
        form.add_error("username" if error.field in ("user", "username") else None, error.message)
        return _members_response(request, team, form=form, error=None if request.htmx else error.message)
    done = f"Added {membership.user.username} to {team.slug} as {membership.get_role_display().lower()}."
    return _members_response(request, team, done=done)


@login_required
@require_POST
def membership_role(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    team = _visible_team(request, slug)
    membership = get_object_or_404(team.memberships.select_related("user", "team"), pk=pk)
    require_perm(request.user, "tenants.manage_members", team)
    form = MembershipRoleForm(request.POST)
    if not form.is_valid():
        return _members_response(request, team, error=_form_error_text(form))
    try:
        changed = services.membership_set_role(actor=request.user, membership=membership, role=form.cleaned_data["role"])
    except DomainError as error:
        return _members_response(request, team, error=error.message)
    return _members_response(request, team, done=f"{membership.user.username} is now {changed.get_role_display().lower()}.")


@login_required
@require_POST
def membership_remove(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    team = _visible_team(request, slug)
    membership = get_object_or_404(team.memberships.select_related("user", "team"), pk=pk)
    require_perm(request.user, "tenants.manage_members", team)
    try:
        services.membership_remove(actor=request.user, membership=membership)
    except DomainError as error:
        return _members_response(request, team, error=error.message)
    return _members_response(request, team, done=f"Removed {membership.user.username} from {team.slug}.")


def _form_error_text(form: Any) -> str:
    return " ".join(str(message) for messages_ in form.errors.values() for message in messages_)


# --- Quota requests ---------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def quota_request_create(request: HtmxHttpRequest) -> HttpResponse:
    renew = whole_number(request.GET.get("renew"))  # isdigit() took "²", which int() refuses
    renewal_of = _visible_request(request, renew) if renew is not None and request.method == "GET" else None
    form = QuotaRequestForm(request.POST if request.method == "POST" else None, user=request.user,
                            initial_team=request.GET.get("team"), renewal_of=renewal_of)
    if request.method == "POST" and form.is_valid():
        try:
            quota_request = services.quota_request_create(
                requester=request.user,
                team=form.cleaned_data["team"],
                lines=form.cleaned_data["lines"],
                justification=form.cleaned_data["justification"],
                ends_on=form.cleaned_data.get("ends_on"),
                renews=form.cleaned_data.get("renews"),
                starts_on=form.cleaned_data.get("starts_on"),
            )
        except DomainError as error:
            add_refusal(form, error)
        else:
            summary = services.describe_lines(form.cleaned_data["lines"])
            messages.success(request, f"Request #{quota_request.pk} filed: {summary} for {quota_request.team.slug}. "
                                      "The team's leads have been told.")
            return redirect("tenants:team-detail", quota_request.team.slug)
    return render(request, "tenants/quota_request_form.html", {"form": form})


@login_required
@require_GET
def quota_preview(request: HtmxHttpRequest) -> HttpResponse:
    """Where one line of the request form stands, as the user types it."""
    context: dict[str, Any] = {"preview": None, "message": None}
    slug, flavor_slug, raw_units = (request.GET.get(key, "").strip() for key in ("team", "flavor", "units"))
    if not slug:
        context["message"] = "Choose a team to see where this flavor stands."
    elif not flavor_slug:
        _visible_team(request, slug)
        context["message"] = "Choose a flavor to see how much of it is free."
    else:
        team = _visible_team(request, slug)
        flavor = get_object_or_404(Flavor.objects.filter(is_active=True), slug=flavor_slug)
        try:
            units = services.parse_units(raw_units, flavor=flavor) if raw_units not in ("", "-", "+") else 0
        except DomainError as error:
            context["message"], context["bad"] = error.message, True
        else:
            context.update(preview=selectors.quota_preview(team=team, flavor=flavor, units=units), team=team)
    return render(request, "tenants/quota_request_form.html#quota-preview", context)


@login_required
@require_GET
def quota_request_list(request: HtmxHttpRequest) -> HttpResponse:
    filters = QuotaRequestFilter(request.GET, queryset=selectors.quota_requests_for_user(user=request.user), request=request)
    requests = filters.qs  # a value the filter does not understand (a stale link) is left out, not refused
    chosen = filters.form.cleaned_data
    context = {"requests": page(requests, request.GET.get("page")), "status": chosen.get("status") or "",
               "mine": bool(chosen.get("mine")), "statuses": QuotaRequest.Status.choices}
    template = "tenants/quota_request_list.html#request-rows" if request.htmx else "tenants/quota_request_list.html"
    return render(request, template, context)


@login_required
@require_GET
def quota_request_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    quota_request = _visible_request(request, pk)
    notifications_mark_read_about(user=request.user, url=request.path)
    return render(request, "tenants/quota_request_detail.html",
                  {"qr": quota_request, "grants": quota_request.grants.select_related("flavor")})


@login_required
@require_GET
def approvals(request: HtmxHttpRequest) -> HttpResponse:
    inbox = page(selectors.approvals_inbox(user=request.user), request.GET.get("page"))
    fits = cluster_selectors.approval_fits(requests=inbox.object_list)
    context = {"inbox": inbox, "rows": [(qr, fits[qr.pk]) for qr in inbox],
               "is_decider": request.user.has_perm("tenants.receive_quotarequests")}
    template = "tenants/approvals.html#approval-rows" if request.htmx else "tenants/approvals.html"
    return render(request, template, context)


def _decide(request: HtmxHttpRequest, pk: int, act: Callable[[QuotaRequest, str], QuotaRequest], done: str) -> HttpResponse:
    """Approve, reject or cancel: for htmx the inbox row in its new state, otherwise a redirect.

    A refusal (over capacity, someone else decided first) is shown in the row, whose buttons stay.
    """
    quota_request = _visible_request(request, pk)
    form = DecisionForm(request.POST)
    note = form.cleaned_data["note"] if form.is_valid() else ""
    error = None
    try:
        act(quota_request, note)
    except DomainError as refusal:
        error = refusal.message
    quota_request = _visible_request(request, pk)
    if request.htmx:
        line_fits = None
        if error:  # the row keeps its fields, with what was typed in them
            line_fits = [replace(fit, typed=request.POST.get(f"units-{fit.flavor.pk}", ""))
                         for fit in cluster_selectors.approval_fits(requests=[quota_request])[quota_request.pk]]
        return render(request, "tenants/approvals.html#approval-row",
                      {"qr": quota_request, "line_fits": line_fits, "error": error, "note": note if error else ""})
    if error:
        messages.error(request, error)
    else:
        messages.success(request, f"Request #{quota_request.pk} {done}.")
    return HttpResponseRedirect(_safe_next(request) or reverse("tenants:quota-request-detail", args=[quota_request.pk]))


@login_required
@require_POST
def quota_request_approve(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return _decide(
        request, pk,
        lambda qr, note: services.quota_request_approve(quota_request=qr, approver=request.user, note=note,
                                                        units=_units_to_grant(request, qr)),
        "approved",
    )


def _units_to_grant(request: HtmxHttpRequest, quota_request: QuotaRequest) -> dict[int, int] | None:
    """The inbox's "Grant" fields (`units-<flavor id>`): fewer units than asked on some lines."""
    units = {}
    for line in quota_request.lines.select_related("flavor"):
        raw = request.POST.get(f"units-{line.flavor_id}", "").strip()
        if not raw:
            continue
        value = whole_number(raw)
        if value is None:
            raise DomainError(f"{line.flavor.name}: “{raw}” is not a whole number of units to grant.")
        units[line.flavor_id] = value
    return units or None


@login_required
@require_POST
def quota_request_reject(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return _decide(
        request, pk, lambda qr, note: services.quota_request_reject(quota_request=qr, approver=request.user, note=note),
        "rejected",
    )


@login_required
@require_POST
def quota_request_cancel(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return _decide(request, pk, lambda qr, note: services.quota_request_cancel(quota_request=qr, actor=request.user), "cancelled")


# --- Audit ------------------------------------------------------------------------------------


@login_required
@require_GET
def audit(request: HtmxHttpRequest) -> HttpResponse:
    # A team the user cannot see leaves the trail empty, as on every list, rather than answering 404.
    filters = AuditEventFilter(request.GET, queryset=selectors.audit_events_for_user(user=request.user), request=request)
    events = filters.qs
    teams = list(Team.objects.for_user(request.user).only("slug", "name"))
    context = {
        "events": page(events, request.GET.get("page")),
        "team": next((team for team in teams if team.slug == filters.form.cleaned_data.get("team")), None),
        "teams": teams,
    }
    template = "tenants/audit.html#audit-rows" if request.htmx else "tenants/audit.html"
    return render(request, template, context)

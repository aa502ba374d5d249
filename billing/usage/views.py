"""Usage and cost pages: a team's month, its efficiency fragment, the finance overview and a
person's own usage. Thin adapters over billing.usage's selectors.

Who may read what is decided once: a team's page looks its team up among the teams the user can
see (another team's is 404), and the finance overview asks `portal.read_costs`.
"""

from __future__ import annotations

from decimal import Decimal

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from billing import energy, periods
from billing.rules import require_costs
from billing.usage import overview, selectors
from billing.usage.efficiency import team_month_efficiency
from portal.adapters import HtmxHttpRequest
from portal.errors import DomainError
from tenants.models import Team, user_team_roles

OVERVIEW_PAGE_SIZE = 100  # sorted over every team, shown a hundred at a time
OVERVIEW_COLUMNS = [("team", "Team", False), ("cost_center", "Cost center", False), ("gpu_hours", "GPU-hours", True),
                    ("cost", "Cost", True), ("change", "Change from last month", True)]


def _refusal(request: HtmxHttpRequest, error: DomainError) -> HttpResponse:
    """A month or sort order the page cannot read: the sentence alone for htmx, else the 400 page
    with it, so a mistyped address is not a bare line of text."""
    if request.htmx:
        return HttpResponseBadRequest(error.message, content_type="text/plain; charset=utf-8")
    return render(request, "400.html", {"message": error.message}, status=400)


@login_required
@require_GET
def team_usage(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    try:
        usage = selectors.team_month_usage(team=team, month=periods.month_asked(request.GET.get("month")))
    except DomainError as error:
        return _refusal(request, error)
    efficiency = team_month_efficiency(team=team, account=usage.account, month=usage.month, cost=usage.total.cost,
                                       allocated_device_seconds=usage.allocated_device_seconds)
    power = energy.month_energy(month=usage.month, accounts=[usage.account] if usage.account else [])
    return render(request, "billing/team_usage.html", {"team": team, "usage": usage, "efficiency": efficiency,
                                                       "energy": power})


@login_required
@require_GET
def team_efficiency(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """The team page's month of allocated vs busy GPU-hours next to its cost (the team page loads
    it; the usage page has every month): one grouped rollup query for the cost, one for the
    allocated hours and one metrics query, whatever the number of workloads."""
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    try:
        month = periods.month_asked(request.GET.get("month"))
        account = selectors.account_for_team(team=team)
        cost, currency = (selectors.team_month_cost(account=account, month=month) if account is not None
                          else (Decimal(0), ""))
    except DomainError as error:
        return _refusal(request, error)
    efficiency = team_month_efficiency(team=team, account=account, month=month, cost=cost)
    context = {"team": team, "month": month, "efficiency": efficiency, "currency": currency}
    name = "billing/team_efficiency.html#team-efficiency" if request.htmx else "billing/team_efficiency.html"
    return render(request, name, context)


@login_required
@require_GET
def finance_overview(request: HtmxHttpRequest) -> HttpResponse:
    require_costs(request.user)
    sort = request.GET.get("sort") or "cost"
    if sort not in overview.OVERVIEW_SORTS:
        return _refusal(request, DomainError(f"“{sort}” is not a column to sort by; choose one of "
                                             f"{', '.join(overview.OVERVIEW_SORTS)}."))
    descending = request.GET.get("dir", "desc") != "asc"
    try:
        found = overview.finance_overview(month=periods.month_asked(request.GET.get("month")), sort=sort,
                                          descending=descending)
    except DomainError as error:
        return _refusal(request, error)
    keep = [("sort", found.sort), ("dir", "desc" if found.descending else "asc")]
    rows = Paginator(found.rows, OVERVIEW_PAGE_SIZE).get_page(request.GET.get("page"))
    power = energy.month_energy(month=found.month)
    kwh = {team.account_id: team.kwh for team in power.teams}
    return render(request, "billing/finance_overview.html",
                  {"overview": found, "rows": rows, "columns": OVERVIEW_COLUMNS, "keep": keep, "energy": power,
                   "rows_with_energy": [(row, kwh.get(row.account_id)) for row in rows]})


@login_required
@require_GET
def my_usage(request: HtmxHttpRequest) -> HttpResponse:
    try:
        usage = selectors.personal_usage(user=request.user, month=periods.month_asked(request.GET.get("month")))
    except DomainError as error:
        return _refusal(request, error)
    teams = list(Team.objects.filter(pk__in=list(user_team_roles(request.user))).order_by("name"))
    return render(request, "billing/my_usage.html", {"usage": usage, "teams": teams})

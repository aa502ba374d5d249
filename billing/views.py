"""Usage and cost pages: thin adapters over billing.selectors and billing.services.

Who may read what is decided once: a team's page looks its team up among the teams the user can
see (another team's is 404), the finance pages ask `portal.read_costs`, and prices are set only
through `billing.services.rate_set` and idle policies through `billing.services.idle_policy_set`,
which decide who may.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponse, HttpResponseBadRequest, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from billing import periods, selectors, services
from billing.efficiency import team_month_efficiency
from billing.models import IdlePolicy, Rate
from portal.adapters import HtmxHttpRequest
from portal.errors import DomainError
from tenants.models import Flavor, Team, user_team_roles

OVERVIEW_PAGE_SIZE = 100  # sorted over every team, shown a hundred at a time
OVERVIEW_COLUMNS = [("team", "Team", False), ("cost_center", "Cost center", False), ("gpu_hours", "GPU-hours", True),
                    ("cost", "Cost", True), ("change", "Change from last month", True)]


def parse_month(text: str | None) -> dt.date:
    """A month written YYYY-MM, this month when empty; anything else is refused in a sentence."""
    text = (text or "").strip()
    if not text:
        return periods.current_month()
    month = periods.month_parse(text)
    if month is None:
        raise DomainError(f"“{text}” is not a month; write it as YYYY-MM, for example 2026-11.", field="month")
    return month


def _refusal(request: HtmxHttpRequest, error: DomainError) -> HttpResponse:
    """A month or sort order the page cannot read: the sentence alone for htmx, else the 400 page
    with it, so a mistyped address is not a bare line of text."""
    if request.htmx:
        return HttpResponseBadRequest(error.message, content_type="text/plain; charset=utf-8")
    return render(request, "400.html", {"message": error.message}, status=400)


def _require_costs(request: HtmxHttpRequest) -> None:
    if not request.user.has_perm("portal.read_costs"):
        raise PermissionDenied


@login_required
@require_GET
def team_usage(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    try:
        usage = selectors.team_month_usage(team=team, month=parse_month(request.GET.get("month")))
    except DomainError as error:
        return _refusal(request, error)
    efficiency = team_month_efficiency(team=team, account=usage.account, month=usage.month, cost=usage.total.cost,
                                       allocated_device_seconds=usage.allocated_device_seconds)
    return render(request, "billing/team_usage.html", {"team": team, "usage": usage, "efficiency": efficiency})


@login_required
@require_GET
def team_efficiency(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """The team page's month of allocated vs busy GPU-hours next to its cost (the team page loads
    it; the usage page has every month): one grouped rollup query for the cost, one for the
    allocated hours and one metrics query, whatever the number of workloads."""
    team = get_object_or_404(Team.objects.for_user(request.user), slug=slug)
    try:
        month = parse_month(request.GET.get("month"))
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
    _require_costs(request)
    sort = request.GET.get("sort") or "cost"
    if sort not in selectors.OVERVIEW_SORTS:
        return _refusal(request, DomainError(f"“{sort}” is not a column to sort by; choose one of "
                                             f"{', '.join(selectors.OVERVIEW_SORTS)}."))
    descending = request.GET.get("dir", "desc") != "asc"
    try:
        overview = selectors.finance_overview(month=parse_month(request.GET.get("month")), sort=sort,
                                              descending=descending)
    except DomainError as error:
        return _refusal(request, error)
    keep = [("sort", overview.sort), ("dir", "desc" if overview.descending else "asc")]
    rows = Paginator(overview.rows, OVERVIEW_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "billing/finance_overview.html",
                  {"overview": overview, "rows": rows, "columns": OVERVIEW_COLUMNS, "keep": keep})


@login_required
@require_GET
def my_usage(request: HtmxHttpRequest) -> HttpResponse:
    try:
        usage = selectors.personal_usage(user=request.user, month=parse_month(request.GET.get("month")))
    except DomainError as error:
        return _refusal(request, error)
    teams = list(Team.objects.filter(pk__in=list(user_team_roles(request.user))).order_by("name"))
    return render(request, "billing/my_usage.html", {"usage": usage, "teams": teams})


class RateForm(forms.Form):
    flavor = forms.ModelChoiceField(queryset=Flavor.objects.order_by("name"), to_field_name="slug",
                                    error_messages={"invalid_choice": "Choose one of the flavors listed."})
    price_per_gpu_hour = forms.CharField(max_length=20, label="Price per GPU-hour")
    currency = forms.CharField(max_length=3, initial="USD")
    effective_from = forms.DateTimeField(required=False, label="From (empty: now)",
                                         error_messages={"invalid": "Write the moment as YYYY-MM-DD HH:MM."})
    note = forms.CharField(max_length=200, required=False)


def _rate_card_context(request: HtmxHttpRequest, form: RateForm) -> dict[str, object]:
    rates = Rate.objects.select_related("flavor", "created_by").order_by("flavor__name", "-effective_from")
    return {"form": form, "rates": rates, "in_force": {rate.pk for rate in selectors.rates_in_force().values()},
            "idle_policies": selectors.idle_policy_rows(), "idle_modes": IdlePolicy.Mode.choices,
            "can_set": request.user.has_perm("billing.set_rates")}


@login_required
@require_http_methods(["GET", "POST"])
def rate_card(request: HtmxHttpRequest) -> HttpResponse:
    _require_costs(request)
    # A flavor named in the address (the catalog's "no price yet" link) comes chosen.
    form = RateForm(request.POST or None, initial={"flavor": request.GET.get("flavor") or None})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            rate = services.rate_set(actor=request.user, flavor=data["flavor"], price_per_gpu_hour=data["price_per_gpu_hour"],
                                     currency=data["currency"], effective_from=data["effective_from"], note=data["note"])
        except DomainError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
        else:
            messages.success(request, f"{rate.flavor.name} costs {rate.price_per_gpu_hour} {rate.currency} per GPU-hour "
                                      f"from {rate.effective_from:%Y-%m-%d %H:%M}.")
            return redirect("billing:rate-card")
    status = 400 if request.method == "POST" else 200
    return render(request, "billing/rate_card.html", _rate_card_context(request, form), status=status)


@login_required
@require_POST
def idle_policy_set(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """One flavor's idle policy, from its row on the rate card; `billing.services.idle_policy_set`
    decides who may and audits the change."""
    flavor = get_object_or_404(Flavor, slug=slug)
    try:
        services.idle_policy_set(actor=request.user, flavor=flavor, mode=request.POST.get("mode", ""))
    except PermissionDenied:
        return HttpResponseForbidden("Only finance and platform admins choose what happens to a flavor's unallocated "
                                     "capacity.", content_type="text/plain; charset=utf-8")
    except DomainError as refused:
        error: str | None = refused.message
    else:
        error = None
    if request.htmx:
        # htmx swaps only successful answers, so the row with the refusal comes back as a 200.
        [row] = selectors.idle_policy_rows(flavors=Flavor.objects.filter(pk=flavor.pk))
        return render(request, "billing/_idle_policy_row.html",
                      {"row": row, "idle_modes": IdlePolicy.Mode.choices, "can_set": True, "error": error,
                       "saved": error is None})
    if error is None:
        return redirect("billing:rate-card")
    context = _rate_card_context(request, RateForm())
    context.update(idle_error_for=flavor.slug, idle_error=error)
    return render(request, "billing/rate_card.html", context, status=400)

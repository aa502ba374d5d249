"""Budget pages: the list of budgets, a team's budget (its bar, its alerts and, for finance and
platform admins, the form that sets it), the budget bar fragment the team usage page shows, and
each person's choice of budget alert emails. Another team's budget is 404 everywhere."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_http_methods

from billing.budgets import selectors, services
from billing.budgets.forms import AlertEmailForm, BudgetForm
from billing.models import Budget
from portal.adapters import HtmxHttpRequest, add_refusal, signed_in_user
from portal.errors import DomainError
from tenants.models import Team


def _visible_team(request: HtmxHttpRequest, slug: str) -> Team:
    return get_object_or_404(Team.objects.for_user(request.user), slug=slug)


def _form_for(budget: Budget | None) -> BudgetForm:
    if budget is None:
        return BudgetForm()
    return BudgetForm(initial={"amount": budget.amount, "currency": budget.currency, "hard_stop": budget.hard_stop})


def _team_context(request: HtmxHttpRequest, team: Team, form: BudgetForm | None = None, done: str = "",
                  holds: selectors.BudgetStatus | None = None) -> dict[str, Any]:
    budget = selectors.team_budget(team=team)
    return {
        "team": team, "budget": budget, "bar": {"status": selectors.budget_status(budget=budget) if budget else None},
        "alerts": selectors.alerts_for_user(request.user).filter(account__team=team)[:24],
        "form": form or _form_for(budget), "done": done, "holds": holds,
    }


@login_required
def budget_list(request: HtmxHttpRequest) -> HttpResponse:
    visible = list(selectors.budgets_for_user(request.user).order_by("account__slug"))
    statuses = selectors.budget_statuses(budgets=visible)
    rows = [{"budget": b, "status": statuses[b.pk]} for b in visible]
    budgeted = {b.account.team_id for b in visible}
    unbudgeted = [t for t in Team.objects.for_user(request.user).order_by("slug") if t.pk not in budgeted]
    return render(request, "billing/budgets.html", {"rows": rows, "unbudgeted": unbudgeted})


@login_required
@require_http_methods(["GET", "POST"])
def budget_detail(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    team = _visible_team(request, slug)
    template = "billing/budget_detail.html#budget-panel" if request.htmx else "billing/budget_detail.html"
    if request.method != "POST":
        return render(request, template, _team_context(request, team))
    form = BudgetForm(request.POST)
    if form.is_valid():
        try:
            data = form.cleaned_data
            holds = None if data["hold_confirmed"] else services.budget_hold_preview(
                team=team, amount=data["amount"], currency=data["currency"], hard_stop=data["hard_stop"])
            if holds is not None:
                return render(request, template, _team_context(request, team, form=form, holds=holds))
            budget = services.budget_set(actor=signed_in_user(request), team=team, amount=form.cleaned_data["amount"],
                                        currency=form.cleaned_data["currency"], hard_stop=form.cleaned_data["hard_stop"])
        except DomainError as error:
            add_refusal(form, error)
        else:
            done = f"The budget of {team.slug} is now {selectors.money_text(budget.amount, budget.currency)} a month" + (
                " with a hard stop." if budget.hard_stop else ".")
            return render(request, template, _team_context(request, team, done=done))
    # htmx swaps only 2xx answers, so the form with its sentences comes back as 200 there.
    return render(request, template, _team_context(request, team, form=form), status=200 if request.htmx else 400)


@login_required
def budget_bar(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """The bar alone, for the team usage page (which includes billing/_budget_bar.html) to refresh."""
    team = _visible_team(request, slug)
    budget = selectors.team_budget(team=team)
    status = selectors.budget_status(budget=budget) if budget else None
    return render(request, "billing/_budget_bar.html", {"team": team, "bar": {"status": status}})


@login_required
@require_http_methods(["GET", "POST"])
def alert_email(request: HtmxHttpRequest) -> HttpResponse:
    user = signed_in_user(request)
    template = "billing/alert_email.html#alert-email" if request.htmx else "billing/alert_email.html"
    done = ""
    if request.method == "POST":
        form = AlertEmailForm(request.POST)
        form.is_valid()  # a checkbox: absent is False, anything else True
        preference = services.alert_email_preference_set(user=user, daily_digest=form.cleaned_data.get("daily_digest", False))
        done = "Budget alerts now come in one email a day." if preference.daily_digest else \
            "Budget alerts now come by email as they happen."
    return render(request, template, {"daily_digest": selectors.alert_email_digest(user=user), "done": done})

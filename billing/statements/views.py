"""The statement pages: the list with the close-month form, one statement with its lines and
adjustments, the adjustment form (htmx), and the CSV and PDF downloads.

Each view parses, calls one service or selector, and renders. A statement is looked up among
those the user may see (`Statement.objects.for_user`), and a team among the teams on it the user
may read, so another team's statement or part of one is 404 on every page and download.
"""

from __future__ import annotations

import datetime as dt

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from billing import periods
from billing.statements import exports, selectors, services
from billing.statements.forms import AdjustmentForm, CloseMonthForm
from portal.adapters import HtmxHttpRequest, add_refusal, require_perm
from portal.errors import DomainError
from portal.htmx import redirect_page


def _can_close(request: HtmxHttpRequest) -> bool:
    return request.user.has_perm("billing.close_statements")


def _list_context(request: HtmxHttpRequest, form: CloseMonthForm | None = None,
                  preview: services.ClosePreview | None = None) -> dict[str, object]:
    last_month = periods.month_start(periods.current_month() - dt.timedelta(days=1))
    return {"statements": selectors.statements_for_user(user=request.user), "can_close": _can_close(request),
            "form": form or CloseMonthForm(initial={"month": f"{last_month:%Y-%m}"}), "preview": preview}


@login_required
@require_GET
def statement_list(request: HtmxHttpRequest) -> HttpResponse:
    require_perm(request.user, "billing.read_statements")
    return render(request, "billing/statements.html", _list_context(request))


@login_required
@require_POST
def statement_close(request: HtmxHttpRequest) -> HttpResponse:
    require_perm(request.user, "billing.close_statements")
    form = CloseMonthForm(request.POST)
    preview = None
    if form.is_valid():
        month = form.cleaned_data["month"]
        try:
            if not form.cleaned_data["confirmed"]:
                preview = services.statement_preview(actor=request.user, month=month)
            else:
                statement = services.statement_close(actor=request.user, month=month)
                messages.success(request, f"Closed {statement.label}: {statement.charged_total} {statement.currency} "
                                          "charged to teams.")
                return redirect_page(request, reverse("billing:statement-detail", args=[statement.slug]))
        except DomainError as error:
            form.add_error("month", error.message)
    # htmx swaps only successful answers, so the fragment with the refusal (or the preview) comes back as a 200.
    context = _list_context(request, form, preview)
    if request.htmx:
        return render(request, "billing/statements.html#close-form", context)
    return render(request, "billing/statements.html", context, status=200 if preview else 400)


def _picture(request: HtmxHttpRequest, month: str, team: str | None) -> selectors.StatementPicture:
    statement = selectors.statement_visible(user=request.user, month=month)
    return selectors.statement_picture(user=request.user, statement=statement, team=team or None)


def _detail_context(request: HtmxHttpRequest, picture: selectors.StatementPicture,
                    form: AdjustmentForm | None = None, done: str | None = None) -> dict[str, object]:
    return {"picture": picture, "statement": picture.statement, "currency": picture.statement.currency,
            "can_close": _can_close(request),
            "adjustable": selectors.adjustable_teams(statement=picture.statement) if _can_close(request) else [],
            "flavors": selectors.flavor_totals(picture), "departments": selectors.department_totals(picture),
            "form": form or AdjustmentForm(), "done": done,
            "team": request.GET.get("team", "")}


@login_required
@require_GET
def statement_detail(request: HtmxHttpRequest, month: str) -> HttpResponse:
    picture = _picture(request, month, request.GET.get("team"))
    return render(request, "billing/statement_detail.html", _detail_context(request, picture))


@login_required
@require_POST
def adjustment_add(request: HtmxHttpRequest, month: str) -> HttpResponse:
    statement = selectors.statement_visible(user=request.user, month=month)
    require_perm(request.user, "billing.close_statements")
    form = AdjustmentForm(request.POST)
    done = None
    if form.is_valid():
        account = selectors.statement_account(statement=statement, slug=form.cleaned_data["team"])
        if account is None:
            form.add_error("team", f"There is no team “{form.cleaned_data['team']}”.")
        else:
            try:
                adjustment = services.adjustment_add(actor=request.user, statement=statement, account=account,
                                                       amount=form.cleaned_data["amount"], reason=form.cleaned_data["reason"])
            except DomainError as error:
                add_refusal(form, error)
            else:
                done = f"Added {adjustment.amount} {statement.currency} for {account.slug}."
                form = AdjustmentForm()
    picture = selectors.statement_picture(user=request.user, statement=statement,
                                                    team=request.GET.get("team") or None)
    if request.htmx:  # every figure of the page, with the refusal or the new adjustment; htmx swaps only a 200
        return render(request, "billing/statement_detail.html#statement-body", _detail_context(request, picture, form, done))
    if done:
        messages.success(request, done)
        return redirect("billing:statement-detail", statement.slug)
    return render(request, "billing/statement_detail.html", _detail_context(request, picture, form), status=400)


@login_required
@require_GET
def statement_csv(request: HtmxHttpRequest, month: str) -> HttpResponse:
    team = request.GET.get("team") or None
    picture = _picture(request, month, team)
    return exports.download(exports.statement_csv(picture), "text/csv; charset=utf-8", exports.filename(picture, "csv", team))


@login_required
@require_GET
def statement_pdf(request: HtmxHttpRequest, month: str) -> HttpResponse:
    team = request.GET.get("team") or None
    picture = _picture(request, month, team)
    if not picture.teams and not picture.whole:
        raise Http404
    return exports.download(exports.statement_pdf(picture), "application/pdf", exports.filename(picture, "pdf", team))

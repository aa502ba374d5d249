"""What the team's own pages (its data volumes, its credentials) share: the team as the caller may
see it (another team's is 404), and the answer after a change: the page again, or for htmx the
card, with what was done or refused in it (htmx swaps only a 2xx answer, so a refusal is a 200 card)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from portal.adapters import HtmxHttpRequest
from tenants.models import Team


def visible_team(request: HtmxHttpRequest, slug: str) -> Team:
    return get_object_or_404(Team.objects.for_user(request.user), slug=slug)


def answer(request: HtmxHttpRequest, *, page: str, card: str, route: str, team: Team, context: dict[str, Any],
           form: Any = None, error: str = "", done: str = "", status: int = 200) -> HttpResponse:
    """A plain form's post that went through: the page again, by redirect, with what happened as a
    message. Otherwise the page (a form with its refusals) or, for htmx, its card."""
    if not request.htmx and form is None:
        if error:
            messages.error(request, error)
        if done:
            messages.success(request, done)
        return redirect(route, team.slug)
    context = {"team": team, "form": form, "error": error, "done": done, **context}
    if request.htmx:
        return render(request, f"{page}#{card}", context)
    return render(request, page, context, status=status)

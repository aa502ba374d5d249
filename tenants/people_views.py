"""The People pages (platform admins): everyone's account, who is finance or platform admin,
deactivation, and a person's teams and API tokens. Thin adapters over tenants/people.py, which
decides, refuses in words and audits; each action is a plain form that comes back to the
person's page with what happened."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from portal.adapters import HtmxHttpRequest, page, require_perm, signed_in_user
from portal.errors import DomainError
from portal.models import ApiToken, User
from tenants import people
from tenants.filters import PersonFilter


def _people(request: HtmxHttpRequest) -> QuerySet[User]:
    require_perm(request.user, "portal.manage_people")
    return people.people_for_user(user=request.user)


def _person(request: HtmxHttpRequest, pk: int) -> User:
    return get_object_or_404(_people(request), pk=pk)


def _back(person: User) -> HttpResponse:
    return redirect("tenants:person-detail", person.pk)


@login_required
@require_GET
def person_list(request: HtmxHttpRequest) -> HttpResponse:
    filters = PersonFilter(request.GET, queryset=_people(request), request=request)
    found = filters.qs  # a value the filter does not understand (a stale link) is left out, not refused
    chosen = filters.form.cleaned_data
    context = {"people": page(found, request.GET.get("page")), "search": chosen.get("search") or "",
               "role": chosen.get("role") or "", "active": chosen.get("active"), "roles": PersonFilter.ROLES}
    return render(request, "tenants/people.html", context)


@login_required
@require_GET
def person_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    person = _person(request, pk)
    return render(request, "tenants/person_detail.html", {"picture": people.person_picture(person=person),
                                                          "is_me": person.pk == request.user.pk})


@login_required
@require_POST
def person_role(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One role given or taken away: `role` (is_platform_admin or is_finance) and `value` (1 or 0)."""
    person = _person(request, pk)
    role, value = request.POST.get("role", ""), request.POST.get("value", "")
    if role not in people.ROLE_FIELDS or value not in ("0", "1"):
        messages.error(request, "Choose a role to give or take away with its button on this page.")
        return _back(person)
    try:
        people.person_roles_set(actor=signed_in_user(request), person=person, roles={role: value == "1"})
    except DomainError as refusal:
        messages.error(request, refusal.message)
    else:
        words = people.ROLE_WORDS[role]
        messages.success(request, f"{person.username} is {'now' if value == '1' else 'no longer'} {words}.")
    return _back(person)


@login_required
@require_POST
def person_active(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    person = _person(request, pk)
    value = request.POST.get("value", "")
    if value not in ("0", "1"):
        messages.error(request, "Deactivate or reactivate with the button on this page.")
        return _back(person)
    try:
        people.person_active_set(actor=signed_in_user(request), person=person, active=value == "1")
    except DomainError as refusal:
        messages.error(request, refusal.message)
    else:
        messages.success(request, f"{person.username} can sign in again." if value == "1" else
                         f"{person.username} is deactivated: they can no longer sign in or use their API tokens.")
    return _back(person)


@login_required
@require_POST
def person_token_revoke(request: HtmxHttpRequest, pk: int, token_pk: int) -> HttpResponse:
    person = _person(request, pk)
    token = get_object_or_404(ApiToken.objects.filter(user=person), pk=token_pk)
    try:
        people.person_token_revoke(actor=signed_in_user(request), person=person, token=token)
    except DomainError as refusal:
        messages.error(request, refusal.message)
    else:
        messages.success(request, f"Token “{token.name}” of {person.username} is revoked.")
    return _back(person)

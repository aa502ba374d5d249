"""Request types shared by the apps' views and admin."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails

from portal.models import User


def signed_in_user(request: HttpRequest) -> User:
    """The user behind a page or endpoint that requires a login (the admin, login_required views,
    the API behind IsAuthenticated).

    `request.user` is typed `User | AnonymousUser`; this narrows it for the services, which act for
    a person, and refuses rather than passing an anonymous user on if a login check was forgotten.
    """
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied
    return user


class AuthenticatedHttpRequest(HttpRequest):
    """The request of a view behind login_required: its user is a User, never anonymous."""

    user: User  # login_required guarantees it; HttpRequest says User | AnonymousUser


class HtmxHttpRequest(AuthenticatedHttpRequest):
    """The same, with django-htmx's details of an htmx request (HtmxMiddleware sets them)."""

    htmx: HtmxDetails

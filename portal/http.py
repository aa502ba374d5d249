"""Request types shared by the apps' views and admin."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from portal.models import User


def signed_in_user(request: HttpRequest) -> User:
    """The user behind a page that requires a login (the admin, login_required views).

    `request.user` is typed `User | AnonymousUser`; this narrows it for the services, which act for
    a person, and refuses rather than passing an anonymous user on if a login check was forgotten.
    """
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied
    return user

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest

from portal.models import Notification


def portal(request: HttpRequest) -> dict[str, Any]:
    context: dict[str, Any] = {"oidc_enabled": settings.OIDC_ENABLED}
    user = getattr(request, "user", None)  # none on a 400 refused before the user is loaded (portal.security)
    if user is not None and user.is_authenticated:
        # A callable, so a page that never shows the bell never runs the query.
        context["unread_notifications"] = lambda: Notification.objects.for_user(user).unread().count()
    return context

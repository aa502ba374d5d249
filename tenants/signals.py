"""Saves that other parts of the portal follow.

There is no service that deactivates an account: the admin, the shell and single sign-on all
just save the User, so the change is noticed here and handed to the service that reconciles.

A team's saves and deletion are told to the apps to the right (billing keeps an account per team
that outlives it) through the events TEAM_SAVED and TEAM_DELETING (portal.hooks): every save is
seen, whether a service, the Django admin or the shell made it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models.signals import post_save, pre_delete, pre_save
from django.dispatch import receiver

from portal.hooks import Event
from portal.models import User
from tenants import services
from tenants.models import Team

# (team, created, the fields saved or None for all)
TEAM_SAVED = Event[Callable[[Team, bool, "frozenset[str] | None"], None]]("tenants.signals.TEAM_SAVED", by="billing")
TEAM_DELETING = Event[Callable[[Team], None]]("tenants.signals.TEAM_DELETING", by="billing")


@receiver(pre_save, sender=User, dispatch_uid="tenants.user_activity_before")
def _remember_activity(sender: type[User], instance: User, update_fields: frozenset[str] | None = None,
                       **kwargs: Any) -> None:
    # Logins save only last_login; reading the row back for those would cost a query each.
    if instance.pk is None or (update_fields is not None and "is_active" not in update_fields):
        instance._was_active = None  # type: ignore[attr-defined]
        return
    instance._was_active = (  # type: ignore[attr-defined]
        User.objects.filter(pk=instance.pk).values_list("is_active", flat=True).first()
    )


@receiver(post_save, sender=User, dispatch_uid="tenants.user_activity_after")
def _reconcile_teams_on_activity_change(sender: type[User], instance: User, created: bool, **kwargs: Any) -> None:
    was_active = getattr(instance, "_was_active", None)
    if created or was_active is None or was_active == instance.is_active:
        return
    services.user_activity_changed(user=instance)


@receiver(post_save, sender=Team, dispatch_uid="tenants.team_saved")
def _team_saved(sender: type[Team], instance: Team, created: bool = False,
                update_fields: frozenset[str] | None = None, **kwargs: Any) -> None:
    TEAM_SAVED.send(instance, created, update_fields)


@receiver(pre_delete, sender=Team, dispatch_uid="tenants.team_deleting")
def _team_deleting(sender: type[Team], instance: Team, **kwargs: Any) -> None:
    TEAM_DELETING.send(instance)

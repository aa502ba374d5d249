"""Saves of a User that change what its teams should have in the cluster.

There is no service that deactivates an account: the admin, the shell and single sign-on all
just save the User, so the change is noticed here and handed to the service that reconciles.
"""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver

from portal.models import User


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
    from tenants import services

    services.user_activity_changed(user=instance)

"""The audit trail: every state change writes one event with a sentence a person can read."""

from __future__ import annotations

from typing import Any

from django.db import models

from portal.models import AuditEvent, User


def audit_record(
    *,
    actor: User | None,
    action: str,
    obj: models.Model,
    message: str,
    team_id: int | None = None,
    data: dict[str, Any] | None = None,
) -> AuditEvent:
    return AuditEvent.objects.create(
        actor=actor,
        actor_name=actor.username if actor else "system",
        action=action,
        object_type=obj._meta.model_name or type(obj).__name__.lower(),
        object_id=str(obj.pk),
        team_id=team_id,
        message=message,
        data=data or {},
    )

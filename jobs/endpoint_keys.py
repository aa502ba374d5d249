"""Keys for programs: a member makes a key for a server the team serves (an inference server), a
program sends it as `Authorization: Bearer gpk_…`, and the gate lets it through to that server
only. A key is shown once; the portal keeps its SHA-256 and its first characters. Revoking takes
effect at the next request. Every key made and revoked is on the team's audit trail."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from jobs.models import EndpointKey, Workload
from portal.audit import audit_record
from portal.errors import DomainError, StateConflict
from portal.models import User

# How often a key's last use is written: a busy program must not cost a write per request.
LAST_USED_EVERY = dt.timedelta(minutes=1)
MOST_ACTIVE = 20  # keys in use at once per server


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def key_create(*, actor: User, workload: Workload, name: str) -> tuple[EndpointKey, str]:
    """A new key for the workload and the secret a program sends, shown to the caller only now."""
    if not actor.has_perm("jobs.manage_endpoint_keys", workload):
        raise PermissionDenied
    name = name.strip()
    if not name or len(name) > 60:
        raise DomainError("Name the key (at most 60 characters) after the program that uses it, e.g. “eval-nightly”.",
                          field="name")
    if not workload.is_active:
        raise StateConflict(f"{workload.name} has ended; a key for it would open nothing.")
    with transaction.atomic():
        if workload.endpoint_keys.filter(revoked_at__isnull=True).count() >= MOST_ACTIVE:
            raise DomainError(f"{workload.name} has {MOST_ACTIVE} keys in use; revoke one it no longer needs first.",
                              field="name")
        secret = EndpointKey.PREFIX + secrets.token_urlsafe(32)
        key = EndpointKey.objects.create(workload=workload, name=name, shown=secret[:12], sha256=digest(secret),
                                         created_by=actor)
        audit_record(actor=actor, action="endpoint_key.created", obj=workload, team_id=workload.team_id,
                     data={"key": key.shown, "name": name},
                     message=f"{actor.username} made the key {key.shown}… ({name}) for {workload.name} (#{workload.pk})")
    return key, secret


def key_revoke(*, actor: User, key: EndpointKey) -> EndpointKey:
    workload = key.workload
    if not actor.has_perm("jobs.manage_endpoint_keys", workload):
        raise PermissionDenied
    with transaction.atomic():
        if not EndpointKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now(),
                                                                                     revoked_by=actor):
            raise StateConflict(f"The key {key.shown}… is already revoked.")
        audit_record(actor=actor, action="endpoint_key.revoked", obj=workload, team_id=workload.team_id,
                     data={"key": key.shown, "name": key.name},
                     message=f"{actor.username} revoked the key {key.shown}… ({key.name}) of {workload.name} (#{workload.pk})")
    key.refresh_from_db()
    return key


def key_admits(*, workload_id: int, secret: str) -> EndpointKey | None:
    """The active key of that workload the secret is, noting its use; None for any other secret."""
    key = (EndpointKey.objects.select_related("workload").filter(sha256=digest(secret), workload_id=workload_id,
                                                                 revoked_at__isnull=True).first())
    if key is None or not key.workload.is_active:
        return None
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at >= LAST_USED_EVERY:
        EndpointKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key

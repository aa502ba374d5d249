"""Celery tasks for teams: they take ids, reload, and are safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task

from tenants import services

log = logging.getLogger(__name__)

RETRY = {"autoretry_for": (Exception,), "retry_backoff": 2, "retry_backoff_max": 120, "retry_jitter": True, "max_retries": 8}


@shared_task(acks_late=True)
def quota_grants_expire() -> dict[str, int]:
    result = services.quota_grants_expire()
    if result.ended or result.warned:
        log.info("quota grants: %d ended, %d warned", result.ended, result.warned)
    return {"ended": result.ended, "warned": result.warned}


@shared_task(acks_late=True, **RETRY)
def team_reconcile(team_id: int) -> None:
    """Brings the team's cluster objects in line with the database (see tenants/reconcile.py)."""
    from tenants.reconcile import team_reconcile as reconcile

    reconcile(team_id=team_id)

"""Celery tasks for teams: they take ids, reload, and are safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task

from tenants import reconcile, services

log = logging.getLogger(__name__)

# Bounded retries with exponential backoff and jitter: a cluster that is down for a while
# leaves the team "applying" and the periodic pass finishes the job once it is back.
RETRY = {"autoretry_for": (Exception,), "retry_backoff": 2, "retry_backoff_max": 60, "retry_jitter": True, "max_retries": 6}


class TeardownPending(Exception):
    """The namespace is still terminating; try again shortly."""


@shared_task(acks_late=True)
def quota_grants_expire() -> dict[str, int]:
    result = services.quota_grants_expire()
    if result.ended or result.warned:
        log.info("quota grants: %d ended, %d warned", result.ended, result.warned)
    return {"ended": result.ended, "warned": result.warned}


@shared_task(acks_late=True, **RETRY)
def team_reconcile(team_id: int) -> bool:
    return reconcile.team_reconcile(team_id=team_id)


@shared_task(acks_late=True, **RETRY)
def platform_reconcile() -> None:
    reconcile.platform_reconcile()


@shared_task(acks_late=True, autoretry_for=(Exception,), retry_backoff=1, retry_backoff_max=30, retry_jitter=True, max_retries=20)
def team_teardown(slug: str, uid: str = "") -> None:
    # Without a uid (a task queued before teams had one) nothing carries the proof, so nothing is deleted.
    if not reconcile.team_teardown(slug=slug, uid=uid):
        raise TeardownPending(f"namespace {slug} is still terminating")


@shared_task(acks_late=True)
def cluster_reconcile() -> dict[str, int]:
    result = reconcile.cluster_reconcile()
    return {"applied": len(result.applied), "deleted": len(result.deleted), "errors": len(result.errors)}

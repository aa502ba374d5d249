"""Celery tasks for teams: they take ids, reload, and are safe to run twice. Those that talk to
the cluster follow the one retry policy of portal.tasks.ClusterTask."""

from __future__ import annotations

import logging

from celery import shared_task

from portal.tasks import cluster_task, retry_delay
from tenants import nodes, reconcile, services

log = logging.getLogger(__name__)

# How many times a teardown looks again for a terminating namespace (about four minutes in all);
# whatever is still there after that is deleted by the periodic cluster reconcile.
TEARDOWN_POLLS = 6


@shared_task(acks_late=True)
def quota_grants_expire() -> dict[str, int]:
    result = services.quota_grants_expire()
    if result.ended or result.warned or result.begun:
        log.info("quota grants: %d begun, %d ended, %d warned", result.begun, result.ended, result.warned)
    return {"begun": result.begun, "ended": result.ended, "warned": result.warned}


@shared_task(acks_late=True)
def sso_identities_revalidate() -> dict[str, int]:
    result = services.sso_identities_revalidate()
    if result.demoted or result.confirmed:
        log.info("single sign-on: %d confirmed, %d demoted, %d waiting", result.confirmed, result.demoted, result.waiting)
    return {"confirmed": result.confirmed, "demoted": result.demoted, "waiting": result.waiting}


# A failure is already on the team (reconcile.team_reconcile writes sync_error before it raises),
# so giving up needs no record of its own; the team page shows the reason.
@cluster_task()
def team_reconcile(team_id: int) -> bool:
    return reconcile.team_reconcile(team_id=team_id)


@cluster_task()
def platform_reconcile() -> None:
    reconcile.platform_reconcile()


# Every minute: a node whose devices went unhealthy, or a pool relabelled to share its GPUs
# another way, reaches the catalog (and refuses launches) within a minute.
@cluster_task()
def flavor_nodes_check() -> dict[str, int]:
    verdicts = nodes.check_flavors()
    return {"flavors": len(verdicts), "refused": sum(1 for verdict in verdicts.values() if verdict.problem)}


@cluster_task(bind=True, max_retries=TEARDOWN_POLLS)
def team_teardown(self, slug: str, uid: str = "") -> None:  # type: ignore[no-untyped-def]
    # Without a uid (a task queued before teams had one) nothing carries the proof, so nothing is deleted.
    if reconcile.team_teardown(slug=slug, uid=uid):
        log.info("team %s: nothing of it is left in the cluster", slug)
    elif self.request.retries < self.max_retries:
        # Not a failure: namespaces take a while to terminate. Look again later.
        raise self.retry(countdown=retry_delay(self.request.retries))
    else:
        log.info("namespace %s is still terminating; the periodic reconcile finishes it", slug)


@shared_task(acks_late=True)
def cluster_reconcile() -> dict[str, int]:
    result = reconcile.cluster_reconcile()
    return {"applied": len(result.applied), "deleted": len(result.deleted), "errors": len(result.errors)}

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from portal.kube import gateway


@shared_task(acks_late=True, ignore_result=True)
def simulated_cluster_tick() -> None:
    """Lets the simulated cluster's controllers move on (pods finish, queues admit)."""
    if settings.PORTAL_CLUSTER == "simulated":
        gateway().tick()  # type: ignore[attr-defined]


@shared_task(acks_late=True, ignore_result=True)
def heartbeat() -> None:
    """Proves to readiness that a worker takes tasks off the broker; beat sends it on a schedule."""
    from portal.health import WORKER, heartbeat_record

    heartbeat_record(name=WORKER)

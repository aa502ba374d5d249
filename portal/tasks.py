from __future__ import annotations

from celery import shared_task

from portal.kube import gateway


@shared_task(acks_late=True, ignore_result=True)
def simulated_cluster_tick() -> None:
    """Lets the simulated cluster's controllers move on (pods finish, queues admit); a real
    cluster ignores it. The name stays so the schedules beat already stored keep working."""
    gateway().tick()

"""A workload's deletion, told to the apps to the right (billing closes its open run intervals)
through the event WORKLOAD_DELETING (portal.hooks): the Django admin and the shell delete rows
without a service, and a team's deletion takes its workloads along."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models.signals import pre_delete
from django.dispatch import receiver

from jobs.models import Workload
from portal.hooks import Event

WORKLOAD_DELETING = Event[Callable[[Workload], None]]("jobs.signals.WORKLOAD_DELETING", by="billing")


@receiver(pre_delete, sender=Workload, dispatch_uid="jobs.workload_deleting")
def _workload_deleting(sender: type[Workload], instance: Workload, **kwargs: Any) -> None:
    WORKLOAD_DELETING.send(instance)

"""An account is made with its team, follows its name and cost center, and outlives it.

Billing depends on tenants and jobs, not the other way round, so it listens to their saves and
deletes here (connected in BillingConfig.ready) instead of being called by them."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_save, pre_delete
from django.utils import timezone

from billing.models import Account
from jobs.models import RunInterval, Workload
from tenants.models import Team


def _team_saved(sender: type[Team], instance: Team, created: bool = False,
                update_fields: frozenset[str] | None = None, **kwargs: Any) -> None:
    # The reconcile saves a team often, for its sync state only: those saves change nothing here.
    if created or update_fields is None or {"slug", "name", "cost_center"} & set(update_fields):
        Account.for_team(instance)


def _team_deleting(sender: type[Team], instance: Team, **kwargs: Any) -> None:
    # The team's name and cost center stay on the account as they were; the link falls to null.
    account = Account.for_team(instance)
    Account.objects.filter(pk=account.pk).update(team_deleted_at=timezone.now())


def _workload_deleting(sender: type[Workload], instance: Workload, **kwargs: Any) -> None:
    # Its pods go with it and no sync will read them again: they ran until now at the latest.
    RunInterval.objects.filter(workload=instance, ended_at__isnull=True).update(ended_at=timezone.now())


def _intervals_closed(**kwargs: Any) -> None:
    from billing import tasks

    transaction.on_commit(tasks.rollups_refresh.delay)


def connect() -> None:
    from jobs import sync

    post_save.connect(_team_saved, sender=Team, dispatch_uid="billing.account_follows_team")
    pre_delete.connect(_team_deleting, sender=Team, dispatch_uid="billing.account_outlives_team")
    pre_delete.connect(_workload_deleting, sender=Workload, dispatch_uid="billing.close_intervals_of_deleted_workload")
    sync.intervals_closed.connect(_intervals_closed, dispatch_uid="billing.refresh_on_interval_close")

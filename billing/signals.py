"""What billing follows in the apps to its left, through their events (portal.hooks): an account
is made with its team, follows its name, cost center and department, and outlives it; a deleted workload's
open run intervals end; closed intervals are metered soon after. Subscribed in BillingConfig.ready."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from billing import tasks
from billing.models import Account
from jobs import signals as job_signals
from jobs import sync
from jobs.models import RunInterval, Workload
from tenants import selectors as tenant_selectors
from tenants import signals as tenant_signals
from tenants.models import Team


def _team_saved(team: Team, created: bool, update_fields: frozenset[str] | None) -> None:
    # The reconcile saves a team often, for its sync state only: those saves change nothing here.
    if created or update_fields is None or {"slug", "name", "cost_center", "department"} & set(update_fields):
        Account.for_team(team)


def _team_deleting(team: Team) -> None:
    # The team's name and cost center stay on the account as they were; the link falls to null.
    account = Account.for_team(team)
    Account.objects.filter(pk=account.pk).update(team_deleted_at=timezone.now())


def _workload_deleting(workload: Workload) -> None:
    # Its pods go with it and no sync will read them again: they ran until now at the latest.
    RunInterval.objects.filter(workload=workload, ended_at__isnull=True).update(ended_at=timezone.now())


def _intervals_closed(interval_ids: list[int]) -> None:
    transaction.on_commit(tasks.rollups_refresh.delay)


def _records_staying(team: Team) -> list[str]:
    return ["Usage history: every run's GPU-hours and cost, kept under the team's billing account",
            "Monthly statements, closed or not yet closed, with their lines for this team"]


def connect() -> None:
    tenant_signals.TEAM_SAVED.subscribe(_team_saved)
    tenant_signals.TEAM_DELETING.subscribe(_team_deleting)
    job_signals.WORKLOAD_DELETING.subscribe(_workload_deleting)
    sync.INTERVALS_CLOSED.subscribe(_intervals_closed)
    tenant_selectors.TEAM_RECORDS_STAYING.subscribe(_records_staying)

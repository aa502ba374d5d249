"""Billing's periodic work: the hourly usage rollups are kept current every minute (beat) and
after a sync closes run intervals; budgets are checked, and digests sent, on their own beat.
Their names (`billing.tasks.…`) are what the beat schedule in portal/settings.py sends."""

from __future__ import annotations

import logging

from celery import shared_task

from billing import energy, metering
from billing.budgets import services as budgets

log = logging.getLogger(__name__)


@shared_task(acks_late=True)
def rollups_refresh() -> int:
    """Safe to run twice or at once: a refresh locks the watermark and recomputes whole hours."""
    return metering.rollups_refresh()


@shared_task(acks_late=True)
def budgets_check() -> dict[str, int]:
    """Budget alerts due this month, and the hold of hard-stopped teams over budget."""
    result = budgets.budgets_check()
    if result.alerts or result.held or result.released:
        log.info("budgets: %d alerts, held %s, released %s", len(result.alerts), result.held, result.released)
    return {"alerts": len(result.alerts), "held": len(result.held), "released": len(result.released)}


@shared_task(acks_late=True)
def budget_digests_send() -> int:
    """The daily digest of budget alerts for people who asked for one instead of an email each."""
    return budgets.budget_digests_send()


@shared_task(acks_late=True)
def energy_meter() -> int:
    """Each complete hour's GPU energy per team, once; hours telemetry missed are read later."""
    return energy.energy_meter()

"""Billing's periodic work: the hourly usage rollups are kept current every minute (beat) and
after a sync closes run intervals."""

from __future__ import annotations

from celery import shared_task

from billing import metering


@shared_task(acks_late=True)
def rollups_refresh() -> int:
    """Safe to run twice or at once: a refresh locks the watermark and recomputes whole hours."""
    return metering.rollups_refresh()

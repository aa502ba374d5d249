"""Follows the cluster with watches and records workload phases and run intervals as they
happen. Run one per site beside the Celery worker (which does the periodic full pass)."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.management.base import BaseCommand

from jobs.watch import WorkloadInformer
from portal.health import WATCHER, heartbeat_record

log = logging.getLogger(__name__)
HEARTBEAT_SECONDS = 10.0


class LoopHeartbeat:
    """Called on every turn of the informer's loop (its `until` hook), so a heartbeat means the
    loop turns, not merely that the process exists; writes at most every HEARTBEAT_SECONDS."""

    def __init__(self) -> None:
        self.last = 0.0

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.last >= HEARTBEAT_SECONDS:
            self.last = now
            try:
                heartbeat_record(name=WATCHER)
            except Exception:  # a missed heartbeat shows in readiness; it must not stop the watch
                log.exception("Could not record the watcher's heartbeat")
        return False


class Command(BaseCommand):
    help = "Watch the cluster and keep workload phases and run intervals current."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write("Watching jobs, servers, pods and Kueue workloads (Ctrl-C stops).")
        try:
            WorkloadInformer().run(until=LoopHeartbeat())
        except KeyboardInterrupt:
            self.stdout.write("Stopped.")

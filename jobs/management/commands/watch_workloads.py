"""Follows the cluster with watches and records workload phases and run intervals as they
happen. Run one per site beside the Celery worker (which does the periodic full pass)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from jobs.watch import WorkloadInformer


class Command(BaseCommand):
    help = "Watch the cluster and keep workload phases and run intervals current."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write("Watching jobs, servers, pods and Kueue workloads (Ctrl-C stops).")
        try:
            WorkloadInformer().run()
        except KeyboardInterrupt:
            self.stdout.write("Stopped.")

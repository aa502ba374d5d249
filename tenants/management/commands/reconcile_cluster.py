"""Brings the cluster in line with the portal now: the flavors and priorities every team shares,
then every team, writing only what differs. What the periodic task does, on demand."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from portal.kube import KubeError
from tenants import reconcile


class Command(BaseCommand):
    help = "Apply every team's cluster objects and prune what the portal no longer wants."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            reconcile.platform_reconcile()
            result = reconcile.cluster_reconcile()
        except KubeError as error:
            raise CommandError(f"The cluster did not take the change: {error}") from error
        self.stdout.write(f"Cluster reconciled: {len(result.applied)} applied, {len(result.deleted)} deleted.")
        for team, problem in result.errors.items():
            self.stderr.write(f"  {team}: {problem}")
        if result.errors:
            raise CommandError(f"{len(result.errors)} teams could not be reconciled (see above).")

"""Seeds a believable site for the demo (demo.site), its history since the start of the previous
month metered and that month's statement closed (demo.history), and the RuntimeClasses and the
teams' data volumes in the cluster. Running it again the same day changes nothing; on a later day it adds the runs of the
days since."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.utils import timezone

from billing.statements import services as statements
from demo import history, site
from portal.models import User
from tenants.models import Team


class Command(BaseCommand):
    help = "Seed the demo site (idempotent) and print who can log in."

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        if Team.objects.exists():
            self.stdout.write("Demo data is already there.")
            admin = User.objects.filter(username="admin", is_platform_admin=True).first()
            if admin is not None:
                site.own_code_seed(admin=admin)
                site.workspace_seed(admin=admin)
                site.cpu_notebook_seed(admin=admin)
        else:
            site.site_seed(now=now, since=history.history_start(now))
        seeded = history.history_seed(now=now)
        closed = statements.month_label(seeded.statement.month) if seeded.statement else None
        self.stdout.write(f"Usage since {seeded.since:%Y-%m-%d} is metered ({seeded.intervals} runs added)"
                          + (f"; finance closed {closed}" if closed else "")
                          + f"; {history.DEMO_BUDGET[0]} has a monthly budget.")
        self.stdout.write(site.runtime_classes_seed())
        self.stdout.write(site.data_volumes_seed())
        self.stdout.write(f"\nLog in with any of these (password for all: {site.PASSWORD}):")
        for username, *_rest, roles in site.PEOPLE:
            user = User.objects.get(username=username)
            what = ", ".join(f"{role} of {team}" for team, role in roles) or (
                "platform admin" if user.is_platform_admin else "finance"
            )
            self.stdout.write(f"  {username:<8} {what}")

"""The capacity calendar (issue 27 §4) with 1,000 teams, on PostgreSQL.

Five GPU flavors; each team holds a permanent grant of one flavor and two reservations of others
in the coming twelve months (5 to 25 days each), one in ten with a temporary grant ending in the
window: about 3,100 grants, written by bulk_create; 50 departments of 20 teams each, each pooling
a few units of two flavors (their pools count in every month). The calendar page (each flavor's peak of
promises and what is reserved, per month for twelve months) is then fetched through Django's test
Client as a platform admin and timed, its queries counted, as the billing pages are. Target: p95
under 150 ms.

    scripts/with-services.sh .venv/bin/python benchmarks/capacity_calendar.py [--teams 1000] [--departments 50] [--requests 30]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.billing_pages import TARGET_MS, timed  # noqa: E402 - after the checkout is on the path
from benchmarks.results import record  # noqa: E402 - after the checkout is on the path; its import notes the load at the start

FLAVORS = [("H100 80GB", "h100", 1), ("A100 80GB", "a100", 1), ("A100 1g.10gb", "a100-1g", 7), ("L40S", "l40s", 1),
           ("T4 shared", "t4-shared", 4)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--teams", type=int, default=1000)
    parser.add_argument("--departments", type=int, default=50)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("Run it on PostgreSQL: scripts/with-services.sh .venv/bin/python benchmarks/capacity_calendar.py")
    os.environ.update({"PORTAL_VAR_DIR": os.environ.get("PORTAL_VAR_DIR") or tempfile.mkdtemp(prefix="gpu-portal-bench-"),
                       "PORTAL_CLUSTER": "simulated", "DJANGO_SETTINGS_MODULE": "portal.settings",
                       "CELERY_TASK_ALWAYS_EAGER": "1", "LOG_LEVEL": "WARNING"})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    figures = run(args)
    print(json.dumps(figures, indent=2))
    record("capacity_calendar", figures)


def seed(teams: int, departments: int) -> tuple[int, int]:
    from django.utils import timezone

    from tenants.models import Department, DepartmentPool, Flavor, QuotaGrant, Team

    chance = random.Random(27)
    flavors = [Flavor.objects.create(name=name, slug=slug, resource_name="nvidia.com/gpu" if denominator == 1 else
                                     f"nvidia.com/{slug}", sharing_mode="exclusive" if denominator == 1 else "mig",
                                     gpu_model=name, fraction_denominator=denominator, capacity_units=teams * 8)
               for name, slug, denominator in FLAVORS]
    groups = Department.objects.bulk_create([Department(slug=f"dept-{i:02}", name=f"Department {i:02}")
                                             for i in range(departments)])
    pools = DepartmentPool.objects.bulk_create([DepartmentPool(department=group, flavor=flavor, units=chance.randint(1, 8))
                                                for group in groups for flavor in chance.sample(flavors, 2)])
    made = Team.objects.bulk_create([Team(slug=f"team-{i:04}", name=f"Team {i:04}",
                                          department=groups[i % departments] if departments else None)
                                     for i in range(teams)])
    now = timezone.now()
    grants = []
    for index, team in enumerate(made):
        grants.append(QuotaGrant(team=team, flavor=flavors[index % len(flavors)], units=chance.randint(1, 4),
                                 valid_from=now - dt.timedelta(days=30), began_at=now - dt.timedelta(days=30)))
        for _ in range(2):
            starts = now + dt.timedelta(days=chance.randint(1, 360))
            grants.append(QuotaGrant(team=team, flavor=chance.choice(flavors), units=chance.randint(1, 8), valid_from=starts,
                                     valid_until=starts + dt.timedelta(days=chance.randint(5, 25))))
        if index % 10 == 0:
            grants.append(QuotaGrant(team=team, flavor=chance.choice(flavors), units=2, valid_from=now - dt.timedelta(days=3),
                                     valid_until=now + dt.timedelta(days=chance.randint(1, 200)),
                                     began_at=now - dt.timedelta(days=3)))
    QuotaGrant.objects.bulk_create(grants, batch_size=2000)
    return len(grants), len(pools)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from django.conf import settings
    from django.test import Client
    from django.test.utils import setup_test_environment

    from portal.models import User

    setup_test_environment()
    settings.ALLOWED_HOSTS = ["*"]
    grants, pools = seed(args.teams, args.departments)
    admin = User.objects.create(username="bench-admin", is_platform_admin=True)
    client = Client()
    client.force_login(admin)
    page = timed(client, "/capacity/calendar/", args.requests)
    return {"teams": args.teams, "departments": args.departments, "department_pools": pools, "flavors": len(FLAVORS),
            "grants": grants, "months": 12, "target_p95_ms": TARGET_MS,
            "calendar_page": page, "calendar_p95_under_target": page["under_target"]}


if __name__ == "__main__":
    main()

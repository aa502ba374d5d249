"""The team usage page and the finance overview over a month of rollups, on PostgreSQL.

1,000 teams (each with its billing account), 5 flavors and hourly rollups for last month and
this one up to the open hour (the overview compares the two): every team uses two of the flavors
(`--flavors-per-team`) every hour, its hours split among three people, one hour in seven
borrowed: up to 3 million rows, made by one INSERT … SELECT over generate_series, with each
flavor's capacity per hour. The state is what metering leaves: metered up to now, the hours
before this one complete and summed into the monthly level (`metering.months_rebuild`). Each
page is then fetched through Django's test Client, as a finance user and as a team lead, and
timed; the number of queries of each request is counted, and must be the same for a team with
one hour of rows as for one with a month.

    scripts/with-services.sh .venv/bin/python benchmarks/billing_pages.py [--teams 1000] [--flavors-per-team 2] [--requests 30]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results import record  # noqa: E402 - after the checkout is on the path; its import notes the load at the start
from benchmarks.stats import percentile  # noqa: E402 - after the checkout is on the path

FLAVORS = [("H100 80GB", "h100", 1, 1, "4.00"), ("A100 80GB", "a100", 1, 1, "2.50"), ("L40S", "l40s", 1, 1, "1.20"),
           ("A100 1g.10gb", "a100-1g", 1, 7, "2.50"), ("T4 shared", "t4-shared", 1, 4, "0.40")]
TARGET_MS = 150


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--teams", type=int, default=1000)
    parser.add_argument("--flavors-per-team", type=int, default=2)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("Run it on PostgreSQL: scripts/with-services.sh .venv/bin/python benchmarks/billing_pages.py")
    os.environ.update({"PORTAL_VAR_DIR": os.environ.get("PORTAL_VAR_DIR") or tempfile.mkdtemp(prefix="gpu-portal-bench-"),
                       "PORTAL_CLUSTER": "simulated", "DJANGO_SETTINGS_MODULE": "portal.settings",
                       "CELERY_TASK_ALWAYS_EAGER": "1", "LOG_LEVEL": "WARNING"})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    figures = run(args.teams, args.flavors_per_team, args.requests)
    print(json.dumps(figures, indent=2))
    record("billing_pages", figures)


def seed(teams: int, flavors_per_team: int, previous_start: dt.datetime, month_end: dt.datetime,
         now: dt.datetime) -> dict[str, Any]:
    from django.db import connection

    from billing import metering
    from billing.models import Account, MeteringState, Rate, UsageMonth
    from billing.periods import hour_floor
    from portal.models import User
    from tenants.models import Flavor, Membership, Team

    flavors = Flavor.objects.bulk_create([
        Flavor(name=name, slug=slug, resource_name=f"nvidia.com/{slug}", gpu_model=name, capacity_units=8 * teams,
               fraction_numerator=num, fraction_denominator=den, node_labels={"gpu": slug})
        for name, slug, num, den, _ in FLAVORS])
    Rate.objects.bulk_create([Rate(flavor=flavor, price_per_gpu_hour=price, currency="USD",
                                   effective_from=previous_start - dt.timedelta(days=30))
                              for flavor, (*_, price) in zip(flavors, FLAVORS, strict=True)])
    made = Team.objects.bulk_create([Team(slug=f"team-{i:04}", name=f"Team {i:04}", cost_center=f"CC-{i % 37:03}")
                                     for i in range(teams)])
    Account.objects.bulk_create([Account(team=team, team_uid=team.uid, slug=team.slug, name=team.name,
                                         cost_center=team.cost_center) for team in made])
    lead = User.objects.create(username="bench-lead")
    Membership.objects.create(team=made[0], user=lead, role=Membership.Role.LEAD)
    finance = User.objects.create(username="bench-finance", is_finance=True)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("""
            INSERT INTO billing_usagehour (hour, account_id, flavor_id, owner_username, borrowed, rate_id,
                                           fraction_numerator, fraction_denominator, unit_seconds)
            SELECT h, a.id, f.id, 'person-' || a.id || '-' || (extract(hour FROM h)::int %% 3),
                   (extract(hour FROM h)::int + a.id) %% 7 = 0, r.id, f.fraction_numerator, f.fraction_denominator,
                   3600 * (1 + (a.id + f.id + extract(day FROM h)::int) %% 4)
            FROM generate_series(%s::timestamptz, %s::timestamptz - interval '1 hour', interval '1 hour') AS h
            CROSS JOIN billing_account a
            JOIN tenants_flavor f ON (f.id + a.id) %% %s < %s
            JOIN billing_rate r ON r.flavor_id = f.id
        """, [previous_start, month_end, len(FLAVORS), flavors_per_team])
        rows = cursor.rowcount
        # The lent rollup at its largest: every team that did not borrow in an hour lent some of
        # each flavor it used then (metering writes these rows; the ledger only reads them).
        cursor.execute("""
            INSERT INTO billing_lenthour (hour, account_id, flavor_id, unit_seconds)
            SELECT hour, account_id, flavor_id, 600 FROM billing_usagehour WHERE NOT borrowed
            GROUP BY hour, account_id, flavor_id
        """)
        lent_rows = cursor.rowcount
        cursor.execute("""
            INSERT INTO billing_capacityhour (hour, flavor_id, fraction_numerator, fraction_denominator, unit_seconds)
            SELECT h, f.id, f.fraction_numerator, f.fraction_denominator, 3600 * f.capacity_units
            FROM generate_series(%s::timestamptz, %s::timestamptz - interval '1 hour', interval '1 hour') AS h
            CROSS JOIN tenants_flavor f
        """, [previous_start, month_end])
        # Metered up to now, as the beat task leaves it: the hours before this one are complete and
        # summed into the monthly level, this hour is open.
        MeteringState.objects.create(metered_until=now, months_through=hour_floor(now), refreshed_at=now)
        metering.months_rebuild(through=hour_floor(now))
        for table in ("usagehour", "lenthour", "capacityhour", "usagemonth", "flavorhour"):
            cursor.execute(f"ANALYZE billing_{table}")
    return {"lead": lead, "finance": finance, "team": made[0], "rows": rows, "lent_rows": lent_rows,
            "usage_month_rows": UsageMonth.objects.count(), "seed_seconds": round(time.perf_counter() - started, 1)}


def timed(client: Any, url: str, requests: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    # The first request is timed on its own: it compiles the templates, saves the session, and
    # fills the cache the finance overview keeps until the rollups change (a metering refresh).
    with CaptureQueriesContext(connection) as first_queries:
        started = time.perf_counter()
        assert client.get(url).status_code == 200
        first_ms = (time.perf_counter() - started) * 1000
    times, queries = [], set()
    for _ in range(requests):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
        queries.add(len(captured))
    if os.environ.get("BENCH_PROFILE"):
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        with CaptureQueriesContext(connection) as profiled:
            profiler.runcall(client.get, url)
        print(f"--- profile of {url}", file=sys.stderr)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
        with connection.cursor() as cursor:
            for query in profiled.captured_queries:
                if float(query["time"]) > 0.005 and query["sql"].startswith("SELECT"):
                    cursor.execute("EXPLAIN ANALYZE " + query["sql"])
                    print(query["time"], query["sql"][:300], *[line for (line,) in cursor.fetchall()],
                          sep="\n", file=sys.stderr)
    times.sort()
    p95 = percentile(times, 0.95)
    return {"url": url, "first_request_ms": round(first_ms, 1), "first_request_queries": len(first_queries),
            "requests": requests, "p50_ms": round(statistics.median(times), 1), "p95_ms": round(p95, 1),
            "max_ms": round(times[-1], 1), "queries": sorted(queries), "under_target": p95 < TARGET_MS}


def run(teams: int, flavors_per_team: int, requests: int) -> dict[str, Any]:
    from django.conf import settings
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse

    from billing import periods

    setup_test_environment()
    settings.ALLOWED_HOSTS = ["*"]
    month = periods.current_month()
    previous = periods.month_start(month - dt.timedelta(days=1))
    _, month_end = periods.month_bounds(month)
    previous_start, _ = periods.month_bounds(previous)
    now = dt.datetime.now(dt.UTC)
    # This month's rows run up to the open hour (the rollups never go past now).
    seeded = seed(teams, flavors_per_team, previous_start, min(month_end, periods.next_hour(periods.hour_floor(now))), now)
    result: dict[str, Any] = {
        "commit": os.popen(f"git -C {ROOT} describe --always --dirty").read().strip(),
        "teams": teams, "flavors": len(FLAVORS), "flavors_per_team": flavors_per_team, "usage_rows": seeded["rows"],
        "lent_rows": seeded["lent_rows"], "usage_month_rows": seeded["usage_month_rows"],
        "seed_seconds": seeded["seed_seconds"],
        "months": [f"{previous:%Y-%m}", f"{month:%Y-%m}"], "target_p95_ms": TARGET_MS,
    }
    lead, finance = Client(), Client()
    lead.force_login(seeded["lead"])
    finance.force_login(seeded["finance"])
    team_url = reverse("billing:team-usage", args=[seeded["team"].slug])
    result["team_usage_page"] = timed(lead, team_url, requests)
    result["team_usage_page_last_month"] = timed(lead, f"{team_url}?month={previous:%Y-%m}", requests)
    result["finance_overview"] = timed(finance, reverse("billing:finance-overview"), requests)
    result["finance_overview_sorted_by_team"] = timed(finance, reverse("billing:finance-overview") + "?sort=team&dir=asc",
                                                      max(5, requests // 4))
    return result


if __name__ == "__main__":
    main()

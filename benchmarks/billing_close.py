"""Closing a month on PostgreSQL at scale, against the floor of one hand-written SQL aggregate.

Seeds 1,000 teams, 5 flavors (two of them change price mid-month) and a month of hourly usage
rollups: every team uses 2 of the 5 flavors in every hour, for 2 people each, a quarter of it
borrowed, which is 1,000 × 744 × 2 × 2 ≈ 3.0 M `UsageHour` rows. That is what about 10 M run
intervals (13 per team-hour) fold into, since a rollup row holds every interval of its hour ×
team × flavor × person × guaranteed/borrowed. Capacity rows give each flavor unallocated hours.

Then, in the same run, timed alternately (median of `--repeat`, after one warm-up of each):
- `statement_close`: the service as finance calls it, committed (so deferred foreign-key checks
  count), then deleted with the triggers off so the month can be closed again;
- the floor: one hand-written SQL aggregate over the same rows (team × flavor × rate × fraction,
  guaranteed and borrowed), its rows fetched into Python.

Run through `make bench` (PostgreSQL is started for it), or with DATABASE_URL set:
    .venv/bin/python benchmarks/billing_close.py [--teams 1000] [--repeat 3]
Targets: close under 5 s, and within 2× of the floor.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results import record  # noqa: E402 - after the checkout is on the path; its import notes the load at the start

MONTH = dt.date(2026, 10, 1)
FLAVORS = [("h100-80gb", "H100 80GB", 1, 1, 512), ("a100-80gb", "A100 80GB", 1, 1, 512),
           ("a100-1g10gb", "A100 1g.10gb", 1, 7, 1792), ("l40s-shared", "L40S shared", 1, 4, 1024),
           ("l4", "L4", 1, 1, 1024)]

FLOOR_SQL = """
SELECT account_id, flavor_id, rate_id, fraction_numerator, fraction_denominator,
       SUM(unit_seconds) FILTER (WHERE NOT borrowed), SUM(unit_seconds) FILTER (WHERE borrowed)
FROM billing_usagehour
WHERE hour >= %s AND hour < %s
GROUP BY account_id, flavor_id, rate_id, fraction_numerator, fraction_denominator
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--teams", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        sys.exit("Set DATABASE_URL (PostgreSQL), or run `make bench`, which starts one.")
    os.environ.update({"DJANGO_SETTINGS_MODULE": "portal.settings", "LOG_LEVEL": "WARNING",
                       "PORTAL_VAR_DIR": os.environ.get("PORTAL_VAR_DIR") or tempfile.mkdtemp(prefix="gpu-portal-bench-")})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    seeded = seed(teams=args.teams)
    figures = {**seeded, **measure(repeat=args.repeat)}
    print(json.dumps(figures, indent=2))
    record("billing_close", figures)


def seed(*, teams: int) -> dict[str, object]:
    from django.db import connection, transaction

    from billing import periods
    from billing.models import Account, Rate
    from portal.models import User
    from tenants.models import Flavor, Team

    start, end = periods.month_bounds(MONTH)
    middle = start + (end - start) / 2
    began = time.perf_counter()
    with transaction.atomic():
        User.objects.get_or_create(username="bench-finance", defaults={"is_finance": True})
        flavors = [Flavor.objects.create(slug=slug, name=name, resource_name=f"nvidia.com/{slug}", fraction_numerator=num,
                                         fraction_denominator=den, capacity_units=capacity)
                   for slug, name, num, den, capacity in FLAVORS]
        created = Team.objects.bulk_create([Team(slug=f"team-{index:04d}", name=f"Team {index:04d}",
                                                 cost_center=f"CC-{index % 40:03d}") for index in range(teams)])
        Account.objects.bulk_create([Account(team=team, slug=team.slug, name=team.name, cost_center=team.cost_center)
                                     for team in created])
        before = start - dt.timedelta(days=60)
        rates = {}
        for index, flavor in enumerate(flavors):
            first = Rate.objects.create(flavor=flavor, price_per_gpu_hour=f"{1.25 + index:.2f}", effective_from=before)
            # Two flavors change price mid-month: their lines split in two.
            second = Rate.objects.create(flavor=flavor, price_per_gpu_hour=f"{1.50 + index:.2f}", effective_from=middle) \
                if index < 2 else first
            rates[flavor.pk] = (first.pk, second.pk)
    flavor_ids = [flavor.pk for flavor in flavors]
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE bench_flavor (slot int, flavor_id bigint, num int, den int, rate_before bigint, "
                       "rate_after bigint, capacity bigint)")
        for slot, flavor in enumerate(flavors):
            cursor.execute("INSERT INTO bench_flavor VALUES (%s, %s, %s, %s, %s, %s, %s)",
                           [slot, flavor.pk, flavor.fraction_numerator, flavor.fraction_denominator, *rates[flavor.pk],
                            flavor.capacity_units])
        # The rows are consistent by construction: skip the per-row foreign-key checks while seeding
        # (the database's own superuser may), which otherwise take most of the seeding time.
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(USAGE_SQL, [middle, start, hours_in(start, end) - 1])
        cursor.execute("SET session_replication_role = DEFAULT")
        cursor.execute("""
            INSERT INTO billing_capacityhour (hour, flavor_id, fraction_numerator, fraction_denominator, unit_seconds)
            SELECT %s::timestamptz + n * interval '1 hour', f.flavor_id, f.num, f.den, f.capacity * 3600
            FROM generate_series(0, %s) AS n CROSS JOIN bench_flavor f
        """, [start, hours_in(start, end) - 1])
        cursor.execute("ANALYZE billing_usagehour")
        cursor.execute("ANALYZE billing_capacityhour")
        cursor.execute("SELECT count(*) FROM billing_usagehour")
        (rows,) = cursor.fetchone()
    return {"teams": teams, "flavors": len(flavor_ids), "usage_rows": rows, "seed_seconds": round(time.perf_counter() - began, 1)}


# Every team × hour uses two flavors (slots picked by team and hour), two people each; a quarter
# of the rows are borrowed. Unit-seconds vary so amounts are not round numbers.
USAGE_SQL = """
INSERT INTO billing_usagehour (hour, account_id, flavor_id, owner_username, borrowed, rate_id,
                               fraction_numerator, fraction_denominator, unit_seconds)
SELECT h.hour, a.id, f.flavor_id, 'user-' || (a.id %% 50) || '-' || o.owner, (a.id + o.owner + h.n) %% 4 = 0,
       CASE WHEN h.hour < %s THEN f.rate_before ELSE f.rate_after END, f.num, f.den,
       60 + ((a.id * 7919 + h.n * 104729 + o.owner * 31) %% 3540)
FROM (SELECT n, %s::timestamptz + n * interval '1 hour' AS hour FROM generate_series(0, %s) AS n) AS h
CROSS JOIN billing_account a
CROSS JOIN generate_series(0, 1) AS o(owner)
JOIN bench_flavor f ON f.slot IN ((a.id + h.n) %% 5, (a.id + h.n + 2) %% 5)
"""


def hours_in(start: dt.datetime, end: dt.datetime) -> int:
    return int((end - start).total_seconds() // 3600)


def measure(*, repeat: int) -> dict[str, object]:
    from django.db import connection

    from billing import periods
    from billing.models import Statement
    from billing.statements.services import statement_close
    from portal.models import User

    actor = User.objects.get(username="bench-finance")
    start, end = periods.month_bounds(MONTH)
    now = end + dt.timedelta(days=1)

    def close_once() -> tuple[float, int]:
        began = time.perf_counter()
        statement = statement_close(actor=actor, month=MONTH, now=now)  # committed, foreign keys checked
        took = time.perf_counter() - began
        lines = statement.lines.count()
        # A closed statement cannot be deleted: the triggers refuse. Only to close the month again,
        # the benchmark deletes it as the database's superuser with triggers off (replica role).
        with connection.cursor() as cursor:
            cursor.execute("SET session_replication_role = replica")
            cursor.execute("DELETE FROM billing_statementline")
            cursor.execute("DELETE FROM billing_statement")
            cursor.execute("SET session_replication_role = DEFAULT")
        return took, lines

    def floor_once() -> tuple[float, int]:
        began = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(FLOOR_SQL, [start, end])
            rows = cursor.fetchall()
        return time.perf_counter() - began, len(rows)

    floor_once(), close_once()  # warm the caches
    closes, floors = [], []
    lines = groups = 0
    for _ in range(repeat):
        took, groups = floor_once()
        floors.append(took)
        took, lines = close_once()
        closes.append(took)
    assert not Statement.objects.exists()
    close_s, floor_s = statistics.median(closes), statistics.median(floors)
    return {"statement_lines": lines, "floor_groups": groups, "close_seconds": round(close_s, 3),
            "floor_seconds": round(floor_s, 3), "ratio": round(close_s / floor_s, 2),
            "close_runs": [round(t, 3) for t in closes], "floor_runs": [round(t, 3) for t in floors],
            "targets_met": close_s < 5 and close_s <= 2 * floor_s}


if __name__ == "__main__":
    main()

"""Keeping the usage rollups current at 10,000 running pods, on PostgreSQL.

Builds 1,000 teams with quota grants on 5 flavors, 2,000 people and 10,000 pods running (1 to 4
units each, a tenth on borrowed quota), meters them up to a start instant, then plays minutes of
cluster activity: each minute some pods end (the sync closes their intervals, a few of them at a
finish time before the last refresh), as many new ones start (some found late, started before
the last refresh), and some workloads flip between guaranteed and borrowed. After each minute it
times one `rollups_refresh` (what the beat task runs every minute), across an hour boundary,
in wall-clock time and in CPU time of the portal's process and of its PostgreSQL backend.
Target: under 1 s per minute of activity. At the end it checks the rollups against a
recomputation from scratch (`billing.metering.recompute`) and prints the figures as JSON.

Two minutes cost more than the others and are reported apart: the one whose refresh reaches the
hour boundary (the completed hour is folded into the monthly level) and the next (the new hour's
rows are inserted, and the late intervals of the completed hour correct it).
BENCH_PROFILE=<minute> prints a cProfile of that minute's refresh to stderr.

Run through `make bench`, or with PostgreSQL from scripts/with-services.sh:
    scripts/with-services.sh .venv/bin/python benchmarks/billing_rollups.py [--pods 10000] [--minutes 15]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results import record  # noqa: E402 - after the checkout is on the path; its import notes the load at the start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--teams", type=int, default=1_000)
    parser.add_argument("--minutes", type=int, default=15)
    parser.add_argument("--churn", type=float, default=0.01, help="Share of running pods that end each minute.")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL"):
        sys.exit("Set DATABASE_URL (PostgreSQL), or run `make bench`, which starts one.")
    os.environ.update({"DJANGO_SETTINGS_MODULE": "portal.settings", "LOG_LEVEL": "WARNING",
                       "PORTAL_VAR_DIR": os.environ.get("PORTAL_VAR_DIR") or tempfile.mkdtemp(prefix="gpu-portal-bench-")})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    figures = run(args)
    print(json.dumps(figures, indent=2))
    record("billing_rollups", figures)


def run(args: argparse.Namespace) -> dict[str, object]:
    from billing import metering
    from billing.models import Account, UsageHour
    from billing.periods import hour_floor
    from jobs.models import RunInterval, RunIntervalSwitch, Workload, WorkloadTemplate, WorkloadTemplateVersion
    from portal.models import User
    from tenants.models import Flavor, QuotaGrant, Team

    rng = random.Random(10_000)
    # A past instant 50 minutes into an hour, so the minutes played cross an hour boundary.
    start = hour_floor(dt.datetime.now(dt.UTC) - dt.timedelta(days=1)) + dt.timedelta(minutes=50)
    flavors = Flavor.objects.bulk_create([
        Flavor(name=f"Bench flavor {n}", slug=f"bench-{n}", resource_name=f"nvidia.com/bench-{n}", gpu_model="bench",
               fraction_denominator=(1, 7, 4, 1, 2)[n], capacity_units=args.pods) for n in range(5)])
    teams = Team.objects.bulk_create([Team(slug=f"bench-{n}", name=f"Bench {n}") for n in range(args.teams)])
    Account.objects.bulk_create([Account(team=t, team_uid=t.uid, slug=t.slug, name=t.name) for t in teams])
    since = start - dt.timedelta(days=30)
    QuotaGrant.objects.bulk_create([QuotaGrant(team=t, flavor=f, units=rng.randint(1, 8), valid_from=since)
                                    for t in teams for f in flavors if rng.random() < 0.6])
    users = User.objects.bulk_create([User(username=f"bench-user-{n}") for n in range(2 * args.teams)])
    template = WorkloadTemplate.objects.create(slug="bench-train", name="Bench", kind="training")
    version = WorkloadTemplateVersion.objects.create(template=template, number=1, image="train:1")

    def workloads(count: int) -> list[Workload]:
        made = []
        for _ in range(count):
            team, flavor = rng.choice(teams), rng.choice(flavors)
            made.append(Workload(team=team, owner=rng.choice(users), template_version=version, name="train", flavor=flavor,
                                 units=rng.randint(1, 4), cpu=1, memory_gib=1, priority="normal", phase="running",
                                 on_borrowed=rng.random() < 0.1))
        return Workload.objects.bulk_create(made)

    def intervals(for_workloads: list[Workload], started: list[dt.datetime]) -> list[RunInterval]:
        return RunInterval.objects.bulk_create([
            RunInterval(workload=w, team_id=w.team_id, team_uid=w.team.uid, owner_id=w.owner_id,
                        owner_username=w.owner.username, flavor=w.flavor, fraction_numerator=w.flavor.fraction_numerator,
                        fraction_denominator=w.flavor.fraction_denominator, borrowed=w.on_borrowed,
                        pod_uid=str(uuid.uuid4()), pod_name=f"wl-{w.pk}-0", node="bench", resource_name=w.flavor.resource_name,
                        units=w.units, started_at=s) for w, s in zip(for_workloads, started, strict=True)], batch_size=2000)

    made = time.perf_counter()
    running = intervals(workloads(args.pods), [start - dt.timedelta(seconds=rng.randint(0, 6 * 3600))
                                               for _ in range(args.pods)])
    setup_seconds = time.perf_counter() - made
    first = time.perf_counter()
    metering.rollups_refresh(until=start)
    first_refresh = time.perf_counter() - first

    backend = _backend_cpu_reader()
    timings: list[float] = []
    database_cpu: list[float] = []  # the PostgreSQL backend's CPU time for the same refresh (same machine)
    floors: list[float] = []
    cpu_timings: list[float] = []  # the portal process's own CPU time: what the machine's load does not inflate
    closed_total = opened_total = flipped_total = 0
    for minute in range(1, args.minutes + 1):
        now = start + dt.timedelta(minutes=minute)
        ending = rng.sample(running, int(len(running) * args.churn))
        ended_ids = {i.pk for i in ending}
        for interval in ending:
            # Most end within the minute; one in ten ended before the last refresh and is seen only now.
            back = rng.randint(1, 120) if rng.random() < 0.1 else rng.randint(0, 59)
            interval.ended_at = max(now - dt.timedelta(seconds=back), interval.started_at)
        RunInterval.objects.bulk_update(ending, ["ended_at"], batch_size=2000)
        running = [i for i in running if i.pk not in ended_ids]
        new = intervals(workloads(len(ending)), [now - dt.timedelta(seconds=rng.randint(0, 90)) for _ in ending])
        running += new
        flips = rng.sample(running, 20)
        RunIntervalSwitch.objects.bulk_create([RunIntervalSwitch(interval=i, at=now - dt.timedelta(seconds=rng.randint(0, 59)),
                                                                 borrowed=rng.random() < 0.5) for i in flips])
        closed_total, opened_total, flipped_total = closed_total + len(ending), opened_total + len(new), flipped_total + 20
        tick, cpu, db_cpu = time.perf_counter(), time.process_time(), backend()
        if os.environ.get("BENCH_PROFILE") == str(minute):
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.runcall(metering.rollups_refresh, until=now)
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(35)
        else:
            metering.rollups_refresh(until=now)
        timings.append(time.perf_counter() - tick)
        cpu_timings.append(time.process_time() - cpu)
        database_cpu.append(backend() - db_cpu)
        # The floor, measured in the same minute: one read of what is running (the refresh reads at least that).
        tick = time.perf_counter()
        len(RunInterval.objects.filter(ended_at__isnull=True).values_list("id", "team_uid", "flavor_id", "owner_username",
                                                                          "units", "started_at"))
        floors.append(time.perf_counter() - tick)

    now = start + dt.timedelta(minutes=args.minutes)
    crossing = [minute for minute in range(1, args.minutes + 1)
                if hour_floor(start + dt.timedelta(minutes=minute)) != hour_floor(start + dt.timedelta(minutes=minute - 1))]
    check = time.perf_counter()
    differences = metering.recompute(start=hour_floor(start - dt.timedelta(hours=7)), end=now)
    recompute_seconds = time.perf_counter() - check
    return {
        "running_pods": len(running), "teams": args.teams, "flavors": len(flavors), "minutes": args.minutes,
        "per_minute": {"intervals_closed": closed_total // args.minutes, "intervals_opened": opened_total // args.minutes,
                       "borrowed_flips": flipped_total // args.minutes},
        "setup_seconds": round(setup_seconds, 1),
        "first_refresh_seconds (7 hours of history)": round(first_refresh, 2),
        "refresh_seconds_per_minute": {"median": round(statistics.median(timings), 3), "max": round(max(timings), 3),
                                       "all": [round(t, 3) for t in timings]},
        "hour_crossing (the minute reaching the boundary and the next)": {
            f"minute {minute}": {"wall": round(timings[minute - 1], 3), "portal_cpu": round(cpu_timings[minute - 1], 3),
                                 "database_cpu": round(database_cpu[minute - 1], 3)}
            for first in crossing for minute in (first, first + 1) if minute <= args.minutes},
        "portal_cpu_seconds_per_minute": {"median": round(statistics.median(cpu_timings), 3),
                                          "max": round(max(cpu_timings), 3), "all": [round(t, 3) for t in cpu_timings]},
        "database_cpu_seconds_per_minute": {"median": round(statistics.median(database_cpu), 3),
                                            "max": round(max(database_cpu), 3), "all": [round(t, 3) for t in database_cpu]},
        "portal_and_database_cpu_seconds_per_minute (median)": round(statistics.median(
            [a + b for a, b in zip(cpu_timings, database_cpu, strict=True)]), 3),
        "floor_seconds (one read of the running intervals)": round(statistics.median(floors), 3),
        "refresh_over_floor": round(statistics.median(timings) / statistics.median(floors), 1),
        "load_average_1min": round(os.getloadavg()[0], 1), "cpus": os.cpu_count(),
        "target_seconds": 1.0, "within_target": max(timings) < 1.0,
        "usage_rows": UsageHour.objects.count(),
        "recompute_seconds (7 hours)": round(recompute_seconds, 2), "differences_after_recompute": len(differences),
    }


def _backend_cpu_reader() -> Callable[[], float]:
    """CPU seconds the PostgreSQL backend serving this connection has used so far, read from /proc
    (the benchmark's PostgreSQL runs on this machine): with the portal's own CPU time, what a
    refresh costs whatever the machine's load does to the wall clock."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    ticks = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime

    return read


if __name__ == "__main__":
    main()

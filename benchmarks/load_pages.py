"""Fifty people at once on the main pages and API lists: gunicorn on PostgreSQL, at scale.

The database holds 100 teams (`--teams`), 10,000 workloads (`--workloads`) and 1,000,000 run
intervals (`--intervals`): the teams, flavors, rates and two months of hourly usage rollups come
from benchmarks/billing_pages.py's `seed`; this script adds each team's lead and members (some
people in several teams), grants, pending quota requests, the workloads with their timelines
(one INSERT … SELECT), the intervals (one INSERT … SELECT over generate_series, settled, one
open per running workload) and last month's closed statement.

First every page is fetched (twice: the second is counted) through Django's test Client, as the
role that uses it, with CaptureQueriesContext: its query count must stay within its bound in
QUERY_BOUNDS, the same at any scale, so a page whose queries grow with the data fails the run
(exit status 1, after the load figures are printed). Then gunicorn serves the portal on a free
loopback port (`--gunicorn-workers` sync workers, as the chart runs it), and for each number of
people in `--users` (50 and 200) locust (benchmarks/locustfile.py, headless, in its own process)
runs that many signed-in people (members, leads, finance in the same mix), each fetching their
pages in turn with a think time between requests, until `--seconds` pass or `--max-requests` are
made. A warm-up round (every page once per worker, not counted) comes first. The figures per page,
from locust's statistics: requests, p50, p95, max, failures (anything but 200, or a failed
connection); the target is p95 under 150 ms and 0 failures at 50 people; at 200 they are reported.
Locust's CSV files and HTML report of each run are kept in benchmarks/reports/load_pages/. Printed
as JSON.

    scripts/with-services.sh .venv/bin/python benchmarks/load_pages.py [--teams 100] [--workloads 10000]
        [--intervals 1000000] [--users 50,200] [--seconds 60] [--max-requests 5000] [--think 1.0 3.0]

With BENCH_PROFILE=workload-list,team-usage (page names) it prints a cProfile of those pages, with
BENCH_QUERIES=team-usage their queries.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results import record  # noqa: E402 - after the checkout is on the path; its import notes the load at the start

TARGET_MS = 150
REPORTS = ROOT / "benchmarks" / "reports" / "load_pages"
# Queries per request of each page, measured with the test client at the seeded scale; a bound
# does not depend on the number of teams, workloads or intervals. The workload page reads its
# intervals' guaranteed/borrowed switches (its borrowed history), the team usage page whether any
# GPU failed this month (the XID credit it would bring). Team usage and a statement read 22 and 12
# since 4152c63 at 10 teams as at 100 (its bounds were one short): four of the 22 are the simulated
# metrics door's (Prometheus answers over HTTP) and two Django's model permissions, read once a
# request when a rule says no in a template.
QUERY_BOUNDS = {
    "dashboard": 13, "team": 18, "workload-list": 17, "workload-detail": 15, "team-usage": 22, "my-usage": 11,
    "approvals": 15, "statements": 9, "statement-detail": 12, "finance-overview": 19,
    "api-workloads": 7, "api-teams": 10, "api-quota-requests": 8, "api-grants": 7, "api-memberships": 7,
    "api-flavors": 7, "api-notifications": 5, "api-usage": 12,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--teams", type=int, default=100)
    parser.add_argument("--workloads", type=int, default=10_000)
    parser.add_argument("--intervals", type=int, default=1_000_000)
    parser.add_argument("--users", type=lambda text: [int(n) for n in text.split(",")], default=[50, 200],
                        help="How many people at once, run after run (comma-separated).")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--max-requests", type=int, default=5000)
    parser.add_argument("--think", type=float, nargs=2, default=(1.0, 3.0), metavar=("MIN", "MAX"),
                        help="Seconds each person waits between two requests (uniform).")
    parser.add_argument("--gunicorn-workers", type=int, default=3, help="The chart's web.workers.")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("Run it on PostgreSQL: scripts/with-services.sh .venv/bin/python benchmarks/load_pages.py")
    os.environ.update({"PORTAL_VAR_DIR": os.environ.get("PORTAL_VAR_DIR") or tempfile.mkdtemp(prefix="gpu-portal-bench-"),
                       "PORTAL_CLUSTER": "simulated", "DJANGO_SETTINGS_MODULE": "portal.settings",
                       "CELERY_TASK_ALWAYS_EAGER": "1", "LOG_LEVEL": "WARNING"})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    result = run(args)
    print(json.dumps(result, indent=2))
    record("load_pages", result)
    over = [name for name, page in result["queries_per_page"].items() if not page["within_bound"]]
    if over:  # the load figures are still printed: a query bound is checked, not a reason to stop early
        sys.exit(f"Pages over their query bound: {', '.join(over)}")


@dataclass
class Person:
    username: str
    role: str  # member, lead or finance
    pages: list[tuple[str, str]] = field(default_factory=list)  # (page name, path)
    cookie: str = ""


def seed(args: argparse.Namespace) -> dict[str, Any]:
    from django.db import connection

    from benchmarks.billing_pages import seed as seed_billing
    from billing import periods
    from jobs.models import Workload, WorkloadTemplate, WorkloadTemplateVersion
    from portal.models import User
    from tenants.models import Flavor, Membership, QuotaGrant, QuotaRequest, QuotaRequestLine, Team

    rng = random.Random(13)
    now = dt.datetime.now(dt.UTC)
    month = periods.current_month()
    previous = periods.month_start(month - dt.timedelta(days=1))
    _, month_end = periods.month_bounds(month)
    previous_start, _ = periods.month_bounds(previous)
    started = time.perf_counter()
    billing = seed_billing(args.teams, 2, previous_start,
                           min(month_end, periods.next_hour(periods.hour_floor(now))), now)
    teams = list(Team.objects.order_by("slug"))
    flavors = list(Flavor.objects.order_by("pk"))
    since = previous_start - dt.timedelta(days=30)
    QuotaGrant.objects.bulk_create([QuotaGrant(team=t, flavor=f, units=8, valid_from=since) for t in teams for f in flavors])
    # A lead and four members per team; every fifth member is also a member of the next team.
    leads = User.objects.bulk_create([User(username=f"lead-{t.slug}", email=f"lead-{t.slug}@example.org") for t in teams])
    members = User.objects.bulk_create([User(username=f"member-{t.slug}-{n}", email=f"m-{t.slug}-{n}@example.org")
                                        for t in teams for n in range(4)])
    memberships = [Membership(team=t, user=u, role=Membership.Role.LEAD) for t, u in zip(teams, leads, strict=True)]
    for i, user in enumerate(members):
        team = teams[i // 4]
        memberships.append(Membership(team=team, user=user, role=Membership.Role.MEMBER))
        if i % 5 == 0 and len(teams) > 1:
            memberships.append(Membership(team=teams[(i // 4 + 1) % len(teams)], user=user, role=Membership.Role.MEMBER))
    Membership.objects.bulk_create(memberships)
    finance = [billing["finance"], *User.objects.bulk_create([User(username=f"finance-{n}", is_finance=True)
                                                             for n in range(4)])]
    # Two pending requests per team for its lead's approvals inbox.
    pending = QuotaRequest.objects.bulk_create([QuotaRequest(team=t, requester=leads[i], justification="More training.")
                                                for i, t in enumerate(teams) for _ in range(2)])
    QuotaRequestLine.objects.bulk_create([QuotaRequestLine(request=r, flavor=flavors[n % len(flavors)], units=2)
                                          for n, r in enumerate(pending)])

    template = WorkloadTemplate.objects.create(slug="bench-train", name="Bench training", kind="training")
    version = WorkloadTemplateVersion.objects.create(template=template, number=1, image="train:1")
    per_team = {t.pk: [*members[i * 4:(i + 1) * 4], leads[i]] for i, t in enumerate(teams)}
    workloads = []
    for n in range(args.workloads):
        team = teams[n % len(teams)]
        running = n % 10 == 0
        created = now - dt.timedelta(minutes=n % (60 * 24 * 60))
        workloads.append(Workload(
            team=team, owner=rng.choice(per_team[team.pk]), template_version=version, name=f"train-{n}",
            flavor=flavors[n % len(flavors)], units=1 + n % 4, cpu=4, memory_gib=16, priority="normal",
            phase="running" if running else "succeeded", reason="" if running else "Completed.",
            created_at=created, submitted_at=created, seen_in_cluster_at=created,
            finished_at=None if running else created + dt.timedelta(minutes=30)))
    Workload.objects.bulk_create(workloads, batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute("""
            INSERT INTO jobs_workloadtransition (workload_id, phase, reason, at)
            SELECT w.id, p.phase, p.reason, w.created_at + p.after
            FROM jobs_workload w CROSS JOIN (VALUES ('submitting', '', interval '0'), ('running', '', interval '5 seconds'),
                                                   ('succeeded', 'Completed.', interval '30 minutes')) AS p(phase, reason, after)
            WHERE p.phase <> 'succeeded' OR w.phase = 'succeeded'
        """)
        # Intervals spread over the workloads (a hash join on the workload's rank: the modulus is
        # a constant); the first of a running workload is still open.
        total = args.workloads
        cursor.execute("""
            INSERT INTO jobs_runinterval (workload_id, team_id, team_uid, owner_id, owner_username, flavor_id,
                                          fraction_numerator, fraction_denominator, borrowed, pod_uid, pod_name, node,
                                          resource_name, units, started_at, ended_at, metered_until, settled)
            SELECT w.id, w.team_id, t.uid, w.owner_id, u.username, w.flavor_id, f.fraction_numerator,
                   f.fraction_denominator, w.on_borrowed, 'bench-pod-' || g, 'wl-' || w.id || '-' || (g / %s),
                   'node-' || (g %% 50), f.resource_name, w.units, s.started,
                   CASE WHEN is_open THEN NULL ELSE s.started + interval '30 minutes' END,
                   CASE WHEN is_open THEN %s ELSE s.started + interval '30 minutes' END, NOT is_open
            FROM generate_series(0, %s - 1) AS g
            JOIN (SELECT id, team_id, owner_id, flavor_id, on_borrowed, units, phase,
                         row_number() OVER (ORDER BY id) - 1 AS n FROM jobs_workload) w ON w.n = g %% %s
            JOIN tenants_team t ON t.id = w.team_id
            JOIN portal_user u ON u.id = w.owner_id
            JOIN tenants_flavor f ON f.id = w.flavor_id
            CROSS JOIN LATERAL (SELECT g < %s AND w.phase = 'running' AS is_open,
                                       %s::timestamptz - (g %% 86400) * interval '1 minute' AS started) s
        """, [total, now, args.intervals, total, total, now])
        intervals = cursor.rowcount
        for table in ("jobs_workload", "jobs_workloadtransition", "jobs_runinterval", "tenants_membership",
                      "tenants_quotarequest", "tenants_quotagrant", "portal_user"):
            cursor.execute(f"ANALYZE {table}")
    closed = _close_previous(finance[0], previous)
    return {"teams": teams, "leads": leads, "members": members, "finance": finance, "previous": previous,
            "closed_statement": closed, "intervals": intervals, "usage_rows": billing["rows"],
            "seed_seconds": round(time.perf_counter() - started, 1)}


def _close_previous(actor: Any, previous: dt.date) -> str | None:
    """Last month's statement, closed as finance closes it (the statement pages read it)."""
    from billing.statements import services as statements

    statement = statements.statement_close(actor=actor, month=previous)
    return str(statement.slug)


def people(users: int, seeded: dict[str, Any]) -> list[Person]:
    """Members, leads and finance people of many teams, each with the pages their role uses."""
    from django.urls import reverse

    from jobs.models import Workload
    from tenants.models import Membership

    rng = random.Random(50)
    teams = seeded["teams"]
    by_user: dict[int, list[int]] = defaultdict(list)
    for team_id, user_id in Membership.objects.values_list("team_id", "user_id"):
        by_user[user_id].append(team_id)
    slugs = {t.pk: t.slug for t in teams}
    a_workload = {team_id: pk for pk, team_id in Workload.objects.order_by("pk").values_list("pk", "team_id")}
    api = [("api-workloads", "/api/workloads/"), ("api-teams", "/api/teams/"), ("api-quota-requests", "/api/quota-requests/"),
           ("api-grants", "/api/grants/"), ("api-memberships", "/api/memberships/"), ("api-flavors", "/api/flavors/"),
           ("api-notifications", "/api/notifications/")]

    def team_pages(user_id: int) -> list[tuple[str, str]]:
        team_id = rng.choice(by_user[user_id])
        return [("dashboard", reverse("tenants:dashboard")),
                ("team", reverse("tenants:team-detail", args=[slugs[team_id]])),
                ("workload-list", reverse("jobs:workload-list")),
                ("workload-detail", reverse("jobs:workload-detail", args=[a_workload[team_id]])),
                ("team-usage", reverse("billing:team-usage", args=[slugs[team_id]])),
                ("my-usage", reverse("billing:my-usage")),
                ("api-usage", f"/api/billing/usage/?team={slugs[team_id]}"), *api]

    made: list[Person] = []
    finance_count = max(1, users // 10)
    lead_count = max(1, (users - finance_count) // 3)
    for n in range(users - finance_count - lead_count):
        user = seeded["members"][(n * 7) % len(seeded["members"])]
        made.append(Person(user.username, "member", team_pages(user.pk)))
    for n in range(lead_count):
        user = seeded["leads"][(n * 3) % len(seeded["leads"])]
        made.append(Person(user.username, "lead", [*team_pages(user.pk), ("approvals", reverse("tenants:approvals")),
                                                   ("statements", reverse("billing:statement-list"))]))
    for n in range(finance_count):
        user = seeded["finance"][n % len(seeded["finance"])]
        team = rng.choice(teams)
        made.append(Person(user.username, "finance", [
            ("dashboard", reverse("tenants:dashboard")), ("finance-overview", reverse("billing:finance-overview")),
            ("statements", reverse("billing:statement-list")),
            ("statement-detail", reverse("billing:statement-detail", args=[seeded["closed_statement"]])),
            ("team-usage", reverse("billing:team-usage", args=[team.slug])),
            ("api-usage", "/api/billing/usage/?by=team"), ("api-teams", "/api/teams/")]))
    return made


def sign_in(persons: list[Person]) -> None:
    """A session for each person, as the login form leaves it (the login itself is not measured)."""
    from django.conf import settings
    from django.test import Client

    from portal.models import User

    users = {u.username: u for u in User.objects.filter(username__in=[p.username for p in persons])}
    for person in persons:
        client = Client()
        client.force_login(users[person.username])
        person.cookie = client.cookies[settings.SESSION_COOKIE_NAME].value


def count_queries(persons: list[Person]) -> dict[str, dict[str, Any]]:
    """Queries of each page, through the test client as one person who uses it (after a first
    request that fills the per-process caches), and its time alone (median of 3): under load a
    page's latency is mostly its wait behind the others, this says which pages cost the time."""
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    setup_test_environment()
    settings.ALLOWED_HOSTS = ["*"]
    counted: dict[str, dict[str, Any]] = {}
    for person in persons:
        client = Client()
        client.cookies[settings.SESSION_COOKIE_NAME] = person.cookie
        for name, path in person.pages:
            if name in counted:
                continue
            first = client.get(path)
            assert first.status_code == 200, (person.username, path, first.status_code)
            connection.queries_log.clear()  # a full log (9,000 entries) would make every capture look empty
            with CaptureQueriesContext(connection) as captured:
                response = client.get(path)
            assert response.status_code == 200, (person.username, path, response.status_code)
            queries = len(captured)
            if name in os.environ.get("BENCH_QUERIES", "").split(","):
                print(f"--- queries of {name} {path}", *(q["sql"][:300] for q in captured), sep="\n", file=sys.stderr)
            if name in os.environ.get("BENCH_PROFILE", "").split(","):
                import cProfile
                import pstats

                profiler = cProfile.Profile()
                profiler.runcall(client.get, path)
                print(f"--- profile of {name} {path}", file=sys.stderr)
                pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
            alone = []  # the page's own cost with no other request in flight, in this process
            for _ in range(3):
                began = time.perf_counter()
                client.get(path)
                alone.append((time.perf_counter() - began) * 1000)
            counted[name] = {"path": path, "as": person.role, "queries": queries, "bound": QUERY_BOUNDS[name],
                             "within_bound": queries <= QUERY_BOUNDS[name],
                             "alone_median_ms": round(statistics.median(alone), 1)}
    return counted


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_gunicorn(workers: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "DEBUG": "0", "CELERY_TASK_ALWAYS_EAGER": "0"}
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "portal.wsgi:application", "--bind", f"127.0.0.1:{port}",
         "--workers", str(workers), "--worker-tmp-dir", "/tmp", "--log-level", "warning"],
        cwd=ROOT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    import requests

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:  # the socket takes connections before the workers have loaded Django
            if requests.get(f"{base}/healthz", timeout=10).status_code == 200:
                return process, base
        except requests.RequestException:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {process.returncode}")
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)
    raise RuntimeError("gunicorn did not answer /healthz within 90 s")


def warm_up(persons: list[Person], base: str, workers: int) -> None:
    """Every page once per gunicorn worker, not counted: templates compile per process."""
    import requests
    from django.conf import settings

    warm = requests.Session()
    for who, path in {name: (person, path) for person in persons for name, path in person.pages}.values():
        warm.headers["Cookie"] = f"{settings.SESSION_COOKIE_NAME}={who.cookie}"
        for _ in range(workers):
            warm.get(base + path, allow_redirects=False, timeout=10)


def locust_load(persons: list[Person], base: str, args: argparse.Namespace, reports: Path) -> dict[str, Any]:
    """One headless locust run of the persons against `base`, its CSV files and HTML report kept in
    `reports`; the figures per page from its statistics."""
    from django.conf import settings

    shutil.rmtree(reports, ignore_errors=True)
    reports.mkdir(parents=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as listed:
        json.dump([{"cookie": p.cookie, "pages": p.pages} for p in persons], listed)
    env = {**os.environ, "LOAD_PAGES_PEOPLE": listed.name, "LOAD_PAGES_THINK": ",".join(map(str, args.think)),
           "LOAD_PAGES_MAX_REQUESTS": str(args.max_requests), "LOAD_PAGES_COOKIE": settings.SESSION_COOKIE_NAME}
    users = len(persons)
    began = time.monotonic()
    subprocess.run(
        [str(Path(sys.executable).parent / "locust"), "-f", str(ROOT / "benchmarks" / "locustfile.py"), "--headless",
         "--host", base, "--users", str(users), "--spawn-rate", str(max(users // 5, 1)),
         "--run-time", f"{int(args.seconds)}s", "--stop-timeout", "10", "--only-summary", "--loglevel", "WARNING",
         "--csv", str(reports / "locust"), "--html", str(reports / "report.html")],
        cwd=ROOT, env=env, check=False, stdout=subprocess.DEVNULL, timeout=args.seconds + 120)
    elapsed = time.monotonic() - began
    os.unlink(listed.name)
    pages: dict[str, Any] = {}
    total = failures = 0
    with open(reports / "locust_stats.csv", newline="", encoding="utf-8") as stats:
        for row in csv.DictReader(stats):
            requests_, failed = int(row["Request Count"]), int(row["Failure Count"])
            if row["Name"] == "Aggregated":
                total, failures = requests_, failed
                continue
            p95 = float(row["95%"]) if row["95%"] != "N/A" else 0.0
            pages[row["Name"]] = {"requests": requests_, "p50_ms": float(row["50%"]), "p95_ms": p95,
                                  "max_ms": round(float(row["Max Response Time"]), 1), "failures": failed,
                                  "under_target": p95 < TARGET_MS and not failed}
    with open(reports / "locust_failures.csv", newline="", encoding="utf-8") as failed_file:
        for row in csv.DictReader(failed_file):
            kinds = pages.setdefault(row["Name"], {}).setdefault("failure_kinds", {})
            kinds[row["Error"]] = kinds.get(row["Error"], 0) + int(row["Occurrences"])
    return {"people": users, "requests": total, "seconds": round(elapsed, 1),
            "requests_per_second": round(total / elapsed, 1) if elapsed else 0.0, "failures": failures,
            "reports": str(reports.relative_to(ROOT)), "pages": dict(sorted(pages.items()))}


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    say("seeding")
    seeded = seed(args)
    say(f"seeded in {seeded['seed_seconds']} s; counting queries per page")
    persons = people(max(args.users), seeded)
    sign_in(persons)
    queries = count_queries(persons)
    result: dict[str, Any] = {
        "commit": os.popen(f"git -C {ROOT} describe --always --dirty").read().strip(),
        "teams": args.teams, "workloads": args.workloads, "run_intervals": seeded["intervals"],
        "usage_hour_rows": seeded["usage_rows"], "seed_seconds": seeded["seed_seconds"],
        "think_seconds": list(args.think), "gunicorn_workers": args.gunicorn_workers, "target_p95_ms": TARGET_MS,
        "load_average_before": [round(x, 2) for x in os.getloadavg()], "queries_per_page": queries,
    }
    say("starting gunicorn")
    process, base = start_gunicorn(args.gunicorn_workers)
    try:
        result["load"] = {}
        for users in args.users:
            crowd = people(users, seeded)
            sign_in(crowd)
            warm_up(crowd, base, args.gunicorn_workers)
            say(f"gunicorn on {base}: {users} people for {args.seconds} s (locust)")
            result["load"][f"{users}_people"] = {
                "mix": {role: sum(p.role == role for p in crowd) for role in ("member", "lead", "finance")},
                **locust_load(crowd, base, args, REPORTS / f"{users}-people")}
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    first = result["load"][f"{args.users[0]}_people"]
    result[f"all_under_target_at_{args.users[0]}_people"] = all(page["under_target"] for page in first["pages"].values())
    return result


if __name__ == "__main__":
    main()

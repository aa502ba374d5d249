"""Web replicas behind one address (issue 28 §2): gunicorn on PostgreSQL at load_pages.py's scale.

Debian's haproxy listens on a loopback port and balances over gunicorn replicas (each
`--workers-per-replica` sync workers, as one chart web pod runs them; haproxy holds no more
requests on a replica than it has workers and queues the rest), checking each one's /healthz every
second, taking a replica out at its first refused connection (`observe layer4`) and sending a
request whose connection failed, or that got no answer, to the other replica (`retry-on`; the
pages are GETs). The people and their pages are load_pages.py's, run
by locust (benchmarks/locustfile.py) with a short think time, so the replicas are the bottleneck:

1. throughput: the same crowd for `--seconds` against one replica behind haproxy, then two;
   requests per second and p95 of each, and the ratio of two to one;
2. failover: the crowd against two replicas; a third of the way through, one replica (its master
   and workers) is killed with SIGKILL; locust's failures are counted: only requests in flight
   when it died may fail, and haproxy retries those whose connection broke.

The target ratio (1.8) assumes cores for the second replica: on a machine whose cores the first
already fills, the ratio says so. Celery workers and beat are not in this run: a worker killed
mid-task and beat's leader moving are the fault suite's (tests/portal/test_worker_killed.py, run
at full size by `make bench`).

    scripts/with-services.sh .venv/bin/python benchmarks/scale_out.py [--users 100] [--seconds 60]
        [--workers-per-replica 1] [--teams 100] [--workloads 10000] [--intervals 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import load_pages  # noqa: E402 - after the checkout is on the path
from benchmarks.results import record  # noqa: E402 - after the checkout is on the path; its import notes the load at the start

REPORTS = ROOT / "benchmarks" / "reports" / "scale_out"
TARGET_RATIO = 1.8


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--teams", type=int, default=100)
    parser.add_argument("--workloads", type=int, default=10_000)
    parser.add_argument("--intervals", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--max-requests", type=int, default=50_000)
    parser.add_argument("--think", type=float, nargs=2, default=(0.2, 0.6), metavar=("MIN", "MAX"))
    parser.add_argument("--workers-per-replica", type=int, default=1)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("Run it on PostgreSQL: scripts/with-services.sh .venv/bin/python benchmarks/scale_out.py")
    if shutil.which("haproxy") is None:
        sys.exit("It needs Debian's haproxy: scripts/apt.sh haproxy")
    os.environ.update({"PORTAL_VAR_DIR": os.environ.get("PORTAL_VAR_DIR") or tempfile.mkdtemp(prefix="gpu-portal-bench-"),
                       "PORTAL_CLUSTER": "simulated", "DJANGO_SETTINGS_MODULE": "portal.settings",
                       "CELERY_TASK_ALWAYS_EAGER": "1", "LOG_LEVEL": "WARNING"})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    figures = run(args)
    print(json.dumps(figures, indent=2))
    record("scale_out", figures)


def start_haproxy(backends: list[str], workers: int) -> tuple[subprocess.Popen[bytes], str, Path]:
    """haproxy on a free loopback port over the gunicorn replicas at `backends` (http://host:port),
    holding at most `workers` requests on each at once (one a sync worker), the rest queued in
    haproxy: a replica's backlog stays empty, so its health check is answered between requests."""
    port = load_pages.free_port()
    servers = "\n".join(f"  server web{n} {base.removeprefix('http://')} check" for n, base in enumerate(backends))
    config = Path(tempfile.mkdtemp(prefix="gpu-portal-haproxy-")) / "haproxy.cfg"
    config.write_text(f"""global
  maxconn 4000
defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  retries 3
  option redispatch 1
  retry-on conn-failure empty-response response-timeout
frontend portal
  bind 127.0.0.1:{port}
  default_backend web
backend web
  balance leastconn
  timeout queue 30s
  timeout check 5s
  option httpchk GET /healthz
  http-check expect status 200
  default-server maxconn {workers} inter 1s fall 3 rise 2 observe layer4 error-limit 1 on-error mark-down
{servers}
""")
    process = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stdout=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    import requests

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{base}/healthz", timeout=5).status_code == 200:
                return process, base, config
        except requests.RequestException:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"haproxy exited with {process.returncode}")
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    raise RuntimeError("haproxy did not answer /healthz within 30 s")


def stop(process: subprocess.Popen[bytes], how: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        os.killpg(process.pid, how)
    process.wait(timeout=15)


def crowd_run(replicas: int, crowd: list[load_pages.Person], args: argparse.Namespace, name: str,
              kill_after: float | None = None) -> dict[str, Any]:
    """`replicas` gunicorns behind haproxy, the crowd for args.seconds; with `kill_after`, the
    first replica is killed (SIGKILL, master and workers) that many seconds into the run."""
    started = [load_pages.start_gunicorn(args.workers_per_replica) for _ in range(replicas)]
    proxy, base, config = start_haproxy([address for _, address in started], args.workers_per_replica)
    killed: list[float] = []
    try:
        for _, address in started:
            load_pages.warm_up(crowd, address, args.workers_per_replica)
        timer = None
        if kill_after is not None:
            def kill() -> None:
                killed.append(time.monotonic())
                os.killpg(started[0][0].pid, signal.SIGKILL)
            timer = threading.Timer(kill_after, kill)
            timer.start()
        load_pages.say(f"{name}: {len(crowd)} people on {replicas} replica(s) behind {base} for {args.seconds} s")
        figures = load_pages.locust_load(crowd, base, args, REPORTS / name)
        if timer is not None:
            timer.cancel()
    finally:
        stop(proxy)
        for process, _ in started:
            stop(process)
        shutil.rmtree(config.parent, ignore_errors=True)
    aggregated = {key: figures[key] for key in ("requests", "requests_per_second", "failures", "seconds", "reports")}
    slowest = max(figures["pages"].values(), key=lambda page: page["p95_ms"])
    return {"replicas": replicas, **aggregated, "p95_ms_slowest_page": slowest["p95_ms"],
            "p95_ms_by_page": {page: values["p95_ms"] for page, values in figures["pages"].items()},
            "failure_kinds": failure_kinds(figures["pages"]),
            **({"killed_replica_after_seconds": kill_after} if kill_after is not None else {})}


def failure_kinds(pages: dict[str, Any]) -> dict[str, int]:
    """Locust's failures of every page, summed by what went wrong ("HTTP 503", a reset connection)."""
    summed: dict[str, int] = {}
    for page in pages.values():
        for kind, count in page.get("failure_kinds", {}).items():
            summed[kind] = summed.get(kind, 0) + count
    return summed


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_pages.say("seeding")
    seeded = load_pages.seed(args)
    crowd = load_pages.people(args.users, seeded)
    load_pages.sign_in(crowd)
    one = crowd_run(1, crowd, args, "one-replica")
    two = crowd_run(2, crowd, args, "two-replicas")
    failover = crowd_run(2, crowd, args, "failover", kill_after=args.seconds / 3)
    ratio = round(two["requests_per_second"] / one["requests_per_second"], 2) if one["requests_per_second"] else 0.0
    return {"teams": args.teams, "workloads": args.workloads, "run_intervals": seeded["intervals"], "people": args.users,
            "think_seconds": list(args.think), "workers_per_replica": args.workers_per_replica,
            "cores": os.cpu_count(), "one_replica": one, "two_replicas": two,
            "throughput_ratio": ratio, "target_ratio": TARGET_RATIO, "ratio_reached": ratio >= TARGET_RATIO,
            "failover": failover}


if __name__ == "__main__":
    main()

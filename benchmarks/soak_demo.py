"""Soak: the demo's processes under steady launches, checking that nothing gets stuck.

The demo's worker once died after 18 minutes of a half-written broker message, and every later
launch stayed 'Submitting' while /healthz said ok. This starts the processes as scripts/demo.sh
does (SQLite, the file-system broker, the simulated cluster; its own var dir and a free port on
127.0.0.1), launches a training workload through the REST API every --interval seconds as a
demo member, stops every third one shortly after, polls /readyz, and at the end checks that:

- every accepted launch left 'submitting' (and none is left in it),
- the worker stayed up, or was restarted by the supervisor and work went on,
- readiness stayed ok,
- no broker message was quarantined and no worker died of an unrecoverable error.

Bounded by --minutes and --max-launches; loopback only. `make soak` runs the full 30 minutes;
tests/portal/test_soak.py runs about a minute of it.

    .venv/bin/python benchmarks/soak_demo.py [--minutes 30] [--max-launches 1000] [--interval 2]
        [--kill-worker-after SECONDS] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results import record  # noqa: E402 - after the checkout is on the path; its import notes the load at the start
from benchmarks.stats import percentile  # noqa: E402 - after the checkout is on the path

PYTHON = sys.executable
# How long launches may take to leave 'submitting' once launching stops, before counting as stuck.
DRAIN_SECONDS = 60.0
READY_WAIT_SECONDS = 120.0
STOP_AFTER_SECONDS = 10.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Launch:
    id: int
    at: float
    stop_at: float | None
    left_submitting_after: float | None = None
    phase: str = "submitting"
    stopped: bool = False


@dataclass
class Figures:
    launches_attempted: int = 0
    launches_accepted: int = 0
    launch_errors: list[str] = field(default_factory=list)
    stops_sent: int = 0
    stop_errors: list[str] = field(default_factory=list)
    readiness_samples: int = 0
    readiness_not_ok: list[str] = field(default_factory=list)


class Portal:
    """The demo's processes in a var dir of their own, and a small REST client for them."""

    def __init__(self, var_dir: Path, port: int) -> None:
        self.var_dir = var_dir
        self.base = f"http://127.0.0.1:{port}"
        self.port = port
        self.env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "PORTAL_PRODUCTION"}}
        # The embedded defaults, whatever the caller's environment (make test sets PostgreSQL and Redis).
        self.env.update(PORTAL_VAR_DIR=str(var_dir), DJANGO_SETTINGS_MODULE="portal.settings", PORTAL_CLUSTER="simulated",
                        CELERY_TASK_ALWAYS_EAGER="0",
                        # One token launches steadily on purpose; the per-user rate is not what is measured.
                        PORTAL_LAUNCH_RATE="1000000/minute", PORTAL_TEAM_MAX_WORKLOADS="1000000")
        self.supervisor: subprocess.Popen[bytes] | None = None
        self.token = ""

    def manage(self, *args: str) -> str:
        result = subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True,  # noqa: S603
                                text=True, timeout=300, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def prepare(self) -> None:
        self.manage("migrate", "--noinput", "-v0")
        self.manage("seed_demo")
        self.manage("reconcile_cluster")
        out = self.manage("shell", "-c", (
            "from portal.models import User; from portal import tokens; "
            "print(tokens.api_token_create(user=User.objects.get(username='alice'), name='soak', expires_in_days=1)[1])"
        ))
        self.token = out.strip().splitlines()[-1]

    def start(self) -> None:
        log = open(self.var_dir / "run_demo_processes.out", "ab")  # noqa: SIM115 - lives as long as the child
        self.supervisor = subprocess.Popen(  # noqa: S603
            [PYTHON, "manage.py", "run_demo_processes", "--web", f"127.0.0.1:{self.port}"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def stop(self) -> None:
        if self.supervisor is None or self.supervisor.poll() is not None:
            return
        self.supervisor.send_signal(signal.SIGTERM)
        try:
            self.supervisor.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.supervisor.pid, signal.SIGKILL)
            self.supervisor.wait()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, *, auth: bool = True,
             timeout: float = 15) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)  # noqa: S310 - loopback
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if auth:
            request.add_header("Authorization", f"Token {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw or b"null")
            except ValueError:
                return error.code, raw.decode(errors="replace")[:300]

    def readiness(self) -> tuple[bool, list[str]]:
        try:
            status, body = self.call("GET", "/readyz", auth=False, timeout=10)
        except OSError as error:
            return False, [f"/readyz did not answer: {error}"]
        return status == 200, (body or {}).get("problems", []) if isinstance(body, dict) else [str(body)]

    def wait_ready(self, seconds: float) -> list[str]:
        deadline = time.monotonic() + seconds
        problems: list[str] = ["not asked yet"]
        while time.monotonic() < deadline:
            ok, problems = self.readiness()
            if ok:
                return []
            time.sleep(1)
        return problems

    def phase_counts(self) -> dict[str, int]:
        """How many of the member's team's workloads are in each phase, by the API's list counts."""
        counts = {}
        for phase in ("submitting", "queued", "admitted", "running", "preempted", "succeeded", "failed", "stopped"):
            status, body = self.call("GET", f"/api/workloads/?team=vision&phase={phase}&page_size=1")
            counts[phase] = body["count"] if status == 200 else -1
        return counts

    def live_children(self) -> list[int]:
        """Processes the supervisor started that are still alive (after stop: none should be)."""
        pids = [int(line.split("(pid ")[1].split(")")[0])
                for line in (self.var_dir / "supervisor.log").read_text().splitlines() if "started " in line and "(pid " in line]
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            alive.append(pid)
        return alive

    def worker_pid(self) -> int | None:
        """The worker's pid, from the supervisor's log (its latest start)."""
        pid = None
        for line in (self.var_dir / "supervisor.log").read_text().splitlines():
            if "started worker (pid " in line:
                pid = int(line.split("started worker (pid ")[1].split(")")[0])
        return pid


def soak(args: argparse.Namespace) -> dict[str, Any]:
    var_dir = Path(args.var_dir or tempfile.mkdtemp(prefix="gpu-portal-soak-"))
    var_dir.mkdir(parents=True, exist_ok=True)
    portal = Portal(var_dir, args.port or free_port())
    figures = Figures()
    launches: dict[int, Launch] = {}
    started = time.monotonic()
    try:
        portal.prepare()
        portal.start()
        if problems := portal.wait_ready(READY_WAIT_SECONDS):
            raise RuntimeError(f"the demo did not become ready in {READY_WAIT_SECONDS:.0f} s: {problems}")
        ready_after = time.monotonic() - started
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        next_launch = next_ready = next_poll = t0
        killed_worker_at: float | None = None
        while True:
            now = time.monotonic()
            launching = now < end and figures.launches_attempted < args.max_launches
            pending = [w for w in launches.values() if w.left_submitting_after is None]
            if not launching and (not pending or now > max(end, t0) + DRAIN_SECONDS):
                break
            if (args.kill_worker_after is not None and killed_worker_at is None
                    and now - t0 >= args.kill_worker_after and (pid := portal.worker_pid())):
                os.killpg(pid, signal.SIGKILL)  # as the kombu bug did: no warning, no cleanup
                killed_worker_at = now - t0
            if launching and now >= next_launch:
                next_launch += args.interval
                figures.launches_attempted += 1
                n = figures.launches_attempted
                try:
                    status, body = portal.call("POST", "/api/workloads/", {
                        "team": "vision", "template": "pytorch-training", "flavor": "h100-80gb", "units": 1,
                        "name": f"soak-{n}", "parameters": {"epochs": 1}})
                except OSError as error:
                    figures.launch_errors.append(f"#{n}: {error}")
                else:
                    if status == 201:
                        figures.launches_accepted += 1
                        launches[body["id"]] = Launch(body["id"], time.monotonic(),
                                                      time.monotonic() + STOP_AFTER_SECONDS if n % 3 == 0 else None)
                    else:
                        figures.launch_errors.append(f"#{n}: HTTP {status} {str(body)[:200]}")
            for launch in launches.values():
                if launch.stop_at is not None and not launch.stopped and now >= launch.stop_at:
                    launch.stopped = True
                    figures.stops_sent += 1
                    try:
                        status, body = portal.call("POST", f"/api/workloads/{launch.id}/stop/")
                        if status >= 400 and "not active" not in str(body).lower():
                            figures.stop_errors.append(f"{launch.id}: HTTP {status} {str(body)[:200]}")
                    except OSError as error:
                        figures.stop_errors.append(f"{launch.id}: {error}")
            if now >= next_poll:
                next_poll = now + 1.0
                for launch in pending:
                    try:
                        status, body = portal.call("GET", f"/api/workloads/{launch.id}/")
                    except OSError:
                        continue
                    if status == 200 and body["phase"] != "submitting":
                        launch.phase = body["phase"]
                        launch.left_submitting_after = time.monotonic() - launch.at
            if now >= next_ready:
                next_ready = now + 5.0
                ok, problems = portal.readiness()
                figures.readiness_samples += 1
                if not ok:
                    figures.readiness_not_ok.append(f"{now - t0:.0f} s: {'; '.join(problems)}")
            time.sleep(0.05)
        soaked = time.monotonic() - t0
        final_ready, final_problems = portal.readiness()
        final_phases = portal.phase_counts()
    finally:
        portal.stop()
    left_running = portal.live_children()
    result = report(args, portal, figures, launches, ready_after=ready_after, soaked=soaked,
                    final_ready=final_ready, final_problems=final_problems, killed_worker_at=killed_worker_at)
    # For reading, not judged: queueing behind a full quota is the cluster's answer, not a stuck portal.
    result["final_phases"] = final_phases
    # Stopping the supervisor (as Ctrl-C does) must stop everything it started.
    result["processes_left_running_after_stop"] = left_running
    if left_running:
        result["failures"].append(f"{len(left_running)} process(es) still running after the supervisor stopped")
        result["ok"] = False
    return result


def report(args: argparse.Namespace, portal: Portal, figures: Figures, launches: dict[int, Launch], *,
           ready_after: float, soaked: float, final_ready: bool, final_problems: list[str],
           killed_worker_at: float | None) -> dict[str, Any]:
    var = portal.var_dir
    supervisor_log = (var / "supervisor.log").read_text()
    restarts = {name: supervisor_log.count(f"supervisor: {name} (pid") for name in ("worker", "beat", "watcher", "web")}
    worker_log = (var / "worker.log").read_text(errors="replace") if (var / "worker.log").exists() else ""
    quarantined = sorted(os.listdir(var / "broker" / "quarantine")) if (var / "broker" / "quarantine").exists() else []
    latencies = [w.left_submitting_after for w in launches.values() if w.left_submitting_after is not None]
    stuck = sorted(w.id for w in launches.values() if w.left_submitting_after is None)
    phases: dict[str, int] = {}
    for w in launches.values():
        phases[w.phase] = phases.get(w.phase, 0) + 1
    result: dict[str, Any] = {
        "minutes_requested": args.minutes,
        "soaked_seconds": round(soaked, 1),
        "ready_after_start_seconds": round(ready_after, 1),
        "launches_attempted": figures.launches_attempted,
        "launches_accepted": figures.launches_accepted,
        "launch_errors": figures.launch_errors[:10],
        "launch_error_count": len(figures.launch_errors),
        "stops_sent": figures.stops_sent,
        "stop_errors": figures.stop_errors[:10],
        "left_submitting": len(latencies),
        "stuck_in_submitting": stuck[:20],
        "stuck_count": len(stuck),
        "phase_first_seen_after_submitting": phases,
        "submitting_to_next_phase_seconds": {
            "p50": round(statistics.median(latencies), 2) if latencies else None,
            "p95": round(percentile(latencies, 0.95), 2), "max": round(max(latencies), 2) if latencies else None,
            "note": "upper bounds: each pending workload is read once a second",
        },
        "readiness_samples": figures.readiness_samples,
        "readiness_not_ok": figures.readiness_not_ok[:10],
        "readiness_not_ok_count": len(figures.readiness_not_ok),
        "final_readiness_ok": final_ready,
        "final_readiness_problems": final_problems,
        "restarts": restarts,
        "worker_killed_at_second": round(killed_worker_at, 1) if killed_worker_at is not None else None,
        "unrecoverable_errors_in_worker_log": worker_log.count("Unrecoverable error"),
        "quarantined_broker_messages": len(quarantined),
        "var_dir": str(var),
    }
    failures = []
    if figures.launches_accepted == 0:
        failures.append("no launch was accepted")
    if figures.launch_errors:
        failures.append(f"{len(figures.launch_errors)} launch(es) failed")
    if stuck:
        failures.append(f"{len(stuck)} workload(s) still submitting after {DRAIN_SECONDS:.0f} s of drain")
    if figures.readiness_not_ok or not final_ready:
        failures.append("readiness was not ok at some point")
    if result["unrecoverable_errors_in_worker_log"]:
        failures.append("the worker logged an unrecoverable error")
    if quarantined:
        failures.append(f"{len(quarantined)} broker message(s) quarantined")
    unexpected = {name: n for name, n in restarts.items() if n and not (name == "worker" and killed_worker_at is not None)}
    if unexpected:
        failures.append(f"processes exited on their own: {unexpected}")
    result["failures"] = failures
    result["ok"] = not failures
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to keep launching (default 30)")
    parser.add_argument("--max-launches", type=int, default=1000, help="stop launching after this many (default 1000)")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between launches (default 2)")
    parser.add_argument("--port", type=int, default=0, help="web port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--var-dir", help="the demo's var dir (default: a new temporary one)")
    parser.add_argument("--kill-worker-after", type=float, help="SIGKILL the worker once, this many seconds in")
    parser.add_argument("--keep", action="store_true", help="keep the var dir (logs, database) afterwards")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.minutes > 120 or args.max_launches > 5000:
        parser.error("bounded on purpose: at most 120 minutes and 5000 launches")
    result = soak(args)
    text = json.dumps(result, indent=2)
    print(text)
    record("soak_demo", result)
    if args.json:
        Path(args.json).write_text(text)
    if not args.keep and not args.var_dir:
        shutil.rmtree(result["var_dir"], ignore_errors=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

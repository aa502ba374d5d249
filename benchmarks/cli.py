"""The command-line client against a portal on its embedded defaults (SQLite, the simulated cluster,
tasks run at once), served by `manage.py runserver` on loopback: how long `gpu-portal launch` and
`gpu-portal status` take as a person runs them (the whole program, Python's start included), and
how soon `gpu-portal logs --follow` prints a line after the pod writes it.

The simulated pod writes a line when its phase changes; each run here lasts 30 simulated seconds,
so once the client follows its log the clock starts when this script makes it end (advancing the
simulated cluster, in the shared database, until the pod reads Succeeded: it has then written
"[simulated] phase Succeeded") and stops when the client prints that line.

    .venv/bin/python benchmarks/cli.py [--runs 20] [--follows 5]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results import record  # noqa: E402 - after the checkout is on the path
from benchmarks.stats import percentile  # noqa: E402


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cli(env: dict[str, str], *args: str) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gpu_portal_cli", "-o", "json", *args], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"gpu-portal {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return took, json.loads(done.stdout)


def _figures(values: list[float]) -> dict[str, float]:
    return {"p50_s": round(percentile(values, 0.5), 3), "p95_s": round(percentile(values, 0.95), 3),
            "max_s": round(max(values), 3), "count": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--follows", type=int, default=5)
    args = parser.parse_args()

    var = tempfile.mkdtemp(prefix="gpu-portal-bench-cli-")
    server_env = {**os.environ, "PORTAL_VAR_DIR": var, "PORTAL_CLUSTER": "simulated", "DJANGO_SETTINGS_MODULE": "portal.settings",
                  "CELERY_TASK_ALWAYS_EAGER": "1", "LOG_LEVEL": "WARNING", "DEBUG": "false",
                  "ALLOWED_HOSTS": "127.0.0.1,localhost",
                  "PORTAL_POD_ANNOTATIONS": json.dumps({"gpu-portal.io/simulated-run-seconds": "30"})}
    for key in ("DATABASE_URL", "REDIS_URL"):
        server_env.pop(key, None)
    os.environ.clear()
    os.environ.update(server_env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    secret, team, flavor, template = _seed(args.runs + args.follows)

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"], cwd=ROOT,
                              env=server_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(url)
        cli_env = {**server_env, "PYTHONPATH": str(ROOT / "cli" / "src"), "GPU_PORTAL_URL": url, "GPU_PORTAL_TOKEN": secret}
        launches, statuses = [], []
        for index in range(args.runs):
            took, workload = _cli(cli_env, "launch", template, "--team", team, "--flavor", flavor, "--units", "1",
                                  "--name", f"bench-{index}")
            launches.append(took)
            took, _ = _cli(cli_env, "status", str(workload["id"]))
            statuses.append(took)
        follows = [_follow_once(cli_env, template, team, flavor, index) for index in range(args.follows)]
    finally:
        server.terminate()
        server.wait(timeout=30)
    figures = {"launch": _figures(launches), "status": _figures(statuses), "logs_follow_line": _figures(follows),
               "server": "manage.py runserver, SQLite, simulated cluster, tasks eager"}
    print(json.dumps(figures, indent=2))
    record("cli", figures)


def _seed(units: int) -> tuple[str, str, str, str]:
    from billing.rates import services as billing_services
    from jobs import services
    from portal import tokens
    from portal.models import User
    from tenants import reconcile
    from tenants.models import Flavor, Membership, QuotaGrant, Team

    admin = User.objects.create(username="bench-admin", is_platform_admin=True)
    member = User.objects.create(username="bench-member")
    flavor = Flavor.objects.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", gpu_model="H100",
                                   capacity_units=units, node_labels={"gpu": "h100"})
    billing_services.rate_set(actor=admin, flavor=flavor, price_per_gpu_hour="2.75")
    team = Team.objects.create(slug="bench", name="Bench")
    Membership.objects.create(team=team, user=member, role=Membership.Role.MEMBER)
    QuotaGrant.objects.create(team=team, flavor=flavor, units=units)
    reconcile.platform_reconcile()
    reconcile.team_reconcile(team_id=team.pk)
    services.image_registry_add(user=admin, prefix="registry.example.com")
    services.template_create(user=admin, slug="bench-train", name="Bench", kind="training", flavors=[flavor],
                             image="registry.example.com/train:1", command=["python", "train.py"], parameters=[],
                             max_units=1)
    _, secret = tokens.api_token_create(user=member, name="bench", expires_in_days=1)
    return secret, team.slug, flavor.slug, "bench-train"


def _wait_for(url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=2).read()  # noqa: S310 - loopback
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"the server at {url} did not answer within 60 s") from None
            time.sleep(0.2)


def _follow_once(env: dict[str, str], template: str, team: str, flavor: str, index: int) -> float:
    """Seconds from the pod writing its last line (it ended) to the client printing it."""
    from jobs import sync
    from jobs.models import Workload
    from portal.kube import gateway

    _, workload = _cli(env, "launch", template, "--team", team, "--flavor", flavor, "--units", "1", "--name", f"follow-{index}")
    follow = subprocess.Popen([sys.executable, "-m", "gpu_portal_cli", "logs", str(workload["id"]), "--follow"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    printed: queue.Queue[tuple[float, str]] = queue.Queue()
    assert follow.stdout is not None
    stream = follow.stdout
    def read() -> None:
        for line in stream:
            printed.put((time.perf_counter(), line))

    threading.Thread(target=read, daemon=True).start()
    try:
        cluster = gateway()
        name = Workload.objects.get(pk=workload["id"]).k8s_name

        def phase() -> str:
            pods, _ = cluster.list("v1", "Pod", namespace=team)
            return next(((p.get("status") or {}).get("phase", "") for p in pods if p["metadata"]["name"].startswith(name)), "")

        while phase() != "Running":
            cluster.advance(1)  # type: ignore[attr-defined]
        while "phase Running" not in printed.get(timeout=60)[1]:
            pass  # the client follows the running pod's log
        written = 0.0
        for _ in range(120):
            cluster.advance(1)  # type: ignore[attr-defined]
            if phase() == "Succeeded":
                written = time.perf_counter()
                break
        if not written:
            raise SystemExit(f"the pod of {name} did not end")
        while True:
            at, line = printed.get(timeout=60)
            if "phase Succeeded" in line:
                sync.sync_all()
                return at - written
    finally:
        follow.kill()


if __name__ == "__main__":
    main()

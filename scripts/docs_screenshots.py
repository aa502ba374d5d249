"""The docs' screenshots, taken from the demo so they can be taken again whenever the pages change.

Starts the demo's processes as scripts/demo.sh does (SQLite, the file-system broker, the simulated
cluster) in a var dir of its own on a free loopback port, launches a training run and a notebook
as alice so the workload pages have something running, then signs in as each demo person with
Debian's Chromium (headless, through Playwright, as tests/browsing.py drives it) and saves each
page at 1280 px wide, at most 1,000 px tall, as a palette PNG (a page of text and flat colours
loses nothing visible at 256 colours and is a fraction of the size).

    .venv/bin/python scripts/docs_screenshots.py [--out docs/images] [--only dashboard,member-launch]

Needs /usr/bin/chromium (`scripts/apt.sh chromium`). Prints each file and the time it took.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from PIL import Image  # noqa: E402 - after the checkout is on the path

from tests.browsing import CHROMIUM, CHROMIUM_ARGS, htmx_settled, sync_api  # noqa: E402

PASSWORD = "gpu-portal-demo"
WIDTH = 1280
MAX_HEIGHT = 1000


@dataclass(frozen=True)
class Shot:
    name: str
    user: str
    path: str  # may name {training}, {notebook}, {template} and {month}, found once the demo runs


SHOTS = (
    Shot("dashboard", "alice", "/"),
    Shot("member-launch", "alice", "/launch/?template={template}"),
    Shot("member-workloads", "alice", "/workloads/"),
    Shot("member-workload", "alice", "/workloads/{training}/"),
    Shot("lead-approvals", "lena", "/approvals/"),
    Shot("lead-team", "lena", "/teams/vision/"),
    Shot("lead-usage", "lena", "/billing/teams/vision/"),
    Shot("finance-overview", "finance", "/billing/finance/"),
    Shot("finance-statement", "finance", "/billing/statements/{month}/"),
    Shot("finance-budgets", "finance", "/billing/budgets/"),
    Shot("admin-capacity", "admin", "/capacity/"),
    Shot("admin-catalog", "admin", "/platform/catalog/"),
    Shot("admin-nodes", "admin", "/platform/nodes/"),
    Shot("admin-people", "admin", "/platform/people/"),
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(what: str, check: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what} after {seconds:.0f} s")
        time.sleep(0.5)


class Demo:
    """The demo's processes in a var dir of their own, and the few API calls the shots need."""

    def __init__(self, var_dir: Path, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.port = port
        self.var_dir = var_dir
        self.env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "PORTAL_PRODUCTION"}}
        self.env.update(PORTAL_VAR_DIR=str(var_dir), DJANGO_SETTINGS_MODULE="portal.settings", PORTAL_CLUSTER="simulated",
                        DEBUG="false", CELERY_TASK_ALWAYS_EAGER="0")
        self.supervisor: subprocess.Popen[bytes] | None = None
        self.token = ""

    def manage(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True,
                              text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def start(self) -> None:
        self.manage("migrate", "--noinput", "-v0")
        self.manage("seed_demo")
        self.manage("reconcile_cluster")
        self.token = self.manage("shell", "-c", (
            "from portal.models import User; from portal import tokens; "
            "print(tokens.api_token_create(user=User.objects.get(username='alice'), name='docs', expires_in_days=1)[1])"
        )).strip().splitlines()[-1]
        log = open(self.var_dir / "run_demo_processes.out", "ab")  # noqa: SIM115 - lives as long as the child
        self.supervisor = subprocess.Popen(  # noqa: S603
            [sys.executable, "manage.py", "run_demo_processes", "--web", f"127.0.0.1:{self.port}"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for("the demo to be ready", lambda: self.status("/readyz") == 200, 180)

    def stop(self) -> None:
        if self.supervisor is None or self.supervisor.poll() is not None:
            return
        self.supervisor.send_signal(signal.SIGTERM)
        try:
            self.supervisor.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.supervisor.pid, signal.SIGKILL)
            self.supervisor.wait()

    def status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.base + path, timeout=5) as answer:  # noqa: S310 - loopback
                return int(answer.status)
        except OSError:
            return 0

    def api(self, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(self.base + path, data=json.dumps(body).encode() if body else None,  # noqa: S310
                                         headers={"Authorization": f"Token {self.token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - loopback
            return json.loads(answer.read())

    def launch(self, kind: str, name: str) -> tuple[int, int]:
        """Alice launches the first template of a kind on its default flavor; (workload id, template id)."""
        template = next(t for t in self.api("/api/templates/?team=vision&page_size=200")["results"] if t["kind"] == kind)
        offered = [flavor["slug"] for flavor in template["version"]["flavors"]]
        # One vision holds quota for, so it runs rather than waits.
        flavor = next((slug for slug in ("t4-shared", "h100-80gb") if slug in offered), offered[0])
        workload = self.api("/api/workloads/", {"team": "vision", "template": template["id"], "flavor": flavor,
                                                "units": 1, "name": name})
        return int(workload["id"]), int(template["id"])

    def phase(self, workload: int) -> str:
        return str(self.api(f"/api/workloads/{workload}/")["phase"])


def take(browser: Any, demo: Demo, shot: Shot, values: dict[str, object], out: Path) -> Path:
    context = browser.new_context(viewport={"width": WIDTH, "height": 800})
    page = context.new_page()
    page.goto(f"{demo.base}/login/")
    page.fill("#id_username", shot.user)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url and "/start/" not in url)
    page.goto(demo.base + shot.path.format(**values))
    page.wait_for_load_state("networkidle")
    htmx_settled(page)
    height = min(int(page.evaluate("document.documentElement.scrollHeight")), MAX_HEIGHT)
    png = page.screenshot(full_page=True, clip={"x": 0, "y": 0, "width": WIDTH, "height": height})
    context.close()
    path = out / f"{shot.name}.png"
    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    image.save(path, optimize=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "docs" / "images"))
    parser.add_argument("--only", default="", help="comma-separated shot names (default: all)")
    args = parser.parse_args()
    wanted = {name.strip() for name in args.only.split(",") if name.strip()}
    shots = [shot for shot in SHOTS if not wanted or shot.name in wanted]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    begun = time.monotonic()
    var_dir = Path(tempfile.mkdtemp(prefix="gpu-portal-docs-"))
    demo = Demo(var_dir, free_port())
    try:
        demo.start()
        training, template = demo.launch("training", "detector-v3")
        notebook, _ = demo.launch("notebook", "alice-notebook")
        for workload in (training, notebook):
            wait_for(f"workload {workload} to run", lambda w=workload: demo.phase(w) == "running", 120)  # type: ignore[misc]
        month = demo.manage("shell", "-c", (
            "from billing.models import Statement; print(Statement.objects.order_by('-month').first().month.strftime('%Y-%m'))"
        )).strip().splitlines()[-1]
        values: dict[str, object] = {"training": training, "notebook": notebook, "template": template, "month": month}
        print(f"demo ready in {time.monotonic() - begun:.0f} s", flush=True)
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for shot in shots:
                started = time.monotonic()
                path = take(browser, demo, shot, values, out)
                print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
                      f"{path.stat().st_size / 1024:.0f} KiB in {time.monotonic() - started:.1f} s", flush=True)
            browser.close()
    finally:
        demo.stop()
        shutil.rmtree(var_dir, ignore_errors=True)
    print(f"{len(shots)} screenshots in {time.monotonic() - begun:.0f} s")


if __name__ == "__main__":
    main()

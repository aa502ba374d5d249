"""Runs the embedded portal's background processes (and optionally its web server) and restarts
any that exits, with backoff, logging each restart. The demo used to start them once: a worker
that died left every launch 'Submitting' and nothing said so.

Production runs each process under its own supervisor (Kubernetes, systemd); this is for
`make demo` and the soak benchmark.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

log = logging.getLogger("portal.supervisor")

# A process that ran this long before exiting was healthy: restart it soon, not after backoff.
STABLE_SECONDS = 60.0
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
STOP_GRACE_SECONDS = 10.0


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path | None  # None: the supervisor's own stdout (the web server, for the terminal)
    process: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None
    started_at: float = 0.0
    next_start_at: float = 0.0
    backoff: float = FIRST_BACKOFF_SECONDS
    restarts: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)

    def start(self) -> None:
        if self.log_path is not None:
            self.log_file = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the child's life
        # A session of its own: a terminal's Ctrl-C reaches the supervisor alone, which then stops
        # every child in order, and a signal to the group also reaches what the child started.
        self.process = subprocess.Popen(  # noqa: S603 - argv built here from fixed parts
            self.argv, stdout=self.log_file, stderr=subprocess.STDOUT if self.log_file else None,
            start_new_session=True, env={**os.environ, **self.extra_env}, cwd=settings.BASE_DIR,
        )
        self.started_at = time.monotonic()
        log.info("started %s (pid %d)%s", self.name, self.process.pid,
                 f", log {self.log_path}" if self.log_path else "")

    def note_in_own_log(self, line: str) -> None:
        if self.log_file is not None:
            self.log_file.write(f"\n[supervisor] {line}\n".encode())
            self.log_file.flush()

    def reap_if_exited(self, now: float) -> None:
        if self.process is None or (code := self.process.poll()) is None:
            return
        ran = now - self.started_at
        self.backoff = FIRST_BACKOFF_SECONDS if ran >= STABLE_SECONDS else min(self.backoff * 2, MAX_BACKOFF_SECONDS)
        self.restarts += 1
        line = (f"{self.name} (pid {self.process.pid}) exited with code {code} after {ran:.0f} s; "
                f"restarting in {self.backoff:.0f} s (restart {self.restarts})")
        log.error(line)
        self.note_in_own_log(line)
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None
        self.process = None
        self.next_start_at = now + self.backoff

    def signal_group(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signum)


def demo_children(*, web: str | None) -> list[Child]:
    var = Path(settings.VAR_DIR)
    python = sys.executable
    manage = str(Path(settings.BASE_DIR) / "manage.py")
    children = [
        Child("worker", [python, "-m", "celery", "-A", "portal", "worker", "--pool=threads", "--concurrency=4",
                         "--loglevel=INFO"], var / "worker.log"),
        # Beat on its own, not inside the worker (--beat), so readiness tells one's death from the other's.
        Child("beat", [python, "-m", "celery", "-A", "portal", "beat", "--loglevel=INFO",
                       f"--schedule={var / 'celerybeat-schedule'}"], var / "beat.log"),
        Child("watcher", [python, manage, "watch_workloads"], var / "watch.log"),
    ]
    if web:
        children.append(Child("web", [python, manage, "runserver", "--noreload", web], None))
    return children


class Command(BaseCommand):
    help = "Run the demo's worker, beat and watch sync (and optionally the web server); restart any that exits."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--web", metavar="HOST:PORT", help="also run the development web server on this address")

    def handle(self, *args: Any, **options: Any) -> None:
        var = Path(settings.VAR_DIR)
        var.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(var / "supervisor.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s supervisor: %(message)s"))
        log.addHandler(handler)

        stopping = False

        def stop(signum: int, frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)

        children = demo_children(web=options["web"])
        try:
            while not stopping:
                now = time.monotonic()
                for child in children:
                    child.reap_if_exited(now)
                    if child.process is None and now >= child.next_start_at and not stopping:
                        child.start()
                time.sleep(0.5)
        finally:
            self._stop_all(children)
            log.removeHandler(handler)
            handler.close()

    def _stop_all(self, children: list[Child]) -> None:
        log.info("stopping %s", ", ".join(c.name for c in children if c.process is not None))
        for child in children:
            child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for child in children:
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0f s; killing it", child.name, STOP_GRACE_SECONDS)
                child.signal_group(signal.SIGKILL)
                child.process.wait()
            if child.log_file is not None:
                child.log_file.close()
        log.info("stopped")

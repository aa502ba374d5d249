"""Celery beat that runs only while this process holds a Lease, so that of several replicas (a
rolling update, a pod that looks dead but is not) never two send the schedule's tasks at once.

The beat itself is a child process (`celery -A portal beat`). It is started once this process
leads, killed the moment leadership lapses (before any other replica may take the Lease over),
and stopped gracefully on SIGTERM, after which the Lease is released. The child dies with this
process (PR_SET_PDEATHSIG), so a `kill -9` of the parent cannot leave an orphan beat behind.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.leader import LeaderElector, LeaseConfig

log = logging.getLogger(__name__)

POLL_SECONDS = 0.1
STOP_GRACE_SECONDS = 10.0
# Run in the child before celery: die with the parent (prctl survives the exec), and give up if
# the parent is already gone. prctl from a child of a threaded parent, not preexec_fn, which
# is not safe once threads (the Lease renewer) run.
DIE_WITH_PARENT = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, 9)\n"  # PR_SET_PDEATHSIG, SIGKILL
    "os.getppid() == int(sys.argv[1]) or sys.exit('run_beat is gone; not starting beat')\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'celery', *sys.argv[2:]])\n"
)


def beat_argv(extra: list[str]) -> list[str]:
    return [sys.executable, "-c", DIE_WITH_PARENT, str(os.getpid()), "-A", "portal", "beat", "--loglevel=INFO", *extra]


class BeatExited(CommandError):
    pass


class Command(BaseCommand):
    help = ("Run Celery beat while holding the Lease PORTAL_BEAT_LEASE in POD_NAMESPACE: of several replicas, "
            "only the leader runs beat. Extra arguments go to `celery beat`.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("beat_args", nargs="*", help="arguments for celery beat, after --")

    def handle(self, *args: Any, **options: Any) -> None:
        elector = LeaderElector(LeaseConfig.from_settings(name=settings.PORTAL_BEAT_LEASE))
        elector.stop_on_signals()
        self.stdout.write(f"Candidate {elector.config.identity} for Lease "
                          f"{elector.config.namespace}/{elector.config.name}; the leader runs celery beat.")
        exited: list[int] = []

        def beat(leader: LeaderElector) -> None:
            child = subprocess.Popen(beat_argv(options["beat_args"]), cwd=settings.BASE_DIR,  # noqa: S603 - fixed argv
                                     start_new_session=True)
            log.info("%s leads: started celery beat (pid %d)", leader.config.identity, child.pid)
            try:
                while child.poll() is None and leader.leading() and not leader.stopping.is_set():
                    leader.stopping.wait(POLL_SECONDS)
            finally:
                _stop(child, leader)
            if child.returncode is not None and leader.leading() and not leader.stopping.is_set():
                exited.append(child.returncode)

        elector.lead(beat)
        if exited:
            raise BeatExited(f"celery beat exited by itself with code {exited[0]}; the Lease is released")
        self.stdout.write("Stopped.")


def _stop(child: subprocess.Popen[bytes], leader: LeaderElector) -> None:
    """Gracefully (SIGTERM, SIGKILL after a grace) while the Lease is still ours; with SIGKILL the
    moment leadership lapses, since another replica may then soon start its own beat."""
    if child.poll() is not None:
        return
    if leader.leading():
        os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while child.poll() is None and leader.leading() and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        if child.poll() is not None:
            log.info("stopped celery beat (pid %d)", child.pid)
            return
        log.warning("celery beat (pid %d) still runs after SIGTERM; killing it", child.pid)
    else:
        log.error("leadership lapsed: killing celery beat (pid %d) before another replica may start one", child.pid)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()

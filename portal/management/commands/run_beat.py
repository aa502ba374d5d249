"""Celery beat that sends only while this process holds a Lease, so that of several replicas (a
rolling update, a pod that looks dead but is not) never two send the schedule's tasks.

Beat runs in this process, in a thread, with the scheduler settings name (CELERY_BEAT_SCHEDULER)
fenced: every send first checks that the Lease is still held (`LeaderElector.fence`), on this
process's own clock, which says no before any other replica may take the Lease over. So a beat
frozen for a while (a stopped container, a starved node) and then resumed sends nothing. Beat is
stopped as soon as leadership lapses and this process campaigns again; on SIGTERM it stops, and
the Lease is released so that another replica takes over at once.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.beat import Service
from celery.utils.imports import symbol_by_name
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from portal.celery import app
from portal.leader import LeaderElector, LeaseConfig

log = logging.getLogger(__name__)

POLL_SECONDS = 0.1
STOP_SECONDS = 10.0  # beat finishes its current wait (at most its max interval) and saves its schedule


def fenced_scheduler(leader: LeaderElector) -> type:
    """The configured scheduler, made to send only while `leader` leads."""
    base: type = symbol_by_name(settings.CELERY_BEAT_SCHEDULER)

    class Fenced(base):
        def apply_entry(self, entry: Any, producer: Any = None) -> None:
            if not leader.leading():
                log.warning("not sending %s: %s no longer holds the Lease", entry.name, leader.config.identity)
                return
            super().apply_entry(entry, producer=producer)

        def apply_async(self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any) -> Any:
            leader.fence()  # the last check, right before the message goes out
            result = super().apply_async(entry, producer=producer, advance=advance, **kwargs)
            log.info("beat sent %s (%s) as leader %s", entry.name, entry.task, leader.config.identity)
            return result

    return Fenced


class Command(BaseCommand):
    help = ("Run Celery beat while holding the Lease PORTAL_BEAT_LEASE in POD_NAMESPACE: of several replicas, "
            "only the leader sends the schedule's tasks.")

    def handle(self, *args: Any, **options: Any) -> None:
        elector = LeaderElector(LeaseConfig.from_settings(name=settings.PORTAL_BEAT_LEASE))
        elector.stop_on_signals()
        self.stdout.write(f"Candidate {elector.config.identity} for Lease "
                          f"{elector.config.namespace}/{elector.config.name}; the leader runs celery beat.")

        def beat(leader: LeaderElector) -> None:
            service = Service(app, scheduler_cls=fenced_scheduler(leader))

            def run() -> None:
                try:
                    service.start()
                except Exception:
                    log.exception("celery beat stopped on an error")
                    raise
                finally:
                    connection.close()

            thread = threading.Thread(target=run, daemon=True, name="celery-beat")
            thread.start()
            log.info("%s leads: celery beat started", leader.config.identity)
            while thread.is_alive() and leader.leading() and not leader.stopping.is_set():
                leader.stopping.wait(POLL_SECONDS)
            ended_by_itself = not thread.is_alive() and leader.leading() and not leader.stopping.is_set()
            service.stop()
            thread.join(timeout=STOP_SECONDS)
            if thread.is_alive():  # a second beat must never start beside it: give up the Lease and exit
                raise CommandError(f"celery beat did not stop within {STOP_SECONDS:.0f} s; exiting, the Lease released")
            if ended_by_itself:
                raise CommandError("celery beat ended by itself (see the log above); exiting, the Lease released")
            log.info("celery beat stopped")

        elector.lead(beat)
        self.stdout.write("Stopped.")

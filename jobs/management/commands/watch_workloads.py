"""Follows the cluster with watches: records workload phases and run intervals as they happen,
and every PORTAL_TEAM_PASS_SECONDS runs the team pass from a watch-kept store of what the portal
owns (tenants.reconcile.StorePasses). Run one per site beside the Celery worker (which does the
periodic full passes), or several with PORTAL_LEADER_ELECTION=1, of which the one holding the
Lease writes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from jobs.watch import WorkloadInformer
from portal.health import WATCHER, heartbeat_record
from portal.leader import LeaderElector, LeaseConfig
from tenants.reconcile import StorePasses

log = logging.getLogger(__name__)
HEARTBEAT_SECONDS = 10.0


class LoopHeartbeat:
    """Called on every turn of the informer's loop (its `until` hook), so a heartbeat means the
    loop turns, not merely that the process exists; writes at most every HEARTBEAT_SECONDS."""

    def __init__(self) -> None:
        self.last = 0.0

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.last >= HEARTBEAT_SECONDS:
            self.last = now
            try:
                heartbeat_record(name=WATCHER)
            except Exception:  # a missed heartbeat shows in readiness; it must not stop the watch
                log.exception("Could not record the watcher's heartbeat")
        return False


class Command(BaseCommand):
    help = ("Watch the cluster and keep workload phases and run intervals current. With "
            "PORTAL_LEADER_ELECTION=1, replicas elect one writer through the Lease PORTAL_LEADER_LEASE.")

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PORTAL_LEADER_ELECTION:
            self._handle_elected()
            return
        self.stdout.write("Watching jobs, servers, pods and Kueue workloads, and the teams' objects (Ctrl-C stops).")
        passes = team_passes()
        try:
            WorkloadInformer().run(until=LoopHeartbeat())
        except KeyboardInterrupt:
            self.stdout.write("Stopped.")
        finally:
            if passes is not None:
                passes.stop()

    def _handle_elected(self) -> None:
        """Only the leader watches and writes; a follower waits for the Lease. The leader stops
        writing (fence) once it has not renewed for the renew deadline, and on SIGTERM it stops
        and releases the Lease so a follower takes over at once."""
        elector = LeaderElector(LeaseConfig.from_settings(name=settings.PORTAL_LEADER_LEASE))
        elector.stop_on_signals()
        self.stdout.write(f"Candidate {elector.config.identity} for Lease "
                          f"{elector.config.namespace}/{elector.config.name}; the leader watches and writes.")

        def watch(leader: LeaderElector) -> None:
            heartbeat = LoopHeartbeat()
            informer = WorkloadInformer(fence=leader.fence)
            passes = team_passes(fence=leader.fence)
            try:
                informer.run(until=lambda: leader.stopping.is_set() or not leader.leading() or heartbeat())
            finally:
                if passes is not None:
                    passes.stop()

        elector.lead(watch)
        self.stdout.write("Stopped.")


def team_passes(*, fence: Callable[[], None] | None = None) -> StorePasses | None:
    """The team pass from a store, started, unless PORTAL_TEAM_PASS_SECONDS turns it off."""
    if not settings.PORTAL_TEAM_PASS_SECONDS:
        return None
    return StorePasses(seconds=settings.PORTAL_TEAM_PASS_SECONDS, fence=fence).start()

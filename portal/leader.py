"""Leader election through a Kubernetes Lease (coordination.k8s.io/v1), as client-go's
leaderelection package does it, so that of several replicas of a process exactly one acts.

- A candidate reads the Lease. One held by another is left alone until the lease duration has
  passed since the candidate *saw* it change (its own monotonic clock: no two machines' clocks
  are compared), or until its holder released it. Then the candidate writes itself in as holder.
- Every write names the resourceVersion it read, so of two candidates racing for an expired
  Lease one wins and the other gets a 409 and stays a follower (optimistic concurrency).
- The leader renews every retry period. Leadership is counted from the moment before a renewal
  was sent, and it ends `renew_deadline` later unless another renewal succeeded: `leading()`
  turns false on the leader's own clock before any follower, which waits the longer lease
  duration from a later moment, may take over. Work that checks `fence()` before each write
  therefore never writes after another leader could have started.
- On SIGTERM the leader stops its work and then releases the Lease (holder cleared), so a
  follower takes over at its next retry instead of after the lease duration.

The Lease goes through the one gateway (portal.kube), on a real cluster or the simulated one.
"""

from __future__ import annotations

import copy
import logging
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from django.conf import settings
from django.db import connection

from portal.backoff import jittered
from portal.kube import Gateway, KubeError, ObjectRef, gateway

log = logging.getLogger(__name__)

LEASE_API = "coordination.k8s.io/v1"
JITTER = 0.2  # client-go's JitterFactor 1.2: candidates spread their retries


class LeadershipLost(Exception):
    """Raised by `fence()` once this process may no longer write as the leader."""


@dataclass(frozen=True)
class LeaseConfig:
    name: str
    namespace: str
    identity: str
    lease_duration: int = 15  # whole seconds: the Lease's spec.leaseDurationSeconds
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > (1 + JITTER) * self.retry_period > 0:
            raise ValueError("a lease needs lease_duration > renew_deadline > 1.2 × retry_period > 0; "
                             f"got {self.lease_duration}, {self.renew_deadline}, {self.retry_period}")

    @classmethod
    def from_settings(cls, *, name: str) -> LeaseConfig:
        """The Lease `name` in the pod's namespace, held under a name unique to this process
        (the pod's name and a random suffix, as kube-controller-manager's)."""
        holder = settings.POD_NAME or socket.gethostname()
        return cls(name=name, namespace=settings.POD_NAMESPACE, identity=f"{holder}_{uuid.uuid4().hex[:8]}",
                   lease_duration=settings.PORTAL_LEASE_DURATION_SECONDS,
                   renew_deadline=settings.PORTAL_LEASE_RENEW_DEADLINE_SECONDS,
                   retry_period=settings.PORTAL_LEASE_RETRY_PERIOD_SECONDS)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(LEASE_API, "Lease", self.name, self.namespace)


def micro_time(at: datetime) -> str:
    """A MicroTime as the API server writes it."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """One candidate for one Lease. `acquire()` blocks until it leads (or is stopped);
    `renew_until_lost()` keeps it leading, in a thread of its own; `leading()` and `fence()` say
    whether it may still write; `release()` hands the Lease back. The clocks are parameters so
    that tests can move time by hand."""

    def __init__(
        self,
        config: LeaseConfig,
        *,
        cluster: Callable[[], Gateway] = gateway,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(tz=UTC),
    ) -> None:
        self.config = config
        self.cluster, self.clock, self.wall = cluster, clock, wall
        self.stopping = threading.Event()  # set by stop(): give up, whatever the state
        self.resigning = threading.Event()  # set when the work ended: the renewer stops
        self.observed: dict[str, Any] | None = None  # the Lease as last read or written
        self.observed_at = 0.0  # when (monotonic) it was last seen to change
        self.renewed_at: float | None = None  # when the last successful acquire or renew was sent

    # --- State ----------------------------------------------------------------------------------

    def leading(self) -> bool:
        """Whether this process may act as the leader now: its last successful renewal was sent
        less than the renew deadline ago. False the moment it is not, on this process's clock."""
        renewed_at = self.renewed_at
        return renewed_at is not None and self.clock() < renewed_at + self.config.renew_deadline

    def fence(self) -> None:
        """Call before each write the leader alone may make."""
        if not self.leading():
            raise LeadershipLost(f"no longer the leader of Lease {self.config.namespace}/{self.config.name}")

    def holder(self) -> str:
        return ((self.observed or {}).get("spec") or {}).get("holderIdentity") or ""

    def _observe(self, lease: dict[str, Any], now: float) -> None:
        if self.observed is None or lease["metadata"].get("resourceVersion") != self.observed["metadata"].get("resourceVersion"):
            self.observed, self.observed_at = lease, now

    # --- One attempt ----------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One read and at most one write: True when this process now holds the Lease."""
        cfg = self.config
        cluster = self.cluster()  # made before the clock starts: the first call loads the client
        sent = self.clock()
        now = micro_time(self.wall())
        lease = cluster.get(cfg.ref)
        if lease is None:
            body = {"apiVersion": LEASE_API, "kind": "Lease", "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                    "spec": {"holderIdentity": cfg.identity, "leaseDurationSeconds": cfg.lease_duration,
                             "acquireTime": now, "renewTime": now, "leaseTransitions": 0}}
            try:
                created = cluster.create(body)
            except KubeError as error:
                if error.status == 409:  # another candidate created it first
                    return False
                raise
            self._observe(created, self.clock())
            self.renewed_at = sent
            log.info("%s acquired Lease %s/%s (created it)", cfg.identity, cfg.namespace, cfg.name)
            return True
        # Seen after the read returned: never earlier than the holder's renewal, however slow the read.
        seen = self.clock()
        self._observe(lease, seen)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        # The lease the holder wrote, or ours if it wrote none: counted from when we saw it change.
        duration = spec.get("leaseDurationSeconds") or cfg.lease_duration
        if holder and holder != cfg.identity and seen < self.observed_at + duration:
            return False
        ours = holder == cfg.identity
        body = copy.deepcopy(lease)
        body["spec"] = {
            "holderIdentity": cfg.identity, "leaseDurationSeconds": cfg.lease_duration,
            "acquireTime": spec.get("acquireTime", now) if ours else now, "renewTime": now,
            "leaseTransitions": (spec.get("leaseTransitions") or 0) + (0 if ours or not holder else 1),
        }
        try:
            updated = self.cluster().replace(body)
        except KubeError as error:
            if error.status == 409:  # someone wrote it since we read it: read again next time
                return False
            raise
        self._observe(updated, self.clock())
        self.renewed_at = sent
        if not ours:
            log.info("%s acquired Lease %s/%s (from %s)", cfg.identity, cfg.namespace, cfg.name, holder or "nobody")
        return True

    def _attempt(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except KubeError as error:
            log.warning("Lease %s/%s: %s", self.config.namespace, self.config.name, error)
            return False

    def _wait(self, seconds: float) -> bool:
        """Sleeps, jittered; True when asked to stop meanwhile."""
        return self.stopping.wait(jittered(seconds, least=1.0, more=JITTER))

    # --- Loops ----------------------------------------------------------------------------------

    def acquire(self) -> bool:
        """Tries every retry period until this process leads (True) or is stopped (False)."""
        self.resigning.clear()
        announced = False
        while not self.stopping.is_set():
            if self._attempt():
                return True
            if not announced and self.holder():
                log.info("%s waits: Lease %s/%s is held by %s", self.config.identity, self.config.namespace,
                         self.config.name, self.holder())
                announced = True
            if self._wait(self.config.retry_period):
                break
        return False

    def renew_until_lost(self) -> None:
        """Renews every retry period, retrying a failed renewal until the renew deadline; returns
        when leadership is lost or the work has ended (resigning). It keeps renewing after stop(),
        while the work winds down, so that the Lease can then be released rather than expire.
        Meant for a thread of its own."""
        try:
            while not self.resigning.wait(self.config.retry_period):
                while not self._attempt():
                    if not self.leading():
                        self.renewed_at = None
                        return
                    if self.resigning.wait(self.config.retry_period):
                        return
        finally:
            connection.close()  # the simulated cluster reads the database from this thread

    def release(self) -> None:
        """Hands the Lease back (holder cleared) if this process still leads, so a follower need
        not wait out the lease duration. A Lease it no longer holds is left as it is."""
        if not self.leading() or self.observed is None:
            self.renewed_at = None
            return
        body = copy.deepcopy(self.observed)
        now = micro_time(self.wall())
        body["spec"] = {**(body.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1,
                        "acquireTime": now, "renewTime": now}
        self.renewed_at = None
        try:
            self.cluster().replace(body)
            log.info("%s released Lease %s/%s", self.config.identity, self.config.namespace, self.config.name)
        except KubeError as error:
            log.warning("%s could not release Lease %s/%s: %s", self.config.identity, self.config.namespace,
                        self.config.name, error)

    def stop(self) -> None:
        self.stopping.set()

    def lead(self, work: Callable[[LeaderElector], None]) -> None:
        """Campaigns; while leading, runs `work(self)`, which must return soon after `leading()`
        turns false or `stopping` is set (and check `fence()` before each write). Work that
        returns has seen its leadership lapse: the process campaigns again, unless stopped. Work
        that fails (raises) ends the campaign. Either way the Lease is released if still held."""
        try:
            while self.acquire():
                renewer = threading.Thread(target=self.renew_until_lost, daemon=True, name=f"lease-{self.config.name}")
                renewer.start()
                try:
                    work(self)
                except LeadershipLost as error:
                    log.warning("%s: %s; its work stopped", self.config.identity, error)
                finally:
                    self.resigning.set()
                    renewer.join()
                if self.stopping.is_set():
                    break
                # Said here, once: the work (its own clock) or the renewer may be first to see it.
                log.error("%s lost Lease %s/%s: not renewed within %.1f s", self.config.identity,
                          self.config.namespace, self.config.name, self.config.renew_deadline)
                log.info("%s campaigns again for Lease %s/%s", self.config.identity, self.config.namespace, self.config.name)
        finally:
            self.release()

    def stop_on_signals(self) -> None:
        """SIGTERM (a pod being stopped) and SIGINT stop the work and release the Lease."""

        def handler(signum: int, frame: FrameType | None) -> None:
            log.info("%s: %s received, stepping down", self.config.identity, signal.Signals(signum).name)
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

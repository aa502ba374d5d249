"""Readiness: is every part the portal needs to do its work alive?

The web process answers for itself; the worker, beat and the watch sync prove they are alive by
heartbeats in the database, and the broker by taking a connection. A dead background process
otherwise leaves launches 'Submitting' forever behind a health check that says ok.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from celery.signals import before_task_publish
from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from portal.celery import HEARTBEAT_TASK, app
from portal.models import Heartbeat

log = logging.getLogger(__name__)

WORKER = "worker"
BEAT = "beat"
WATCHER = "watcher"
# Not a process but the team pass (tenants.reconcile.cluster_reconcile), from the watcher's store
# or the worker's listing: when it last compared every team with the cluster. Exported on /metrics
# and shown on the team page; readiness does not wait for it (the pass can be turned off).
TEAM_PASS = "team-pass"
# Not a process either: the node check (tenants.nodes.check_flavors), which judges each flavor
# against its nodes and keeps the GPU nodes for the nodes page, every minute on beat.
NODE_CHECK = "node-check"
# Nor this: billing's energy meter (billing.energy.energy_meter), each time it has read every
# complete hour from telemetry; a telemetry outage leaves it where it was.
ENERGY_METER = "energy-meter"

# What each heartbeat proves, for the reason a stale one gives.
HEARTBEAT_ROLES = {
    WORKER: "the Celery worker has not run its heartbeat task",
    BEAT: "Celery beat has not sent its scheduled heartbeat",
    WATCHER: "the watch sync (manage.py watch_workloads) has not turned its loop",
}


def heartbeat_record(*, name: str, at: dt.datetime | None = None) -> None:
    """One UPDATE, as every beat after the first is; the first creates the row."""
    at = at or timezone.now()
    if not Heartbeat.objects.filter(name=name).update(at=at):
        Heartbeat.objects.update_or_create(name=name, defaults={"at": at})  # safe if another process's first beat races it


@before_task_publish.connect
def beat_heartbeat(sender: str | None = None, **kwargs: Any) -> None:
    """Only beat sends the heartbeat task, so sending it is beat's own sign of life."""
    if sender == HEARTBEAT_TASK:
        heartbeat_record(name=BEAT)


def heartbeat_at(name: str) -> dt.datetime | None:
    return Heartbeat.objects.filter(name=name).values_list("at", flat=True).first()


class HeartbeatCollector:
    """When each background process last showed a sign of life, and when the team pass last
    compared every team with the cluster (the heartbeats above): one query per scrape."""

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        try:
            beats = list(Heartbeat.objects.values_list("name", "at"))
        except DatabaseError:
            log.warning("heartbeat metrics not exported: the database did not answer", exc_info=True)
            return
        for name, at in sorted(beats):
            family.add_metric([name], at.timestamp())
        yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "portal_heartbeat_timestamp_seconds",
            "Unix time of the last sign of life of worker, beat and watcher, and of the last completed team pass "
            "(team-pass), as recorded in the database.", labels=["name"])


@dataclass(frozen=True)
class Problem:
    said: str  # for anyone who asks /readyz: the error's class only, since its message may name a host
    detail: str  # for the log, which only operators read: the error's own words and what to check


def _detail(error: Exception) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:500]}"


def _database_problem() -> Problem | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as error:  # noqa: BLE001 - any failure means not ready
        return Problem(f"database: did not answer ({type(error).__name__})",
                       f"database: did not answer ({_detail(error)}); check DATABASE_URL and that the database "
                       "accepts connections from here")
    return None


def _broker_problem() -> Problem | None:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=0, timeout=settings.PORTAL_READINESS_BROKER_TIMEOUT)  # a probe fails fast
            conn.default_channel  # noqa: B018 - opening a channel is the check
    except Exception as error:  # noqa: BLE001 - any failure means not ready
        return Problem(f"broker: did not accept a connection ({type(error).__name__})",
                       f"broker: did not accept a connection ({_detail(error)}); check REDIS_URL and that Redis "
                       "accepts connections from here")
    return None


def _heartbeat_problems(names: list[str], now: dt.datetime) -> list[str]:
    bound = dt.timedelta(seconds=settings.PORTAL_HEARTBEAT_STALE_SECONDS)
    try:
        last = dict(Heartbeat.objects.filter(name__in=names).values_list("name", "at"))
    except Exception as error:  # noqa: BLE001 - the database check reports the cause
        return [f"heartbeats: could not be read ({type(error).__name__})"]
    problems = []
    for name in names:
        at = last.get(name)
        if at is None:
            problems.append(f"{name}: no heartbeat yet; {HEARTBEAT_ROLES[name]}")
        elif now - at > bound:
            age = int((now - at).total_seconds())
            problems.append(f"{name}: last heartbeat {age} s ago (bound {int(bound.total_seconds())} s); "
                            f"{HEARTBEAT_ROLES[name]} — is it running?")
    return problems


def readiness_problems(checks: list[str] | None = None) -> list[str]:
    """Each thing that keeps the portal from doing its work, in words; empty when ready. The
    same, with the errors' own words, goes to the log as one line. `checks` defaults to
    PORTAL_READINESS_CHECKS."""
    wanted: list[str] = settings.PORTAL_READINESS_CHECKS if checks is None else checks
    problems: list[Problem] = []
    simple: dict[str, Callable[[], Problem | None]] = {"database": _database_problem, "broker": _broker_problem}
    for name, check in simple.items():
        if name in wanted and (problem := check()):
            problems.append(problem)
    heartbeats = [name for name in (WORKER, BEAT, WATCHER) if name in wanted]
    if heartbeats and not any(p.said.startswith("database:") for p in problems):
        problems.extend(Problem(text, text) for text in _heartbeat_problems(heartbeats, timezone.now()))
    if problems:
        log.warning("Not ready: %s", "; ".join(p.detail for p in problems))
    return [p.said for p in problems]

"""Readiness: is every part the portal needs to do its work alive?

The web process answers for itself; the worker, beat and the watch sync prove they are alive by
heartbeats in the database, and the broker by taking a connection. A dead background process
otherwise leaves launches 'Submitting' forever behind a health check that says ok.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.utils import timezone

from portal.models import Heartbeat

log = logging.getLogger(__name__)

WORKER = "worker"
BEAT = "beat"
WATCHER = "watcher"

# What each heartbeat proves, for the reason a stale one gives.
HEARTBEAT_ROLES = {
    WORKER: "the Celery worker has not run its heartbeat task",
    BEAT: "Celery beat has not sent its scheduled heartbeat",
    WATCHER: "the watch sync (manage.py watch_workloads) has not turned its loop",
}


def heartbeat_record(*, name: str, at: dt.datetime | None = None) -> None:
    Heartbeat.objects.update_or_create(name=name, defaults={"at": at or timezone.now()})


def _database_problem() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as error:  # noqa: BLE001 - any failure means not ready
        # The class only: the message may name the database host, and anyone may ask.
        return f"database: did not answer ({type(error).__name__})"
    return None


def _broker_problem() -> str | None:
    from portal.celery import app

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=0, timeout=settings.PORTAL_READINESS_BROKER_TIMEOUT)  # a probe fails fast
            conn.default_channel  # noqa: B018 - opening a channel is the check
    except Exception as error:  # noqa: BLE001 - any failure means not ready
        return f"broker: did not accept a connection ({type(error).__name__})"
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


def readiness_problems() -> list[str]:
    """Each thing that keeps the portal from doing its work, in words; empty when ready."""
    checks: list[str] = settings.PORTAL_READINESS_CHECKS
    problems: list[str] = []
    simple: dict[str, Callable[[], str | None]] = {"database": _database_problem, "broker": _broker_problem}
    for name, check in simple.items():
        if name in checks and (problem := check()):
            problems.append(problem)
    heartbeats = [name for name in (WORKER, BEAT, WATCHER) if name in checks]
    if heartbeats and not any(p.startswith("database:") for p in problems):
        problems.extend(_heartbeat_problems(heartbeats, timezone.now()))
    if problems:
        log.warning("Not ready: %s", "; ".join(problems))
    return problems

"""Notebooks stop after their idle limit. Idleness is what the notebook server itself reports
(Jupyter's /api/status: last_activity); one that does not answer is left running."""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import urllib.error
import urllib.parse
import urllib.request

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs.access import notebook_token
from jobs.models import Workload, WorkloadKind
from jobs.services import record_transition
from portal.audit import audit_record

log = logging.getLogger(__name__)


def notebook_last_activity(workload: Workload) -> dt.datetime | None:
    """When the notebook was last used, or None when its answer does not say (it is left running)."""
    url = settings.PORTAL_NOTEBOOK_STATUS_URL.format(name=workload.k8s_name, namespace=workload.team.namespace)
    url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"token": notebook_token(workload)})
    try:
        with urllib.request.urlopen(url, timeout=3) as response:  # noqa: S310 - a URL of the site's own config
            status = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as error:
        log.info("notebook %s did not say how idle it is: %s", workload.pk, error)
        return None
    if not isinstance(status, dict):
        log.info("notebook %s answered its status with a %s, not an object", workload.pk, type(status).__name__)
        return None
    if status.get("kernels", 0) and status.get("connections", 0):
        return timezone.now()  # someone is connected to a running kernel: not idle
    reported = status.get("last_activity")
    last = parse_datetime(reported) if isinstance(reported, str) else None
    if last is None or timezone.is_naive(last):
        # A time without a zone cannot be compared with now; guessing one could stop a notebook in use.
        log.info("notebook %s reported no usable last_activity: %r", workload.pk, reported)
        return None
    return last


def notebooks_stop_idle(*, now: dt.datetime | None = None) -> list[int]:
    """Stops running notebooks idle past their template's limit; returns their ids."""
    now = now or timezone.now()
    stopped = []
    running = Workload.objects.filter(phase=Workload.Phase.RUNNING, template_version__template__kind=WorkloadKind.NOTEBOOK,
                                      template_version__idle_minutes__gt=0).select_related("team", "template_version")
    for workload in running:
        # One notebook's odd answer (or any error checking it) must not spare every other team's
        # idle notebooks: it is logged with the workload and skipped.
        try:
            if _stop_if_idle(workload, now=now):
                stopped.append(workload.pk)
        except Exception:
            log.exception("checking whether notebook %s (%s of %s) is idle failed; skipped", workload.pk,
                          workload.k8s_name, workload.team.slug)
    return stopped


def _stop_if_idle(workload: Workload, *, now: dt.datetime) -> bool:
    limit = dt.timedelta(minutes=workload.template_version.idle_minutes)
    last = notebook_last_activity(workload)
    if last is None or now - last < limit:
        return False
    with transaction.atomic():
        locked = Workload.objects.select_for_update(of=("self",)).select_related("team").get(pk=workload.pk)
        if locked.phase != Workload.Phase.RUNNING:
            return False
        minutes = int((now - last).total_seconds() // 60)
        limit_minutes = int(limit.total_seconds() // 60)
        record_transition(locked, Workload.Phase.STOPPED, f"Stopped after {minutes} minutes idle (limit {limit_minutes})")
        audit_record(actor=None, action="workload.stopped_idle", obj=locked, team_id=locked.team_id,
                     message=f"Notebook {locked.name} (#{locked.pk}) of {locked.team.slug}"
                     f" stopped after {minutes} minutes idle")
        from jobs import tasks

        transaction.on_commit(functools.partial(tasks.workload_teardown.delay, locked.pk))
    return True

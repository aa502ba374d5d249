"""Notebooks stop after their idle limit. Idleness is what the notebook server itself reports
(Jupyter's /api/status: last_activity), asked over HTTP from the portal's pods: the team's
NetworkPolicy `gpu-portal-allow-portal` admits them (PORTAL_NAMESPACE, PORTAL_POD_LABELS) to
notebook pods' HTTP port. A notebook the check cannot reach, or whose answer it cannot read, is
neither idle nor in use: it is left running and the pass says so, by name, in the log and in
its result.

GPU utilization is the other signal, and it belongs to the telemetry work (issue 10, DCGM
through portal/metrics/): that code registers a source with `register_gpu_activity`, and a GPU
busy more recently than the notebook's own last activity keeps the notebook running (a kernel
training with nobody connected). It can only make a notebook busier; it never stops one, nor
vouches for one the check could not reach."""

from __future__ import annotations

import datetime as dt
import functools
import http.client
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs.access import notebook_token
from jobs.models import Workload, WorkloadKind
from jobs.services import record_transition
from portal.audit import audit_record

log = logging.getLogger(__name__)

STATUS_TIMEOUT_SECONDS = 3

GpuActivity = Callable[[Workload], "dt.datetime | None"]
_gpu_activity: GpuActivity | None = None


def register_gpu_activity(source: GpuActivity | None) -> None:
    """Telemetry (issue 10) registers when a notebook's GPU was last busy; None unregisters."""
    global _gpu_activity
    _gpu_activity = source


@dataclass(frozen=True)
class NotebookActivity:
    """What one notebook told the idle check. At most one of the three is set."""

    last_activity: dt.datetime | None = None  # when it was last used
    unreachable: str = ""  # why the portal could not reach it
    unreadable: str = ""  # it answered, but not with a time the check can trust


@dataclass
class IdlePass:
    """What one pass did: notebooks stopped, and those it could not judge, with why."""

    stopped: list[int] = field(default_factory=list)
    unreachable: dict[int, str] = field(default_factory=dict)
    unreadable: dict[int, str] = field(default_factory=dict)
    failed: list[int] = field(default_factory=list)  # the check itself broke (logged with its traceback)


def notebook_activity(workload: Workload) -> NotebookActivity:
    url = settings.PORTAL_NOTEBOOK_STATUS_URL.format(name=workload.k8s_name, namespace=workload.team.namespace)
    url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"token": notebook_token(workload)})
    try:
        with urllib.request.urlopen(url, timeout=STATUS_TIMEOUT_SECONDS) as response:  # noqa: S310 - the site's own config
            body = response.read()
    except urllib.error.HTTPError as error:  # it answered, with an error
        return NotebookActivity(unreadable=f"it answered HTTP {error.code}")
    except urllib.error.URLError as error:
        return NotebookActivity(unreachable=str(error.reason))
    except http.client.HTTPException as error:
        return NotebookActivity(unreadable=f"it did not answer in HTTP ({type(error).__name__})")
    except (TimeoutError, OSError) as error:
        return NotebookActivity(unreachable=f"no answer within {STATUS_TIMEOUT_SECONDS} s"
                                if isinstance(error, TimeoutError) else str(error))
    try:
        status = json.loads(body)
    except ValueError:
        return NotebookActivity(unreadable="its status is not JSON")
    if not isinstance(status, dict):
        return NotebookActivity(unreadable=f"its status is a {type(status).__name__}, not an object")
    if status.get("kernels", 0) and status.get("connections", 0):
        return NotebookActivity(last_activity=timezone.now())  # someone is connected to a running kernel: not idle
    reported = status.get("last_activity")
    try:
        last = parse_datetime(reported) if isinstance(reported, str) else None
    except ValueError:  # shaped like a time, but no such day (month 13)
        last = None
    if last is None or timezone.is_naive(last):
        # A time without a zone cannot be compared with now; guessing one could stop a notebook in use.
        return NotebookActivity(unreadable=f"its last_activity {reported!r} is not a time with a zone")
    return NotebookActivity(last_activity=last)


def notebooks_stop_idle(*, now: dt.datetime | None = None) -> IdlePass:
    """Stops running notebooks idle past their template's limit."""
    now = now or timezone.now()
    result = IdlePass()
    running = Workload.objects.filter(phase=Workload.Phase.RUNNING, template_version__template__kind=WorkloadKind.NOTEBOOK,
                                      template_version__idle_minutes__gt=0).select_related("team", "template_version")
    for workload in running:
        # One notebook's odd answer (or any error checking it) must not spare every other team's
        # idle notebooks: it is logged with the workload and skipped.
        try:
            _stop_if_idle(workload, now=now, result=result)
        except Exception:
            result.failed.append(workload.pk)
            log.exception("checking whether notebook %s (%s of %s) is idle failed; skipped", workload.pk,
                          workload.k8s_name, workload.team.slug)
    if result.unreachable:
        log.warning(
            "the idle check could not reach %d notebook(s), left running and not counted idle or in use: %s. "
            "Team NetworkPolicies admit the portal's pods from namespace %s with labels %s (PORTAL_NAMESPACE, "
            "PORTAL_POD_LABELS) to notebook pods' HTTP port; the check must run there.",
            len(result.unreachable), "; ".join(f"#{pk}: {why}" for pk, why in result.unreachable.items()),
            settings.PORTAL_NAMESPACE, ",".join(f"{k}={v}" for k, v in settings.PORTAL_POD_LABELS) or "(any)",
        )
    return result


def _stop_if_idle(workload: Workload, *, now: dt.datetime, result: IdlePass) -> None:
    limit = dt.timedelta(minutes=workload.template_version.idle_minutes)
    activity = notebook_activity(workload)
    name = f"notebook {workload.pk} ({workload.k8s_name} of {workload.team.slug})"
    if activity.unreachable:
        log.warning("%s could not be reached to check whether it is idle (%s); left running", name, activity.unreachable)
        result.unreachable[workload.pk] = activity.unreachable
        return
    if activity.last_activity is None:
        log.info("%s did not say how idle it is (%s); left running", name, activity.unreadable)
        result.unreadable[workload.pk] = activity.unreadable
        return
    last = activity.last_activity
    gpu_busy = _gpu_activity(workload) if _gpu_activity else None
    if gpu_busy is not None and gpu_busy > last:
        last = gpu_busy
    if now - last < limit:
        return
    with transaction.atomic():
        locked = Workload.objects.select_for_update(of=("self",)).select_related("team").get(pk=workload.pk)
        if locked.phase != Workload.Phase.RUNNING:
            return
        minutes = int((now - last).total_seconds() // 60)
        limit_minutes = int(limit.total_seconds() // 60)
        record_transition(locked, Workload.Phase.STOPPED, f"Stopped after {minutes} minutes idle (limit {limit_minutes})")
        audit_record(actor=None, action="workload.stopped_idle", obj=locked, team_id=locked.team_id,
                     message=f"Notebook {locked.name} (#{locked.pk}) of {locked.team.slug}"
                     f" stopped after {minutes} minutes idle")
        from jobs import tasks

        transaction.on_commit(functools.partial(tasks.workload_teardown.delay, locked.pk))
    result.stopped.append(workload.pk)

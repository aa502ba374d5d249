"""XID errors on the GPUs workloads hold: found by the sweep (one metrics query for all running
workloads), recorded once per pod, GPU and code, shown on the workload page with what the code
means, and told to the owner and platform admins. A hardware XID makes the pod's GPU time after
it non-billable (billing/statements/xid_credits.py turns it into a credit)."""

from __future__ import annotations

import datetime as dt
import logging

from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from jobs.models import GpuXidEvent, RunInterval, Workload
from portal.audit import audit_record
from portal.metrics import MetricsError, metrics
from portal.metrics.xid import is_hardware_xid, xid_meaning
from portal.models import User
from portal.notifications import notify

log = logging.getLogger(__name__)

# Longer than the sweep's period, so a late sweep still sees a change; the unique constraint
# keeps one event however many sweeps see it.
LOOK_BACK = dt.timedelta(minutes=10)


def xid_sweep(*, now: dt.datetime | None = None) -> list[GpuXidEvent]:
    """Records XIDs new since the last sweeps on running workloads' GPUs; returns the new ones."""
    now = now or timezone.now()
    running = list(Workload.objects.filter(phase=Workload.Phase.RUNNING).select_related("team", "owner"))
    if not running:
        return []
    try:
        reports = metrics().xid_errors(namespaces={w.team.namespace for w in running}, window=LOOK_BACK)
    except MetricsError as error:
        log.warning("the XID sweep could not read GPU metrics (%s)", error)
        return []
    if not reports:
        return []
    by_pod: dict[tuple[str, str], Workload] = {}
    by_id = {w.pk: w for w in running}
    for interval in RunInterval.objects.filter(workload__in=running).only("workload_id", "pod_name"):
        holder = by_id[interval.workload_id]  # type: ignore[index]
        by_pod[(holder.team.namespace, interval.pod_name)] = holder
    admins = list(User.objects.filter(is_platform_admin=True, is_active=True))
    found = []
    for report in reports:
        workload = by_pod.get((report.namespace, report.pod))
        if workload is None:
            continue
        try:
            with transaction.atomic():
                event = GpuXidEvent.objects.create(workload=workload, pod_name=report.pod, gpu=report.gpu, node=report.node,
                                                   code=report.code, hardware=is_hardware_xid(report.code), at=now)
                _tell(event, workload, admins)
        except IntegrityError:
            continue  # an earlier sweep recorded it
        found.append(event)
    return found


def _tell(event: GpuXidEvent, workload: Workload, admins: list[User]) -> None:
    where = f" on node {event.node}" if event.node else ""
    message = (f"GPU {event.gpu}{where} reported XID {event.code} ({xid_meaning(event.code)}) while {workload.name} "
               f"(#{workload.pk}) of {workload.team.slug} held it.")
    if event.hardware:
        message += " Its GPU time from now on is not billed."
    notify(recipients=[workload.owner, *admins], message=message, url=reverse("jobs:workload-detail", args=[workload.pk]),
           subject=f"XID {event.code} on a GPU of {workload.name}")
    audit_record(actor=None, action="workload.gpu_xid", obj=workload, team_id=workload.team_id, message=message)


def xid_rows(*, workload: Workload) -> list[dict[str, object]]:
    """The workload page's XID table: each event with what its code means."""
    return [{"event": event, "meaning": xid_meaning(event.code)} for event in GpuXidEvent.objects.filter(workload=workload)]

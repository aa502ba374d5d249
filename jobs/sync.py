"""Status sync: reads what the cluster says about the portal's workloads and records it.

One pass lists the portal's Jobs, Deployments, StatefulSets and pods and Kueue's Workloads (five
calls, however many workloads), derives each active workload's phase with the reason in
words, and records every pod's run interval keyed by its UID, so reading the same cluster
again, after a watch expired or the worker restarted, changes nothing.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs import manifests
from jobs.models import RunInterval, Workload
from jobs.services import record_transition
from portal.kube import gateway
from portal.kube.base import quantity
from tenants import selectors as tenant_selectors

MANAGED = {manifests.MANAGED_BY_LABEL: "gpu-portal"}
KUEUE = "kueue.x-k8s.io/v1beta2"


Key = tuple[str, int]  # (namespace, workload id): an object counts only in its team's namespace
# What the sync reads: the portal's own objects by label, and Kueue's Workloads (which Kueue
# creates without our labels; they are matched to ours through their owners).
WATCHED: tuple[tuple[str, str, dict[str, str] | None], ...] = (
    ("batch/v1", "Job", MANAGED),
    ("apps/v1", "Deployment", MANAGED),
    ("apps/v1", "StatefulSet", MANAGED),
    ("v1", "Pod", MANAGED),
    (KUEUE, "Workload", None),
)


@dataclass
class Snapshot:
    """The cluster objects of the portal's workloads, indexed by namespace and workload id."""

    owners: dict[Key, dict[str, Any]] = field(default_factory=dict)  # the Job, Deployment or StatefulSet
    pods: dict[Key, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    kueue: dict[Key, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def read(cls) -> Snapshot:
        cluster = gateway()
        return cls.of({kind: cluster.list(api_version, kind, labels=labels)[0] for api_version, kind, labels in WATCHED})

    @classmethod
    def of(cls, objects: dict[str, list[dict[str, Any]]]) -> Snapshot:
        """Indexes lists of objects by kind (a fresh read, or an informer's cache)."""
        snapshot = cls()
        by_name: dict[tuple[str, str, str], Key] = {}
        for kind in ("Job", "Deployment", "StatefulSet"):
            for obj in objects.get(kind, []):
                key = _key(obj)
                if key is not None:
                    snapshot.owners[key] = obj
                    by_name[(kind, key[0], obj["metadata"]["name"])] = key
        for pod in objects.get("Pod", []):
            key = _key(pod)
            if key is not None:
                snapshot.pods[key].append(pod)
                by_name[("Pod", key[0], pod["metadata"]["name"])] = key
        for kueue_workload in objects.get("Workload", []):
            namespace = kueue_workload["metadata"].get("namespace", "")
            for owner in kueue_workload["metadata"].get("ownerReferences", []):
                key = by_name.get((owner["kind"], namespace, owner["name"]))
                if key is not None:
                    snapshot.kueue[key].append(kueue_workload)
        return snapshot


def _key(obj: dict[str, Any]) -> Key | None:
    value = obj["metadata"].get("labels", {}).get(manifests.WORKLOAD_LABEL, "")
    return (obj["metadata"].get("namespace", ""), int(value)) if value.isdigit() else None


def key_of(workload: Workload) -> Key:
    return (workload.team.namespace, workload.pk)


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions", []) or []:
        if cond.get("type") == type_:
            return cond
    return {}


def _true(obj: dict[str, Any], type_: str) -> bool:
    return _condition(obj, type_).get("status") == "True"


def waiting_reason(message: str) -> str:
    """Kueue's condition message, said for people."""
    if "insufficient unused quota" in message or "insufficient quota" in message:
        return f"Waiting for quota: {message}"
    if not message:
        return "Waiting for Kueue to admit it"
    return f"Waiting: {message}"


def derive(workload: Workload, snapshot: Snapshot) -> tuple[str, str] | None:
    """The phase and reason the cluster shows for one workload, or None to leave it as it is."""
    owner = snapshot.owners.get(key_of(workload))
    pods = snapshot.pods.get(key_of(workload), [])
    kueue = snapshot.kueue.get(key_of(workload), [])
    if owner is None:
        if workload.phase == Workload.Phase.SUBMITTING:
            return None
        return Workload.Phase.FAILED, "Its objects are gone from the cluster (deleted outside the portal)."
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    evicted = [w for w in kueue if _true(w, "Evicted") and not _true(w, "QuotaReserved")]
    pending = [w for w in kueue if not _true(w, "QuotaReserved")]
    if owner["kind"] == "Job":
        completions = int(owner["spec"].get("completions") or owner["spec"].get("parallelism") or 1)
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        # All pods done is what the Job controller will conclude a moment later: say it now.
        if _true(owner, "Complete") or succeeded >= completions:
            return Workload.Phase.SUCCEEDED, "Finished successfully"
        if _true(owner, "Failed"):
            failed = _condition(owner, "Failed")
            return Workload.Phase.FAILED, f"{failed.get('reason', 'Failed')}: {failed.get('message', '')}".rstrip(": ")
        if evicted:
            cond = _condition(evicted[0], "Evicted")
            return Workload.Phase.PREEMPTED, f"Preempted and queued again: {cond.get('message', '')}".rstrip(": ")
        if owner["spec"].get("suspend", False):
            message = _condition(pending[0], "QuotaReserved").get("message", "") if pending else ""
            return Workload.Phase.QUEUED, waiting_reason(message)
        if running:
            return Workload.Phase.RUNNING, f"{len(running)} of {owner['spec'].get('parallelism', 1)} pods running"
        return Workload.Phase.ADMITTED, "Admitted by Kueue; starting its pods"
    # Servers and notebooks: Kueue gates each pod until it is admitted.
    if running:
        return Workload.Phase.RUNNING, f"{len(running)} of {owner['spec'].get('replicas', 1)} replicas running"
    if evicted:
        return Workload.Phase.PREEMPTED, "Preempted and queued again"
    if pending:
        return Workload.Phase.QUEUED, waiting_reason(_condition(pending[0], "QuotaReserved").get("message", ""))
    if pods:
        return Workload.Phase.ADMITTED, "Admitted by Kueue; starting its pods"
    return Workload.Phase.QUEUED, "Waiting for Kueue to admit it"


def _time(value: str | None) -> dt.datetime | None:
    return parse_datetime(value) if value else None


def _pod_interval(pod: dict[str, Any]) -> tuple[dt.datetime | None, dt.datetime | None]:
    """When the pod's containers ran: from the first start to the last finish."""
    status = pod.get("status") or {}
    starts, ends = [], []
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if "running" in state:
            starts.append(_time(state["running"].get("startedAt")))
        if "terminated" in state:
            starts.append(_time(state["terminated"].get("startedAt")))
            ends.append(_time(state["terminated"].get("finishedAt")))
    started = min((s for s in starts if s), default=None) or (_time(status.get("startTime")) if status.get("phase") in ("Running", "Succeeded", "Failed") else None)
    finished = None
    if status.get("phase") in ("Succeeded", "Failed"):
        finished = max((e for e in ends if e), default=None) or timezone.now()
    return started, finished


def _gpu_units(pod: dict[str, Any], resource: str) -> int:
    total = 0
    for container in pod["spec"].get("containers", []):
        value = (container.get("resources", {}).get("limits") or {}).get(resource)
        parsed = quantity(value) if value is not None else None
        total += int(parsed) if parsed else 0
    return total


@dataclass
class SyncResult:
    changed: int = 0
    intervals_opened: int = 0
    intervals_closed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"changed": self.changed, "intervals_opened": self.intervals_opened, "intervals_closed": self.intervals_closed}


def record_intervals(workload: Workload, pods: list[dict[str, Any]], result: SyncResult) -> None:
    seen = set()
    resource = workload.flavor.resource_name
    open_intervals = {i.pod_uid: i for i in workload.intervals.all()}
    for pod in pods:
        uid = pod["metadata"].get("uid")
        started, finished = _pod_interval(pod)
        if not uid or started is None or not pod["spec"].get("nodeName"):
            continue
        seen.add(uid)
        interval = open_intervals.get(uid)
        if interval is None:
            _, created = RunInterval.objects.get_or_create(pod_uid=uid, defaults={
                "workload": workload, "pod_name": pod["metadata"]["name"], "node": pod["spec"]["nodeName"],
                "resource_name": resource, "units": _gpu_units(pod, resource), "started_at": started, "ended_at": finished,
            })
            result.intervals_opened += int(created)
        elif interval.ended_at is None and finished is not None:
            interval.ended_at = finished
            interval.save(update_fields=["ended_at"])
            result.intervals_closed += 1
    # A pod that is gone (deleted, preempted, garbage-collected) ran until now at the latest.
    now = timezone.now()
    for uid, interval in open_intervals.items():
        if uid not in seen and interval.ended_at is None:
            interval.ended_at = now
            interval.save(update_fields=["ended_at"])
            result.intervals_closed += 1


def mark_borrowed(team_ids: set[int] | None = None) -> None:
    """Which admitted workloads run on borrowed quota: a team's guarantee covers its oldest
    admitted workloads first, as Kueue counts it, and the newest beyond it are borrowing (and
    are the ones a reclaiming lender preempts)."""
    running = Workload.objects.filter(phase__in=(Workload.Phase.ADMITTED, Workload.Phase.RUNNING))
    if team_ids is not None:
        running = running.filter(team_id__in=team_ids)
    admitted = list(running.order_by("team_id", "flavor_id", "submitted_at", "pk").only(
        "pk", "team_id", "flavor_id", "units", "workers", "on_borrowed"))
    guarantees = tenant_selectors.guarantees_by_flavor(team_ids=list({w.team_id for w in admitted}))
    used: dict[tuple[int, int], int] = defaultdict(int)
    for workload in admitted:
        key = (workload.team_id, workload.flavor_id)
        used[key] += workload.total_units
        borrowed = used[key] > guarantees.get(key, 0)
        if borrowed != workload.on_borrowed:
            Workload.objects.filter(pk=workload.pk).update(on_borrowed=borrowed)
    Workload.objects.exclude(phase__in=(Workload.Phase.ADMITTED, Workload.Phase.RUNNING)).filter(on_borrowed=True).update(on_borrowed=False)


def _teams(workloads: list[Workload]) -> set[int]:
    return {workload.team_id for workload in workloads}


def sync_all() -> SyncResult:
    return sync_snapshot(Snapshot.read())


def sync_snapshot(snapshot: Snapshot, keys: set[Key] | None = None) -> SyncResult:
    """Records what the snapshot says about active workloads (only those in keys, when given)."""
    result = SyncResult()
    workloads = Workload.objects.filter(phase__in=Workload.ACTIVE_PHASES).select_related("team", "flavor", "template_version__template")
    if keys is not None:
        workloads = workloads.filter(pk__in={workload_id for _, workload_id in keys})
    workloads = list(workloads.prefetch_related("intervals"))
    for workload in workloads:
        with transaction.atomic():
            derived = derive(workload, snapshot)
            record_intervals(workload, snapshot.pods.get(key_of(workload), []), result)
            if derived and derived != (workload.phase, workload.reason):
                record_transition(workload, *derived)
                result.changed += 1
    mark_borrowed(None if keys is None else _teams(workloads))
    # Stopped or finished workloads may still have pods winding down: close their intervals too.
    recently = Workload.objects.filter(phase__in=Workload.FINAL_PHASES, intervals__ended_at__isnull=True).distinct()
    if keys is not None:
        recently = recently.filter(pk__in={workload_id for _, workload_id in keys})
    for workload in recently.select_related("team", "flavor").prefetch_related("intervals"):
        record_intervals(workload, snapshot.pods.get(key_of(workload), []), result)
    return result



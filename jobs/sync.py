"""Status sync: reads what the cluster says about the portal's workloads and records it.

One pass lists the owners of the portal's workloads (each kind's, jobs/kinds/: Jobs, Deployments,
StatefulSets), their pods and the queue backend's objects of them (Kueue's Workloads or
Volcano's PodGroups) (five calls, however many workloads; with PORTAL_NAMESPACED_READS pods are
listed per team namespace that has a workload to follow, four calls plus one per such team),
derives each active workload's phase with the reason in words, and records every pod's run
interval keyed by its UID, so reading the same cluster again, after a watch expired or the worker
restarted, changes nothing.

A snapshot is never the whole truth at one instant: the full pass lists five kinds one after
another, and an informer's caches are fed by one watch per kind, in no common order. So a
terminal verdict comes only from evidence no later event can contradict: the Job's own
Complete or Failed condition, a succeeded pod for every completion, or, for "gone", a direct
read of an owner once in the cluster that answers 404. Absence from a snapshot proves nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs import kinds, manifests
from jobs.models import RunInterval, RunIntervalSwitch, Workload
from jobs.services import record_transition
from portal.adapters import whole_number
from portal.hooks import Event
from portal.kube import KubeError, ObjectRef, gateway
from portal.kube.base import quantity
from portal.kube.store import list_each
from tenants import desired, queueing
from tenants import selectors as tenant_selectors
from tenants.models import Flavor, Team
from tenants.queueing.base import HELD_WAITING

log = logging.getLogger(__name__)

MANAGED = {manifests.MANAGED_BY_LABEL: "gpu-portal"}
GONE_REASON = "Its objects are gone from the cluster (deleted outside the portal)."
# Sent after the commit that closed run intervals, with their ids: billing meters their hours then.
INTERVALS_CLOSED = Event[Callable[[list[int]], None]]("jobs.sync.INTERVALS_CLOSED", by="billing")


Key = tuple[str, int]  # (namespace, workload id): an object counts only in its team's namespace


def owner_kind_names() -> tuple[str, ...]:
    """The kinds of the objects that own workloads' pods on the site's queue backend (jobs/kinds/)."""
    return tuple(kind for _, kind in kinds.owner_kinds())


def watched() -> tuple[tuple[str, str, dict[str, str] | None], ...]:
    """What the sync reads: the portal's own objects by label, and the site's queue backend's
    objects of them (Kueue's Workloads, which Kueue creates without our labels and are matched to
    ours through their owners; Volcano's PodGroups, which carry our labels)."""
    return (
        *((api_version, kind, MANAGED) for api_version, kind in kinds.owner_kinds()),
        ("v1", "Pod", MANAGED),
        *((api_version, kind, None) for api_version, kind in queueing.backend().workload_kinds),
    )


# Of watched(), the kinds the portal may read only in team namespaces when PORTAL_NAMESPACED_READS
# is on (its ClusterRole then holds no read of them across the cluster): listed and watched per
# namespace, one call or one watch each, rather than once.
TEAM_NAMESPACE_KINDS = frozenset({"Pod"})
# How long after a workload ends its team's namespace is still read for its pods: pods winding
# down after a stop, or seen only after the Job's end, still get their run interval recorded.
WINDING_DOWN = dt.timedelta(hours=1)


def read_per_namespace(kind: str) -> bool:
    return kind in TEAM_NAMESPACE_KINDS and settings.PORTAL_NAMESPACED_READS


def read_namespaces(kind: str) -> list[str] | None:
    """Where the sync reads `kind`: the namespaces of workload_namespaces() when the portal's
    reads of it are namespaced; None, the whole cluster, otherwise."""
    return workload_namespaces() if read_per_namespace(kind) else None


def workload_namespaces() -> list[str]:
    """The team namespaces where the sync may find pods it records: those of teams with a
    workload active, ended within WINDING_DOWN, or with a run interval still open. A team with
    nothing running costs no call (one query of the database)."""
    recent = timezone.now() - WINDING_DOWN
    busy = Workload.objects.filter(Q(phase__in=Workload.ACTIVE_PHASES) | Q(finished_at__gte=recent), team=OuterRef("pk"))
    still_open = RunInterval.objects.filter(workload__team=OuterRef("pk"), ended_at__isnull=True)
    teams = Team.objects.filter(Exists(busy) | Exists(still_open)).only("slug")
    return sorted(team.namespace for team in teams)


@dataclass
class Snapshot:
    """The cluster objects of the portal's workloads, indexed by namespace and workload id."""

    owners: dict[Key, dict[str, Any]] = field(default_factory=dict)  # each workload's owner (its kind's, jobs/kinds/)
    pods: dict[Key, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    queued: dict[Key, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))  # the queue's objects

    @classmethod
    def read(cls) -> Snapshot:
        return cls.of({kind: list_each(api_version, kind, namespaces=read_namespaces(kind), labels=labels)
                       for api_version, kind, labels in watched()})

    @classmethod
    def of(cls, objects: dict[str, list[dict[str, Any]]], keys: set[Key] | None = None) -> Snapshot:
        """Indexes lists of objects by kind (a fresh read, or an informer's cache). With `keys`,
        only those workloads' objects: all that a sync of just those workloads reads, and what the
        informer indexes for each batch, which at 5,000 workloads spent about 20 ms a batch
        indexing the other 15,000 objects."""
        snapshot = cls()
        by_name: dict[tuple[str, str, str], Key] = {}
        for kind in owner_kind_names():
            for obj in objects.get(kind, []):
                key = _key(obj)
                if key is not None and (keys is None or key in keys):
                    snapshot.owners[key] = obj
                    by_name[(kind, key[0], obj["metadata"]["name"])] = key
        for pod in objects.get("Pod", []):
            key = _key(pod)
            if key is not None and (keys is None or key in keys):
                snapshot.pods[key].append(pod)
                by_name[("Pod", key[0], pod["metadata"]["name"])] = key
        for _, kind in queueing.backend().workload_kinds:
            for queued in objects.get(kind, []):
                key = _key(queued)  # Volcano's PodGroups carry the workload's label
                if key is not None:
                    if keys is None or key in keys:
                        snapshot.queued[key].append(queued)
                    continue
                namespace = queued["metadata"].get("namespace", "")
                for owner in queued["metadata"].get("ownerReferences", []):  # Kueue's Workloads: through their owner
                    key = by_name.get((owner["kind"], namespace, owner["name"]))
                    if key is not None:
                        snapshot.queued[key].append(queued)
        return snapshot


def _key(obj: dict[str, Any]) -> Key | None:
    value = obj["metadata"].get("labels", {}).get(manifests.WORKLOAD_LABEL, "")
    workload_id = whole_number(value)
    return (obj["metadata"].get("namespace", ""), workload_id) if workload_id is not None else None


def key_of(workload: Workload) -> Key:
    return (workload.team.namespace, workload.pk)


def owner_ref(workload: Workload) -> ObjectRef:
    api_version, kind = kinds.owner_of(workload.kind_facts)
    return ObjectRef(api_version, kind, workload.k8s_name, workload.team.namespace)


def owner_gone(workload: Workload) -> bool:
    """Whether the workload's owner is proven gone: it was in the cluster once, and a direct read,
    which no cache stands between, answers 404. A cluster that does not answer proves nothing.
    A read that finds it counts as seeing it."""
    if not workload.reached_cluster:
        return False
    try:
        owner = gateway().get(owner_ref(workload))
    except KubeError as error:
        log.warning("could not confirm whether %s is gone: %s", owner_ref(workload), error)
        return False
    if owner is not None:
        _mark_seen(workload)
    return owner is None


def _mark_seen(workload: Workload) -> None:
    """Records the first time the sync saw the workload's owner in the cluster."""
    if workload.seen_in_cluster_at is None:
        workload.seen_in_cluster_at = timezone.now()
        workload.save(update_fields=["seen_in_cluster_at"])


def derive(workload: Workload, snapshot: Snapshot) -> tuple[str, str] | None:
    """The phase and reason the cluster shows for one workload, by its kind's rules (jobs/kinds/),
    or None to leave it as it is. Without its owner in the snapshot nothing can be said: whether
    it is gone takes a direct read (owner_gone), which this pure function does not make."""
    owner = snapshot.owners.get(key_of(workload))
    if owner is None:
        return None
    key = key_of(workload)
    per_unit = {resource.name: resource.amount for resource in workload.flavor.unit_resources}
    admission = queueing.backend().admission(snapshot.queued.get(key, []), per_unit=per_unit)
    return workload.kind_facts.derive(owner, snapshot.pods.get(key, []), admission)


def admitted_flavor(workload: Workload, snapshot: Snapshot) -> Flavor | None:
    """The flavor the queue admitted a workload on where its launch accepted several, when it is
    another than the one recorded: read from its admission, the quota the queue charges.
    None when nothing is to change (one flavor, not admitted yet, or admitted as recorded)."""
    accepted = {flavor.slug: flavor for flavor in workload.accepted_flavors.all()}
    if not accepted:
        return None
    for resource, slug in queueing.backend().admission(snapshot.queued.get(key_of(workload), [])).flavors:
        if resource == workload.flavor.resource_name and slug in accepted and slug != workload.flavor.slug:
            return accepted[slug]
    return None


def pod_flavor(workload: Workload, pod: dict[str, Any]) -> Flavor:
    """The flavor a pod runs on: of the flavors its workload accepts, the one whose node labels
    its node selector holds (Kueue writes the admitted flavor's there); else the workload's."""
    selector = pod["spec"].get("nodeSelector") or {}
    for flavor in workload.accepted_flavors.all():
        if flavor.node_labels and all(selector.get(key) == value for key, value in flavor.node_labels.items()):
            return flavor
    return workload.flavor


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
    started = min((s for s in starts if s), default=None) or (
        _time(status.get("startTime")) if status.get("phase") in ("Running", "Succeeded", "Failed") else None)
    finished = None
    if status.get("phase") in ("Succeeded", "Failed"):
        finished = max((e for e in ends if e), default=None) or timezone.now()
    return started, finished


def _units(workload: Workload, flavor: Flavor, pod: dict[str, Any]) -> int:
    """The units a pod holds: what it requests of its flavor's resource, or, where it claims its
    devices through a DeviceClass, the devices its claim asks for (exactly the workload's units)."""
    if flavor.device_class_name:
        claims = pod["spec"].get("resourceClaims") or []
        return workload.units if any(claim.get("resourceClaimTemplateName") for claim in claims) else 0
    return flavor.units_of(_gpu_units(pod, flavor.resource_name))


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
    closed_interval_ids: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {"changed": self.changed, "intervals_opened": self.intervals_opened, "intervals_closed": self.intervals_closed}


def _ran(pod: dict[str, Any]) -> bool:
    """Whether the pod has run on a node: only such a pod has a run interval."""
    return bool(pod["metadata"].get("uid")) and _pod_interval(pod)[0] is not None and bool(pod["spec"].get("nodeName"))


def unseen_endings(workload: Workload, pods: list[dict[str, Any]]) -> dict[str, dt.datetime | None]:
    """For each open interval whose pod the snapshot lacks: when the pod stopped, by a direct read
    (None while it may still run). Made before the transaction that records them, so a call to
    the cluster never holds the database."""
    seen = {pod["metadata"]["uid"] for pod in pods if _ran(pod)}
    return {interval.pod_uid: _ended_while_unseen(workload, interval) for interval in workload.intervals.all()
            if interval.ended_at is None and interval.pod_uid not in seen}


def record_intervals(workload: Workload, pods: list[dict[str, Any]], result: SyncResult,
                     unseen: dict[str, dt.datetime | None] | None = None) -> None:
    """Opens and closes the workload's run intervals from its pods; `unseen` is unseen_endings(),
    read beforehand (read here when not given)."""
    if unseen is None:
        unseen = unseen_endings(workload, pods)
    resource = workload.flavor.resource_name
    open_intervals = {i.pod_uid: i for i in workload.intervals.all()}
    for pod in pods:
        started, finished = _pod_interval(pod)
        if started is None or not _ran(pod):
            continue
        uid = pod["metadata"]["uid"]
        interval = open_intervals.get(uid)
        if interval is None:
            flavor = pod_flavor(workload, pod)
            _, created = RunInterval.objects.get_or_create(pod_uid=uid, defaults={
                "workload": workload, "pod_name": pod["metadata"]["name"], "node": pod["spec"]["nodeName"],
                "flavor": flavor, "fraction_numerator": flavor.fraction_numerator,
                "fraction_denominator": flavor.fraction_denominator,
                "resource_name": resource, "units": _units(workload, flavor, pod), "started_at": started,
                "ended_at": finished,
            })
            result.intervals_opened += int(created)
        elif interval.ended_at is None and finished is not None:
            _close(interval, finished, result)
    for uid, ended in unseen.items():
        interval = open_intervals[uid]
        if ended is not None and interval.ended_at is None:
            _close(interval, ended, result)


def _close(interval: RunInterval, ended: dt.datetime, result: SyncResult) -> None:
    # Never before it started: the start is a node's clock, a pod found gone ends by the cluster's.
    interval.ended_at = max(ended, interval.started_at)
    interval.save(update_fields=["ended_at"])
    result.intervals_closed += 1
    result.closed_interval_ids.append(interval.pk)


def _ended_while_unseen(workload: Workload, interval: RunInterval) -> dt.datetime | None:
    """When a pod missing from the snapshot stopped running, or None while it may still run.
    Another writer (the full pass, or the watch) may have opened the interval from a fresher read
    than this snapshot, so its absence is confirmed by a direct read before the interval ends."""
    try:
        pod = gateway().get(ObjectRef("v1", "Pod", interval.pod_name, workload.team.namespace))
    except KubeError as error:
        log.warning("could not confirm whether pod %s is gone: %s", interval.pod_name, error)
        return None
    if pod is None or pod["metadata"].get("uid") != interval.pod_uid:
        return gateway().cluster_now()  # gone (deleted, preempted, garbage-collected): it ran until now at the latest
    return _pod_interval(pod)[1]


def borrowing(admitted: Iterable[tuple[tuple[int, int], int]], guarantees: Mapping[tuple[int, int], int]) -> list[bool]:
    """Whether each admitted workload, given oldest first as (team id, flavor id) and its units,
    runs on borrowed quota: its team's guarantee of the flavor covers the oldest first, as Kueue
    counts it, and the newest beyond it are borrowing. The one rule: `mark_borrowed` applies it
    to the workloads running now, the demo's history to its runs in the past."""
    used: dict[tuple[int, int], int] = defaultdict(int)
    verdicts = []
    for key, units in admitted:
        used[key] += units
        verdicts.append(used[key] > guarantees.get(key, 0))
    return verdicts


def mark_borrowed(team_ids: set[int] | None = None) -> None:
    """Which admitted workloads run on borrowed quota (`borrowing`); the newest, beyond the
    guarantee, are also the ones a reclaiming lender preempts."""
    running = Workload.objects.filter(phase__in=(Workload.Phase.ADMITTED, Workload.Phase.RUNNING))
    if team_ids is not None:
        running = running.filter(team_id__in=team_ids)
    admitted = list(running.order_by("team_id", "flavor_id", "submitted_at", "pk").only(
        "pk", "team_id", "flavor_id", "units", "workers", "on_borrowed"))
    guarantees = tenant_selectors.guarantees_by_flavor(team_ids=list({w.team_id for w in admitted}))
    flips: dict[bool, list[int]] = defaultdict(list)
    verdicts = borrowing((((w.team_id, w.flavor_id), w.total_units) for w in admitted), guarantees)
    for workload, borrowed in zip(admitted, verdicts, strict=True):
        if borrowed != workload.on_borrowed:
            flips[borrowed].append(workload.pk)
    at = timezone.now()
    for borrowed, ids in flips.items():  # a reclaim flips many at once: one write per direction
        with transaction.atomic():
            # Another writer (a second watcher, the full pass) may have flipped some since they were
            # read: only those still unflipped, locked, are flipped and split here, so never twice.
            ids = list(Workload.objects.select_for_update().filter(pk__in=ids, on_borrowed=not borrowed)
                       .values_list("pk", flat=True))
            Workload.objects.filter(pk__in=ids).update(on_borrowed=borrowed)
            record_switch(workload_ids=ids, borrowed=borrowed, at=at)
    lapsed = (Workload.objects.exclude(phase__in=(Workload.Phase.ADMITTED, Workload.Phase.RUNNING))
              .filter(on_borrowed=True))
    # A workload that stopped or was preempted keeps, for its pods winding down, the state they ran in.
    lapsed.update(on_borrowed=False)


def record_switch(*, workload_ids: list[int], borrowed: bool, at: dt.datetime | None = None) -> int:
    """Splits the workloads' running intervals at this moment: metering counts each second as
    guaranteed or borrowed as it was then. An interval not yet metered and never switched takes
    the state from its start instead (the first verdict after a pod opens is about that pod),
    and so does one that starts later."""
    if not workload_ids:
        return 0
    at = at or timezone.now()
    running = RunInterval.objects.filter(workload_id__in=workload_ids, ended_at__isnull=True)
    fresh = running.filter(Q(started_at__gte=at) | Q(metered_until__isnull=True, switches__isnull=True))
    fresh_ids = list(fresh.values_list("pk", flat=True))
    RunInterval.objects.filter(pk__in=fresh_ids).update(borrowed=borrowed)
    switches = [RunIntervalSwitch(interval_id=pk, at=at, borrowed=borrowed)
                for pk in running.exclude(pk__in=fresh_ids).values_list("pk", flat=True)]
    RunIntervalSwitch.objects.bulk_create(switches)
    return len(switches)


def _record_admitted_flavor(workload: Workload, flavor: Flavor) -> None:
    """The workload now counts as running on the flavor Kueue admitted it on: its quota, its page
    and its pods' billing follow it."""
    workload.flavor = flavor
    Workload.objects.filter(pk=workload.pk).update(flavor=flavor)


def _teams(workloads: list[Workload]) -> set[int]:
    return {workload.team_id for workload in workloads}


def _unfenced() -> None:
    """Writes by the periodic pass and by a watcher that runs alone need no fence."""


def sync_all() -> SyncResult:
    return sync_snapshot(Snapshot.read())


def _unchanged_since_read(workload: Workload) -> bool:
    """Whether the workload is still in the phase, with the reason, this pass read, locked until
    the transaction ends: a stop committed meanwhile deletes its objects, and their absence must
    not then be recorded over it as gone; and another writer (a second watcher during a rolling
    update, the full pass) that recorded a change meanwhile, if only of the reason, must not see
    it written twice."""
    current = Workload.objects.select_for_update().filter(pk=workload.pk).values_list("phase", "reason").first()
    return current == (workload.phase, workload.reason)


def _behind(workload: Workload, derived: tuple[str, str]) -> bool:
    """Whether a snapshot that shows the workload waiting is behind what was recorded (a second
    watcher's informer during a rolling update):
    - Kueue lets an admitted workload wait again only by evicting it, which derive() reads as
      preempted; so "queued" after admitted or running is an older view (seen in CI as running,
      queued, running).
    - The queue never takes back what it said of a waiting workload; so a wait it has said nothing
      of yet, after it said why, is an older view (seen in CI as waiting for Kueue, for quota, for
      Kueue, for quota).
    - A pod never goes back from running to pending; so "admitted" after running, while a pod it
      ran is still running by a direct read (its interval open after record_intervals), is an
      older view (seen in CI as admitted, running, admitted, running). A Job's retry, its pods
      all ended, is admitted again by a fresh view alone."""
    if derived[0] == Workload.Phase.ADMITTED and workload.phase == Workload.Phase.RUNNING:
        return workload.intervals.filter(ended_at__isnull=True).exists()
    if derived[0] != Workload.Phase.QUEUED:
        return False
    if workload.phase in (Workload.Phase.ADMITTED, Workload.Phase.RUNNING):
        return True
    unseen = queueing.backend().unseen
    return workload.phase == Workload.Phase.QUEUED and derived[1] == unseen and workload.reason != unseen


# The phases from which waiting again means the workload lost what it ran on.
REQUEUED_FROM = (Workload.Phase.ADMITTED, Workload.Phase.RUNNING, Workload.Phase.PREEMPTED)


def _requeued(workload: Workload, derived: tuple[str, str] | None) -> tuple[str, str] | None:
    """A workload that ran and waits again, every pod it ran proven ended (its intervals closed by
    a direct read, which no stale view can do), lost its pods to its queue and waits to start again:
    preempted until it runs, though the queue may not say so (Kueue admits a server's pods one by
    one, each its own Workload, so a new pod's Workload is merely pending; a Volcano Job's PodGroup
    is made again). Call after record_intervals."""
    if derived is None or derived[0] != Workload.Phase.QUEUED or workload.phase not in REQUEUED_FROM:
        return derived
    intervals = list(workload.intervals.all())
    if intervals and all(interval.ended_at is not None for interval in intervals):
        return Workload.Phase.PREEMPTED, f"Preempted and queued again. {derived[1]}".strip()
    return derived


def sync_snapshot(snapshot: Snapshot, keys: set[Key] | None = None, *, fence: Callable[[], None] | None = None) -> SyncResult:
    """Records what the snapshot says about active workloads (only those in keys, when given).
    `fence`, when given, is called before each write and raises to stop them: a watcher elected
    leader (portal.leader) stops before another may start writing the same transitions."""
    fence = fence or _unfenced
    result = SyncResult()
    active = (Workload.objects.filter(phase__in=Workload.ACTIVE_PHASES)
              .select_related("team", "flavor", "template_version__template"))
    if keys is not None:
        active = active.filter(pk__in={workload_id for _, workload_id in keys})
    workloads = list(active.prefetch_related("intervals", "accepted_flavors"))
    held: set[int] | None = None  # the teams on hold, read once a pass, when something waits
    for workload in workloads:
        pods = snapshot.pods.get(key_of(workload), [])
        if key_of(workload) in snapshot.owners:
            _mark_seen(workload)
            derived = derive(workload, snapshot)
            if derived is not None and derived[0] == Workload.Phase.QUEUED:
                # On hold, it waits for the hold whatever else its queue says (a Volcano PodGroup
                # cannot tell a held Queue from a full one): the same words on every backend.
                held = desired.HOLDS.call(sorted({w.team_id for w in workloads})) if held is None else held
                derived = (derived[0], HELD_WAITING) if workload.team_id in held else derived
            if (admitted := admitted_flavor(workload, snapshot)) is not None:
                fence()
                _record_admitted_flavor(workload, admitted)
        else:
            # Read before the transaction: a call to the cluster should not hold the database.
            derived = (Workload.Phase.FAILED, GONE_REASON) if owner_gone(workload) else None
        unseen = unseen_endings(workload, pods)
        fence()
        with transaction.atomic():
            record_intervals(workload, pods, result, unseen)
            derived = _requeued(workload, derived)
            if (derived and derived != (workload.phase, workload.reason) and not _behind(workload, derived)
                    and _unchanged_since_read(workload)):
                record_transition(workload, *derived)
                result.changed += 1
    fence()
    mark_borrowed(None if keys is None else _teams(workloads))
    # Stopped or finished workloads may still have pods winding down, or pods the snapshot
    # shows only now (a watch delivered the Job's end before the pod's start): record those too.
    recently = Workload.objects.filter(phase__in=Workload.FINAL_PHASES)
    if keys is not None:
        recently = recently.filter(pk__in={workload_id for _, workload_id in keys})
    else:
        with_pods = {workload_id for (_, workload_id), pods in snapshot.pods.items() if pods}
        still_open = Exists(RunInterval.objects.filter(workload=OuterRef("pk"), ended_at__isnull=True))
        recently = recently.filter(Q(still_open) | Q(pk__in=with_pods))
    for workload in recently.select_related("team", "flavor").prefetch_related("intervals", "accepted_flavors"):
        fence()
        record_intervals(workload, snapshot.pods.get(key_of(workload), []), result)
    if result.closed_interval_ids:
        closed = list(result.closed_interval_ids)
        transaction.on_commit(lambda: INTERVALS_CLOSED.send(closed))
    return result



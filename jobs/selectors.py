"""Reads about workloads: lists scoped to the user, the live picture of one workload, the
launch hint, and the answer to "why is it still waiting?"."""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db.models import OuterRef, Prefetch, QuerySet, Subquery, prefetch_related_objects
from django.utils import timezone

from jobs import kinds, manifests, person_limits, policy, pricing
from jobs.models import (
    GitSource,
    GpuXidEvent,
    ImageRegistry,
    Priority,
    RunInterval,
    TeamVolume,
    Workload,
    WorkloadTemplate,
    WorkloadTemplateVersion,
)
from portal.kube import KubeError, ObjectRef, gateway
from portal.kube.dra import RESOURCE_API
from portal.metrics import PodKey
from portal.metrics.xid import xid_meaning
from tenants import cluster_selectors, queueing
from tenants import selectors as tenant_selectors
from tenants.models import Flavor, Team
from tenants.nodes import NodeWorkload, NodeXid
from tenants.queueing.base import HELD_WAITING, PendingEntry, QueueUsage

PRIORITY_ORDER: dict[str, int] = {Priority.HIGH: 0, Priority.NORMAL: 1, Priority.LOW: 2}
WAITING = (Workload.Phase.QUEUED, Workload.Phase.PREEMPTED, Workload.Phase.SUBMITTING)


def image_allow_list() -> list[str]:
    """Every registry templates may pull from: the deployment's (PORTAL_IMAGE_REGISTRIES) and the
    platform admins' (ImageRegistry), in one written form."""
    configured = [entry for entry in map(policy.registry_entry, settings.PORTAL_IMAGE_REGISTRIES) if entry]
    return sorted({*configured, *ImageRegistry.objects.values_list("prefix", flat=True)})


def git_sources() -> list[str]:
    """Where git parameters may fetch code from: the sources set at deployment
    (PORTAL_GIT_SOURCES) and those platform admins keep (GitSource), in one written form."""
    configured = {entry for entry in map(policy.git_source_entry, settings.PORTAL_GIT_SOURCES) if entry}
    return sorted({*configured, *GitSource.objects.values_list("prefix", flat=True)})


def team_claims(*, team: Team) -> list[str] | None:
    """The names of the team's data volumes: the PersistentVolumeClaims in its namespace as the
    cluster has them now (none being deleted), for the launch form to offer. None when the
    cluster does not answer. Only the team's own namespace is read, so another team's claims
    are never listed."""
    try:
        claims, _ = gateway().list("v1", "PersistentVolumeClaim", namespace=team.namespace)
    except KubeError:
        return None
    return sorted(claim["metadata"]["name"] for claim in claims if not claim["metadata"].get("deletionTimestamp"))


def team_claim_exists(*, team: Team, claim: str) -> bool:
    """Whether the team's namespace holds the claim now: a direct read, never a cached list
    (raises KubeError when the cluster does not answer)."""
    found = gateway().get(ObjectRef("v1", "PersistentVolumeClaim", claim, team.namespace))
    return found is not None and not found["metadata"].get("deletionTimestamp")


def workloads_for_user(*, user: Any) -> QuerySet[Workload]:
    """The workloads the user can see; the lists narrow them with jobs.filters.WorkloadFilter."""
    return Workload.objects.for_user(user).select_related("team", "owner", "flavor", "template_version__template")


def workload_launched(*, workload: Workload) -> Workload:
    """A workload its caller just launched, with its timeline, for the answer to the launch. Only
    its own row is read again (its submission may have moved it on already); the team, owner,
    flavor and version it holds are the ones the launch checked, which never change, so the
    detail's five-table join is not needed on the launch's critical path."""
    workload.refresh_from_db(fields=[field.attname for field in Workload._meta.concrete_fields if not field.is_relation])
    prefetch_related_objects([workload], "transitions", "intervals__flavor", "intervals__switches")
    return workload


def _queues() -> dict[str, list[QueueUsage]] | None:
    """Every team queue's usage in one read, or None when the cluster is silent."""
    try:
        return cluster_selectors.cluster_queue_usage()
    except KubeError:
        return None


def team_queue_usage(
    *, team: Team, flavor: Flavor, queues: dict[str, list[QueueUsage]] | None = None
) -> QueueUsage | None:
    """The team's queue for this flavor as Kueue reports it, or None when the cluster is silent. A
    CPU-only flavor is in no queue: its use is the portal's count of the team's active workloads."""
    if flavor.is_cpu:
        return QueueUsage(flavor=flavor.slug, resource=flavor.resource_name,
                          guaranteed=tenant_selectors.team_guarantees(team=team).get(flavor.pk, 0),
                          in_use=cpu_units_in_use(team=team, flavor=flavor), borrowed=0, lent=0)
    queues = _queues() if queues is None else queues
    if queues is None:
        return None
    for row in queues.get(team.slug, []):
        if row.flavor == flavor.slug:
            return row
    return QueueUsage(flavor=flavor.slug, resource=flavor.resource_name,
                      guaranteed=tenant_selectors.team_guarantees(team=team).get(flavor.pk, 0), in_use=0, borrowed=0, lent=0)


def cpu_units_in_use(*, team: Team, flavor: Flavor) -> int:
    """The units of a CPU-only flavor the team's active workloads hold (or will, once started)."""
    rows = Workload.objects.filter(team=team, flavor=flavor).active().values_list("units", "workers")
    return sum(units * workers for units, workers in rows)


def queues_in_use(team_ids: list[int]) -> dict[int, set[str]]:
    """Per team, the queues its active workloads were launched into (tenants.desired.QUEUES_IN_USE)."""
    found: dict[int, set[str]] = {}
    rows = Workload.objects.filter(team_id__in=team_ids).active().exclude(queue_name="")
    for team_id, name in rows.values_list("team_id", "queue_name").distinct():
        found.setdefault(team_id, set()).add(name)
    return found


@dataclass(frozen=True)
class LaunchHint:
    flavor: Flavor
    units: int
    usage: QueueUsage | None
    ceiling: int
    lendable: int = 0  # idle quota of the other teams' queues that nobody borrows or already waits for
    cost: pricing.HourlyPrice | None = None  # per hour at the current rate
    # Of the team's own free quota, what its workloads already waiting would take first, and of
    # the cohort's idle quota, what waiting workloads of any team would: Kueue admits them first.
    claimed_own: int = 0
    claimed_idle: int = 0

    @property
    def free(self) -> int:
        """What is left of the team's guarantee for this launch."""
        return max(self.usage.free - self.claimed_own, 0) if self.usage is not None else 0

    @property
    def fits_guarantee(self) -> bool:
        return self.usage is not None and self.units <= self.free

    @property
    def would_borrow(self) -> bool:
        return (self.usage is not None and not self.fits_guarantee and self.units <= self.ceiling
                and self.units - self.free <= self.lendable)

    @property
    def would_wait(self) -> bool:
        """Neither its own quota nor what others leave idle is enough right now: it queues."""
        return self.usage is not None and not self.fits_guarantee and not self.would_borrow and not self.impossible

    @property
    def impossible(self) -> bool:
        return self.units > self.ceiling

    @property
    def gpus(self) -> float:
        return float(self.units * self.flavor.fraction)


def cohort_idle(*, team: Team, flavor: Flavor, queues: dict[str, list[QueueUsage]]) -> int:
    """What the other teams' queues leave idle of the flavor, may lend, and nobody borrows yet."""
    idle = borrowed = 0
    for slug, rows in queues.items():
        for row in rows:
            if row.flavor != flavor.slug:
                continue
            borrowed += row.borrowed
            if slug != team.slug:
                idle += row.idle
    return max(idle - borrowed, 0)


def claimed_by_waiting(*, team: Team, flavor: Flavor, queues: dict[str, list[QueueUsage]], idle: int) -> tuple[int, int]:
    """What workloads already waiting for the flavor would take before a new launch of the team:
    (units of the team's own free quota, units of the cohort's idle quota).

    Kueue tries waiting workloads by priority and age, skipping one that does not fit (best-effort
    FIFO), so each waiting workload that fits its team's free quota plus the idle pool takes its
    share first; a launch is the newest and comes after them. Without this, a hint counted idle
    units a workload launched a moment earlier was about to take ("would borrow", then waited)."""
    free = {slug: row.free for slug, rows in queues.items() for row in rows if row.flavor == flavor.slug}
    own_before = free.get(team.slug, 0)
    pool = idle
    # Work waiting in the portal for a per-person limit is in no queue: it claims nothing there yet.
    waiting = sorted(Workload.objects.filter(flavor=flavor, phase__in=WAITING, waits_for_person_limit=False)
                     .select_related("team"),
                     key=lambda w: (PRIORITY_ORDER.get(w.priority, 1), w.created_at, w.pk))
    for other in waiting:
        slug = other.team.slug
        own = min(free.get(slug, 0), other.total_units)
        borrow = other.total_units - own
        if borrow and (not other.team.may_borrow or borrow > pool):
            continue
        free[slug] = free.get(slug, 0) - own
        pool -= borrow
    return own_before - free.get(team.slug, 0), idle - pool


def launch_hint(*, team: Team, flavor: Flavor, units: int) -> LaunchHint:
    queues = _queues()
    usage = None if queues is None else team_queue_usage(team=team, flavor=flavor, queues=queues)
    idle = (cohort_idle(team=team, flavor=flavor, queues=queues)
            if queues is not None and team.may_borrow and not flavor.is_cpu else 0)
    claimed_own, claimed_idle = claimed_by_waiting(team=team, flavor=flavor, queues=queues, idle=idle) if queues else (0, 0)
    return LaunchHint(flavor=flavor, units=units, usage=usage, ceiling=tenant_selectors.team_ceiling(team=team, flavor=flavor),
                      lendable=idle - claimed_idle, cost=pricing.hourly_cost(flavor=flavor, units=units),
                      claimed_own=claimed_own, claimed_idle=claimed_idle)


def launch_hint_among(*, team: Team, flavors: list[Flavor], units: int) -> LaunchHint:
    """The hint for a launch that accepts several flavors: the flavor Kueue would admit it on,
    the first in the team queue's order (the catalog's, by id) where it fits the guarantee or may
    borrow; else the first. One flavor is launch_hint's."""
    if len(flavors) == 1:
        return launch_hint(team=team, flavor=flavors[0], units=units)
    hints = [launch_hint(team=team, flavor=flavor, units=units) for flavor in sorted(flavors, key=lambda f: f.pk)]
    return next((hint for hint in hints if hint.fits_guarantee or hint.would_borrow), hints[0])


@dataclass(frozen=True)
class Holder:
    """A team using the flavor now: its queue's use, and how much of that is borrowed."""

    team: str
    in_use: int
    borrowed: int
    guaranteed: int


@dataclass(frozen=True)
class WhyWaiting:
    reason: str
    usage: QueueUsage | None
    position: int  # 1 = the first of the team's waiting workloads Kueue tries; 0 = not known or not waiting
    ahead: list[Workload] = field(default_factory=list)
    # Where the position comes from: the queue backend's name ("kueue": its visibility API) or
    # "estimate" (the portal's own ordering by priority and age, when the cluster does not say).
    position_source: str = "estimate"
    position_by: str = ""  # the queue backend that lists it there ("Kueue"), when it is not the estimate
    holders: list[Holder] = field(default_factory=list)
    estimated_start: dt.datetime | None = None
    estimate_basis: str = ""
    fairness: str = ""  # where fair sharing between teams is why it waits (fairness_reason)
    order: str = ""  # where the team's waiting work goes by its people's recent use (person_order_reason)


def _owned_by(entry: PendingEntry, workload_name: str) -> bool:
    """Whether a waiting entry of the queue stands for this portal workload: its owner, or one of
    its pods (Deployments' and StatefulSets' pods are queued one by one or as a group)."""
    return any(name == workload_name or name.startswith(workload_name + "-") for name in entry.owners)


def _queue_position(workload: Workload, queued: list[Workload]) -> tuple[int, list[Workload]] | None:
    """The workload's place in its team queue as the queue backend reads it (Kueue: its visibility
    API), with the team's workloads before it; None when the cluster does not say or does not list it."""
    entries = queueing.backend().pending(team_queue=workload.team.cluster_queue)
    if entries is None:
        return None
    mine = [entry for entry in entries if entry.namespace == workload.team.namespace]
    own = next((entry for entry in mine if _owned_by(entry, workload.k8s_name)), None)
    if own is None:
        return None
    before = [entry for entry in mine if entry.position < own.position]
    ahead = [other for other in queued if other.pk != workload.pk and any(_owned_by(entry, other.k8s_name) for entry in before)]
    ahead.sort(key=lambda other: min(entry.position for entry in before if _owned_by(entry, other.k8s_name)))
    return own.position + 1, ahead


def _holders(flavor: Flavor, queues: dict[str, list[QueueUsage]] | None) -> list[Holder]:
    if not queues:
        return []
    rows = [(slug, row) for slug, team_rows in queues.items() for row in team_rows
            if row.flavor == flavor.slug and (row.in_use or row.borrowed)]
    names = dict(Team.objects.filter(slug__in=[slug for slug, _ in rows]).values_list("slug", "name"))
    holders = [Holder(team=names.get(slug, slug), in_use=row.in_use, borrowed=row.borrowed, guaranteed=row.guaranteed)
               for slug, row in rows]
    return sorted(holders, key=lambda h: (-h.in_use, h.team))


def _run_started(workload: Workload) -> dt.datetime | None:
    starts = [interval.started_at for interval in workload.intervals.all()]
    return min(starts) if starts else workload.submitted_at


def estimated_start(*, workload: Workload, ahead: list[Workload], usage: QueueUsage | None,
                    lendable: int, now: dt.datetime | None = None) -> tuple[dt.datetime | None, str]:
    """The latest time the workload should start if nothing new comes first: running jobs of the
    flavor end at the latest at their start plus their template's maximum run time, and their
    units go to the workloads ahead of it, then to it. An estimate, and said to be one."""
    now = now or timezone.now()
    if usage is None:
        return None, "The cluster did not answer, so no start can be estimated."
    needed = workload.total_units + sum(other.total_units for other in ahead) - usage.free - lendable
    if needed <= 0:
        return now, f"Enough quota looks free now; {queueing.backend().label} should admit it on its next pass."
    running = (Workload.objects.filter(flavor_id=workload.flavor_id, phase__in=(Workload.Phase.ADMITTED, Workload.Phase.RUNNING),
                                       template_version__template__kind__in=kinds.names(runs_to_completion=True))
               .select_related("template_version").prefetch_related("intervals"))
    if not workload.team.may_borrow:
        running = running.filter(team_id=workload.team_id)
    ends = []
    for other in running:
        started = _run_started(other)
        if started is not None:
            ends.append((started + dt.timedelta(seconds=other.template_version.max_runtime_seconds), other.total_units))
    freed = 0
    for end, units in sorted(ends, key=lambda pair: pair[0]):
        freed += units
        if freed >= needed:
            return max(end, now), (f"When running jobs of {workload.flavor.name} reach their maximum run time, "
                                   f"{freed} units free up; it needs {needed} more than are free now.")
    return None, (f"It needs {needed} more units of {workload.flavor.name} than are free now, and running jobs "
                  "with a maximum run time do not free that many: servers and notebooks run until stopped.")


def fairness_reason(*, workload: Workload, usage: QueueUsage | None, queues: dict[str, list[QueueUsage]] | None) -> str:
    """Where it waits for idle quota other teams of its cohort borrow: how those units are split by
    weight, and whether the team would be above its fair share with it (then it waits for units to
    free up) or not (then Kueue reclaims for it from a team above its own); "" where fairness is
    not the reason (it fits the team's guarantee, the team may not borrow, nobody else borrows)."""
    if (queues is None or usage is None or workload.phase not in WAITING or not workload.team.may_borrow
            or usage.free >= workload.total_units or not queueing.backend().fair_sharing
            or not workload.reason.startswith(("Waiting for quota", "Preempted and queued again"))):
        return ""
    share = next((fs for fs in cluster_selectors.fair_shares(team=workload.team, queues=queues)
                  if fs.flavor == workload.flavor.name), None)
    if share is None or not share.borrowers:
        return ""
    team, units = workload.team.name, workload.total_units
    others = ", ".join(f"{b.team} {b.borrowed} (weight {b.weight_text})" for b in share.borrowers)
    said = (f"Fair sharing: the {share.pool} units of {share.flavor} the teams of its cohort borrow go to them by weight. "
            f"{team} borrows {share.borrowed} (weight {share.weight_text}; its fair share {share.fair_text}); also borrowing: "
            f"{others}. ")
    if share.borrowed + units > share.fair:
        return said + (f"With this workload {team} would hold {share.borrowed + units}, above its fair share, so it waits "
                       "until units free up or the others borrow less.")
    return said + (f"With this workload {team} would still be within its fair share, so Kueue takes units back for it "
                   "from a team above its own.")


def _recent(use: float) -> str:
    return f"{use:.1f}" if use >= 0.05 or use == 0 else "under 0.1"


def person_order_reason(*, workload: Workload, ahead: list[Workload]) -> str:
    """Where the queue admits the team's waiting work by its people's recent use (Kueue's
    admission fair sharing): the owner's recent use and that of whose work is ahead of it; "" on a
    backend without it, for work launched before people had their own queue, or when the
    cluster does not say."""
    backend = queueing.backend()
    if not backend.people_ordered or not workload.queue_name or workload.phase not in WAITING:
        return ""
    use = backend.people_use(namespace=workload.team.namespace)
    if use is None:
        return ""
    mine = use.get(workload.queue_name, 0.0)
    said = (f"{backend.label} admits the team's waiting work by each person's recent use, least first, then by priority "
            f"and age. {workload.owner.username}'s recent use: {_recent(mine)}.")
    others: dict[str, float] = {}
    for other in ahead:
        if other.owner_id != workload.owner_id and other.queue_name:
            others.setdefault(other.owner.username, use.get(other.queue_name, 0.0))
    if others:
        said += " Ahead of it: " + ", ".join(f"{name}'s ({_recent(value)})" for name, value in others.items()) + "."
    return said


def why_waiting(*, workload: Workload) -> WhyWaiting:
    """The reason in words, the team's quota of the flavor, its place in the queue (Kueue's, or
    the portal's estimate, said which), who uses the flavor now, and an estimated start. Work
    waiting in the portal for its owner's per-person limit is in no queue yet: its reason, now."""
    if workload.waits_for_person_limit and workload.phase == Workload.Phase.QUEUED:
        queues = _queues()
        return WhyWaiting(reason=person_limits.waiting_now(workload),
                          usage=None if queues is None else team_queue_usage(team=workload.team, flavor=workload.flavor,
                                                                             queues=queues), position=0)
    queued = list(
        Workload.objects.filter(team_id=workload.team_id, phase__in=WAITING, waits_for_person_limit=False)
        .select_related("owner", "flavor")
    )
    queued.sort(key=lambda w: (PRIORITY_ORDER.get(w.priority, 1), w.created_at, w.pk))
    from_queue = _queue_position(workload, queued) if workload.phase in WAITING else None
    position_by = ""
    if from_queue is not None:
        (position, ahead), source, position_by = from_queue, queueing.backend().name, queueing.backend().label
    else:
        position = next((i for i, w in enumerate(queued, start=1) if w.pk == workload.pk), 0)
        ahead, source = queued[: max(position - 1, 0)], "estimate"
    queues = _queues()
    usage = None if queues is None else team_queue_usage(team=workload.team, flavor=workload.flavor, queues=queues)
    lendable = (cohort_idle(team=workload.team, flavor=workload.flavor, queues=queues)
                if queues is not None and workload.team.may_borrow else 0)
    start, basis = (estimated_start(workload=workload, ahead=ahead, usage=usage, lendable=lendable)
                    if workload.phase in WAITING else (None, ""))
    # A held team's queue says so where the workload's own queue objects cannot (Volcano's PodGroups).
    reason = HELD_WAITING if usage is not None and usage.held and workload.phase in WAITING else workload.reason
    return WhyWaiting(reason=reason, usage=usage, position=position, ahead=ahead, position_source=source,
                      position_by=position_by,
                      holders=_holders(workload.flavor, queues), estimated_start=start, estimate_basis=basis,
                      fairness=fairness_reason(workload=workload, usage=usage, queues=queues),
                      order=person_order_reason(workload=workload, ahead=ahead) if from_queue is not None else "")


@dataclass(frozen=True)
class EventRow:
    at: str
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class LivePicture:
    """What only the cluster knows about the workload now. Its phase and timeline are not here:
    the status sync keeps them in the database, so a poll reads them there for free."""

    pods: list[dict[str, Any]]
    events: list[EventRow]
    events_of: str = ""  # the object the events are about
    unreachable: str = ""
    # Where its flavor is a DeviceClass: each pod's devices, as its claim's allocation names them
    claimed: list[tuple[str, list[str]]] = field(default_factory=list)


def _pods(workload: Workload) -> list[dict[str, Any]]:
    return gateway().list("v1", "Pod", namespace=workload.team.namespace, labels={manifests.WORKLOAD_LABEL: str(workload.pk)})[0]


def _newest(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)


def _event_row(event: dict[str, Any]) -> EventRow:
    return EventRow(at=event.get("lastTimestamp") or event.get("eventTime") or "", type=event.get("type") or "",
                    reason=event.get("reason") or "", message=event.get("message") or "")


def live_picture(*, workload: Workload, max_events: int = 20) -> LivePicture:
    """The workload's pods and the recent events of its newest pod (of the workload's own object
    while it has none), read from the cluster now in two calls.

    A field selector matches one name, so the events are those of one object: the newest pod
    says why a run stalls (pulling, crashing, evicted); before any pod exists the Job,
    Deployment or StatefulSet does. The rest of the namespace's events are never read.
    """
    try:
        pods = _pods(workload)
        newest = _newest(pods)
        subject = newest["metadata"]["name"] if newest else workload.k8s_name
        events = gateway().list("v1", "Event", namespace=workload.team.namespace, fields={"involvedObject.name": subject})[0]
        claimed = _claimed(workload, pods) if workload.flavor.device_class_name else []
    except KubeError as error:
        return LivePicture(pods=[], events=[], unreachable=f"The cluster did not answer: {error}")
    rows = sorted((_event_row(e) for e in events), key=lambda row: row.at, reverse=True)
    return LivePicture(pods=pods, events=rows[:max_events], events_of=subject, claimed=claimed)


def _claimed(workload: Workload, pods: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Each pod's devices (driver, pool and device, as the scheduler allocated them to its
    ResourceClaims), in one list of the namespace's claims; a pod not allocated yet has none."""
    claims = {claim["metadata"]["name"]: claim
              for claim in gateway().list(RESOURCE_API, "ResourceClaim", namespace=workload.team.namespace)[0]}
    found = []
    for pod in pods:
        devices = []
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            claim = claims.get(status.get("resourceClaimName") or "", {})
            results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
            devices += [f"{result['driver']} {result['pool']}/{result['device']}" for result in results]
        found.append((pod["metadata"]["name"], devices))
    return found


# --- Reads for the REST API (jobs/api.py) -------------------------------------------------------


def templates_with_current_version(*, user: Any) -> QuerySet[WorkloadTemplate]:
    """The templates the user can see (inactive ones too), each with its current version in `current_versions`, in a
    fixed number of queries; jobs.filters.TemplateFilter narrows them to what a team can launch."""
    templates = WorkloadTemplate.objects.for_user(user)
    newest = WorkloadTemplateVersion.objects.filter(template=OuterRef("template")).order_by("-number").values("number")[:1]
    current = WorkloadTemplateVersion.objects.filter(number=Subquery(newest)).prefetch_related("flavors")
    return templates.select_related("owner_team").prefetch_related(
        Prefetch("versions", queryset=current, to_attr="current_versions"), "teams"
    )


@dataclass(frozen=True)
class WorkloadLogs:
    pod: str
    lines: list[str]
    unreachable: str = ""
    pods: tuple[str, ...] = ()  # every pod of the workload, newest first: a distributed job's workers, a server's replicas
    no_such_pod: bool = False  # the pod asked for is not one of them (the cluster answered)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


# The most of one log the download carries: the API server stops there (limitBytes).
LOG_DOWNLOAD_BYTES = 10 * 1024 * 1024


def workload_logs(*, workload: Workload, tail_lines: int | None = 100, pod: str = "",
                  limit_bytes: int | None = None) -> WorkloadLogs:
    """The log of one of the workload's pods (the newest unless `pod` names another of its own):
    the last lines, or with `tail_lines=None` all of it up to `limit_bytes`. Read only when asked
    for (the page's logs panel, the download, the API): logs are the dearest read the API server serves."""
    try:
        pods = sorted(_pods(workload), key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
        names = tuple(p["metadata"]["name"] for p in pods)
        if pod and pod not in names:
            return WorkloadLogs(pod="", lines=[], pods=names, no_such_pod=True,
                                unreachable=f"{workload.name} has no pod “{pod}”; choose one of its pods.")
        chosen = pod or (names[0] if names else "")
        logs = (gateway().pod_logs(namespace=workload.team.namespace, name=chosen, tail_lines=tail_lines,
                                   limit_bytes=limit_bytes) if chosen else "")
    except KubeError as error:
        return WorkloadLogs(pod="", lines=[], unreachable=f"The cluster did not answer: {error}")
    return WorkloadLogs(pod=chosen, lines=logs.splitlines(), pods=names)


# --- Reads for the workload pages (added with jobs/views.py) ---------------------------------


_TEMPLATE_ID = re.compile(r"[0-9]{1,18}")


def templates_named(*, templates: QuerySet[WorkloadTemplate], reference: Any) -> QuerySet[WorkloadTemplate]:
    """The templates among `templates` (those the caller can see) that a reference names.

    A template is named by its id. A slug, which old links and scripts use, is unique only within
    its team (and among the portal's own templates), so it may name several: callers that need
    one template take it only when it is the only one. A slug is never all digits (services
    refuse one), so a number is always an id.
    """
    text = str(reference).strip()
    if _TEMPLATE_ID.fullmatch(text):
        return templates.filter(pk=int(text))
    return templates.filter(slug=text)


def templates_named_among(*, templates: Iterable[WorkloadTemplate], reference: Any) -> list[WorkloadTemplate]:
    """templates_named for templates already read (the launch form's, a list's choices)."""
    text = str(reference).strip()
    if _TEMPLATE_ID.fullmatch(text):
        return [template for template in templates if template.pk == int(text)]
    return [template for template in templates if template.slug == text]


def templates_for_user(*, user: Any) -> QuerySet[WorkloadTemplate]:
    """Active templates the user's teams may launch, of kinds the site's queue backend runs, each
    with its versions newest first (so `versions.all()[0]` is the current one without another
    query) and their flavors."""
    versions = WorkloadTemplateVersion.objects.order_by("-number").prefetch_related("flavors")
    return (
        WorkloadTemplate.objects.for_user(user)
        .filter(is_active=True, kind__in=kinds.runnable())
        .select_related("owner_team")
        .prefetch_related(Prefetch("versions", queryset=versions), "teams")
        .order_by("name", "pk")
    )


def flavor_of_pods(pods: Collection[PodKey]) -> dict[PodKey, str]:
    """The flavor (by name) each running pod runs on, as its run interval records it: one query
    over the open run intervals. Pods of no workload (not the portal's) are left out."""
    names = {pod.pod for pod in pods}
    found = {}
    rows = (RunInterval.objects.filter(ended_at__isnull=True, pod_name__in=names)
            .values_list("pod_name", "workload__team__slug", "flavor__name"))
    for pod_name, slug, flavor in rows:
        key = PodKey(Team(slug=slug).namespace, pod_name)
        if key in pods:
            found[key] = flavor
    return found


def workloads_on_nodes(nodes: Collection[str] | None = None) -> dict[str, list[NodeWorkload]]:
    """The workloads with a pod running on each node (of these names; None: every node), and their
    units there, as their open run intervals record them: one query, for the nodes pages."""
    units: dict[tuple[str, int, str, str], int] = defaultdict(int)
    open_intervals = RunInterval.objects.filter(ended_at__isnull=True, workload__isnull=False).exclude(node="")
    if nodes is not None:
        open_intervals = open_intervals.filter(node__in=list(nodes))
    rows = open_intervals.values_list("node", "workload_id", "workload__name", "workload__team__slug", "units")
    for node, pk, name, slug, count in rows:
        units[(node, pk, name, slug)] += count
    found: dict[str, list[NodeWorkload]] = defaultdict(list)
    for (node, pk, name, slug), count in sorted(units.items()):
        found[node].append(NodeWorkload(pk=pk, name=name, team=slug, units=count))
    return dict(found)


NODE_XIDS_SHOWN = 50


def xids_on_node(node: str) -> list[NodeXid]:
    """The XID errors recorded on a node's GPUs, newest first (the last NODE_XIDS_SHOWN): one query."""
    events = GpuXidEvent.objects.filter(node=node).select_related("workload__team").order_by("-at", "-id")[:NODE_XIDS_SHOWN]
    return [NodeXid(at=event.at, code=event.code, gpu=event.gpu, meaning=xid_meaning(event.code), hardware=event.hardware,
                    workload=NodeWorkload(pk=event.workload.pk, name=event.workload.name, team=event.workload.team.slug,
                                          units=event.workload.units) if event.workload else None)
            for event in events]


def team_contents(team: Team) -> list[str]:
    """What of the workloads' side goes when a team is deleted, for its confirmation page."""
    workloads = Workload.objects.filter(team=team)
    total, active = workloads.count(), workloads.active().count()
    templates = WorkloadTemplate.objects.filter(owner_team=team).count()
    volumes = TeamVolume.objects.filter(team=team).count()
    return [f"{total} workload record{'s' if total != 1 else ''} ({active} still active: stopped with the namespace)",
            f"{templates} template{'s' if templates != 1 else ''} of the team's own",
            f"{volumes} data volume{'s' if volumes != 1 else ''} made in the portal, with their data (in the namespace)"]


@dataclass(frozen=True)
class BorrowedHistory:
    """How much of a workload's GPU time ran on other teams' idle quota, from its run intervals
    and their guaranteed/borrowed switches (as metering splits them), kept after it stops."""

    borrowed_hours: Decimal
    gpu_hours: Decimal


def borrowed_history(*, intervals: list[RunInterval], now: dt.datetime | None = None) -> BorrowedHistory:
    """From a workload's intervals, read with their switches (the page has them already)."""
    now = now or timezone.now()
    borrowed, total = Fraction(0), Fraction(0)
    for interval in intervals:
        end = interval.ended_at or now
        share = Fraction(interval.units * interval.fraction_numerator, interval.fraction_denominator)
        state, since = interval.borrowed, interval.started_at
        for switch in sorted(interval.switches.all(), key=lambda s: (s.at, s.pk)):
            at = min(max(switch.at, interval.started_at), end)
            if state:
                borrowed += share * int((at - since).total_seconds())
            state, since = switch.borrowed, at
        if state:
            borrowed += share * int((end - since).total_seconds())
        total += share * int((end - interval.started_at).total_seconds())
    hours = Decimal(3600)
    return BorrowedHistory(borrowed_hours=(Decimal(borrowed.numerator) / Decimal(borrowed.denominator) / hours).quantize(
                               Decimal("0.01")),
                           gpu_hours=(Decimal(total.numerator) / Decimal(total.denominator) / hours).quantize(Decimal("0.01")))


def active_choices(*, team: Any, parameter_type: str) -> tuple[dict[str, list[str]], set[str]]:
    """Per value the team's active workloads chose for parameters of that type (a data volume's or
    a credential's name), the names of those workloads; and the ids of all its active workloads.
    Queued ones count: their pods are still to be made, and would not start without it."""
    chosen: dict[str, list[str]] = {}
    active: set[str] = set()
    workloads = (Workload.objects.filter(team=team, phase__in=Workload.ACTIVE_PHASES)
                 .select_related("template_version").only("name", "parameters", "template_version__parameters"))
    for workload in workloads:
        active.add(str(workload.pk))
        for spec in workload.template_version.parameters:
            value = workload.parameters.get(spec.get("name")) if spec.get("type") == parameter_type else None
            if value and workload.name not in chosen.setdefault(value, []):
                chosen[value].append(workload.name)
    return chosen, active


def launchable_teams(user: Any) -> list[Team]:
    """The teams the user may launch for, by name."""
    return [team for team in Team.objects.for_user(user).order_by("name") if user.has_perm("jobs.launch_workload", team)]

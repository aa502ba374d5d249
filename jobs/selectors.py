"""Reads about workloads: lists scoped to the user, the live picture of one workload, the
launch hint, and the answer to "why is it still waiting?"."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import OuterRef, Prefetch, QuerySet, Subquery

from jobs import manifests, policy, pricing
from jobs.models import ImageRegistry, Priority, Workload, WorkloadTemplate, WorkloadTemplateVersion
from portal.kube import KubeError, gateway
from tenants import cluster_selectors
from tenants import selectors as tenant_selectors
from tenants.cluster_selectors import QueueUsage
from tenants.models import Flavor, Team

PRIORITY_ORDER: dict[str, int] = {Priority.HIGH: 0, Priority.NORMAL: 1, Priority.LOW: 2}


def image_allow_list() -> list[str]:
    """Every registry templates may pull from: the deployment's (PORTAL_IMAGE_REGISTRIES) and the
    platform admins' (ImageRegistry), in one written form."""
    configured = [entry for entry in map(policy.registry_entry, settings.PORTAL_IMAGE_REGISTRIES) if entry]
    return sorted({*configured, *ImageRegistry.objects.values_list("prefix", flat=True)})


def workloads_for_user(*, user: Any) -> QuerySet[Workload]:
    """The workloads the user can see; the lists narrow them with jobs.filters.WorkloadFilter."""
    return Workload.objects.for_user(user).select_related("team", "owner", "flavor", "template_version__template")


def _queues() -> dict[str, list[QueueUsage]] | None:
    """Every team queue's usage in one read, or None when the cluster is silent."""
    try:
        return cluster_selectors.cluster_queue_usage()
    except KubeError:
        return None


def team_queue_usage(
    *, team: Team, flavor: Flavor, queues: dict[str, list[QueueUsage]] | None = None
) -> QueueUsage | None:
    """The team's queue for this flavor as Kueue reports it, or None when the cluster is silent."""
    queues = _queues() if queues is None else queues
    if queues is None:
        return None
    for row in queues.get(team.slug, []):
        if row.flavor == flavor.slug:
            return row
    return QueueUsage(flavor=flavor.slug, resource=flavor.resource_name,
                      guaranteed=tenant_selectors.team_guarantees(team=team).get(flavor.pk, 0), in_use=0, borrowed=0, lent=0)


@dataclass(frozen=True)
class LaunchHint:
    flavor: Flavor
    units: int
    usage: QueueUsage | None
    ceiling: int
    lendable: int = 0  # idle quota of the other teams' queues, not already borrowed
    cost: tuple[Decimal, str] | None = None  # per hour at the current rate, with its currency

    @property
    def fits_guarantee(self) -> bool:
        return self.usage is not None and self.usage.in_use + self.units <= self.usage.guaranteed

    @property
    def would_borrow(self) -> bool:
        return (self.usage is not None and not self.fits_guarantee and self.units <= self.ceiling
                and self.units - self.usage.free <= self.lendable)

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


def launch_hint(*, team: Team, flavor: Flavor, units: int) -> LaunchHint:
    queues = _queues()
    usage = None if queues is None else team_queue_usage(team=team, flavor=flavor, queues=queues)
    lendable = cohort_idle(team=team, flavor=flavor, queues=queues) if queues is not None and team.may_borrow else 0
    return LaunchHint(flavor=flavor, units=units, usage=usage, ceiling=tenant_selectors.team_ceiling(team=team, flavor=flavor),
                      lendable=lendable, cost=pricing.hourly_cost(flavor=flavor, units=units))


@dataclass(frozen=True)
class WhyWaiting:
    reason: str
    usage: QueueUsage | None
    position: int  # 1 = next in line among the team's queued workloads
    ahead: list[Workload] = field(default_factory=list)


def why_waiting(*, workload: Workload) -> WhyWaiting:
    """Kueue's own words, the team's quota for the flavor, and the queue in front of it."""
    queued = list(
        Workload.objects.filter(team_id=workload.team_id, phase__in=(Workload.Phase.QUEUED, Workload.Phase.PREEMPTED))
        .select_related("owner", "flavor")
    )
    queued.sort(key=lambda w: (PRIORITY_ORDER.get(w.priority, 1), w.created_at, w.pk))
    position = next((i for i, w in enumerate(queued, start=1) if w.pk == workload.pk), 0)
    return WhyWaiting(reason=workload.reason, usage=team_queue_usage(team=workload.team, flavor=workload.flavor),
                      position=position, ahead=queued[: max(position - 1, 0)])


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
    except KubeError as error:
        return LivePicture(pods=[], events=[], unreachable=f"The cluster did not answer: {error}")
    rows = sorted((_event_row(e) for e in events), key=lambda row: row.at, reverse=True)
    return LivePicture(pods=pods, events=rows[:max_events], events_of=subject)


# --- Reads for the REST API (jobs/api.py) -------------------------------------------------------


def templates_with_current_version(*, user: Any) -> QuerySet[WorkloadTemplate]:
    """The templates the user can see (inactive ones too), each with its current version in `current_versions`, in a
    fixed number of queries; jobs.filters.TemplateFilter narrows them to what a team can launch."""
    templates = WorkloadTemplate.objects.for_user(user)
    newest = WorkloadTemplateVersion.objects.filter(template=OuterRef("template")).order_by("-number").values("number")[:1]
    current = WorkloadTemplateVersion.objects.filter(number=Subquery(newest)).prefetch_related("flavors")
    return templates.select_related("owner_team").prefetch_related(
        Prefetch("versions", queryset=current, to_attr="current_versions")
    )


@dataclass(frozen=True)
class WorkloadLogs:
    pod: str
    lines: list[str]
    unreachable: str = ""
    pods: tuple[str, ...] = ()  # every pod of the workload, newest first: a distributed job's workers, a server's replicas

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
            return WorkloadLogs(pod="", lines=[], pods=names,
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
    """Active templates the user's teams may launch, each with its versions newest first (so
    `versions.all()[0]` is the current one without another query) and their flavors."""
    versions = WorkloadTemplateVersion.objects.order_by("-number").prefetch_related("flavors")
    return (
        WorkloadTemplate.objects.for_user(user)
        .filter(is_active=True)
        .select_related("owner_team")
        .prefetch_related(Prefetch("versions", queryset=versions), "teams")
        .order_by("name", "pk")
    )

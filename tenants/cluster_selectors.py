"""Reads of the live cluster about teams and capacity: what the queue backend (Kueue) says each
team's queue is guaranteed, uses, borrows and lends. The one read model behind the team page, /capacity/, the
team's cluster API, the launch hint and why a workload waits; database-only reads stay in tenants/selectors.py."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from portal.health import TEAM_PASS, heartbeat_at
from portal.hooks import Hook
from portal.kube import KubeError, gateway
from tenants import selectors
from tenants.manifests import weight_quantity
from tenants.models import Flavor, Team
from tenants.queueing import backend
from tenants.queueing.base import QueueUsage


def cluster_queue_usage(*, slugs: Iterable[str] | None = None) -> dict[str, list[QueueUsage]]:
    """Per team: what its queue is guaranteed, uses, borrows and lends, one row per flavor in its
    units, as the site's queue backend reads it (tenants/queueing/)."""
    usage = backend().usage(slugs=slugs)
    flavors = {flavor.slug: flavor for flavor in Flavor.objects.only("slug", "resource_name", "resource_per_unit")}
    return {team: in_units(rows, flavors) for team, rows in usage.items()}


def in_units(rows: Iterable[QueueUsage], flavors: dict[str, Flavor]) -> list[QueueUsage]:
    """The backend's rows, one per flavor and resource in the resource's amounts, as one row per
    flavor in its units: its own resource's figures over what one unit asks (a cGPU unit of 6 GiB
    holds 6 of aliyun.com/gpu-mem). The rows of its other resources (a cGPU unit's percent of
    compute, the resources of its group it asks none of) follow from the units and are left out."""
    kept = []
    for row in rows:
        flavor = flavors.get(row.flavor)
        if flavor is None:
            kept.append(row)  # a flavor the catalog does not know: said as the queue says it
        elif row.resource != flavor.resource_name:
            continue
        elif (per := flavor.resource_per_unit) == 1:
            kept.append(row)
        else:
            kept.append(replace(
                row, guaranteed=row.guaranteed // per, in_use=-(-row.in_use // per), borrowed=-(-row.borrowed // per),
                lent=-(-row.lent // per), idle=row.idle // per))
    return kept


@dataclass(frozen=True)
class Borrower:
    team: str  # its name
    borrowed: int
    weight: Decimal

    @property
    def weight_text(self) -> str:
        return weight_quantity(self.weight)


@dataclass(frozen=True)
class FairShare:
    """A team's part of what the teams of its cohort (its department's, or those in none) borrow
    of one flavor now, against its fair share of it: the borrowed units split by weight among the
    teams borrowing them, itself counted too. When they all want more, Kueue's fair sharing moves
    the units toward these shares (it admits, and reclaims, by borrowed share over weight)."""

    flavor: str  # its name
    weight: Decimal
    borrowed: int
    pool: int  # units the cohort's teams borrow of the flavor
    weights: Decimal  # the borrowing teams' weights, the team's own included
    borrowers: tuple[Borrower, ...] = ()  # the other teams borrowing it, most first

    @property
    def weight_text(self) -> str:
        return weight_quantity(self.weight)

    @property
    def weights_text(self) -> str:
        return weight_quantity(self.weights)

    @property
    def fair(self) -> Decimal:
        """Its fair share of the pool, in units to one decimal."""
        if not self.weights:
            return Decimal(0)
        return (self.pool * self.weight / self.weights).quantize(Decimal("0.1"), ROUND_HALF_UP)

    @property
    def fair_text(self) -> str:
        return weight_quantity(self.fair)

    @property
    def percent(self) -> int:
        return _whole_percent(Decimal(self.borrowed), Decimal(self.pool))

    @property
    def fair_percent(self) -> int:
        return _whole_percent(self.weight, self.weights)

    @property
    def above(self) -> bool:
        """It holds more than its fair share: its borrowed work is the first reclaimed."""
        return self.borrowed > self.fair


def _whole_percent(part: Decimal, whole: Decimal) -> int:
    """A share in whole percent, half up as the fair share's units are."""
    return int((100 * part / whole).quantize(Decimal(1), ROUND_HALF_UP)) if whole else 0


def fair_shares(*, team: Team, queues: dict[str, list[QueueUsage]]) -> list[FairShare]:
    """The team's fair share of each GPU flavor the teams of its cohort borrow now (none where
    nobody borrows), from every team queue's usage as cluster_queue_usage reads it."""
    cohort = Team.objects.filter(slug__in=list(queues))
    cohort = (cohort.filter(department_id=team.department_id) if team.department_id is not None
              else cohort.filter(department__isnull=True))
    siblings = {slug: (name, weight) for slug, name, weight in cohort.values_list("slug", "name", "fair_share_weight")}
    siblings.setdefault(team.slug, (team.name, team.fair_share_weight))
    names = dict(Flavor.objects.filter(slug__in={row.flavor for rows in queues.values() for row in rows})
                 .values_list("slug", "name"))
    borrowed: dict[str, dict[str, int]] = defaultdict(dict)
    for slug, rows in queues.items():
        if slug in siblings:
            for row in rows:
                if row.borrowed:
                    borrowed[row.flavor][slug] = borrowed[row.flavor].get(slug, 0) + row.borrowed
    shares = []
    for flavor, by_team in sorted(borrowed.items()):
        weight = siblings[team.slug][1]
        others = sorted((Borrower(team=siblings[slug][0], borrowed=units, weight=siblings[slug][1])
                         for slug, units in by_team.items() if slug != team.slug), key=lambda b: (-b.borrowed, b.team))
        shares.append(FairShare(flavor=names.get(flavor, flavor), weight=weight, borrowed=by_team.get(team.slug, 0),
                                pool=sum(by_team.values()), weights=weight + sum(b.weight for b in others),
                                borrowers=tuple(others)))
    return shares


@dataclass(frozen=True)
class ClusterPicture:
    """What the team page and API say about a team in the cluster."""

    state: str
    state_display: str
    error: str
    synced_at: Any
    usage: list[QueueUsage]
    unreachable: str = ""
    checked_at: Any = None  # the last team pass, which compared every team's objects with the cluster
    fair_shares: list[FairShare] = field(default_factory=list)


# The units of a CPU-only flavor a team's active workloads hold: no queue counts them (jobs does).
CPU_UNITS_IN_USE = Hook[Callable[..., int]]("tenants.cluster_selectors.CPU_UNITS_IN_USE", by="jobs")


def team_cluster_picture(*, team: Team) -> ClusterPicture:
    names = dict(Flavor.objects.values_list("slug", "name"))
    shares: list[FairShare] = []
    try:
        queues = cluster_queue_usage()
        usage, unreachable = queues.get(team.slug, []), ""
        shares = fair_shares(team=team, queues=queues) if backend().fair_sharing else []
    except KubeError as error:
        usage, unreachable = [], f"The cluster did not answer: {error}"
    usage = [replace(row, flavor=names.get(row.flavor, row.flavor)) for row in usage]
    # A CPU-only flavor is in no queue: its guarantee, and what the team's workloads hold of it.
    guarantees = selectors.team_guarantees(team=team)
    for flavor in Flavor.objects.filter(sharing_mode=Flavor.SharingMode.CPU, pk__in=list(guarantees)).order_by("name"):
        usage.append(QueueUsage(flavor=flavor.name, resource=flavor.resource_name, guaranteed=guarantees[flavor.pk],
                                in_use=CPU_UNITS_IN_USE.call(team=team, flavor=flavor), borrowed=0, lent=0,
                                counted_by_portal=True))
    return ClusterPicture(state=team.sync_state, state_display=team.sync_state_display, error=team.sync_error,
                          synced_at=team.synced_at, usage=usage, unreachable=unreachable, checked_at=heartbeat_at(TEAM_PASS),
                          fair_shares=shares)


@dataclass(frozen=True)
class FlavorPicture:
    name: str
    resource: str
    capacity: int
    guaranteed: int
    in_use: int
    borrowed: int

    @property
    def idle(self) -> int:
        return max(self.capacity - self.in_use, 0)


def cluster_capacity_picture() -> tuple[list[FlavorPicture], str]:
    """Per flavor: capacity, guaranteed to teams, in use and borrowed across every team queue."""
    totals = selectors.flavor_guaranteed_totals()
    in_use: dict[str, int] = defaultdict(int)
    borrowed: dict[str, int] = defaultdict(int)
    unreachable = ""
    try:
        for rows in cluster_queue_usage().values():
            for row in rows:
                in_use[row.flavor] += row.in_use
                borrowed[row.flavor] += row.borrowed
    except KubeError as error:
        unreachable = f"The cluster did not answer: {error}"
    flavors = [
        FlavorPicture(name=f.name, resource=f.resource_name, capacity=f.capacity_units, guaranteed=totals.get(f.pk, 0),
                      in_use=in_use[f.slug], borrowed=borrowed[f.slug])
        for f in Flavor.objects.filter(is_active=True).order_by("name")
    ]
    return flavors, unreachable


@dataclass(frozen=True)
class LineFit:
    """What a lead sees beside one line of a pending request before deciding: the team's
    guarantee and current use of the flavor, and whether the units fit the cluster's capacity."""

    flavor: Flavor
    asked: int
    team_guaranteed: int
    team_in_use: int | None  # None: the cluster did not answer
    capacity: int
    held_by_all: int
    renews: int = 0  # units of the flavor the request continues (a renewal): approving ends them
    typed: str = ""  # what the lead typed to grant, shown again beside a refusal

    @property
    def room(self) -> int:
        return max(self.capacity - self.held_by_all + self.renews, 0)

    @property
    def fits(self) -> bool:
        return self.asked <= self.room

    @property
    def most(self) -> int:
        """The most that may be approved now (an addition); giving back always fits."""
        return min(self.asked, self.room) if self.asked > 0 else self.asked

    @property
    def team_after(self) -> int:
        return self.team_guaranteed - self.renews + self.asked

    @property
    def beyond_nodes(self) -> int | None:
        """What the nodes offer now, when approving would promise more than that (the catalog's
        capacity is above what the nodes offer, as the last node check found): None otherwise."""
        offered = self.flavor.nodes_offered
        promised = self.held_by_all - self.renews + max(self.asked, 0)
        return offered if offered is not None and self.asked > 0 and promised > offered else None


def approval_fits(*, requests: Iterable[Any]) -> dict[int, list[LineFit]]:
    """Per pending request id, one `LineFit` per line: a few reads for the whole inbox page."""
    requests = list(requests)
    guarantees = selectors.guarantees_by_flavor(team_ids=sorted({qr.team_id for qr in requests}))
    totals = selectors.flavor_guaranteed_totals()
    try:
        queues: dict[str, list[QueueUsage]] | None = cluster_queue_usage(slugs={qr.team.slug for qr in requests})
    except KubeError:
        queues = None
    renewed = selectors.renewable_units(request_ids={qr.renews_id for qr in requests if qr.renews_id})
    fits: dict[int, list[LineFit]] = {}
    for qr in requests:
        in_use = None if queues is None else {row.flavor: row.in_use for row in queues.get(qr.team.slug, [])}
        fits[qr.pk] = [
            LineFit(flavor=line.flavor, asked=line.grantable, team_guaranteed=guarantees.get((qr.team_id, line.flavor_id), 0),
                    team_in_use=None if in_use is None else in_use.get(line.flavor.slug, 0),
                    capacity=line.flavor.capacity_units, held_by_all=totals.get(line.flavor_id, 0),
                    renews=renewed.get((qr.renews_id, line.flavor_id), 0))
            for line in qr.lines.all()
        ]
    return fits


RUNTIME_CLASS = ("node.k8s.io/v1", "RuntimeClass")


def missing_runtime_classes(*, flavors: Iterable[Flavor]) -> dict[int, str]:
    """For each flavor whose pods name a RuntimeClass the cluster does not have, a sentence saying
    so, by flavor id. The API server's RuntimeClass admission refuses every pod naming a missing
    one, so a launch on such a flavor would leave a Job or Deployment whose pods never appear.
    Read from the cluster at every call (one list of a few cluster-scoped objects), never from a
    cache that could keep a deleted RuntimeClass alive; no read at all when no flavor names one.
    A cluster that does not answer is a KubeError: the caller says it could not check."""
    naming = [flavor for flavor in flavors if flavor.runtime_class_name]
    if not naming:
        return {}
    present = {item["metadata"]["name"] for item in gateway().list(*RUNTIME_CLASS)[0]}
    return {flavor.pk: runtime_class_missing_sentence(flavor) for flavor in naming
            if flavor.runtime_class_name not in present}


def runtime_class_flags(*, flavors: Iterable[Flavor]) -> dict[int, str]:
    """What the catalog says of each active flavor whose RuntimeClass is missing, or could not be
    checked because the cluster did not answer, by flavor id."""
    active = [flavor for flavor in flavors if flavor.is_active]
    try:
        return missing_runtime_classes(flavors=active)
    except KubeError as error:
        return {flavor.pk: runtime_class_unchecked_sentence(flavor, error) for flavor in active if flavor.runtime_class_name}


def runtime_class_missing_sentence(flavor: Flavor) -> str:
    return (f"{flavor.name} cannot run anything: its pods run with the RuntimeClass “{flavor.runtime_class_name}”, "
            "which the cluster does not have, and the API server refuses every pod that names a missing one. "
            "A platform admin must install that RuntimeClass on the cluster or change the flavor's runtime class.")


def runtime_class_unchecked_sentence(flavor: Flavor, error: KubeError) -> str:
    return (f"The portal could not check that the cluster has the RuntimeClass “{flavor.runtime_class_name}” "
            f"{flavor.name}'s pods run with ({error}); try again in a minute.")

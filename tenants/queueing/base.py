"""The interface every queue backend implements: the cluster side of quota and queueing.

A backend turns a team's grants into the cluster's queue objects (its team queue with its quota,
the flavors' and priority tiers' shared objects, a hold), marks a workload's objects for its
queue, and reads back what the portal says in its own words: whether a workload is admitted and
on which flavor, why it waits and where it stands in its queue, and what each team's queue uses,
borrows and lends per flavor. Kueue (tenants/queueing/kueue.py) and Volcano (volcano.py) are the
two; a site picks one with PORTAL_QUEUE_BACKEND. Pure: the values and the Protocol import nothing
from Django.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tenants.manifests import DepartmentSpec, FlavorSpec, PriorityTier, TeamSpec, TierName


@dataclass(frozen=True)
class Admission:
    """What the queue says of one workload, in the portal's words."""

    pending: bool = False  # the queue knows it and has not admitted it
    waiting: str = ""  # why it waits (also when the queue does not know it yet)
    evicted: bool = False  # the queue took its admission back and has not given it again
    evicted_message: str = ""
    starting: str = ""  # what to say once admitted, before a pod runs
    flavors: tuple[tuple[str, str], ...] = ()  # (resource name, flavor slug) it was admitted on


@dataclass(frozen=True)
class QueueUsage:
    """One team queue's use of one flavor."""

    flavor: str
    resource: str
    guaranteed: int
    in_use: int
    borrowed: int
    lent: int
    idle: int = 0  # what it leaves idle and may lend: none for a team that does not lend
    # The queue is on hold (billing's hard stop): where the backend's objects of a waiting workload
    # cannot say so (Volcano's PodGroups), its queue's does.
    held: bool = False
    # A CPU-only flavor, which no queue counts: the portal's count of the team's active workloads.
    counted_by_portal: bool = False

    @property
    def free(self) -> int:
        """What is left of the guarantee: more than this borrows or waits."""
        return max(self.guaranteed - self.in_use, 0)


# Why a workload of a held team waits, on every backend.
HELD_WAITING = "Waiting: the team's queue is on hold, so nothing new starts until it is resumed."


def lent_shared(rows: Iterable[QueueUsage], by_team: Iterable[str]) -> dict[str, list[QueueUsage]]:
    """Per team, its rows with what it lends: no queue backend reports it, so the teams' borrowing
    of each flavor and resource is shared among the lenders by the guarantee each leaves idle.
    `by_team`: each row's team, in the rows' order."""
    rows, teams = list(rows), list(by_team)
    borrowed: dict[tuple[str, str], int] = defaultdict(int)
    idle: dict[tuple[str, str], int] = defaultdict(int)
    for row in rows:
        borrowed[row.flavor, row.resource] += row.borrowed
        idle[row.flavor, row.resource] += row.idle
    result: dict[str, list[QueueUsage]] = {}
    for team, row in zip(teams, rows, strict=True):
        key = (row.flavor, row.resource)
        result.setdefault(team, []).append(replace(row, lent=round(borrowed[key] * row.idle / idle[key]) if idle[key] else 0))
    return result


@dataclass(frozen=True)
class PendingEntry:
    """One waiting entry of a team queue, in the order the backend will try them."""

    namespace: str
    owners: tuple[str, ...]  # names of the objects it stands for (a workload's owner, or its pods)
    position: int  # counted from 0 across the team's queue


@dataclass(frozen=True)
class QueuedWorkload:
    """What a backend needs to know of one workload to shape its objects for the queue."""

    name: str  # its Kubernetes name, which its owner and group take
    namespace: str
    team_queue: str  # the team's queue, as its TeamSpec names it (cluster_queue)
    flavor: str  # the flavor its launch named (FlavorSpec.name)
    pods_together: int  # how many of its pods must start together, or none of them (its workers for a gang)
    priority_class: str  # its tier's PriorityClass
    labels: Mapping[str, str]  # the portal's labels of it (managed-by, team, workload)


class QueueBackend(Protocol):
    """What the portal asks of a queue backend. Builders are pure; `usage` and `pending` read the
    cluster through portal.kube."""

    name: str  # as PORTAL_QUEUE_BACKEND names it, and where a waiting position comes from
    label: str  # the backend as the pages name it: "Kueue"
    position_words: str  # that source of a position, in the API's words
    # Kinds the portal owns, as tenants.reconcile lists, applies and prunes them: the shared ones
    # (made before everything else) and a team's (made after the namespace's contents).
    platform_kinds: tuple[tuple[str, str], ...]
    team_kinds: tuple[tuple[str, str], ...]
    # The kind of a team's cluster-scoped queues, which may collide with another's (its roots beside
    # the namespace, and what a deleted team's teardown removes).
    team_queue_kind: tuple[str, str]
    # What the queue makes of a workload, read beside its owner: matched to the workload by the
    # portal's workload label where it carries it, else through its owner references.
    workload_kinds: tuple[tuple[str, str], ...]
    # Whether a launch may accept several flavors, of which the queue admits the first with room:
    # only a backend that charges the flavor it admits on can (Kueue); others run on the one named.
    flavor_alternatives: bool
    # Whether teams may be grouped in departments the backend shares quota by (Kueue's cohorts
    # with parents); where it cannot, a department is refused in words rather than ignored.
    departments: bool
    # Whether idle quota goes to competing teams by their fair-share weights (Kueue's fair
    # sharing); where it does not, a weight other than 1 is refused in words rather than ignored.
    fair_sharing: bool
    # Whether a team's waiting work is admitted in the order of its people's recent use (Kueue's
    # admission fair sharing, through a queue per person); where not, by priority and age alone.
    people_ordered: bool
    # How the pods of a workload whose pods are numbered (a distributed training's workers) are
    # named, by the object shape() makes own them: "{name}-{index}" for an Indexed Job.
    indexed_pod_name: str
    # Why a workload waits before the queue has said anything of it. The queue never takes back
    # what it said of a waiting workload (it only says something else), so a view that shows this
    # after a workload read another reason for waiting is older than the one that recorded that.
    unseen: str

    def owner(self, built: tuple[str, str]) -> tuple[str, str]:
        """The (apiVersion, kind) that owns a workload's pods on this queue, for the owner a kind
        builds (jobs.kinds' `owner`): the same, or the queue's own job object shape() makes of it."""
        ...

    def platform_objects(self, *, flavors: Sequence[FlavorSpec], tiers: Sequence[PriorityTier],
                         departments: Sequence[DepartmentSpec] = ()) -> list[dict[str, Any]]:
        """The flavors', priority tiers' and departments' objects every team shares."""
        ...

    def team_objects(self, *, team: TeamSpec) -> list[dict[str, Any]]:
        """The team's queue with its quota (nominal, borrowing, lending per flavor), held when `team.held`."""
        ...

    def person_queue(self, user_id: int) -> str:
        """The queue a person's work in a team goes through ("" where the team has one queue):
        recorded on each workload at launch (`Workload.queue_name`), so it never changes under it."""
        ...

    def workload_labels(self, *, priority: TierName, queue: str = "") -> dict[str, str]:
        """The labels a workload's queued object carries: its queue (`queue`, the one recorded at
        its launch, or the team's) and its priority tier."""
        ...

    def shape(self, objects: Sequence[dict[str, Any]], *, workload: QueuedWorkload) -> list[dict[str, Any]]:
        """A workload's objects (its kind's build) as this queue runs them, in the order to create them."""
        ...

    def admission(self, objects: Sequence[dict[str, Any]], *, per_unit: Mapping[str, int] | None = None) -> Admission:
        """What the queue's objects of one workload (of `workload_kinds`) say of its admission;
        `per_unit`: how much of each resource one unit of its flavor asks for, to say what is
        missing in units."""
        ...

    def usage(self, *, slugs: Iterable[str] | None = None) -> dict[str, list[QueueUsage]]:
        """Per team slug: what its queue is guaranteed, uses, borrows and lends, per flavor."""
        ...

    def pending(self, *, team_queue: str) -> list[PendingEntry] | None:
        """The team queue's waiting entries in the order they will be tried; None when the
        cluster does not say."""
        ...

    def people_use(self, *, namespace: str) -> dict[str, float] | None:
        """Per person queue of the team's namespace (`person_queue`), the recent use its waiting
        work is ordered by ({} where people share one queue); None when the cluster does not say."""
        ...

"""Level-triggered reconcile of teams to the cluster.

The database says what each team should have; the builders in tenants/manifests.py turn that
into objects; this module makes the cluster hold them. It never asks what event woke it, so
running it twice, concurrently, late or after a crash ends in the same state.

- `team_reconcile` (after every change of a team): server-side apply of the team's objects.
- `cluster_reconcile` (periodic): one list per kind of everything the portal owns, compared
  with what is wanted; only what differs is applied, and what is no longer wanted is deleted.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from portal.kube import KubeError, ObjectRef, gateway, ref_of
from portal.kube.base import quantity
from portal.kube.simulated import SimulatedGateway
from tenants import manifests, selectors
from tenants.models import Flavor, Membership, Team

log = logging.getLogger(__name__)

MANAGED = {manifests.MANAGED_BY_LABEL: manifests.MANAGER}
# Every kind the portal owns, in the order objects are created (and the reverse for deletion).
OWNED_KINDS: tuple[tuple[str, str], ...] = (
    (manifests.KUEUE, "ResourceFlavor"),
    (manifests.KUEUE, "WorkloadPriorityClass"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("v1", "Namespace"),
    ("v1", "ResourceQuota"),
    ("v1", "LimitRange"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    (manifests.KUEUE, "ClusterQueue"),
    (manifests.KUEUE, "LocalQueue"),
)


def flavor_spec(flavor: Flavor) -> manifests.FlavorSpec:
    return manifests.FlavorSpec(
        name=flavor.slug, resource_name=flavor.resource_name, capacity=flavor.capacity_units,
        node_labels=dict(flavor.node_labels), tolerations=tuple(flavor.tolerations),
    )


def team_specs(team_ids: Iterable[int] | None = None) -> dict[int, tuple[Team, manifests.TeamSpec]]:
    """The desired state of the given teams (all when None), read in four queries (teams, flavors, grants, members)."""
    teams = Team.objects.all() if team_ids is None else Team.objects.filter(pk__in=list(team_ids))
    teams_by_id = {team.pk: team for team in teams}
    active = list(Flavor.objects.filter(is_active=True).order_by("pk"))
    flavors = [flavor_spec(f) for f in active]
    flavor_ids = {f.slug: f.pk for f in active}
    guarantees = selectors.guarantees_by_flavor(team_ids=list(teams_by_id))
    members: dict[int, list[str]] = defaultdict(list)
    for team_id, username in Membership.objects.filter(team_id__in=list(teams_by_id)).values_list("team_id", "user__username"):
        members[team_id].append(username)
    specs = {}
    for team in teams_by_id.values():
        specs[team.pk] = (team, manifests.TeamSpec(
            slug=team.slug,
            uid=str(team.uid),
            adopts_unannotated=team.adopts_unannotated,
            name_prefix=settings.PORTAL_NAMESPACE_PREFIX,
            quotas=tuple(
                manifests.FlavorQuota(flavor=f, nominal=max(guarantees.get((team.pk, flavor_ids[f.name]), 0), 0))
                for f in flavors
            ),
            members=tuple(sorted(members[team.pk])),
            policy=manifests.TeamPolicy(
                may_borrow=team.may_borrow, lends_idle=team.lends_idle, cpu=str(team.cpu_limit_cores),
                memory=f"{team.memory_limit_gib}Gi", pods=team.pod_limit,
            ),
            cohort=settings.PORTAL_COHORT,
            ingress_namespace=settings.PORTAL_INGRESS_NAMESPACE,
            user_prefix=settings.PORTAL_CLUSTER_USER_PREFIX,
        ))
    return specs


def platform_objects() -> list[dict[str, Any]]:
    return manifests.make_platform_objects(
        flavors=tuple(flavor_spec(f) for f in Flavor.objects.filter(is_active=True).order_by("pk"))
    )


def _mark_applied(team_id: int, version: int) -> None:
    # Every object now carries the uid, so the team no longer needs to adopt unannotated ones.
    Team.objects.filter(pk=team_id).update(
        applied_version=Greatest(F("applied_version"), version), synced_at=timezone.now(), sync_error="",
        adopts_unannotated=False,
    )


def _mark_failed(team_id: int, error: Exception) -> None:
    Team.objects.filter(pk=team_id).update(sync_error=str(error)[:2000])


class NotOwned(KubeError):
    """A team's namespace or ClusterQueue exists without the proof that the portal created it for
    that team, so the portal applies nothing for the team. Not transient: no retry changes who
    owns the object, only a person can (status 409, so `retriable` is False)."""

    def __init__(self, ref: ObjectRef) -> None:
        what = "namespace" if ref.kind == "Namespace" else ref.kind
        super().__init__(
            f"The {what} {ref.name} already exists in the cluster and was not created by the portal for this team, "
            "so the portal will not adopt it. Remove it, or set PORTAL_NAMESPACE_PREFIX.",
            status=409, reason="NotOwnedByTeam",
        )
        self.ref = ref


def team_roots(spec: manifests.TeamSpec) -> tuple[ObjectRef, ObjectRef]:
    """The team's objects that may collide with what others made: the namespace (everything else
    of the team lives inside it) and the cluster-scoped ClusterQueue."""
    return ObjectRef("v1", "Namespace", spec.namespace), ObjectRef(manifests.KUEUE, "ClusterQueue", spec.cluster_queue)


def _owned(obj: dict[str, Any], spec: manifests.TeamSpec) -> bool:
    return manifests.owned_by_team(obj, uid=spec.uid, slug=spec.slug, adopts_unannotated=spec.adopts_unannotated)


def team_roots_check(spec: manifests.TeamSpec, live: dict[ObjectRef, dict[str, Any]] | None = None) -> None:
    """Raises NotOwned unless each root is absent or carries this team's proof. `live` is what
    the periodic pass listed by label; a root missing from it is read directly, since an object
    without the portal's label is not in that list."""
    for ref in team_roots(spec):
        current = live.get(ref) if live is not None else None
        if current is None:
            current = gateway().get(ref)
        if current is not None and not _owned(current, spec):
            raise NotOwned(ref)


def team_reconcile(*, team_id: int) -> bool:
    """Applies the team's objects. Returns False when the team no longer exists, or when its
    namespace or queue is not the portal's (recorded on the team: retrying cannot help)."""
    specs = team_specs([team_id])
    if team_id not in specs:
        return False
    team, spec = specs[team_id]
    cluster = gateway()
    try:
        team_roots_check(spec)
        for obj in manifests.make_team_objects(team=spec):
            cluster.apply(obj)
    except NotOwned as refusal:
        log.warning("team %s not provisioned: %s", team.slug, refusal)
        _mark_failed(team_id, refusal)
        return False
    except KubeError as error:
        _mark_failed(team_id, error)
        raise
    _mark_applied(team_id, team.config_version)
    return True


GPUS_PER_SIMULATED_NODE = 8


def simulated_nodes() -> list[dict[str, Any]]:
    """The simulated cluster's nodes, made from the catalog: 8 physical GPUs a node, each
    split into as many units as the flavor's fraction says (7 MIG slices, 4 shared...)."""
    nodes = []
    for flavor in Flavor.objects.filter(is_active=True).order_by("pk"):
        per_node = GPUS_PER_SIMULATED_NODE * flavor.fraction_denominator // flavor.fraction_numerator
        count = -(-flavor.capacity_units // per_node)
        for index in range(count):
            units = min(per_node, flavor.capacity_units - index * per_node)
            nodes.append({
                "name": f"sim-{flavor.slug}-{index}",
                "labels": dict(flavor.node_labels),
                "allocatable": {flavor.resource_name: units},
            })
    return nodes


def platform_reconcile() -> None:
    cluster = gateway()
    for obj in platform_objects():
        cluster.apply(obj)
    if isinstance(cluster, SimulatedGateway):
        # A real cluster has its own GPU nodes; the simulated one gets them from the catalog.
        cluster.sync_nodes(simulated_nodes())


def team_teardown(*, slug: str, uid: str) -> bool:
    """Removes what the portal created for a deleted team: only objects carrying its uid, so a
    namespace it never created, or one a new team of the same slug owns, stays. True once none
    of the team's is left (namespaces take a while)."""
    cluster = gateway()
    name = manifests.team_object_name(prefix=settings.PORTAL_NAMESPACE_PREFIX, slug=slug)
    # The namespace first: it takes the workloads with it, then the queue can go.
    refs = (ObjectRef("v1", "Namespace", name), ObjectRef(manifests.KUEUE, "ClusterQueue", name))

    def still_ours(ref: ObjectRef) -> dict[str, Any] | None:
        current = cluster.get(ref)
        return current if current is not None and manifests.owned_by_team(current, uid=uid) else None

    for ref in refs:
        current = still_ours(ref)
        if current is not None and not current["metadata"].get("deletionTimestamp"):
            cluster.delete(ref)
    return all(still_ours(ref) is None for ref in refs)


# --- The periodic pass ------------------------------------------------------------------------------


def contains(live: Any, wanted: Any) -> bool:
    """Whether the live object holds every field we want (others may add their own)."""
    if isinstance(wanted, dict):
        if not isinstance(live, dict):
            return not wanted and live is None
        return all(contains(live.get(key), value) for key, value in wanted.items())
    if isinstance(wanted, list):
        live = live or []
        return isinstance(live, list) and len(live) == len(wanted) and all(contains(l, w) for l, w in zip(live, wanted, strict=True))
    if live is None:
        return wanted in ("", False, 0) or wanted == {}
    if live == wanted or str(live) == str(wanted):
        return True
    # The API server writes quantities in canonical form: "10000" comes back as "10k".
    if isinstance(wanted, str) and isinstance(live, str):
        return quantity(live) is not None and quantity(live) == quantity(wanted)
    return False


@dataclass
class PassResult:
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    reads: int = 0

    @property
    def writes(self) -> int:
        return len(self.applied) + len(self.deleted)


def live_objects() -> dict[ObjectRef, dict[str, Any]]:
    cluster = gateway()
    live: dict[ObjectRef, dict[str, Any]] = {}
    for api_version, kind in OWNED_KINDS:
        items, _ = cluster.list(api_version, kind, labels=MANAGED)
        for item in items:
            live[ref_of(item)] = item
    return live


def cluster_reconcile() -> PassResult:
    """Repairs drift and prunes what the portal owns but no longer wants, writing only the difference."""
    result = PassResult()
    cluster = gateway()
    calls_before = cluster.calls
    live = live_objects()
    specs = team_specs()
    result.reads = cluster.calls - calls_before

    wanted: dict[ObjectRef, dict[str, Any]] = {}
    for obj in platform_objects():
        wanted[ref_of(obj)] = obj
        try:
            _converge(obj, live, result)
        except KubeError as error:
            result.errors[str(ref_of(obj))] = str(error)
    wanted_by_team: dict[str, set[ObjectRef]] = {}
    for team_id, (team, spec) in specs.items():
        objects = manifests.make_team_objects(team=spec)
        wanted_by_team[spec.uid] = {ref_of(obj) for obj in objects}
        try:
            team_roots_check(spec, live)
        except NotOwned as refusal:
            result.errors[team.slug] = str(refusal)
            if team.sync_error != str(refusal):
                _mark_failed(team_id, refusal)
            continue
        except KubeError as error:
            result.errors[team.slug] = str(error)
            _mark_failed(team_id, error)
            continue
        failed = False
        for obj in objects:
            wanted[ref_of(obj)] = obj
            if failed:
                continue
            try:
                _converge(obj, live, result)
            except KubeError as error:
                failed = True
                result.errors[team.slug] = str(error)
                _mark_failed(team_id, error)
        if not failed and (team.applied_version < team.config_version or team.sync_error or team.adopts_unannotated):
            _mark_applied(team_id, team.config_version)

    unwanted = [ref for ref, obj in live.items() if _prunable(ref, obj, wanted, wanted_by_team)]
    gone_namespaces = {ref.name for ref in unwanted if ref.kind == "Namespace"}
    for ref in sorted(unwanted, key=lambda r: -[k for _, k in OWNED_KINDS].index(r.kind)):
        if ref.namespace in gone_namespaces:
            continue  # deleting the namespace takes these with it
        if live[ref].get("metadata", {}).get("deletionTimestamp"):
            continue
        try:
            cluster.delete(ref)
            result.deleted.append(str(ref))
        except KubeError as error:
            result.errors[str(ref)] = str(error)
    if result.writes:
        log.info("cluster reconcile: applied %d, deleted %d objects", len(result.applied), len(result.deleted))
    return result


def _prunable(
    ref: ObjectRef, obj: dict[str, Any], wanted: dict[ObjectRef, dict[str, Any]], wanted_by_team: dict[str, set[ObjectRef]]
) -> bool:
    """Whether the pass may delete a listed object. The catalog's shared objects go when no longer
    wanted; a team's object only with a uid as proof, and only when that team is gone or no
    longer wants it. Without a uid it is nobody's to delete (a copied label proves nothing)."""
    meta = obj.get("metadata") or {}
    if manifests.TEAM_LABEL not in (meta.get("labels") or {}):
        return ref not in wanted
    uid = (meta.get("annotations") or {}).get(manifests.TEAM_UID_ANNOTATION)
    if not uid:
        return False
    return ref not in wanted_by_team.get(uid, set())


def _converge(obj: dict[str, Any], live: dict[ObjectRef, dict[str, Any]], result: PassResult) -> None:
    ref = ref_of(obj)
    current = live.get(ref)
    if current is not None and contains(current, obj):
        return
    gateway().apply(obj)
    result.applied.append(str(ref))


# --- The live quota picture ---------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueUsage:
    flavor: str
    resource: str
    guaranteed: int
    in_use: int
    borrowed: int
    lent: int


def cluster_queue_usage(*, slugs: Iterable[str] | None = None) -> dict[str, list[QueueUsage]]:
    """Per team: what its ClusterQueue is guaranteed, uses, borrows and lends, per flavor.

    Kueue reports usage and borrowing per queue; what a queue lends is not reported, so it is
    the cohort's borrowing shared among the lenders by their idle guarantee.
    """
    items, _ = gateway().list(manifests.KUEUE, "ClusterQueue", labels=MANAGED)
    rows: dict[str, list[dict[str, Any]]] = {}
    for cq in items:
        # Keyed by the team's slug, whatever PORTAL_NAMESPACE_PREFIX made of the queue's name.
        name = (cq["metadata"].get("labels") or {}).get(manifests.TEAM_LABEL, cq["metadata"]["name"])
        usage = {
            (f["name"], r["name"]): r for f in (cq.get("status") or {}).get("flavorsUsage", []) for r in f.get("resources", [])
        }
        for group in cq["spec"].get("resourceGroups", []):
            for fq in group.get("flavors", []):
                for r in fq.get("resources", []):
                    used = usage.get((fq["name"], r["name"]), {})
                    nominal = int(float(r.get("nominalQuota", 0)))
                    lendable = nominal if "lendingLimit" not in r else min(nominal, int(float(r["lendingLimit"])))
                    rows.setdefault(name, []).append({
                        "flavor": fq["name"], "resource": r["name"], "guaranteed": nominal,
                        "in_use": int(float(used.get("total", 0) or 0)), "borrowed": int(float(used.get("borrowed", 0) or 0)),
                        "lendable": lendable,
                    })
    borrowed_by_flavor: dict[str, int] = defaultdict(int)
    idle_by_flavor: dict[str, int] = defaultdict(int)
    for queue_rows in rows.values():
        for row in queue_rows:
            borrowed_by_flavor[row["flavor"]] += row["borrowed"]
            row["idle"] = max(min(row["lendable"], row["guaranteed"] - row["in_use"]), 0)
            idle_by_flavor[row["flavor"]] += row["idle"]
    wanted = set(slugs) if slugs is not None else None
    result: dict[str, list[QueueUsage]] = {}
    for name, queue_rows in rows.items():
        if wanted is not None and name not in wanted:
            continue
        result[name] = [
            QueueUsage(
                flavor=row["flavor"], resource=row["resource"], guaranteed=row["guaranteed"], in_use=row["in_use"],
                borrowed=row["borrowed"],
                lent=round(borrowed_by_flavor[row["flavor"]] * row["idle"] / idle_by_flavor[row["flavor"]])
                if idle_by_flavor[row["flavor"]] else 0,
            )
            for row in queue_rows
        ]
    return result


@dataclass(frozen=True)
class ClusterPicture:
    """What the team page and API say about a team in the cluster."""

    state: str
    state_display: str
    error: str
    synced_at: Any
    usage: list[QueueUsage]
    unreachable: str = ""


def team_cluster_picture(*, team: Team) -> ClusterPicture:
    names = dict(Flavor.objects.values_list("slug", "name"))
    try:
        usage = cluster_queue_usage(slugs=[team.slug]).get(team.slug, [])
        unreachable = ""
    except KubeError as error:
        usage, unreachable = [], f"The cluster did not answer: {error}"
    usage = [QueueUsage(flavor=names.get(row.flavor, row.flavor), resource=row.resource, guaranteed=row.guaranteed,
                        in_use=row.in_use, borrowed=row.borrowed, lent=row.lent) for row in usage]
    return ClusterPicture(state=team.sync_state, state_display=team.sync_state_display, error=team.sync_error,
                          synced_at=team.synced_at, usage=usage, unreachable=unreachable)


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

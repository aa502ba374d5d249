"""Level-triggered reconcile of teams to the cluster.

The database says what each team should have (tenants/desired.py reads it); the builders in
tenants/manifests.py turn that into objects; this module makes the cluster hold them. It never asks what event woke it, so
running it twice, concurrently, late or after a crash ends in the same state.

- `team_reconcile` (after every change of a team): server-side apply of the team's objects.
- `cluster_reconcile` (periodic): everything the portal owns, compared with what is wanted;
  only what differs is applied, and what is no longer wanted is deleted. It reads what the portal
  owns from one list per kind, or from a watch-kept store (`owned_store`, which the watcher
  process keeps), where the comparison costs no API call at all. A store is a cache, so there
  every difference is read again directly before it is written. Any delete and any refusal
  (a root that is not the team's) is read again directly either way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from portal.collector import collector_paused
from portal.health import TEAM_PASS, heartbeat_record
from portal.kube import KubeError, NodeSpec, ObjectRef, gateway, ref_of
from portal.kube.base import quantity
from portal.kube.store import KindStore
from portal.leader import LeadershipLost
from tenants import manifests, nodes
from tenants.desired import gate_service, platform_objects, simulated_nodes, team_objects, team_specs
from tenants.models import Team
from tenants.queueing import backend

log = logging.getLogger(__name__)

MANAGED = {manifests.MANAGED_BY_LABEL: manifests.MANAGER}


def owned_kinds() -> tuple[tuple[str, str], ...]:
    """Every kind the portal owns, in the order objects are created (and the reverse for deletion):
    the site's queue backend's among them."""
    return (
        *backend().platform_kinds,
        ("scheduling.k8s.io/v1", "PriorityClass"),
        ("v1", "Namespace"),
        ("v1", "ResourceQuota"),
        ("v1", "LimitRange"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        *((("gateway.networking.k8s.io/v1", "ReferenceGrant"),) if gate_service() is not None else ()),
        *backend().team_kinds,
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
    """A team's namespace or queue exists without the proof that the portal created it for
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


def team_roots(spec: manifests.TeamSpec) -> list[ObjectRef]:
    """The team's objects that may collide with what others made: the namespace (everything else
    of the team lives inside it) and the queue backend's cluster-scoped team queues."""
    queues = [ref_of(obj) for obj in backend().team_objects(team=spec)
              if (obj["apiVersion"], obj["kind"]) == backend().team_queue_kind]
    return [ObjectRef("v1", "Namespace", spec.namespace), *queues]


def _owned(obj: dict[str, Any], spec: manifests.TeamSpec) -> bool:
    return manifests.owned_by_team(obj, uid=spec.uid, slug=spec.slug, adopts_unannotated=spec.adopts_unannotated)


def team_roots_check(spec: manifests.TeamSpec, live: dict[ObjectRef, dict[str, Any]] | None = None) -> None:
    """Raises NotOwned unless each root is absent or carries this team's proof. `live` is what
    the periodic pass found by label; a root missing from it is read directly, since an object
    without the portal's label is not found that way, and so is one that seems not to be the
    team's: a refusal stops the team, so it is never made from a list or a cache alone."""
    for ref in team_roots(spec):
        current = live.get(ref) if live is not None else None
        if current is None or not _owned(current, spec):
            current = gateway().get(ref)
        if current is not None and not _owned(current, spec):
            raise NotOwned(ref)


def team_reconcile(*, team_id: int) -> bool:
    """Applies the team's objects. Returns False when the team no longer exists, or when its
    namespace or queue is not the portal's (recorded on the team: retrying cannot help)."""
    specs = team_specs([team_id])
    if team_id not in specs:
        log.info("team %s no longer exists; nothing to reconcile", team_id)
        return False
    team, spec = specs[team_id]
    cluster = gateway()
    try:
        team_roots_check(spec)
        for obj in team_objects(spec):
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


def person_queue_ensure(*, team: Team, name: str) -> None:
    """Makes a person's queue in the team (on Kueue their LocalQueue) where the cluster lacks it,
    before their work is submitted to it: a member added a moment ago whose team pass has not run
    yet, or a platform admin launching into a team not theirs. One read when it is there; else
    built as the team's pass builds it (held with the team), which keeps it while their work is in
    the team."""
    def queue_of(spec: manifests.TeamSpec) -> dict[str, Any] | None:
        return next((obj for obj in backend().team_objects(team=replace(spec, people=(name,)))
                     if obj["metadata"]["name"] == name and obj["metadata"].get("namespace") == spec.namespace), None)

    where = queue_of(manifests.TeamSpec(slug=team.slug, uid=str(team.uid), quotas=(),
                                        name_prefix=settings.PORTAL_NAMESPACE_PREFIX))
    if where is None or gateway().get(ref_of(where)) is not None:
        return
    specs = team_specs([team.pk])
    if team.pk in specs and (made := queue_of(specs[team.pk][1])) is not None:
        gateway().apply(made)


# Fields the API server never lets an update change: when the wish differs, the object is
# deleted and created again.
IMMUTABLE_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("scheduling.k8s.io/v1", "PriorityClass"): ("value", "preemptionPolicy"),
    # A site that changes PORTAL_MEMBER_CLUSTER_ROLE (e.g. from `view` to the chart's member role).
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("roleRef",),
}


def _apply(obj: dict[str, Any], current: dict[str, Any] | None) -> None:
    """Applies one object; one the portal owns whose immutable fields differ is recreated. This is
    safe for a PriorityClass: each pod keeps the priority copied into it when it was created, and
    a pod made in the moment between is refused by the API server and made again by its controller."""
    immutable = IMMUTABLE_FIELDS.get((obj["apiVersion"], obj["kind"]), ())
    if current is not None and any(current.get(name) != obj.get(name) for name in immutable):
        labels = (current.get("metadata") or {}).get("labels") or {}
        if labels.get(manifests.MANAGED_BY_LABEL) == manifests.MANAGER:
            log.info("recreating %s: %s cannot change in place", ref_of(obj), ", ".join(immutable))
            gateway().delete(ref_of(obj))
    gateway().apply(obj)


def platform_reconcile() -> None:
    cluster = gateway()
    for obj in platform_objects():
        immutable = (obj["apiVersion"], obj["kind"]) in IMMUTABLE_FIELDS
        _apply(obj, cluster.get(ref_of(obj)) if immutable else None)
    # A real cluster has its own GPU nodes; the simulated one makes them from the catalog.
    cluster.expect_nodes([
        NodeSpec(name=node["name"], labels=node["labels"], allocatable=node["allocatable"], taints=node["taints"],
                 devices=node.get("devices", {}))
        for node in simulated_nodes()
    ])
    try:  # a flavor just saved is judged against its nodes now, not at the next minute
        nodes.check_flavors()
    except KubeError as error:  # the catalog is applied all the same; beat's check tries again in a minute
        log.warning("the nodes behind the catalog could not be checked: %s", error)


def team_teardown(*, slug: str, uid: str) -> bool:
    """Removes what the portal created for a deleted team: only objects carrying its uid, so a
    namespace it never created, or one a new team of the same slug owns, stays. True once none
    of the team's is left (namespaces take a while)."""
    cluster = gateway()
    name = manifests.team_object_name(prefix=settings.PORTAL_NAMESPACE_PREFIX, slug=slug)
    # The namespace first: it takes the workloads with it, then the queues can go.
    queues, _ = cluster.list(*backend().team_queue_kind, labels={**MANAGED, manifests.TEAM_LABEL: slug})
    refs = (ObjectRef("v1", "Namespace", name), *(ref_of(queue) for queue in queues))
    if (gate := gate_service()) is not None:  # in the portal's namespace: the namespace does not take it along
        refs = (*refs, ObjectRef("gateway.networking.k8s.io/v1", "ReferenceGrant", manifests.gate_grant_name(name), gate[0]))

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
    # Loops rather than all() over generators: the pass asks this of 10,000 objects, and the
    # generators' frames were half its time.
    if isinstance(wanted, dict):
        if not isinstance(live, dict):
            return not wanted and live is None
        for key, value in wanted.items():  # noqa: SIM110 - see above
            if not contains(live.get(key), value):
                return False
        return True
    if isinstance(wanted, list):
        live = live or []
        if not isinstance(live, list) or len(live) != len(wanted):
            return False
        for item, w in zip(live, wanted, strict=True):  # noqa: SIM110 - see above
            if not contains(item, w):
                return False
        return True
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
    reads: int = 0  # lists of what the portal owns (0 from a store); direct reads are not counted here
    confirmed: int = 0  # differences a store showed that a direct read found were not there (it lagged)

    @property
    def writes(self) -> int:
        return len(self.applied) + len(self.deleted)


def live_objects() -> dict[ObjectRef, dict[str, Any]]:
    live: dict[ObjectRef, dict[str, Any]] = {}
    for items in gateway().list_kinds(owned_kinds(), labels=MANAGED).values():
        for item in items:
            live[ref_of(item)] = item
    return live


def owned_store(*, watch_seconds: int = 300) -> KindStore:
    """A watch-kept store of everything the portal owns, for `cluster_reconcile(store=…)`; not
    started. At 1,000 teams it holds about 10,000 objects."""
    return KindStore(owned_kinds(), labels=MANAGED, watch_seconds=watch_seconds)


@collector_paused()  # it decodes every object the portal owns: the cyclic collector took half its time
def cluster_reconcile(*, store: KindStore | None = None) -> PassResult:
    """Repairs drift and prunes what the portal owns but no longer wants, writing only the
    difference. With a `store` that has listed every kind, it compares against the store instead
    of listing, and reads an object directly before writing it; otherwise it lists."""
    result = PassResult()
    begun = time.monotonic()
    cached = store.snapshot() if store is not None else None
    if cached is None:
        live = live_objects()
        result.reads = len(owned_kinds())  # live_objects() lists each owned kind once
    else:
        live = cached
    confirm = cached is not None
    specs = team_specs()

    wanted: dict[ObjectRef, dict[str, Any]] = {}
    for obj in platform_objects():
        wanted[ref_of(obj)] = obj
        try:
            _converge(obj, live, result, confirm=confirm)
        except KubeError as error:
            result.errors[str(ref_of(obj))] = str(error)
    wanted_by_team: dict[str, set[ObjectRef]] = {}
    for team_id, (team, spec) in specs.items():
        objects = team_objects(spec)
        wanted_by_team[spec.uid] = {ref_of(obj) for obj in objects}
        if _team_roots_ours(team_id, team, spec, live, result):
            wanted.update((ref_of(obj), obj) for obj in objects)
            _team_converge(team_id, team, objects, live, result, confirm=confirm)

    _prune(live, wanted, wanted_by_team, result)
    heartbeat_record(name=TEAM_PASS)
    took = time.monotonic() - begun
    if result.writes:
        log.info("cluster reconcile: applied %d, deleted %d objects (%d teams, %.2f s)",
                 len(result.applied), len(result.deleted), len(specs), took)
    else:
        log.debug("cluster reconcile: nothing to change (%d teams, %d objects %s, %.2f s)",
                  len(specs), len(live), "from the store" if confirm else "listed", took)
    return result


def _team_roots_ours(team_id: int, team: Team, spec: manifests.TeamSpec, live: dict[ObjectRef, dict[str, Any]],
                     result: PassResult) -> bool:
    """Whether the team's namespace and queue are the team's to write (or not there yet); when
    not, or when asking failed, the team is marked failed with the reason and left alone."""
    try:
        team_roots_check(spec, live)
    except NotOwned as refusal:
        result.errors[team.slug] = str(refusal)
        if team.sync_error != str(refusal):
            _mark_failed(team_id, refusal)
        return False
    except KubeError as error:
        result.errors[team.slug] = str(error)
        _mark_failed(team_id, error)
        return False
    return True


def _team_converge(team_id: int, team: Team, objects: list[dict[str, Any]], live: dict[ObjectRef, dict[str, Any]],
                   result: PassResult, *, confirm: bool) -> None:
    """Writes the team's objects that differ, in order, stopping at the first the cluster refuses;
    a team all of whose objects hold is marked applied at the version it was built from."""
    for obj in objects:
        try:
            _converge(obj, live, result, confirm=confirm)
        except KubeError as error:
            result.errors[team.slug] = str(error)
            _mark_failed(team_id, error)
            return
    if team.applied_version < team.config_version or team.sync_error or team.adopts_unannotated:
        _mark_applied(team_id, team.config_version)


def _prune(live: dict[ObjectRef, dict[str, Any]], wanted: dict[ObjectRef, dict[str, Any]],
           wanted_by_team: dict[str, set[ObjectRef]], result: PassResult) -> None:
    """Deletes what the portal owns and no longer wants, namespaces' contents with their namespace."""
    cluster = gateway()
    unwanted = [ref for ref, obj in live.items() if _prunable(ref, obj, wanted, wanted_by_team)]
    gone_namespaces = {ref.name for ref in unwanted if ref.kind == "Namespace"}
    for ref in sorted(unwanted, key=lambda r: -[k for _, k in owned_kinds()].index(r.kind)):
        if ref.namespace in gone_namespaces:
            continue  # deleting the namespace takes these with it
        if _going(live[ref]):
            continue
        try:
            # Read again: what a list or a store showed a moment ago may have been deleted, or
            # taken by another team, since; nothing is deleted on a view alone.
            current = cluster.get(ref)
            if current is None or _going(current) or not _prunable(ref, current, wanted, wanted_by_team):
                continue
            cluster.delete(ref)
            result.deleted.append(str(ref))
        except KubeError as error:
            result.errors[str(ref)] = str(error)


def _going(obj: dict[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _prunable(
    ref: ObjectRef, obj: dict[str, Any], wanted: dict[ObjectRef, dict[str, Any]], wanted_by_team: dict[str, set[ObjectRef]]
) -> bool:
    """Whether the pass may delete a listed object. The catalog's shared objects go when no longer
    wanted; a team's object only with a uid as proof, and only when that team is gone or no
    longer wants it. Without a uid it is nobody's to delete (a copied label proves nothing), and
    nothing is without the portal's label."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(manifests.MANAGED_BY_LABEL) != manifests.MANAGER:
        return False  # read directly, it may no longer carry the label
    if manifests.TEAM_LABEL not in labels:
        return ref not in wanted
    uid = (meta.get("annotations") or {}).get(manifests.TEAM_UID_ANNOTATION)
    if not uid:
        return False
    return ref not in wanted_by_team.get(uid, set())


def _gpu_limit(key: str) -> bool:
    """A ResourceQuota key of the GPU limits the portal wrote before it left GPUs to the queue: an
    extended resource's requests, or a DeviceClass's devices."""
    return (key.startswith("requests.") and "/" in key) or key.endswith(".deviceclass.resource.k8s.io/devices")


def holds(live: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
    """Whether the live object holds everything wanted; for a ResourceQuota, also no GPU limit the
    portal no longer sets (a site's quotas from before keep theirs until a pass applies them once).
    Only those: a limit someone else adds and owns stays theirs, and would not go by applying."""
    if live is None or not contains(live, wanted):
        return False
    if (wanted["apiVersion"], wanted["kind"]) != ("v1", "ResourceQuota"):
        return True
    found = ((live.get("spec") or {}).get("hard") or {})
    asked = ((wanted.get("spec") or {}).get("hard") or {})
    return not [key for key in found if key not in asked and _gpu_limit(key)]


def _converge(obj: dict[str, Any], live: dict[ObjectRef, dict[str, Any]], result: PassResult, *, confirm: bool) -> None:
    """Applies `obj` if what `live` shows of it lacks anything wanted. With `confirm` (`live` is
    a store), the object is read directly first: the store may not have caught up yet."""
    ref = ref_of(obj)
    current = live.get(ref)
    if holds(current, obj):
        return
    if confirm:
        current = gateway().get(ref)
        if holds(current, obj):
            result.confirmed += 1
            return
    _apply(obj, current)
    result.applied.append(str(ref))


class StorePasses:
    """The periodic pass from a watch-kept store, every `seconds`, in a thread of the watcher
    process (`manage.py watch_workloads`, the one holding the Lease when elected). A pass with
    nothing to change costs the API server nothing; the worker's listing pass (beat's
    `cluster-reconcile`) stays as the safety net. `fence` is called before each pass and raises
    once this process may no longer write."""

    def __init__(self, *, seconds: float, fence: Callable[[], None] | None = None,
                 store: KindStore | None = None) -> None:
        self.seconds = seconds
        self.fence = fence
        self.store = store or owned_store()
        self.stopping = threading.Event()
        self.passes = 0
        self.thread = threading.Thread(target=self._run, daemon=True, name="team-pass")

    def start(self) -> StorePasses:
        self.store.start()
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.store.stop()

    def _run(self) -> None:
        try:
            while not self.stopping.wait(self.seconds):
                close_old_connections()
                try:
                    if self.fence is not None:
                        self.fence()
                    result = cluster_reconcile(store=self.store)
                except LeadershipLost as lost:  # the command stops this loop once the informer notices too
                    log.info("team pass skipped: %s", lost)
                    continue
                except Exception:  # a failed pass is tried again at the next; it must not end the loop
                    log.exception("team pass from the store failed")
                    continue
                self.passes += 1
                if result.errors:
                    log.warning("team pass: %d could not be reconciled: %s", len(result.errors),
                                "; ".join(f"{who}: {why}" for who, why in list(result.errors.items())[:5]))
        finally:
            connection.close()

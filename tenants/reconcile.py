"""Level-triggered reconcile of teams to the cluster.

The database says what each team should have (tenants/desired.py reads it); the builders in
tenants/manifests.py turn that into objects; this module makes the cluster hold them. It never asks what event woke it, so
running it twice, concurrently, late or after a crash ends in the same state.

- `team_reconcile` (after every change of a team): server-side apply of the team's objects.
- `cluster_reconcile` (periodic): one list per kind of everything the portal owns, compared
  with what is wanted; only what differs is applied, and what is no longer wanted is deleted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from portal.kube import KubeError, NodeSpec, ObjectRef, gateway, ref_of
from portal.kube.base import quantity
from tenants import manifests
from tenants.desired import platform_objects, simulated_nodes, team_specs
from tenants.models import Team

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


def _mark_applied(team_id: int, version: int) -> None:
    Team.objects.filter(pk=team_id).update(
        applied_version=Greatest(F("applied_version"), version), synced_at=timezone.now(), sync_error=""
    )


def _mark_failed(team_id: int, error: Exception) -> None:
    Team.objects.filter(pk=team_id).update(sync_error=str(error)[:2000])


def team_reconcile(*, team_id: int) -> bool:
    """Applies the team's objects. Returns False when the team no longer exists."""
    specs = team_specs([team_id])
    if team_id not in specs:
        return False
    team, spec = specs[team_id]
    cluster = gateway()
    try:
        for obj in manifests.make_team_objects(team=spec):
            cluster.apply(obj)
    except KubeError as error:
        _mark_failed(team_id, error)
        raise
    _mark_applied(team_id, team.config_version)
    return True


def platform_reconcile() -> None:
    cluster = gateway()
    for obj in platform_objects():
        cluster.apply(obj)
    # A real cluster has its own GPU nodes; the simulated one makes them from the catalog.
    cluster.expect_nodes([
        NodeSpec(name=node["name"], labels=node["labels"], allocatable=node["allocatable"]) for node in simulated_nodes()
    ])


def team_teardown(*, slug: str) -> bool:
    """Removes what a deleted team had. True once nothing is left (namespaces take a while)."""
    if Team.objects.filter(slug=slug).exists():
        return True  # re-created meanwhile: the team's reconcile owns it again
    cluster = gateway()
    namespace = ObjectRef("v1", "Namespace", slug)
    queue = ObjectRef(manifests.KUEUE, "ClusterQueue", slug)
    # The namespace first: it takes the workloads with it, then the queue can go.
    cluster.delete(namespace)
    cluster.delete(queue)
    return cluster.get(namespace) is None and cluster.get(queue) is None


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
    live = live_objects()
    result.reads = len(OWNED_KINDS)  # live_objects() lists each owned kind once
    specs = team_specs()

    wanted: dict[ObjectRef, dict[str, Any]] = {}
    for obj in platform_objects():
        wanted[ref_of(obj)] = obj
        try:
            _converge(obj, live, result)
        except KubeError as error:
            result.errors[str(ref_of(obj))] = str(error)
    for team_id, (team, spec) in specs.items():
        failed = False
        for obj in manifests.make_team_objects(team=spec):
            wanted[ref_of(obj)] = obj
            if failed:
                continue
            try:
                _converge(obj, live, result)
            except KubeError as error:
                failed = True
                result.errors[team.slug] = str(error)
                _mark_failed(team_id, error)
        if not failed and (team.applied_version < team.config_version or team.sync_error):
            _mark_applied(team_id, team.config_version)

    unwanted = [ref for ref in live if ref not in wanted]
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


def _converge(obj: dict[str, Any], live: dict[ObjectRef, dict[str, Any]], result: PassResult) -> None:
    ref = ref_of(obj)
    current = live.get(ref)
    if current is not None and contains(current, obj):
        return
    gateway().apply(obj)
    result.applied.append(str(ref))

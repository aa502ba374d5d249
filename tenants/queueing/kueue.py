"""Kueue as the portal's queue backend (PORTAL_QUEUE_BACKEND=kueue).

A team is a ClusterQueue in the portal's cohort with one resource group per set of GPU resources
its flavors' units ask for together (flavors sharing a resource are alternatives Kueue tries in
order; a cGPU unit asks for memory and compute, each with its quota), nominal quota from the
team's grants, borrowing and lending limits from its policy, and LocalQueues in its namespace (one
per person, `person-<user id>`, whose recent use orders the team's waiting work, and `default`
for work launched before), held (`stopPolicy: Hold`) while billing's hard stop holds the team. Flavors are
ResourceFlavors and priority tiers WorkloadPriorityClasses. A workload's queued object carries
the LocalQueue's and the tier's labels; Kueue makes a Workload for it, whose conditions say
whether it is admitted, evicted or why it waits, and whose admission names the flavor. What a
queue lends is not reported: it is the cohort's borrowing shared among the lenders by their idle
guarantee. The builders here are pure; `usage` and `pending` read the cluster through portal.kube.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.conf import settings

from portal.kube import KubeError, ObjectRef, gateway
from portal.kube.base import quantity
from tenants.manifests import (
    MANAGED_BY_LABEL,
    MANAGER,
    TEAM_LABEL,
    DepartmentSpec,
    FlavorQuota,
    FlavorSpec,
    PriorityTier,
    TeamSpec,
    TierName,
    platform_labels,
    team_meta,
)
from tenants.queueing.base import HELD_WAITING, Admission, PendingEntry, QueuedWorkload, QueueUsage, lent_shared

KUEUE = "kueue.x-k8s.io/v1beta2"
# Kueue's on-demand visibility API: served by Kueue's visibility server through an APIService.
VISIBILITY = "visibility.kueue.x-k8s.io/v1beta2"
QUEUE_NAME = "default"  # each team's LocalQueue of work launched before people had their own
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# Team queues are the portal's own: other ClusterQueues in the cluster are not a team's.
MANAGED = {MANAGED_BY_LABEL: MANAGER}


# --- What every team shares ----------------------------------------------------------------------


def make_resource_flavor(*, flavor: FlavorSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": dict(flavor.node_labels)}
    if flavor.tolerations:
        spec["tolerations"] = [dict(t) for t in flavor.tolerations]
    return {
        "apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": flavor.name, "labels": platform_labels("flavor")},
        "spec": spec,
    }


def make_workload_priority_class(*, tier: PriorityTier) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE, "kind": "WorkloadPriorityClass",
        "metadata": {"name": tier.object_name, "labels": platform_labels("priority")},
        "value": tier.value, "description": tier.description,
    }


def make_cohort(*, department: DepartmentSpec, flavors: Sequence[FlavorSpec]) -> dict[str, Any]:
    """A department: a Cohort under the portal's, whose nominal quota is its pool (shared by its
    teams' queues beyond their own quotas, as borrowing) and whose limits bound what its teams'
    queues together borrow from, and lend to, queues outside it (Kueue keeps what it may not lend
    for the department's own queues, so they share it among themselves first)."""
    spec: dict[str, Any] = {"parentName": department.parent, "fairSharing": {"weight": department.weight}}
    limits = {"borrowingLimit": department.borrowing_limit, "lendingLimit": department.lending_limit}
    pool = dict(department.pool)
    if pool or any(limit is not None for limit in limits.values()):
        groups = []
        for covered, quotas in resource_groups(FlavorQuota(flavor=flavor, nominal=pool.get(flavor.name, 0))
                                               for flavor in flavors):
            entries = []
            for quota in quotas:
                nominal = quota.flavor.quota(quota.nominal)
                bounds = {key: quota.flavor.quota(limit) for key, limit in limits.items() if limit is not None}
                entries.append({"name": quota.flavor.name, "resources": [
                    {"name": resource, "nominalQuota": str(nominal.get(resource, 0)),
                     **{key: str(amounts.get(resource, 0)) for key, amounts in bounds.items()}}
                    for resource in covered]})
            groups.append({"coveredResources": covered, "flavors": entries})
        if groups:  # none while the catalog has no GPU flavor
            spec["resourceGroups"] = groups
    return {"apiVersion": KUEUE, "kind": "Cohort",
            "metadata": {"name": department.cohort, "labels": platform_labels("department")}, "spec": spec}


# --- A team's queue ------------------------------------------------------------------------------


def resource_groups(quotas: Iterable[FlavorQuota]) -> list[tuple[list[str], list[FlavorQuota]]]:
    """Kueue's resource groups for a team's quotas: flavors whose units ask for a common resource
    go in one group (two models of whole GPUs are alternatives Kueue tries in order; a vGPU flavor
    asking nvidia.com/gpu with nvidia.com/gpumem joins the whole-GPU ones), covering every resource
    its flavors ask for, in the order first asked; flavors with no resource in common never mix."""
    groups: list[tuple[list[str], list[FlavorQuota]]] = []
    for quota in quotas:
        names = [r.name for r in quota.flavor.unit_resources]
        if not names:
            continue  # a CPU-only flavor: Kueue leaves CPU and memory alone (IgnoreUndeclared)
        joined = [index for index, group in enumerate(groups) if set(group[0]) & set(names)]
        covered = [name for index in joined for name in groups[index][0]]
        covered += [name for name in names if name not in covered]
        merged = (covered, [*(member for index in joined for member in groups[index][1]), quota])
        at = joined[0] if joined else len(groups)  # where the first group it joins stood
        groups = [group for index, group in enumerate(groups) if index not in joined]
        groups.insert(at, merged)
    return groups


def make_cluster_queue(*, team: TeamSpec) -> dict[str, Any]:
    # A flavor lists every resource its group covers, in the group's order (Kueue requires it),
    # with no quota for those its units do not ask for.
    resource_groups_ = []
    for covered, quotas in resource_groups(team.quotas):
        flavors = []
        for quota in quotas:
            amounts = quota.flavor.quota(quota.nominal)
            resources = []
            for resource in covered:
                limits: dict[str, Any] = {"name": resource, "nominalQuota": str(amounts.get(resource, 0))}
                if not team.policy.may_borrow:
                    limits["borrowingLimit"] = "0"
                if not team.policy.lends_idle:
                    limits["lendingLimit"] = "0"
                resources.append(limits)
            flavors.append({"name": quota.flavor.name, "resources": resources})
        resource_groups_.append({"coveredResources": covered, "flavors": flavors})
    return {
        "apiVersion": KUEUE, "kind": "ClusterQueue",
        "metadata": team_meta(team.cluster_queue, team, namespaced=False),
        "spec": {
            "cohortName": team.cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": resource_groups_,
            # Kueue's fair sharing (deploy/kueue): who borrows idle quota first, and whose borrowed
            # work is reclaimed first, goes by the share borrowed over this weight.
            "fairSharing": {"weight": team.policy.weight},
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "Never"},
                "withinClusterQueue": "LowerPriority",
            },
            # Admission fair sharing (deploy/kueue): the team's waiting work goes in the order of its
            # people's recent use (each person's LocalQueue's), then by priority and age.
            "admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"},
        },
    }


def person_queue(user_id: int) -> str:
    """The LocalQueue a person's work in a team queues through."""
    return f"person-{user_id}"


def make_local_queue(*, team: TeamSpec, name: str = QUEUE_NAME) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE, "kind": "LocalQueue",
        "metadata": team_meta(name, team),
        # Always written, so lifting a hold is a change the periodic pass sees and applies.
        "spec": {"clusterQueue": team.cluster_queue, "stopPolicy": "Hold" if team.held else "None"},
    }


# --- A workload's admission ------------------------------------------------------------------------


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions", []) or []:
        if cond.get("type") == type_:
            return cond
    return {}


def _true(obj: dict[str, Any], type_: str) -> bool:
    return _condition(obj, type_).get("status") == "True"


_SHORT = re.compile(
    r"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>[^,\s]+), (?P<missing>\S+) more needed")
_TOO_BIG = re.compile(r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>[^,\s]+)")
_UNAVAILABLE = re.compile(r"resource (?P<resource>\S+) unavailable in ClusterQueue")
_UNMAPPED = re.compile(r"DeviceClass (?P<device_class>\S+) is not mapped in DRA configuration")


def _in_units(missing: str, per_unit: int) -> str:
    """What Kueue says is missing of a resource, in units of `per_unit` of it (rounded up)."""
    if per_unit == 1 or not missing.isdigit():
        return missing
    return str(-(-int(missing) // per_unit))


UNSEEN = "Waiting for Kueue to admit it"


def waiting_reason(message: str, per_unit: Mapping[str, int] | None = None) -> str:
    """Kueue's condition message, said in the portal's words rather than repeated; `per_unit` says
    how much of each resource one unit of the workload's flavor asks for (1 where not given)."""
    if not message:
        return UNSEEN
    if match := _SHORT.search(message):
        missing = _in_units(match["missing"], (per_unit or {}).get(match["resource"], 1))
        return (f"Waiting for quota: the team's free {match['flavor']} quota and what other teams leave idle are "
                f"{missing} unit{'' if missing == '1' else 's'} short. It starts when that much frees up.")
    if match := _TOO_BIG.search(message):
        return (f"Waiting for quota: it asks for more {match['flavor']} than the team could ever get (its guarantee "
                "plus what it may borrow); it cannot start until the team's quota grows.")
    if match := _UNMAPPED.search(message):
        return (f"Waiting: Kueue does not count devices of the DeviceClass {match['device_class']} (no deviceClassMappings "
                "entry names it), so it admits nothing claiming them; a platform admin must add the mapping.")
    if match := _UNAVAILABLE.search(message):
        return f"Waiting: the team's queue has no quota for {match['resource']}; ask for some."
    if "is inactive" in message or "is stopped" in message:
        return HELD_WAITING
    if "no longer fits" in message:
        return "Waiting for quota: another workload took the free quota first; it starts at the next opening."
    return f"Waiting for Kueue, which says: {message}"


def admission(workloads: Sequence[dict[str, Any]], per_unit: Mapping[str, int] | None = None) -> Admission:
    """What Kueue's Workloads of one portal workload say: evicted and not admitted again, waiting
    (quota not reserved) and why, and the flavors its admission charges."""
    evicted = [w for w in workloads if _true(w, "Evicted") and not _true(w, "QuotaReserved")]
    pending = [w for w in workloads if not _true(w, "QuotaReserved")]
    message = _condition(pending[0], "QuotaReserved").get("message", "") if pending else ""
    flavors = tuple((resource, flavor) for w in workloads
                    for assignment in (((w.get("status") or {}).get("admission") or {}).get("podSetAssignments") or [])
                    for resource, flavor in (assignment.get("flavors") or {}).items())
    return Admission(
        pending=bool(pending), waiting=waiting_reason(message, per_unit),
        evicted=bool(evicted), evicted_message=_condition(evicted[0], "Evicted").get("message", "") if evicted else "",
        starting="Admitted by Kueue; starting its pods", flavors=flavors,
    )


# --- Reads of the cluster --------------------------------------------------------------------------


def cluster_queue_usage(*, slugs: Iterable[str] | None = None) -> dict[str, list[QueueUsage]]:
    """Per team: what its ClusterQueue is guaranteed, uses, borrows and lends, per flavor and
    resource, in the resource's amounts (tenants.cluster_selectors makes them units).

    Kueue reports usage and borrowing per queue; what a queue lends is not reported, so it is
    the cohort's borrowing shared among the lenders by their idle guarantee.
    """
    items, _ = gateway().list(KUEUE, "ClusterQueue", labels=MANAGED)
    teams: list[str] = []
    rows: list[QueueUsage] = []
    departments: set[str] | None = None
    for cq in items:
        cohort = cq["spec"].get("cohortName")
        if cohort != settings.PORTAL_COHORT:
            departments = _department_cohorts() if departments is None else departments
            if cohort not in departments:
                continue  # borrowing and lending happen within the portal's cohort (and its departments') only
        # Keyed by the team's slug, whatever PORTAL_NAMESPACE_PREFIX made of the queue's name.
        name = (cq["metadata"].get("labels") or {}).get(TEAM_LABEL, cq["metadata"]["name"])
        usage = {
            (f["name"], r["name"]): r for f in (cq.get("status") or {}).get("flavorsUsage", []) for r in f.get("resources", [])
        }
        for group in cq["spec"].get("resourceGroups", []):
            for fq in group.get("flavors", []):
                for r in fq.get("resources", []):  # per flavor and resource: a cGPU flavor's GiB and percent never add
                    used = usage.get((fq["name"], r["name"]), {})
                    nominal = int(float(r.get("nominalQuota", 0)))
                    lendable = nominal if "lendingLimit" not in r else min(nominal, int(float(r["lendingLimit"])))
                    in_use = int(float(used.get("total", 0) or 0))
                    teams.append(name)
                    rows.append(QueueUsage(flavor=fq["name"], resource=r["name"], guaranteed=nominal, in_use=in_use,
                                           borrowed=int(float(used.get("borrowed", 0) or 0)), lent=0,
                                           idle=max(min(lendable, nominal - in_use), 0)))
    wanted = set(slugs) if slugs is not None else None
    return {team: found for team, found in lent_shared(rows, teams).items() if wanted is None or team in wanted}


def _department_cohorts() -> set[str]:
    """The departments' cohorts under the portal's, as the cluster has them (listed only where a
    team queue is in a cohort other than the portal's)."""
    cohorts, _ = gateway().list(KUEUE, "Cohort", labels=MANAGED)
    return {c["metadata"]["name"] for c in cohorts if (c.get("spec") or {}).get("parentName") == settings.PORTAL_COHORT}


def pending_workloads(*, cluster_queue: str) -> list[PendingEntry] | None:
    """Kueue's pending workloads of a ClusterQueue, in the order it will try them, from its
    visibility API; None when the cluster does not serve it (no APIService, or Kueue's
    visibility server does not answer: the VisibilityOnDemand gate is off, or Kueue is down)."""
    answer = gateway().read_subresource(ObjectRef(VISIBILITY, "ClusterQueue", cluster_queue), "pendingworkloads",
                                        query={"limit": 1000})
    if answer is None:
        return None
    entries = []
    for item in answer.get("items") or []:
        meta = item.get("metadata") or {}
        entries.append(PendingEntry(namespace=meta.get("namespace", ""),
                                    owners=tuple(str(ref.get("name", "")) for ref in meta.get("ownerReferences") or []),
                                    position=int(item.get("positionInClusterQueue", 0))))
    return entries


def people_use(*, namespace: str) -> dict[str, float]:
    """Each LocalQueue of the namespace's recent use, as admission fair sharing orders by it: the
    sum of its status's consumed resources (the units its admitted work held, averaged so that each
    day counts half as much as the day after, deploy/kueue's usageHalfLifeTime)."""
    queues, _ = gateway().list(KUEUE, "LocalQueue", namespace=namespace, labels=MANAGED)
    use = {}
    for local_queue in queues:
        status = ((local_queue.get("status") or {}).get("fairSharing") or {}).get("admissionFairSharingStatus") or {}
        consumed = [quantity(value) for value in (status.get("consumedResources") or {}).values()]
        use[local_queue["metadata"]["name"]] = float(sum(value for value in consumed if value is not None))
    return use


class KueueBackend:
    name: str = "kueue"
    label: str = "Kueue"
    position_words: str = "Kueue's visibility API"
    platform_kinds: tuple[tuple[str, str], ...] = ((KUEUE, "ResourceFlavor"), (KUEUE, "WorkloadPriorityClass"),
                                                   (KUEUE, "Cohort"))
    team_kinds: tuple[tuple[str, str], ...] = ((KUEUE, "ClusterQueue"), (KUEUE, "LocalQueue"))
    team_queue_kind: tuple[str, str] = (KUEUE, "ClusterQueue")
    workload_kinds: tuple[tuple[str, str], ...] = ((KUEUE, "Workload"),)
    flavor_alternatives: bool = True
    departments: bool = True
    fair_sharing: bool = True
    people_ordered: bool = True
    indexed_pod_name: str = "{name}-{index}"  # an Indexed Job's pods
    unseen: str = UNSEEN

    def owner(self, built: tuple[str, str]) -> tuple[str, str]:
        return built  # Kueue queues the kinds' own objects

    def platform_objects(self, *, flavors: Sequence[FlavorSpec], tiers: Sequence[PriorityTier],
                         departments: Sequence[DepartmentSpec] = ()) -> list[dict[str, Any]]:
        return [*(make_resource_flavor(flavor=flavor) for flavor in flavors),
                *(make_workload_priority_class(tier=tier) for tier in tiers),
                *(make_cohort(department=department, flavors=flavors) for department in departments)]

    def team_objects(self, *, team: TeamSpec) -> list[dict[str, Any]]:
        return [make_cluster_queue(team=team), make_local_queue(team=team),
                *(make_local_queue(team=team, name=name) for name in team.people)]

    def person_queue(self, user_id: int) -> str:
        return person_queue(user_id)

    def workload_labels(self, *, priority: TierName, queue: str = "") -> dict[str, str]:
        return {QUEUE_LABEL: queue or QUEUE_NAME, PRIORITY_LABEL: f"gpu-portal-{priority}"}

    def shape(self, objects: Sequence[dict[str, Any]], *, workload: QueuedWorkload) -> list[dict[str, Any]]:
        return list(objects)  # the kinds build suspended Jobs and gated pods carrying workload_labels: Kueue's own

    def admission(self, objects: Sequence[dict[str, Any]], *, per_unit: Mapping[str, int] | None = None) -> Admission:
        return admission(objects, per_unit)

    def usage(self, *, slugs: Iterable[str] | None = None) -> dict[str, list[QueueUsage]]:
        return cluster_queue_usage(slugs=slugs)

    def pending(self, *, team_queue: str) -> list[PendingEntry] | None:
        try:
            return pending_workloads(cluster_queue=team_queue)
        except KubeError:
            return None

    def people_use(self, *, namespace: str) -> dict[str, float] | None:
        try:
            return people_use(namespace=namespace)
        except KubeError:
            return None

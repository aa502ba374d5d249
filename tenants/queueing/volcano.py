"""Volcano as a queue backend: the team Queue, a workload's PodGroup and what Volcano says of them.

Not selectable yet (BACKENDS names Kueue only): the builders and readers here are proven against
a real Volcano (tests/cluster's control plane with `queue_backend="volcano"`), but workloads do not
yet run through them. Left to do: jobs.services shaping a launch with `shape` and the sync reading
PodGroups (they carry the workload's label, not an owner reference); the team pass applying
Queues and holding a team by closing its Queue (a bus.volcano.sh Command, which Volcano 1.10's
admission webhook enforces); bounding each flavor's use where flavors share a resource; the
simulated cluster modelling Volcano.

How the portal's model maps onto Volcano 1.10 (the release the suite builds), with the capacity
plugin of deploy/volcano/volcano-scheduler.conf:
- A team is a cluster-scoped Queue named as its Kueue ClusterQueue would be. Its guarantee is
  `deserved` (what reclaim gives back under contention); a team that may not borrow has
  `capability` equal to it; a team that does not lend has its guarantee reserved (`guarantee`),
  which no other queue can use. A queue is `reclaimable`: what it borrowed goes back to its owner.
- Volcano has no ResourceFlavor: a Queue counts resources, not flavors, so every flavor asking for
  one resource (A100 and H100 both `nvidia.com/gpu`) adds to one amount. Which nodes a workload
  runs on is its pods' placement, which the portal already writes (the flavor's node labels and
  tolerations); which flavor a PodGroup is for is its FLAVOR_LABEL.
- A workload is a PodGroup in the team's namespace naming the Queue, with `minMember` the pods
  that must start together (a distributed training's workers: all or none); its pods carry
  GROUP_ANNOTATION and `schedulerName: volcano`. Volcano's phases: Pending (not let in), Inqueue
  (let in, being placed), Running; its Unschedulable condition says why not in Volcano's words.
"""

from __future__ import annotations

import copy
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tenants.manifests import TEAM_LABEL, TeamSpec, team_meta
from tenants.queueing.base import Admission, PendingEntry, QueueUsage, lent_shared

SCHEDULING = "scheduling.volcano.sh/v1beta1"
SCHEDULER_NAME = "volcano"
# On a pod: the PodGroup it belongs to (Volcano's scheduler places a group's pods together).
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
# On a PodGroup: the flavor it was launched on (its pods' placement), since Volcano has no flavors.
FLAVOR_LABEL = "gpu-portal.io/flavor"


# --- A team's queue --------------------------------------------------------------------------------


def guaranteed_amounts(team: TeamSpec) -> dict[str, int]:
    """Per resource, the team's guarantee over every flavor asking for it: a Queue counts resources."""
    amounts: dict[str, int] = defaultdict(int)
    for quota in team.quotas:
        for resource, amount in quota.flavor.quota(quota.nominal).items():
            amounts[resource] += amount
    return dict(amounts)


def make_queue(*, team: TeamSpec) -> dict[str, Any]:
    amounts = {resource: str(amount) for resource, amount in guaranteed_amounts(team).items()}
    spec: dict[str, Any] = {"weight": 1, "reclaimable": True, "deserved": amounts}
    if not team.policy.may_borrow:
        spec["capability"] = dict(amounts)
    if not team.policy.lends_idle:
        spec["guarantee"] = {"resource": dict(amounts)}
    return {"apiVersion": SCHEDULING, "kind": "Queue", "metadata": team_meta(team.cluster_queue, team, namespaced=False),
            "spec": spec}


# --- A workload's group ----------------------------------------------------------------------------


def make_pod_group(*, name: str, namespace: str, queue: str, min_member: int, priority_class: str, flavor: str,
                   labels: Mapping[str, str]) -> dict[str, Any]:
    """The PodGroup of one workload: its pods are placed `min_member` at a time or not at all."""
    return {
        "apiVersion": SCHEDULING, "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "labels": {**labels, FLAVOR_LABEL: flavor}},
        "spec": {"minMember": min_member, "queue": queue, "priorityClassName": priority_class},
    }


def pod_fields(*, group: str) -> tuple[dict[str, str], dict[str, Any]]:
    """What a workload's pod template gets on Volcano: (annotations, spec fields)."""
    return {GROUP_ANNOTATION: group}, {"schedulerName": SCHEDULER_NAME}


def shape(objects: Sequence[dict[str, Any]], *, name: str, namespace: str, queue: str, pods_together: int,
          priority_class: str, flavor: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """A workload's objects (jobs.kinds' build) made Volcano's: its PodGroup first, the object
    owning its pods scheduled by Volcano in that group, and a batch Job not suspended (Kueue
    resumes one it admits; Volcano holds the pods themselves until the whole gang fits)."""
    group = make_pod_group(name=name, namespace=namespace, queue=queue, min_member=pods_together,
                           priority_class=priority_class, flavor=flavor, labels=labels)
    annotations, fields = pod_fields(group=name)
    shaped = []
    for obj in objects:
        template = (obj.get("spec") or {}).get("template")
        if template is not None:
            obj = copy.deepcopy(obj)
            template = obj["spec"]["template"]
            template.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
            template["spec"].update(fields)
            obj["spec"].pop("suspend", None)
        shaped.append(obj)
    return [group, *shaped]


# --- What Volcano says of a workload -------------------------------------------------------------------


def _unschedulable(group: dict[str, Any]) -> dict[str, Any]:
    for condition in (group.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
            return condition
    return {}


_NOT_READY = re.compile(r"(?P<pending>\d+)/(?P<members>\d+) tasks in gang unschedulable")
_ORIGIN = re.compile(r"Origin reason is [^:]+: (?P<why>.+)$")


def waiting_reason(group: dict[str, Any] | None) -> str:
    """Why a PodGroup is not running, in the portal's words rather than Volcano's."""
    if group is None:
        return "Waiting for Volcano to see it"
    phase = (group.get("status") or {}).get("phase", "Pending")
    condition = _unschedulable(group)
    message = condition.get("message", "")
    members = int((group.get("spec") or {}).get("minMember") or 1)
    together = f"all {members} of its pods at once" if members > 1 else "its pod"
    if condition.get("reason") == "NotEnoughResources" or _NOT_READY.search(message):
        origin = _ORIGIN.search(message)
        detail = f" The nodes say: {origin['why'].rstrip('.')}." if origin else ""
        return (f"Waiting for room: Volcano cannot place {together} yet, within the team's queue and on the "
                f"flavor's nodes; it starts when that much frees up.{detail}")
    if phase == "Pending":
        return (f"Waiting for quota: Volcano has not let it into the team's queue, which has no room for {together} "
                "now (its guarantee and what other teams leave idle); it starts when that much frees up.")
    if message:
        return f"Waiting for Volcano, which says: {message}"
    return "Waiting for Volcano to place its pods"


def admission(groups: Sequence[dict[str, Any]]) -> Admission:
    """What a workload's PodGroups say: waiting (not running) and why, and the flavor it runs on."""
    waiting = [g for g in groups if (g.get("status") or {}).get("phase") not in ("Running", "Completed")]
    placed = [((g.get("metadata") or {}).get("labels") or {}).get(FLAVOR_LABEL, "") for g in groups if g not in waiting]
    flavors = tuple(("", flavor) for flavor in placed if flavor)
    return Admission(pending=bool(waiting) or not groups, waiting=waiting_reason(waiting[0] if waiting else None),
                     starting="Placed by Volcano; starting its pods", flavors=flavors)


def queue_usage(queues: Iterable[dict[str, Any]], *, slugs: Iterable[str] | None = None) -> dict[str, list[QueueUsage]]:
    """Per team: its Queue's guarantee, use and borrowing per resource (the flavor is blank where it
    stands for every flavor asking for the resource). What a queue lends is not reported: as for
    Kueue, the teams' borrowing is shared among the lenders by their idle guarantee."""
    teams: list[str] = []
    usage: list[QueueUsage] = []
    for queue in queues:
        meta = queue.get("metadata") or {}
        name = str((meta.get("labels") or {}).get(TEAM_LABEL, meta.get("name", "")))
        spec, status = queue.get("spec") or {}, queue.get("status") or {}
        allocated = status.get("allocated") or {}
        lends = not (spec.get("guarantee") or {}).get("resource")
        for resource, amount in (spec.get("deserved") or {}).items():
            guaranteed, used = int(float(amount)), int(float(allocated.get(resource, 0)))
            teams.append(name)
            usage.append(QueueUsage(flavor="", resource=resource, guaranteed=guaranteed, in_use=used,
                                    borrowed=max(used - guaranteed, 0), lent=0,
                                    idle=max(guaranteed - used, 0) if lends else 0))
    wanted = set(slugs) if slugs is not None else None
    return {team: found for team, found in lent_shared(usage, teams).items() if wanted is None or team in wanted}


def pending_groups(groups: Iterable[dict[str, Any]], *, queue: str,
                   priorities: Mapping[str, int]) -> list[PendingEntry]:
    """A Queue's waiting PodGroups in the order Volcano tries them: higher priority first, then
    older (the priority plugin's job order, then creation); `priorities`: PriorityClass values."""
    waiting = [g for g in groups if (g.get("spec") or {}).get("queue") == queue
               and (g.get("status") or {}).get("phase", "Pending") in ("Pending", "Inqueue")]
    waiting.sort(key=lambda g: (-priorities.get((g.get("spec") or {}).get("priorityClassName", ""), 0),
                                (g.get("metadata") or {}).get("creationTimestamp", "")))
    return [PendingEntry(namespace=(g.get("metadata") or {}).get("namespace", ""),
                         owners=((g.get("metadata") or {}).get("name", ""),), position=position)
            for position, g in enumerate(waiting)]

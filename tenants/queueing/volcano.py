"""Volcano as the portal's queue backend (PORTAL_QUEUE_BACKEND=volcano).

How the portal's model maps onto Volcano 1.10 (the release the suite builds and the docs name), with
the capacity plugin of deploy/volcano/volcano-scheduler.conf:
- Volcano has no ResourceFlavor and a Queue counts resources, not flavors: A100 and H100 units both
  ask for `nvidia.com/gpu`. So a team gets one Queue per flavor, named after its Kueue ClusterQueue
  and the flavor (`queue_name`), each deserving the team's guarantee of that flavor: every flavor's
  quota holds on its own. Which nodes a workload runs on is its pods' placement, which the portal
  writes (the flavor's node labels and tolerations); a launch names one flavor (no alternatives).
- A Queue's guarantee is `deserved` (what reclaim gives back under contention); a team that may
  not borrow has `capability` equal to it; a team that does not lend has it reserved (`guarantee`),
  which no other queue can use. A queue is `reclaimable`: what it borrowed goes back to its owner.
- A hold gives the team's Queues a capability of 0 and makes them not reclaimable: nothing new is
  placed, what runs goes on (also what it borrowed, until it ends or the hold lifts). Not a closed
  Queue: Volcano 1.10 enforces that only when pods are made (its admission webhook), so work
  already waiting would still start.
- A server or notebook is a PodGroup in the team's namespace naming its flavor's Queue, made just
  before its Deployment or StatefulSet; its pods carry GROUP_ANNOTATION and `schedulerName: volcano`.
  The PodGroup carries the workload's labels: it has no owner reference to match by.
- A training (a kind's batch Job) is a Volcano Job (`make_job`) in that Queue, whose controller makes
  its PodGroup (named after the Job and its uid, with the Job's labels) and its pods, `minAvailable`
  the pods that must start together (a distributed training's workers: all or none). A batch Job
  would count a pod Volcano evicts (reclaim, a higher tier) as failed, and end the run; a Volcano
  Job restarts, all its pods together, and ends at the first failure (POLICIES).
- Volcano's phases of a PodGroup: Pending (not let into its queue), Inqueue (let in, being placed),
  Running; its Unschedulable condition says why not, in Volcano's words.
The builders here are pure; `usage` and `pending` read the cluster through portal.kube.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from portal.kube import KubeError, gateway
from portal.kube.base import quantity
from tenants.manifests import (
    MANAGED_BY_LABEL,
    MANAGER,
    PRIORITY_TIERS,
    TEAM_LABEL,
    DepartmentSpec,
    FlavorQuota,
    FlavorSpec,
    PriorityTier,
    TeamSpec,
    TierName,
    team_meta,
)
from tenants.queueing.base import Admission, PendingEntry, QueuedWorkload, QueueUsage, lent_shared

SCHEDULING = "scheduling.volcano.sh/v1beta1"
BATCH = "batch.volcano.sh/v1alpha1"
SCHEDULER_NAME = "volcano"
# A Volcano Job's one task, whose pods are named `<job>-worker-<index>`.
TASK = "worker"
# On a Volcano Job's pod: its index in its task (an Indexed Job's completion index, on Kueue).
TASK_INDEX_ANNOTATION = "volcano.sh/task-index"
# What a Volcano Job does when one of its pods is evicted or fails: an evicted pod (reclaim, a
# higher tier, a drained node) restarts the run, every pod together, as Kueue requeues a preempted
# Job; a failed one ends it, the others stopped. Volcano counts restarts against `maxRetry` without
# telling their causes apart, so failures are not retried (Kueue's single-pod training is, twice):
# every restart is an eviction, which is how the portal can tell a preempted run from a failing one.
POLICIES = ({"event": "PodEvicted", "action": "RestartJob"}, {"event": "PodFailed", "action": "TerminateJob"})
# How often an evicted run starts again before Volcano fails it ("reached the maximum of retries").
EVICTION_RESTARTS = 20
# On a pod: the PodGroup it belongs to (Volcano's scheduler places a group's pods together).
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
# On a Queue and a PodGroup: the flavor it is for, since Volcano has no flavors.
FLAVOR_LABEL = "gpu-portal.io/flavor"
MANAGED = {MANAGED_BY_LABEL: MANAGER}
# What a Queue deserves that is not a flavor's: the team's CPU and memory, counted by its ResourceQuota.
UNCOUNTED = frozenset({"cpu", "memory"})


# --- A team's queues -------------------------------------------------------------------------------


def queue_name(team_queue: str, flavor: str) -> str:
    """The Queue of a team's flavor: its ClusterQueue's name and the flavor's, joined by a dot, which
    neither slug may hold (team "a" with flavor "b-c" and team "a-b" with flavor "c" never meet)."""
    return f"{team_queue}.{flavor}"


def make_queue(*, team: TeamSpec, quota: FlavorQuota) -> dict[str, Any]:
    """The team's Queue for one flavor: its guarantee of the flavor, per resource its units ask for.
    A held team's Queue may be given nothing more (`capability` 0) and is not reclaimable: what it
    runs goes on, what waits in it stays waiting."""
    amounts = {resource: str(amount) for resource, amount in quota.flavor.quota(quota.nominal).items()}
    # CPU and memory deserved too, at the team's backstops: Volcano reads a dimension a Queue does
    # not name as none deserved, so a pod asking for any CPU would be over its share and could
    # never reclaim or preempt. What CPU and memory the team may use is its ResourceQuota's to say.
    deserved = {**amounts, "cpu": team.policy.cpu, "memory": team.policy.memory}
    spec: dict[str, Any] = {"weight": 1, "reclaimable": not team.held, "deserved": deserved}
    if team.held:
        # A CPU-only flavor's Queue has no GPU resource to give nothing of: it is held on CPU.
        spec["capability"] = dict.fromkeys(amounts or ("cpu",), "0")
    elif not team.policy.may_borrow:
        spec["capability"] = dict(amounts)
    if not team.policy.lends_idle:
        spec["guarantee"] = {"resource": dict(amounts)}
    meta = team_meta(queue_name(team.cluster_queue, quota.flavor.name), team, namespaced=False,
                     labels={**team.labels, FLAVOR_LABEL: quota.flavor.name})
    return {"apiVersion": SCHEDULING, "kind": "Queue", "metadata": meta, "spec": spec}


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


def make_job(job: dict[str, Any], *, workload: QueuedWorkload) -> dict[str, Any]:
    """A kind's batch Job as a Volcano Job in the workload's Queue (queued_job): one task of its
    pods. What the batch Job's spec said carries over: its run time limit (on each pod), its time to
    live once finished; an Indexed Job's pods still find their index in JOB_COMPLETION_INDEX, and
    pods that name a subdomain get the host names it gives (Volcano's svc plugin; the portal's
    network policies, not the plugin's, decide who reaches them)."""
    spec = job["spec"]
    template = copy.deepcopy(spec["template"])
    pod = template["spec"]
    if spec.get("activeDeadlineSeconds"):
        pod["activeDeadlineSeconds"] = spec["activeDeadlineSeconds"]
    if spec.get("completionMode") == "Indexed":
        index = {"name": "JOB_COMPLETION_INDEX",
                 "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{TASK_INDEX_ANNOTATION}']"}}}
        for container in pod["containers"]:
            container["env"] = [index, *container.get("env", [])]
    volcano_spec: dict[str, Any] = {"tasks": [{"name": TASK, "replicas": int(spec.get("parallelism", 1)), "template": template}]}
    if pod.get("subdomain"):
        volcano_spec["plugins"] = {"svc": ["--disable-network-policy=true"]}
    if spec.get("ttlSecondsAfterFinished") is not None:
        volcano_spec["ttlSecondsAfterFinished"] = spec["ttlSecondsAfterFinished"]
    return queued_job({"apiVersion": BATCH, "kind": "Job", "metadata": job["metadata"], "spec": volcano_spec},
                      workload=workload)


def queued_job(job: dict[str, Any], *, workload: QueuedWorkload) -> dict[str, Any]:
    """A Volcano Job (make_job's, or one a kind builds itself: an MPI job) in the workload's Queue at
    its tier, its pods scheduled by Volcano `pods_together` at a time or not at all, restarted whole
    after an eviction and ended at a failure (POLICIES), its flavor on its labels (its PodGroup's too)."""
    job = copy.deepcopy(job)
    job["metadata"]["labels"] = {**job["metadata"].get("labels", {}), FLAVOR_LABEL: workload.flavor}
    for task in job["spec"]["tasks"]:
        task["template"]["spec"]["schedulerName"] = SCHEDULER_NAME
    job["spec"].update({
        "schedulerName": SCHEDULER_NAME, "queue": queue_name(workload.team_queue, workload.flavor),
        "priorityClassName": workload.priority_class, "minAvailable": workload.pods_together,
        "maxRetry": EVICTION_RESTARTS, "policies": [dict(policy) for policy in POLICIES],
    })
    return job


def is_volcano_job(obj: dict[str, Any]) -> bool:
    return obj.get("apiVersion") == BATCH and obj.get("kind") == "Job"


def is_batch_job(obj: dict[str, Any]) -> bool:
    return obj.get("apiVersion") == "batch/v1" and obj.get("kind") == "Job"


def shape(objects: Sequence[dict[str, Any]], *, workload: QueuedWorkload) -> list[dict[str, Any]]:
    """A workload's objects (jobs.kinds' build) made Volcano's: a batch Job becomes a Volcano Job
    (make_job), a kind's own Volcano Job is queued (queued_job), and Volcano's controller makes
    their PodGroup; any other owner of pods gets its PodGroup just
    before it, its pods scheduled by Volcano in that group."""
    if any(is_batch_job(obj) or is_volcano_job(obj) for obj in objects):
        return [make_job(obj, workload=workload) if is_batch_job(obj) else
                queued_job(obj, workload=workload) if is_volcano_job(obj) else obj for obj in objects]
    group = make_pod_group(name=workload.name, namespace=workload.namespace,
                           queue=queue_name(workload.team_queue, workload.flavor), min_member=workload.pods_together,
                           priority_class=workload.priority_class, flavor=workload.flavor, labels=workload.labels)
    annotations, fields = pod_fields(group=workload.name)
    shaped = []
    for obj in objects:
        template = (obj.get("spec") or {}).get("template")
        if template is not None:
            obj = copy.deepcopy(obj)
            template = obj["spec"]["template"]
            template.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
            template["spec"].update(fields)
        shaped.append(obj)
    # After what comes before the owner (a claim template, a Secret): the group just before the
    # object whose pods it holds, so that it exists when they are made.
    owner_at = next((i for i, obj in enumerate(shaped) if (obj.get("spec") or {}).get("template") is not None), len(shaped))
    return [*shaped[:owner_at], group, *shaped[owner_at:]]


# --- What Volcano says of a workload -------------------------------------------------------------------


def _unschedulable(group: dict[str, Any]) -> dict[str, Any]:
    for condition in (group.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
            return condition
    return {}


_NOT_READY = re.compile(r"(?P<pending>\d+)/(?P<members>\d+) tasks in gang unschedulable")
_ORIGIN = re.compile(r"Origin reason is [^:]+: (?P<why>.+)$")


UNSEEN = "Waiting for Volcano to see it"


def waiting_reason(group: dict[str, Any] | None) -> str:
    """Why a PodGroup is not running, in the portal's words rather than Volcano's."""
    if group is None:
        return UNSEEN
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


def placed_before(group: dict[str, Any]) -> bool:
    """Whether Volcano once placed the group's pods all together (its gang plugin's Scheduled
    condition, which stays when a later pass finds it unschedulable)."""
    return any(condition.get("type") == "Scheduled" and condition.get("status") == "True"
               for condition in (group.get("status") or {}).get("conditions") or [])


EVICTED = ("Volcano evicted its pods to give their capacity back (a team reclaiming its guarantee, or a higher "
           "tier); they start again when there is room")


def admission(groups: Sequence[dict[str, Any]]) -> Admission:
    """What a workload's PodGroups say: waiting (not running) and why, and the flavor it runs on. A
    group waiting after it was placed lost its pods to an eviction (a server's or notebook's: a
    Volcano Job's restart is read from the Job)."""
    waiting = [g for g in groups if (g.get("status") or {}).get("phase") not in ("Running", "Completed")]
    placed = [((g.get("metadata") or {}).get("labels") or {}).get(FLAVOR_LABEL, "") for g in groups if g not in waiting]
    flavors = tuple(("", flavor) for flavor in placed if flavor)
    evicted = any(placed_before(g) for g in waiting)
    return Admission(pending=bool(waiting) or not groups, waiting=waiting_reason(waiting[0] if waiting else None),
                     evicted=evicted, evicted_message=EVICTED if evicted else "",
                     starting="Placed by Volcano; starting its pods", flavors=flavors)


def held(spec: dict[str, Any], resource: str) -> bool:
    """Whether a Queue's spec is make_queue's hold for that resource: given nothing more, not reclaimable."""
    capability = (spec.get("capability") or {}).get(resource)
    return spec.get("reclaimable") is False and capability is not None and quantity(capability) == 0


def queue_usage(queues: Iterable[dict[str, Any]], *, slugs: Iterable[str] | None = None) -> dict[str, list[QueueUsage]]:
    """Per team: each of its flavor Queues' guarantee, use and borrowing per resource. What a queue
    lends is not reported: as for Kueue, the teams' borrowing of a flavor is shared among its
    lenders by their idle guarantee."""
    teams: list[str] = []
    usage: list[QueueUsage] = []
    for queue in queues:
        meta = queue.get("metadata") or {}
        labels = meta.get("labels") or {}
        name = str(labels.get(TEAM_LABEL, meta.get("name", "")))
        spec, status = queue.get("spec") or {}, queue.get("status") or {}
        allocated = status.get("allocated") or {}
        lends = not (spec.get("guarantee") or {}).get("resource")
        for resource, amount in (spec.get("deserved") or {}).items():
            if resource in UNCOUNTED:
                continue
            guaranteed, used = int(float(amount)), int(float(allocated.get(resource, 0)))
            teams.append(name)
            usage.append(QueueUsage(flavor=str(labels.get(FLAVOR_LABEL, "")), resource=resource, guaranteed=guaranteed,
                                    in_use=used, borrowed=max(used - guaranteed, 0), lent=0,
                                    idle=max(guaranteed - used, 0) if lends else 0,
                                    held=held(spec, resource)))
    wanted = set(slugs) if slugs is not None else None
    return {team: found for team, found in lent_shared(usage, teams).items() if wanted is None or team in wanted}


def pending_groups(groups: Iterable[dict[str, Any]], *, priorities: Mapping[str, int]) -> list[PendingEntry]:
    """The waiting PodGroups of a team's namespace in the order Volcano tries them in each of its
    Queues: higher priority first, then older (the priority plugin's job order, then creation),
    each counted from 0 in its own Queue; `priorities`: PriorityClass values."""
    waiting = [g for g in groups if (g.get("status") or {}).get("phase", "Pending") in ("Pending", "Inqueue")]
    waiting.sort(key=lambda g: (-priorities.get((g.get("spec") or {}).get("priorityClassName", ""), 0),
                                (g.get("metadata") or {}).get("creationTimestamp", "")))
    ahead: dict[str, int] = {}
    entries = []
    for group in waiting:
        queue = (group.get("spec") or {}).get("queue", "")
        entries.append(PendingEntry(namespace=(group.get("metadata") or {}).get("namespace", ""),
                                    owners=((group.get("metadata") or {}).get("name", ""),), position=ahead.get(queue, 0)))
        ahead[queue] = ahead.get(queue, 0) + 1
    return entries


class VolcanoBackend:
    name: str = "volcano"
    label: str = "Volcano"
    position_words: str = "Volcano's order of its queue's waiting pod groups"
    platform_kinds: tuple[tuple[str, str], ...] = ()  # the tiers are the PriorityClasses every backend has
    team_kinds: tuple[tuple[str, str], ...] = ((SCHEDULING, "Queue"),)
    team_queue_kind: tuple[str, str] = (SCHEDULING, "Queue")
    workload_kinds: tuple[tuple[str, str], ...] = ((SCHEDULING, "PodGroup"),)
    flavor_alternatives: bool = False
    # Volcano's hierarchical queues need its capacity plugin's hierarchy, which the portal does not drive.
    departments: bool = False
    fair_sharing: bool = False
    # A team's work waits in one queue, in the order of priority and age: Volcano has no queue per person.
    people_ordered: bool = False
    indexed_pod_name: str = f"{{name}}-{TASK}-{{index}}"  # a Volcano Job's pods
    unseen: str = UNSEEN

    def owner(self, built: tuple[str, str]) -> tuple[str, str]:
        return (BATCH, "Job") if built == ("batch/v1", "Job") else built  # make_job's

    def platform_objects(self, *, flavors: Sequence[FlavorSpec], tiers: Sequence[PriorityTier],
                         departments: Sequence[DepartmentSpec] = ()) -> list[dict[str, Any]]:
        return []

    def team_objects(self, *, team: TeamSpec) -> list[dict[str, Any]]:
        return [make_queue(team=team, quota=quota) for quota in team.quotas]

    def person_queue(self, user_id: int) -> str:
        return ""  # the team's one queue

    def workload_labels(self, *, priority: TierName, queue: str = "") -> dict[str, str]:
        return {}  # the PodGroup names the queue and the tier

    def shape(self, objects: Sequence[dict[str, Any]], *, workload: QueuedWorkload) -> list[dict[str, Any]]:
        return shape(objects, workload=workload)

    def admission(self, objects: Sequence[dict[str, Any]], *, per_unit: Mapping[str, int] | None = None) -> Admission:
        return admission(objects)

    def usage(self, *, slugs: Iterable[str] | None = None) -> dict[str, list[QueueUsage]]:
        items, _ = gateway().list(SCHEDULING, "Queue", labels=MANAGED)
        return queue_usage(items, slugs=slugs)

    def people_use(self, *, namespace: str) -> dict[str, float] | None:
        return {}  # no queue per person

    def pending(self, *, team_queue: str) -> list[PendingEntry] | None:
        """The waiting groups of the team's namespace (named as its queues are)."""
        try:
            groups, _ = gateway().list(SCHEDULING, "PodGroup", namespace=team_queue, labels=MANAGED)
        except KubeError:
            return None
        return pending_groups(groups, priorities={tier.object_name: tier.value for tier in PRIORITY_TIERS})

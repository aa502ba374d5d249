"""Kueue, as far as the portal relies on it: a queued Job, Deployment or StatefulSet gets a
Workload; workloads are admitted by their ClusterQueue's quota per flavor, may borrow what other
queues of the cohort leave idle, and are preempted when a lender reclaims its quota or a higher
priority needs room in the team; each ClusterQueue reports its usage in its status."""

from __future__ import annotations

import copy
import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from portal.kube.base import ObjectRef
from portal.kube.dra import RESOURCE_API
from portal.kube.simulated import dra
from portal.kube.simulated.models import SimulatedObject
from portal.kube.simulated.state import (
    JOB_NAME_LABEL,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    QUEUED_KINDS,
    ClusterState,
    node_selected,
    pod_requests,
    to_units,
    units_text,
)
from portal.kube.simulated.store import now_iso

# Kueue's on-demand visibility API, which its visibility server serves through an APIService.
VISIBILITY = "visibility.kueue.x-k8s.io/v1beta2"

# Admission fair sharing, as deploy/kueue/controller_manager_config.yaml configures Kueue (its
# test holds the two equal): a LocalQueue's consumed resources are the decayed average of what its
# admitted work holds, each sample weighing alpha(interval), and each admission adds its requests
# times alpha(sampling interval) at once (Kueue's entry penalty, settled as the workload is admitted).
AFS_MODE = "UsageBasedAdmissionFairSharing"
AFS_HALF_LIFE_SECONDS = 24 * 3600.0
AFS_SAMPLING_SECONDS = 300.0


def afs_alpha(elapsed: float) -> float:
    """admissionfairsharing.calculateAlphaRate: the weight `elapsed` seconds of new use get."""
    return 1.0 - math.pow(0.5, elapsed / AFS_HALF_LIFE_SECONDS)


def _quantity(value: float) -> str:
    return format(value, ".9f").rstrip("0").rstrip(".") or "0"


# Why a workload was preempted, as Kueue's preemption messages say it (preemption.go).
PREEMPTED = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
}


@dataclass
class Workload:
    row: SimulatedObject
    job: SimulatedObject | None
    queue: str
    cluster_queue: str | None
    priority: int
    created: str
    requests: dict[str, float]  # resource name -> units for all pods
    pods: int
    pod_spec: dict[str, Any] = field(default_factory=dict)
    # resource -> flavor; None until admitted (a workload asking no GPU is admitted with none: {})
    admitted_flavor: dict[str, str] | None = None
    unmapped: str = ""  # a DeviceClass its claims name that Kueue's deviceClassMappings do not

    @property
    def name(self) -> str:
        return self.row.body["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.row.namespace

    @property
    def admitted(self) -> bool:
        return self.admitted_flavor is not None

    @property
    def finished(self) -> bool:
        conditions = self.row.body.get("status", {}).get("conditions", [])
        return any(c["type"] == "Finished" and c["status"] == "True" for c in conditions)


Node = tuple[str, str]  # ("cq", a ClusterQueue's name) or ("cohort", a Cohort's name)
FlavorResource = tuple[str, str]  # (flavor, resource)


@dataclass(frozen=True, order=True)
class Share:
    """A queue's or cohort's dominant resource share as Kueue's fair sharing compares them: the
    lower is admitted first, the higher preempted first. A zero weight that borrows ranks above
    every other (its share is infinite); two such compare by their unweighted ratio."""

    zero_weight_borrows: bool = False
    value: float = 0.0  # borrowed over lendable ×1000 over the weight (unweighted for a zero weight)


class Tree:
    """One cohort tree's quota and usage per flavor and resource, as Kueue's resource nodes hold
    them (pkg/cache/scheduler/resource_node.go and fair_sharing.go, v0.19.2): each node's subtree
    quota, the part it keeps from its parent (subtree minus lending limit), and the usage passed up
    past that kept part; each level's borrowing limit bounds what it takes from its parent."""

    def __init__(self, kueue: Kueue, workloads: list[Workload], cq: str) -> None:
        self.kueue = kueue
        self.queues = kueue._cohort(cq)
        self.children: dict[Node, list[Node]] = defaultdict(list)
        nodes: list[Node] = []
        for name in self.queues:
            node: Node | None = ("cq", name)
            nodes.append(("cq", name))
            while node is not None and (parent := kueue._parent(node)) is not None and node not in self.children[parent]:
                self.children[parent].append(node)
                nodes.append(parent)
                node = parent
        self.specs = {node: self._spec(node) for node in nodes}
        # Every flavor and resource any node of the tree has quota entries for (Kueue's root keeps them all).
        self.frs = sorted({(fq["name"], r["name"]) for spec in self.specs.values()
                           for group in spec.get("resourceGroups", []) or [] for fq in group.get("flavors", [])
                           for r in fq.get("resources", [])})
        queues = set(self.queues)
        self.used: dict[tuple[str, FlavorResource], float] = defaultdict(float)
        for w in workloads:
            if w.admitted and not w.finished and w.cluster_queue in queues:
                for resource, flavor in (w.admitted_flavor or {}).items():
                    self.used[(w.cluster_queue, (flavor, resource))] += w.requests.get(resource, 0)
        self.memo: dict[tuple[Node, FlavorResource], tuple[float, float, float]] = {}

    def _spec(self, node: Node) -> dict[str, Any]:
        kind, name = node
        row = self.kueue.state.cluster_queues.get(name) if kind == "cq" else self.kueue.state.cohorts.get(name)
        return (row.body.get("spec") or {}) if row is not None else {}

    def quota(self, node: Node, fr: FlavorResource) -> tuple[float, float | None, float | None]:
        """(nominal, borrowing limit, lending limit); a node with no entry holds nothing of it."""
        return self.kueue._limits(self.specs.get(node) or self._spec(node), *fr) or (0.0, None, None)

    def state(self, node: Node, fr: FlavorResource) -> tuple[float, float, float]:
        """(subtree quota, quota kept from the parent, usage) of a node."""
        if (node, fr) not in self.memo:
            nominal, _, lend = self.quota(node, fr)
            subtree, used = nominal, 0.0
            if node[0] == "cq":
                used = self.used[(node[1], fr)]
            for child in self.children.get(node, []):
                c_subtree, c_local, c_used = self.state(child, fr)
                subtree += c_subtree - c_local
                used += max(c_used - c_local, 0)
            local = max(subtree - lend, 0) if lend is not None else 0.0
            self.memo[(node, fr)] = (subtree, local, used)
        return self.memo[(node, fr)]

    def chain(self, node: Node) -> list[Node] | None:
        """The node, its parent, ... up to the root; None in a cohort tree with a cycle."""
        chain = [node]
        while (parent := self.kueue._parent(chain[-1])) is not None:
            if parent in chain:
                return None
            chain.append(parent)
        return chain

    def available(self, cq: str, fr: FlavorResource) -> float:
        """What the queue may still admit: its own unused quota kept from lending, plus what its
        cohort tree has free, each level bounded by its borrowing limit."""
        chain = self.chain(("cq", cq))
        if chain is None:
            return 0.0  # Kueue admits nothing in a cohort tree with a cycle
        subtree, _, used = self.state(chain[-1], fr)
        free = subtree - used
        for node in reversed(chain[:-1]):
            subtree, local, used = self.state(node, fr)
            borrowing_limit = self.quota(node, fr)[1]
            if borrowing_limit is not None:
                free = min(subtree - local - max(used - local, 0) + borrowing_limit, free)
            free = max(local - used, 0) + free
        return free

    def potential(self, chain: list[Node], fr: FlavorResource) -> float:
        """What the first node of the chain could use of the resource were the whole tree idle."""
        subtree, local, _ = self.state(chain[0], fr)
        if len(chain) == 1:
            return subtree
        avail = local + self.potential(chain[1:], fr)
        borrowing_limit = self.quota(chain[0], fr)[1]
        return min(subtree + borrowing_limit, avail) if borrowing_limit is not None else avail

    def share(self, node: Node) -> tuple[Share, set[FlavorResource]]:
        """The node's dominant resource share, and the flavors and resources it borrows: of each
        resource, what it uses above its subtree quota over what its parent could lend it, ×1000,
        the largest over its weight."""
        chain = self.chain(node)
        if chain is None or len(chain) == 1:
            return Share(), set()
        borrowing: dict[str, float] = defaultdict(float)
        borrowed: set[FlavorResource] = set()
        for fr in self.frs:
            subtree, _, used = self.state(node, fr)
            if used - subtree > 1e-9:
                borrowing[fr[1]] += used - subtree
                borrowed.add(fr)
        if not borrowing:
            return Share(), set()
        lendable: dict[str, float] = defaultdict(float)
        for fr in self.frs:
            lendable[fr[1]] += self.potential(chain[1:], fr)
        ratio = max((amount * 1000 / lendable[resource] for resource, amount in borrowing.items() if lendable[resource] > 0),
                    default=0.0)
        weight = self.kueue.weight(node)
        return (Share(True, ratio) if weight == 0 else Share(False, ratio / weight)), borrowed


class Kueue:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._templates: dict[tuple[str, str], dict[str, Any]] | None = None

    def _claimed(self, namespace: str, pod_spec: dict[str, Any]) -> tuple[dict[str, float], str]:
        """The devices a pod's claims ask for, under the resources Kueue's deviceClassMappings name,
        and a DeviceClass they name that no mapping does (Kueue then admits nothing of it)."""
        if self._templates is None:
            self._templates = {(row.namespace, row.name): row.body
                               for row in self.state.store.objects("ResourceClaimTemplate", api_version=RESOURCE_API)}
        mapped = dra.device_class_resources()
        claimed: dict[str, float] = defaultdict(float)
        unmapped = ""
        for claim in dra.template_claims(namespace, pod_spec, self._templates):
            if claim.device_class in mapped:
                claimed[mapped[claim.device_class]] += claim.count
            else:
                unmapped = claim.device_class
        return claimed, unmapped

    # One Workload per queued Job.
    def create_workloads(self) -> None:
        have = {(w.namespace, w.body["metadata"].get("labels", {}).get(JOB_NAME_LABEL)) for w in self.state.workload_rows}
        for (namespace, name), job in self.state.jobs.items():
            labels = job.body["metadata"].get("labels", {})
            if QUEUE_LABEL not in labels or (namespace, name) in have:
                continue
            # Kueue reads the pods' requests; a malformed quantity fails here, as it would at admission.
            pod_requests({"spec": job.body["spec"]["template"]["spec"]})
            kind = job.body["kind"]
            count = int(job.body["spec"].get("parallelism" if kind == "Job" else "replicas", 1))
            digest = hashlib.sha256(job.body["metadata"]["uid"].encode()).hexdigest()[:5]
            body: dict[str, Any] = {
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {
                    "name": f"job-{name}-{digest}"[:253], "namespace": namespace,
                    "labels": {JOB_NAME_LABEL: name, "kueue.x-k8s.io/job-uid": job.body["metadata"]["uid"]},
                    "ownerReferences": [
                        {"apiVersion": QUEUED_KINDS[kind], "kind": kind, "name": name, "uid": job.body["metadata"]["uid"]},
                    ],
                },
                "spec": {
                    "queueName": labels[QUEUE_LABEL],
                    "priorityClassName": labels.get(PRIORITY_LABEL, ""),
                    "priority": self.state.priorities.get(labels.get(PRIORITY_LABEL, ""), 0),
                    "podSets": [{"name": "main", "count": count, "template": job.body["spec"]["template"]}],
                },
                "status": {"conditions": []},
            }
            ref = ObjectRef("kueue.x-k8s.io/v1beta2", "Workload", body["metadata"]["name"], namespace)
            self.state.workload_rows.append(self.state.create(ref, body))
            # Kueue suspends what it has not admitted yet.
            if kind == "Job" and not job.body["spec"].get("suspend"):
                job.body["spec"]["suspend"] = True
                self.state.save(job, job.body)

    def workloads(self) -> list[Workload]:
        result = []
        for row in self.state.workload_rows:
            spec = row.body["spec"]
            labels = row.body["metadata"].get("labels", {})
            job = self.state.jobs.get((row.namespace, labels.get(JOB_NAME_LABEL)))
            local_queue = self.state.local_queues.get((row.namespace, spec.get("queueName", "")))
            requests: dict[str, float] = defaultdict(float)
            pod_set = spec["podSets"][0]
            for container in pod_set["template"]["spec"].get("containers", []):
                res = container.get("resources", {})
                for resource, value in (res.get("requests") or res.get("limits") or {}).items():
                    requests[resource] += to_units(value) * pod_set["count"]
            claimed, unmapped = self._claimed(row.namespace, pod_set["template"]["spec"])
            for resource, count in claimed.items():
                requests[resource] += count * pod_set["count"]
            admission = row.body.get("status", {}).get("admission")
            flavors = admission["podSetAssignments"][0]["flavors"] if admission else {}
            result.append(Workload(
                row=row, job=job, queue=spec.get("queueName", ""),
                cluster_queue=local_queue.body["spec"]["clusterQueue"] if local_queue else None,
                priority=int(spec.get("priority", 0)), created=row.body["metadata"]["creationTimestamp"],
                requests=dict(requests), pods=pod_set["count"], admitted_flavor=dict(flavors) if admission else None,
                pod_spec=pod_set["template"].get("spec") or {}, unmapped=unmapped,
            ))
        return result

    # Quota arithmetic, per (flavor, resource).
    @staticmethod
    def _limits(spec: dict[str, Any], flavor: str, resource: str) -> tuple[float, float | None, float | None] | None:
        """A ClusterQueue's or Cohort's (nominal, borrowing limit, lending limit) of one resource of a flavor."""
        for group in spec.get("resourceGroups", []) or []:
            if resource not in group.get("coveredResources", []):
                continue
            for fq in group["flavors"]:
                if fq["name"] != flavor:
                    continue
                for r in fq["resources"]:
                    if r["name"] == resource:
                        borrow = to_units(r["borrowingLimit"]) if "borrowingLimit" in r else None
                        lend = to_units(r["lendingLimit"]) if "lendingLimit" in r else None
                        return to_units(r["nominalQuota"]), borrow, lend
        return None

    def _quota(self, cq: str, flavor: str, resource: str) -> tuple[float, float | None, float | None] | None:
        row = self.state.cluster_queues.get(cq)
        return None if row is None else self._limits(row.body["spec"], flavor, resource)

    def _flavor_order(self, cq: str, resource: str, workload: Workload | None = None) -> list[str]:
        """The flavors of the resource's group in the queue's order; with a workload, only those
        its pods' node selector and required node affinity accept, as Kueue judges them: against
        each flavor's node labels, for the label keys the group's flavors use."""
        row = self.state.cluster_queues.get(cq)
        if row is None:
            return []
        for group in row.body["spec"].get("resourceGroups", []):
            if resource in group.get("coveredResources", []):
                names = [fq["name"] for fq in group["flavors"]]
                if workload is None:
                    return names
                labels = {name: self._node_labels(name) for name in names}
                keys = {key for flavor_labels in labels.values() for key in flavor_labels}
                return [name for name in names if node_selected(workload.pod_spec, labels[name], keys)]
        return []

    def _node_labels(self, flavor: str) -> dict[str, str]:
        row = self.state.flavors.get(flavor)
        return dict(row.body["spec"].get("nodeLabels") or {}) if row is not None else {}

    def _parent(self, node: tuple[str, str]) -> tuple[str, str] | None:
        """A ClusterQueue's cohort, or a Cohort's parent (a cohort named but not made is a root with no quota)."""
        kind, name = node
        if kind == "cq":
            cohort = self.state.cluster_queues[name].body["spec"].get("cohortName")
        else:
            row = self.state.cohorts.get(name)
            cohort = (row.body.get("spec") or {}).get("parentName") if row is not None else None
        return ("cohort", cohort) if cohort else None

    def _root(self, node: tuple[str, str]) -> tuple[str, str]:
        seen = {node}
        while (parent := self._parent(node)) is not None and parent not in seen:  # a cycle admits nothing new anyway
            seen.add(parent)
            node = parent
        return node

    def _cohort(self, cq: str) -> list[str]:
        """The ClusterQueues of the cohort tree `cq` is in, itself included."""
        root = self._root(("cq", cq))
        return [name for name in self.state.cluster_queues if self._root(("cq", name)) == root]

    def _tree(self, workloads: list[Workload], cq: str) -> Tree:
        return Tree(self, workloads, cq)

    def available(self, workloads: list[Workload], cq: str, flavor: str, resource: str) -> float:
        """What the queue may still admit of one resource of a flavor (Tree.available)."""
        return self._tree(workloads, cq).available(cq, (flavor, resource))

    def weight(self, node: tuple[str, str]) -> float:
        """A ClusterQueue's or Cohort's fair-sharing weight (1 where it names none)."""
        kind, name = node
        row = self.state.cluster_queues.get(name) if kind == "cq" else self.state.cohorts.get(name)
        fair = ((row.body.get("spec") or {}).get("fairSharing") or {}) if row is not None else {}
        return to_units(fair["weight"]) if fair.get("weight") is not None else 1.0

    def usage(self, workloads: list[Workload], cq: str, flavor: str, resource: str) -> float:
        # A finished workload keeps its admission in its status, but Kueue gives its quota back.
        return sum(w.requests.get(resource, 0) for w in workloads if w.admitted and not w.finished
                   and w.cluster_queue == cq and (w.admitted_flavor or {}).get(resource) == flavor)

    def _fits(self, workloads: list[Workload], cq: str, flavor: str, resource: str, amount: float) -> tuple[bool, float]:
        """Whether `amount` more fits, and how much is missing when it does not."""
        if self._quota(cq, flavor, resource) is None:
            return False, amount
        missing = max(amount - self.available(workloads, cq, flavor, resource), 0)
        return missing <= 0, missing

    def stop_policy(self, workload: Workload) -> str:
        """The LocalQueue's stopPolicy: Hold admits nothing new, HoldAndDrain also evicts what it admitted."""
        local_queue = self.state.local_queues.get((workload.namespace, workload.queue))
        return str(local_queue.body["spec"].get("stopPolicy") or "None") if local_queue else "None"

    def pending_order(self, workloads: list[Workload]) -> list[Workload]:
        """Workloads waiting for quota, in the order admit() tries them: in a ClusterQueue with
        admission fair sharing, by their LocalQueue's recent use first (cluster_queue.go's
        queueOrderingFunc); then priority, then age."""
        usage: dict[tuple[str, str], float] = {}

        def used(workload: Workload) -> float:
            if not self._uses_afs(workload.cluster_queue):
                return 0.0
            key = (workload.namespace, workload.queue)
            if key not in usage:
                usage[key] = self.local_queue_usage(*key)
            return usage[key]

        return sorted(
            (w for w in workloads if not w.admitted and not w.finished and w.cluster_queue in self.state.cluster_queues),
            key=lambda w: (used(w), -w.priority, w.created, w.name),
        )

    # Admission fair sharing: the ledger lives in each LocalQueue's status, as Kueue persists it.
    def _uses_afs(self, cluster_queue: str | None) -> bool:
        row = self.state.cluster_queues.get(cluster_queue or "")
        return row is not None and (row.body["spec"].get("admissionScope") or {}).get("admissionMode") == AFS_MODE

    @staticmethod
    def _afs_status(local_queue: SimulatedObject) -> dict[str, Any]:
        return ((local_queue.body.get("status") or {}).get("fairSharing") or {}).get("admissionFairSharingStatus") or {}

    def _afs_elapsed(self, local_queue: SimulatedObject) -> float | None:
        """Seconds since the LocalQueue's use was last folded; None before its first fold."""
        last = self._afs_status(local_queue).get("lastUpdate")
        if not last:
            return None
        return max(self.state.now - datetime.fromisoformat(last.replace("Z", "+00:00")).timestamp(), 0.0)

    def local_queue_usage(self, namespace: str, name: str) -> float:
        """admissionfairsharing.CalculateUsage: the LocalQueue's consumed resources (each weighing
        1) over its fair-sharing weight; a missing LocalQueue counts none."""
        local_queue = self.state.local_queues.get((namespace, name))
        if local_queue is None:
            return 0.0
        consumed = sum(to_units(v) for v in (self._afs_status(local_queue).get("consumedResources") or {}).values())
        weight = to_units(((local_queue.body["spec"].get("fairSharing") or {}).get("weight")) or 1)
        return consumed / weight if weight > 0 else math.inf

    @staticmethod
    def _holds(workload: Workload) -> dict[str, float]:
        """What an admitted workload holds of its ClusterQueue's resources (its resourceUsage)."""
        return {r: v for r, v in workload.requests.items() if r in (workload.admitted_flavor or {})}

    def _afs_consume(self, workloads: list[Workload], namespace: str, name: str, penalty: dict[str, float]) -> None:
        """Folds the LocalQueue's admitted use into its consumed resources for the time since the
        last fold, adds `penalty` (an admission's entry penalty) and stamps now."""
        local_queue = self.state.local_queues.get((namespace, name))
        if local_queue is None:
            return
        status = self._afs_status(local_queue)
        alpha = afs_alpha(self._afs_elapsed(local_queue) or 0.0)
        held: dict[str, float] = defaultdict(float)
        for workload in workloads:
            if workload.admitted and not workload.finished and (workload.namespace, workload.queue) == (namespace, name):
                for resource, units in self._holds(workload).items():
                    held[resource] += units
        consumed = {r: to_units(v) * (1 - alpha) for r, v in (status.get("consumedResources") or {}).items()}
        for resource, units in held.items():
            consumed[resource] = consumed.get(resource, 0.0) + units * alpha
        for resource, units in penalty.items():
            consumed[resource] = consumed.get(resource, 0.0) + units
        local_queue.body.setdefault("status", {}).setdefault("fairSharing", {})["admissionFairSharingStatus"] = {
            "consumedResources": {r: _quantity(v) for r, v in sorted(consumed.items())}, "lastUpdate": now_iso(self.state.now)}
        self.state.save(local_queue, local_queue.body)

    def _afs_sample(self, workloads: list[Workload]) -> None:
        """The LocalQueue controller's sampling: every interval, each fair-shared LocalQueue folds its use."""
        for (namespace, name), local_queue in list(self.state.local_queues.items()):
            if not self._uses_afs(local_queue.body["spec"].get("clusterQueue")):
                continue
            elapsed = self._afs_elapsed(local_queue)
            if elapsed is None or elapsed >= AFS_SAMPLING_SECONDS:
                self._afs_consume(workloads, namespace, name, {})

    def pending_workloads(self, cluster_queue: str) -> list[dict[str, Any]]:
        """What Kueue's visibility API answers for one ClusterQueue."""
        pending = [w for w in self.pending_order(self.workloads()) if w.cluster_queue == cluster_queue]
        in_local: dict[tuple[str, str], int] = defaultdict(int)
        items = []
        for position, workload in enumerate(pending):
            meta = workload.row.body["metadata"]
            local = (workload.namespace, workload.queue)
            items.append({
                "metadata": {"name": meta["name"], "namespace": workload.namespace,
                             "creationTimestamp": meta["creationTimestamp"],
                             "ownerReferences": copy.deepcopy(meta.get("ownerReferences", []))},
                "priority": workload.priority, "localQueueName": workload.queue,
                "positionInClusterQueue": position, "positionInLocalQueue": in_local[local],
            })
            in_local[local] += 1
        return items

    def admit(self) -> None:
        workloads = self.workloads()
        self._afs_sample(workloads)
        for workload in workloads:
            if workload.admitted and not workload.finished and self.stop_policy(workload) == "HoldAndDrain":
                workload.admitted_flavor = None
                self._evict(workload, "LocalQueueStopped", "The LocalQueue is stopped")
        queues: dict[str, list[Workload]] = defaultdict(list)
        for workload in self.pending_order(workloads):
            if self.stop_policy(workload) != "None":
                # As Kueue's workload controller says of a workload in a stopped LocalQueue.
                self.set_condition(workload, "QuotaReserved", "False", "Inadmissible",
                                   f"LocalQueue {workload.queue} is inactive")
                self.state.save(workload.row, workload.row.body)
                continue
            queues[workload.cluster_queue or ""].append(workload)
        while (head := self._next(workloads, queues)) is not None:
            queues[head.cluster_queue or ""].remove(head)
            assignment, message = self._assign(workloads, head)
            if assignment is None:
                assignment = self._preempt_for(workloads, head)
            if assignment is None:
                self._set_pending(head, message)
                continue
            head.admitted_flavor = assignment
            self._set_admitted(head)
            if self._uses_afs(head.cluster_queue):
                # The entry penalty: its owner's queue goes behind the others' at once.
                penalty = {r: v * afs_alpha(AFS_SAMPLING_SECONDS) for r, v in self._holds(head).items()}
                self._afs_consume(workloads, head.namespace, head.queue, penalty)
                queues[head.cluster_queue or ""] = self.pending_order(queues[head.cluster_queue or ""])

    # Fair sharing, on as deploy/kueue/controller_manager_config.yaml configures Kueue.
    def _next(self, workloads: list[Workload], queues: dict[str, list[Workload]]) -> Workload | None:
        """The next workload to try: of each queue its first (priority, then age), and among the
        queues of a cohort tree the one a tournament picks, as Kueue's fair sharing iterator does:
        at each level the child whose share, with the workload admitted, is lowest (one that would
        not borrow first), then priority and age."""
        heads = {cq: waiting[0] for cq, waiting in sorted(queues.items()) if waiting}
        if not heads:
            return None
        first = next(iter(heads))
        root = self._root(("cq", first))
        if root[0] == "cq":
            return heads[first]
        tree = self._tree(workloads, first)
        return self._tournament(workloads, tree, root, heads) or heads[first]

    def _tournament(self, workloads: list[Workload], tree: Tree, node: Node, heads: dict[str, Workload]) -> Workload | None:
        best: tuple[tuple[Any, ...], Workload] | None = None
        for child in tree.children.get(node, []):
            candidate = heads.get(child[1]) if child[0] == "cq" else self._tournament(workloads, tree, child, heads)
            if candidate is None:
                continue
            assignment = self._would_assign(workloads, candidate)
            share, borrowed = self._tree(workloads + [replace(candidate, admitted_flavor=assignment)],
                                         candidate.cluster_queue or "").share(child)
            asked = {(flavor, resource) for resource, flavor in assignment.items()}
            key = (bool(borrowed & asked), share, -candidate.priority, candidate.created, candidate.name)
            if best is None or key < best[0]:
                best = (key, candidate)
        return best[1] if best else None

    def _would_assign(self, workloads: list[Workload], workload: Workload) -> dict[str, str]:
        """The flavors the workload would be admitted on: where it fits, else each group's first."""
        assignment, _ = self._assign(workloads, workload)
        if assignment is not None:
            return assignment
        would: dict[str, str] = {}
        for asked in self._asked(workload):
            flavors = self._flavor_order(workload.cluster_queue or "", next(iter(asked)), workload)
            if flavors:
                would.update(dict.fromkeys(asked, flavors[0]))
        return would

    def _asked(self, workload: Workload) -> list[dict[str, float]]:
        """The workload's GPU requests, split by its queue's resource groups: each group's are
        admitted together on one flavor of the group, as Kueue does."""
        row = self.state.cluster_queues.get(workload.cluster_queue or "")
        wanted = {resource: amount for resource, amount in workload.requests.items()
                  if resource not in ("cpu", "memory") and amount}  # Kueue checks GPU resources only (IgnoreUndeclared)
        groups = row.body["spec"].get("resourceGroups", []) if row is not None else []
        asked = [{r: a for r, a in wanted.items() if r in group.get("coveredResources", [])} for group in groups]
        return [group for group in asked if group]

    def _uncovered(self, workload: Workload) -> str:
        covered = {resource for group in self._asked(workload) for resource in group}
        return next((resource for resource, amount in workload.requests.items()
                     if resource not in ("cpu", "memory") and amount and resource not in covered), "")

    def _fits_all(self, workloads: list[Workload], cq: str, flavor: str, asked: dict[str, float]) -> list[tuple[str, float]]:
        """What of `asked` does not fit on the flavor: (resource, missing) each."""
        short = []
        for resource, amount in asked.items():
            fits, missing = self._fits(workloads, cq, flavor, resource, amount)
            if not fits:
                short.append((resource, missing))
        return short

    def _assign(self, workloads: list[Workload], workload: Workload) -> tuple[dict[str, str] | None, str]:
        if workload.unmapped:
            return None, f"DeviceClass {workload.unmapped} is not mapped in DRA configuration for podset main"
        if resource := self._uncovered(workload):
            return None, f"couldn't assign flavors to pod set main: resource {resource} unavailable in ClusterQueue"
        assignment: dict[str, str] = {}
        cq = workload.cluster_queue or ""
        for asked in self._asked(workload):
            first = next(iter(asked))
            flavors = self._flavor_order(cq, first, workload)
            if not flavors:
                return None, ("couldn't assign flavors to pod set main: no flavor of resource "
                              f"{first} matches the pods' node selector or affinity")
            problems = []
            for flavor in flavors:
                short = self._fits_all(workloads, cq, flavor, asked)
                if not short:
                    assignment.update(dict.fromkeys(asked, flavor))
                    break
                problems += [f"insufficient unused quota for {resource} in flavor {flavor}, {units_text(missing)} more needed"
                             for resource, missing in short]
            else:
                return None, "couldn't assign flavors to pod set main: " + ", ".join(problems)
        return assignment, ""

    def _preempt_for(self, workloads: list[Workload], workload: Workload) -> dict[str, str] | None:
        """Makes room by preemption where Kueue's fair sharing would: inside the team by lower
        priority, and in the cohort tree from queues that borrow, reclaiming freely while the team
        stays within its guarantee and, beyond it, only where the team's share stays no higher
        than the other's (then only lower than the other's was)."""
        cq = workload.cluster_queue or ""
        for asked in self._asked(workload):
            for flavor in self._flavor_order(cq, next(iter(asked)), workload):
                if any(self._quota(cq, flavor, resource) is None for resource in asked):
                    continue
                victims = self._fair_victims(workloads, workload, flavor, asked)
                if victims is None:
                    continue
                uid = workload.row.body["metadata"]["uid"]
                for victim, reason in victims:
                    self._evict(victim, reason, f"Preempted to accommodate a workload (UID: {uid}) due to {PREEMPTED[reason]}")
                return self._assign(workloads, workload)[0]
        return None

    def _fair_victims(self, workloads: list[Workload], workload: Workload, flavor: str,
                      asked: dict[str, float]) -> list[tuple[Workload, str]] | None:
        """The workloads whose preemption lets `asked` fit on the flavor, each with its reason, or
        None (and nothing changed) when none would, in the order _givers says."""
        cq = workload.cluster_queue or ""
        incoming = replace(workload, admitted_flavor=dict.fromkeys(asked, flavor))
        contested = {(flavor, resource) for resource in asked}
        queues = set(self._cohort(cq))
        candidates = [other for other in workloads
                      if other.admitted and not other.finished and other.cluster_queue in queues
                      and any((other.admitted_flavor or {}).get(resource) == flavor for resource in asked)
                      and (other.cluster_queue != cq or other.priority < workload.priority)]
        chosen: list[tuple[Workload, str]] = []
        retry: list[Workload] = []

        def take(victim: Workload, reason: str) -> bool:
            chosen.append((victim, reason))
            victim.admitted_flavor = None
            return not self._fits_all(workloads, cq, flavor, asked)

        def targets(pool: list[Workload]) -> list[tuple[Share, str, list[Workload]]]:
            return self._givers(self._tree(workloads + [incoming], cq), pool, cq=cq, contested=contested)

        while found := targets([c for c in candidates if c not in retry]):
            _, target, pending = found[0]
            within = all(self.usage(workloads, cq, flavor, resource) + amount <= (self._quota(cq, flavor, resource) or (0,))[0]
                         for resource, amount in asked.items())
            if target == cq or within:
                if take(pending[0], "InClusterQueue" if target == cq else "InCohortReclamation"):
                    return chosen
                continue
            mine = self._tree(workloads + [incoming], cq).share(("cq", cq))[0]
            for other in pending:
                saved, other.admitted_flavor = other.admitted_flavor, None
                after = self._tree(workloads + [incoming], cq).share(("cq", target))[0]
                other.admitted_flavor = saved
                if mine <= after:  # LessThanOrEqualToFinalShare
                    if take(other, "InCohortFairSharing"):
                        return chosen
                    break
                retry.append(other)
        # LessThanInitialShare, once per queue, for what the first strategy passed over.
        for _, target, pending in targets(retry):
            tree = self._tree(workloads + [incoming], cq)
            if tree.share(("cq", cq))[0] < tree.share(("cq", target))[0] and take(pending[0], "InCohortFairSharing"):
                return chosen
        for victim, _ in chosen:
            victim.admitted_flavor = self._restore(victim)
        return None

    @staticmethod
    def _givers(tree: Tree, pool: list[Workload], *, cq: str,
                contested: set[FlavorResource]) -> list[tuple[Share, str, list[Workload]]]:
        """The queues with candidates of `pool` still admitted that may give (borrowing what is
        contested, or the preemptor's own), highest share first; each one's lowest priority, then
        newest, workload first."""
        by_queue: dict[str, list[Workload]] = defaultdict(list)
        for other in pool:
            if other.admitted_flavor is not None:
                by_queue[other.cluster_queue or ""].append(other)
        found = []
        for name, pending in by_queue.items():
            share, borrowed = tree.share(("cq", name))
            if name == cq or borrowed & contested:
                newest_first = sorted(pending, key=lambda w: w.created, reverse=True)
                found.append((share, name, sorted(newest_first, key=lambda w: w.priority)))
        return sorted(found, key=lambda t: (t[0], t[1]), reverse=True)

    @staticmethod
    def _restore(workload: Workload) -> dict[str, str] | None:
        admission = workload.row.body.get("status", {}).get("admission")
        return dict(admission["podSetAssignments"][0]["flavors"]) if admission else None

    def set_condition(self, workload: Workload, type_: str, status: str, reason: str, message: str) -> None:
        conditions = [c for c in workload.row.body.setdefault("status", {}).setdefault("conditions", []) if c["type"] != type_]
        previous = next((c for c in workload.row.body["status"]["conditions"] if c["type"] == type_), None)
        stamp = previous["lastTransitionTime"] if previous and previous["status"] == status else now_iso(self.state.now)
        conditions.append({"type": type_, "status": status, "reason": reason, "message": message,
                           "lastTransitionTime": stamp, "observedGeneration": 1})
        workload.row.body["status"]["conditions"] = sorted(conditions, key=lambda c: c["type"])

    def finish(self, workload: Workload, verdict: str, message: str) -> None:
        """The Job it admitted is done: Kueue marks its Workload Finished and gives its quota back."""
        self.set_condition(workload, "Finished", "True", verdict, message)
        self.state.save(workload.row, workload.row.body)

    def _set_pending(self, workload: Workload, message: str) -> None:
        self.set_condition(workload, "QuotaReserved", "False", "Pending", message)
        self.state.save(workload.row, workload.row.body)

    def _set_admitted(self, workload: Workload) -> None:
        body, assigned = workload.row.body, workload.admitted_flavor or {}
        body.setdefault("status", {})["admission"] = {
            "clusterQueue": workload.cluster_queue,
            "podSetAssignments": [{
                "name": "main", "count": workload.pods, "flavors": dict(assigned),
                "resourceUsage": {r: units_text(v) for r, v in workload.requests.items() if r in assigned},
            }],
        }
        reserved = f"Quota reserved in ClusterQueue {workload.cluster_queue}"
        self.set_condition(workload, "QuotaReserved", "True", "QuotaReserved", reserved)
        self.set_condition(workload, "Admitted", "True", "Admitted", "The workload is admitted")
        body["status"]["conditions"] = [c for c in body["status"]["conditions"] if c["type"] not in ("Evicted", "Preempted")]
        self.state.save(workload.row, body)
        if workload.job is not None:
            job = workload.job.body
            if job["kind"] == "Job":
                job["spec"]["suspend"] = False
            pod_spec = job["spec"]["template"]["spec"]
            for flavor_name in set(assigned.values()):
                flavor = self.state.flavors.get(flavor_name)
                if flavor is None:
                    continue
                pod_spec.setdefault("nodeSelector", {}).update(flavor.body["spec"].get("nodeLabels", {}))
                for toleration in flavor.body["spec"].get("tolerations", []):
                    if toleration not in pod_spec.setdefault("tolerations", []):
                        pod_spec["tolerations"].append(toleration)
            job.setdefault("status", {}).setdefault("startTime", now_iso(self.state.now))
            self.state.save(workload.job, job)

    def _evict(self, workload: Workload, reason: str, message: str) -> None:
        body = workload.row.body
        body.setdefault("status", {}).pop("admission", None)
        self.set_condition(workload, "Evicted", "True", "Preempted", message)
        self.set_condition(workload, "Preempted", "True", reason, message)
        self.set_condition(workload, "Admitted", "False", "NoReservation", "The workload has no reservation")
        self.set_condition(workload, "QuotaReserved", "False", "Pending", "Preempted; waiting for quota to be admitted again")
        self.state.save(workload.row, body)
        if workload.job is not None:
            job = workload.job.body
            if job["kind"] == "Job":
                job["spec"]["suspend"] = True
                self.state.save(workload.job, job)
            # Its pods go (a Job's, a server's alike), to be made again once it is admitted again.
            for pod in self.state.pods_of(workload.namespace, job["metadata"]["name"]):
                if pod.body.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                    self.state.remove(pod)
                    self.state.pods.remove(pod)

    def write_queue_statuses(self, workloads: list[Workload]) -> None:
        live = [w for w in workloads if not w.finished]
        for name, row in self.state.cluster_queues.items():
            mine = [w for w in live if w.cluster_queue == name]
            usage = []
            for group in row.body["spec"].get("resourceGroups", []):
                for fq in group["flavors"]:
                    resources = []
                    for r in fq["resources"]:
                        total = self.usage(live, name, fq["name"], r["name"])
                        borrowed = max(total - to_units(r["nominalQuota"]), 0)
                        resources.append({"name": r["name"], "total": units_text(total), "borrowed": units_text(borrowed)})
                    usage.append({"name": fq["name"], "resources": resources})
            admitted = sum(1 for w in mine if w.admitted)
            status = {
                "flavorsUsage": usage, "flavorsReservation": usage,
                "admittedWorkloads": admitted, "reservingWorkloads": admitted,
                "pendingWorkloads": sum(1 for w in mine if not w.admitted),
                "conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit new workloads",
                                "lastTransitionTime": row.body["metadata"]["creationTimestamp"]}],
            }
            if row.body.get("status") != status:
                row.body["status"] = status
                self.state.save(row, row.body)


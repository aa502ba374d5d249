"""What the simulated controllers share: one consistent read of the cluster, the writes they
make through the store, and the quantities and labels they agree on."""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from portal.kube.base import KubeError, ObjectRef, quantity, taint_tolerated
from portal.kube.simulated.models import SimulatedObject
from portal.kube.simulated.store import Store

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_NAME_LABEL = "kueue.x-k8s.io/job-name"  # on a Workload: the Job, Deployment or StatefulSet it admits
RUN_SECONDS_ANNOTATION = "gpu-portal.io/simulated-run-seconds"
EXIT_CODE_ANNOTATION = "gpu-portal.io/simulated-exit-code"
DEFAULT_RUN_SECONDS = 30.0
# The simulated controllers' own label on the pods they make: which Job, Deployment or StatefulSet owns it.
OWNER_LABEL = "simulated.gpu-portal.io/owner"
# Kinds Kueue queues: a Job is suspended until admitted; servers' pods wait, ungated, until then.
QUEUED_KINDS = {"Job": "batch/v1", "Deployment": "apps/v1", "StatefulSet": "apps/v1"}
CONTROLLED_KINDS = (
    "Cohort", "ClusterQueue", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass", *QUEUED_KINDS, "Workload", "Pod", "Node",
    "RuntimeClass", "Queue", "PodGroup", "PriorityClass",
)


def to_units(value: Any) -> float:
    parsed = quantity(value)
    if parsed is None:
        raise KubeError(f"quantities must match the regular expression of Kubernetes quantities, not {value!r}", status=422)
    return float(parsed)


def units_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def pod_requests(pod: dict[str, Any]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for container in pod["spec"].get("containers", []):
        res = container.get("resources", {})
        for resource, value in (res.get("requests") or res.get("limits") or {}).items():
            totals[resource] += to_units(value)
    return totals


def ref_of_row(row: SimulatedObject) -> ObjectRef:
    return ObjectRef(row.api_version, row.kind, row.name, row.namespace or None)


@dataclass
class ClusterState:
    """One consistent read of the objects the controllers need, and the writes they make."""

    store: Store
    now: float
    cluster_queues: dict[str, SimulatedObject]
    local_queues: dict[tuple[str, str], SimulatedObject]
    flavors: dict[str, SimulatedObject]
    priorities: dict[str, int]
    jobs: dict[tuple[str, str], SimulatedObject]  # (namespace, name) of Jobs, Deployments and StatefulSets
    workload_rows: list[SimulatedObject]
    pods: list[SimulatedObject]
    nodes: list[SimulatedObject]
    runtime_classes: frozenset[str] = frozenset()
    cohorts: dict[str, SimulatedObject] = field(default_factory=dict)  # Kueue's Cohort objects by name
    # Volcano's: its Queues by name, the PodGroups, and the pods' PriorityClasses' values.
    volcano_queues: dict[str, SimulatedObject] = field(default_factory=dict)
    pod_groups: list[SimulatedObject] = field(default_factory=list)
    pod_priorities: dict[str, int] = field(default_factory=dict)

    @classmethod
    def read(cls, store: Store) -> ClusterState:
        rows = store.snapshot(CONTROLLED_KINDS)
        return cls(
            store=store,
            now=store.now(),
            cluster_queues={r.name: r for r in rows["ClusterQueue"]},
            local_queues={(r.namespace, r.name): r for r in rows["LocalQueue"]},
            flavors={r.name: r for r in rows["ResourceFlavor"]},
            priorities={r.name: int(r.body.get("value", 0)) for r in rows["WorkloadPriorityClass"]},
            jobs={(r.namespace, r.name): r for kind in QUEUED_KINDS for r in rows[kind]},
            workload_rows=rows["Workload"],
            pods=rows["Pod"],
            nodes=rows["Node"],
            runtime_classes=frozenset(r.name for r in rows["RuntimeClass"]),
            cohorts={r.name: r for r in rows["Cohort"]},
            volcano_queues={r.name: r for r in rows["Queue"]},
            pod_groups=rows["PodGroup"],
            pod_priorities={r.name: int(r.body.get("value", 0)) for r in rows["PriorityClass"]},
        )

    def pods_of(self, namespace: str, owner: str) -> list[SimulatedObject]:
        """The pods the simulated controllers made for one Job, Deployment or StatefulSet."""
        return [
            pod for pod in self.pods
            if pod.namespace == namespace and pod.body["metadata"].get("labels", {}).get(OWNER_LABEL) == owner
        ]

    def create(self, ref: ObjectRef, body: dict[str, Any]) -> SimulatedObject:
        """Stores a new object the controllers made and returns its row."""
        self.store.write(ref, body, None)
        row = self.store.get(ref)
        assert row is not None, f"{ref} was written but cannot be read back"
        return row

    def save(self, row: SimulatedObject, body: dict[str, Any]) -> None:
        """Writes the controllers' change unless the stored object already says the same."""
        ref = ObjectRef(body["apiVersion"], body["kind"], body["metadata"]["name"], row.namespace or None)
        fresh = self.store.get(ref)
        if fresh is not None and fresh.body != body:
            self.store.write(ref, copy.deepcopy(body), fresh)

    def remove(self, row: SimulatedObject) -> None:
        self.store.remove(row)


def runtime_class_refusal(pod: dict[str, Any], runtime_classes: Collection[str]) -> str | None:
    """The API server's RuntimeClass admission: a new pod naming a RuntimeClass that does not
    exist is forbidden (403), in the API server's words; None when it may be created."""
    name = (pod.get("spec") or {}).get("runtimeClassName")
    if name and name not in runtime_classes:
        return f'pods "{pod["metadata"].get("name", "")}" is forbidden: pod rejected: RuntimeClass "{name}" not found'
    return None


def node_tolerated(pod_spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether the pod tolerates every taint that keeps pods off the node (NoSchedule, NoExecute)."""
    tolerations = pod_spec.get("tolerations") or []
    return all(taint_tolerated(taint, tolerations) for taint in (node.get("spec") or {}).get("taints") or []
               if taint.get("effect") in ("NoSchedule", "NoExecute"))


def node_selected(pod_spec: dict[str, Any], node_labels: dict[str, str], keys: set[str] | None = None) -> bool:
    """Whether a node with these labels would satisfy the pod's node selector and required node
    affinity, as the scheduler judges a node; with `keys`, considering only those label keys (the
    ones flavors are told apart by), as Kueue's flavor assigner judges a flavor: a term left with
    no expression on those keys then accepts every flavor. Terms are alternatives; the expressions
    within one all hold."""
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if (keys is None or key in keys) and node_labels.get(key) != value:
            return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [[e for e in term.get("matchExpressions") or [] if keys is None or e.get("key") in keys]
             for term in required.get("nodeSelectorTerms") or []]
    if not terms or (keys is not None and any(not term for term in terms)):
        return True
    return any(term and all(_holds(expression, node_labels) for expression in term) for term in terms)


def _holds(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator, values = expression["key"], expression.get("operator"), expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return True

"""The simulated cluster: the embedded default for the demo and for fast tests.

It keeps the same object dicts a real API server would, in the database, and plays just enough
of three controllers to make the portal's story true without a cluster:

- Kueue: a Job labelled for a LocalQueue gets a Workload; workloads are admitted by their
  ClusterQueue's quota per flavor, may borrow what other queues of the cohort leave idle, and
  are preempted when a lender reclaims its quota or a higher priority needs room in the team;
- the scheduler: admitted pods are placed on Nodes of the flavor (labels and free units);
- the kubelet: pods run for a while (`gpu-portal.io/simulated-run-seconds`, default 30), then
  succeed, or fail when the Job asks for `gpu-portal.io/simulated-exit-code`.

It is a stand-in kept honest by the contract suite (tests/contract), which runs the same
scenarios here and on a real control plane. Time advances only when `tick()` runs.
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import Max, Min

from portal.kube.base import FIELD_MANAGER, KubeError, ObjectRef, WatchEvent, kind_info, quantity, ref_of
from portal.models import SimulatedEvent, SimulatedObject

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
RUN_SECONDS_ANNOTATION = "gpu-portal.io/simulated-run-seconds"
# The simulated controllers' own label on the pods they make: which Job, Deployment or StatefulSet owns it.
OWNER_LABEL = "simulated.gpu-portal.io/owner"
# Kinds Kueue queues: a Job is suspended until admitted; servers' pods wait, ungated, until then.
QUEUED_KINDS = {"Job": "batch/v1", "Deployment": "apps/v1", "StatefulSet": "apps/v1"}
EXIT_CODE_ANNOTATION = "gpu-portal.io/simulated-exit-code"
DEFAULT_RUN_SECONDS = 30.0
EVENTS_KEPT = 5000
DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
# Fields an apply by the portal owns wholesale; metadata is merged, status belongs to controllers.
SERVER_OWNED = {"status"}


def _now_iso(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _quantity(value: Any) -> float:
    parsed = quantity(value)
    if parsed is None:
        raise KubeError(f"quantities must match the regular expression of Kubernetes quantities, not {value!r}", status=422)
    return float(parsed)


def _units(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class SimulatedGateway:
    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.offset = 0.0
        self.calls = 0

    def now(self) -> float:
        return self.clock() + self.offset

    def advance(self, seconds: float) -> None:
        """Moves the simulated clock forward (tests), then lets the controllers catch up."""
        self.offset += seconds
        self.tick()

    # --- The store ------------------------------------------------------------------------------

    def _row(self, ref: ObjectRef, *, lock: bool = False) -> SimulatedObject | None:
        rows = SimulatedObject.objects.filter(
            api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace or "", name=ref.name
        )
        return (rows.select_for_update() if lock else rows).first()

    def _record(self, type_: str, body: dict[str, Any]) -> int:
        event = SimulatedEvent.objects.create(
            api_version=body["apiVersion"], kind=body["kind"], namespace=body["metadata"].get("namespace", ""),
            type=type_, body=body,
        )
        return event.id

    def _write(self, ref: ObjectRef, body: dict[str, Any], row: SimulatedObject | None) -> dict[str, Any]:
        """Stores the body as the new state of the object and logs the change."""
        if row is not None and row.body == body:
            return body
        if row is None:
            body["metadata"].setdefault("uid", str(uuid.uuid4()))
            body["metadata"].setdefault("creationTimestamp", _now_iso(self.now()))
            row = SimulatedObject(api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace or "", name=ref.name)
        body["metadata"]["generation"] = body["metadata"].get("generation", 0) + (
            1 if row.pk is None or row.body.get("spec") != body.get("spec") else 0
        )
        event_id = self._record("ADDED" if row.pk is None else "MODIFIED", body)
        body["metadata"]["resourceVersion"] = str(event_id)
        row.body, row.resource_version = body, event_id
        row.save()
        return body

    def _remove(self, row: SimulatedObject) -> None:
        self._record("DELETED", row.body)
        row.delete()

    def _validate(self, ref: ObjectRef, obj: dict[str, Any]) -> None:
        if not DNS_NAME.match(ref.name) or len(ref.name) > 253:
            raise KubeError(f"rejected as invalid: metadata.name: Invalid value: {ref.name!r}: a lowercase RFC 1123 subdomain "
                            "must consist of lower case alphanumeric characters, '-' or '.'", ref=ref, status=422, reason="Invalid")
        if ref.info.namespaced:
            if not ref.namespace:
                raise KubeError("rejected as invalid: metadata.namespace: Required value", ref=ref, status=422, reason="Invalid")
            if self._row(ObjectRef("v1", "Namespace", ref.namespace)) is None:
                raise KubeError(f'namespaces "{ref.namespace}" not found', ref=ref, status=404, reason="NotFound")

    # --- The gateway ------------------------------------------------------------------------------

    def apply(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = True) -> dict[str, Any]:
        self.calls += 1
        ref = ref_of(obj)
        self._validate(ref, obj)
        with transaction.atomic():
            row = self._row(ref, lock=True)
            if row is None:
                body = copy.deepcopy(obj)
                body.setdefault("metadata", {})
            else:
                body = copy.deepcopy(row.body)
                meta = obj.get("metadata", {})
                for key in ("labels", "annotations"):
                    if key in meta:
                        body["metadata"][key] = {**body["metadata"].get(key, {}), **meta[key]}
                for key, value in obj.items():
                    if key not in ("metadata", "apiVersion", "kind") and key not in SERVER_OWNED:
                        body[key] = copy.deepcopy(value)
            if ref.info.namespaced:
                body["metadata"]["namespace"] = ref.namespace
            body = self._defaults(body)
            stored = self._write(ref, body, row)
            self._reconcile_controllers()
        return copy.deepcopy(stored)

    def delete(self, ref: ObjectRef) -> None:
        self.calls += 1
        with transaction.atomic():
            row = self._row(ref, lock=True)
            if row is None:
                return
            if ref.kind == "Namespace":
                for child in SimulatedObject.objects.filter(namespace=ref.name).exclude(kind="Namespace"):
                    self._remove(child)
            if ref.kind in QUEUED_KINDS:
                for pod in self._pods_of_job(ref.namespace or "", ref.name):
                    self._remove(pod)
                for workload in self._workloads_of(ref.namespace or "", ref.name):
                    self._remove(workload)
            self._remove(row)
            self._reconcile_controllers()

    def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        self.calls += 1
        row = self._row(ref)
        return copy.deepcopy(row.body) if row else None

    def list(
        self, api_version: str, kind: str, *, namespace: str | None = None, labels: dict[str, str] | None = None,
        fields: dict[str, str] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        self.calls += 1
        kind_info(api_version, kind)
        rows = SimulatedObject.objects.filter(api_version=api_version, kind=kind)
        if namespace:
            rows = rows.filter(namespace=namespace)
        items = [row.body for row in rows.order_by("namespace", "name")]
        if labels:
            items = [i for i in items if all(i["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())]
        for path, wanted in (fields or {}).items():
            # As the API server does: follow the dotted path, compare as text, a missing field is "".
            def value_at(item: dict[str, Any], path: str = path) -> str:
                value: Any = item
                for key in path.split("."):
                    value = value.get(key) if isinstance(value, dict) else None
                return "" if value is None else str(value)

            items = [i for i in items if value_at(i) == wanted]
        latest = SimulatedEvent.objects.aggregate(latest=Max("id"))["latest"] or 0
        return items, str(latest)

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        resource_version: str | None = None,
        timeout_seconds: int = 60,
    ) -> Iterator[WatchEvent]:
        deadline = time.monotonic() + timeout_seconds
        since = int(resource_version) if resource_version else None
        while True:
            oldest = SimulatedEvent.objects.aggregate(oldest=Min("id"))["oldest"]
            if since is None or (oldest is not None and since < oldest - 1):
                items, latest = self.list(api_version, kind, namespace=namespace, labels=labels)
                yield WatchEvent("RELISTED", {"items": items})
                since = int(latest)
            self.calls += 1
            events = SimulatedEvent.objects.filter(id__gt=since, api_version=api_version, kind=kind).order_by("id")
            if namespace:
                events = events.filter(namespace=namespace)
            for event in events:
                since = event.id
                body = event.body
                if labels and not all(body["metadata"].get("labels", {}).get(k) == v for k, v in labels.items()):
                    continue
                yield WatchEvent(event.type, body)
            if time.monotonic() >= deadline:
                return
            time.sleep(0.2)

    def pod_logs(self, *, namespace: str, name: str, tail_lines: int = 100) -> str:
        self.calls += 1
        pod = self._row(ObjectRef("v1", "Pod", name, namespace))
        if pod is None:
            return ""
        phase = pod.body.get("status", {}).get("phase", "Pending")
        lines = [f"[simulated] pod {name} scheduled on {pod.body['spec'].get('nodeName', '-')}", f"[simulated] phase {phase}"]
        return "\n".join(lines[-tail_lines:]) + "\n"

    # --- Controllers ------------------------------------------------------------------------------

    def tick(self) -> None:
        with transaction.atomic():
            self._reconcile_controllers()
            self._trim_events()

    def _trim_events(self) -> None:
        latest = SimulatedEvent.objects.aggregate(latest=Max("id"))["latest"] or 0
        if latest > EVENTS_KEPT:
            SimulatedEvent.objects.filter(id__lte=latest - EVENTS_KEPT).delete()

    def _defaults(self, body: dict[str, Any]) -> dict[str, Any]:
        if body["kind"] == "Namespace":
            body["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = body["metadata"]["name"]
            body.setdefault("status", {"phase": "Active"})
        if body["kind"] == "Job":
            body["spec"].setdefault("parallelism", 1)
            body["spec"].setdefault("completions", body["spec"]["parallelism"])
            body["spec"].setdefault("suspend", False)
        if body["kind"] == "ResourceQuota":
            hard = body["spec"].get("hard", {})
            body["status"] = {"hard": dict(hard), "used": {key: "0" for key in hard}}
        return body

    def sync_nodes(self, nodes: list[dict[str, Any]]) -> None:
        """Makes the simulated nodes exactly these (name, labels, allocatable): the catalog's."""
        with transaction.atomic():
            wanted = {node["name"]: node for node in nodes}
            for row in self._objects("Node"):
                if row.name not in wanted:
                    self._remove(row)
            for name, node in wanted.items():
                ref = ObjectRef("v1", "Node", name)
                row = self._row(ref, lock=True)
                body = copy.deepcopy(row.body) if row else {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
                body["metadata"]["labels"] = {"kubernetes.io/hostname": name, "type": "simulated", **node["labels"]}
                body["spec"] = {"taints": list(node.get("taints", []))} if node.get("taints") else {}
                allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110", **{k: str(v) for k, v in node["allocatable"].items()}}
                body["status"] = {"allocatable": allocatable, "capacity": dict(allocatable),
                                  "conditions": [{"type": "Ready", "status": "True", "reason": "SimulatedKubelet"}]}
                self._write(ref, body, row)
            self._reconcile_controllers()

    def _objects(self, kind: str, namespace: str | None = None) -> list[SimulatedObject]:
        rows = SimulatedObject.objects.filter(kind=kind)
        if namespace is not None:
            rows = rows.filter(namespace=namespace)
        return list(rows.order_by("id"))

    def _pods_of_job(self, namespace: str, job: str) -> list[SimulatedObject]:
        return [p for p in self._objects("Pod", namespace) if p.body["metadata"].get("labels", {}).get(OWNER_LABEL) == job]

    def _workloads_of(self, namespace: str, job: str) -> list[SimulatedObject]:
        return [w for w in self._objects("Workload", namespace) if w.body["metadata"].get("labels", {}).get("kueue.x-k8s.io/job-name") == job]

    def _reconcile_controllers(self) -> None:
        state = _ClusterState.read(self)
        state.create_workloads()
        state.finish_pods()
        state.admit()
        state.schedule_pods()
        state.write_statuses()


@dataclass
class _Workload:
    row: SimulatedObject
    job: SimulatedObject | None
    queue: str
    cluster_queue: str | None
    priority: int
    created: str
    requests: dict[str, float]  # resource name -> units for all pods
    pods: int
    admitted_flavor: dict[str, str] = field(default_factory=dict)  # resource -> flavor

    @property
    def name(self) -> str:
        return self.row.body["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.row.namespace

    @property
    def admitted(self) -> bool:
        return bool(self.admitted_flavor)

    @property
    def finished(self) -> bool:
        return any(c["type"] == "Finished" and c["status"] == "True" for c in self.row.body.get("status", {}).get("conditions", []))


class _ClusterState:
    """One consistent read of the objects the controllers need, and the writes they make."""

    def __init__(self, gateway: SimulatedGateway) -> None:
        self.g = gateway
        self.now = gateway.now()

    @classmethod
    def read(cls, gateway: SimulatedGateway) -> _ClusterState:
        state = cls(gateway)
        state.cluster_queues = {r.name: r for r in gateway._objects("ClusterQueue")}
        state.local_queues = {(r.namespace, r.name): r for r in gateway._objects("LocalQueue")}
        state.flavors = {r.name: r for r in gateway._objects("ResourceFlavor")}
        state.priorities = {r.name: int(r.body.get("value", 0)) for r in gateway._objects("WorkloadPriorityClass")}
        state.jobs = {(r.namespace, r.name): r for kind in QUEUED_KINDS for r in gateway._objects(kind)}
        state.workload_rows = gateway._objects("Workload")
        state.pods = gateway._objects("Pod")
        state.nodes = gateway._objects("Node")
        return state

    # Kueue: one Workload per queued Job.
    def create_workloads(self) -> None:
        have = {(w.namespace, w.body["metadata"].get("labels", {}).get("kueue.x-k8s.io/job-name")) for w in self.workload_rows}
        for (namespace, name), job in self.jobs.items():
            labels = job.body["metadata"].get("labels", {})
            if QUEUE_LABEL not in labels or (namespace, name) in have:
                continue
            template = job.body["spec"]["template"]["spec"]
            per_pod: dict[str, float] = defaultdict(float)
            for container in template.get("containers", []):
                for resource, value in (container.get("resources", {}).get("requests") or container.get("resources", {}).get("limits") or {}).items():
                    per_pod[resource] += _quantity(value)
            kind = job.body["kind"]
            count = int(job.body["spec"].get("parallelism" if kind == "Job" else "replicas", 1))
            digest = hashlib.sha256(job.body["metadata"]["uid"].encode()).hexdigest()[:5]
            body = {
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {
                    "name": f"job-{name}-{digest}"[:253], "namespace": namespace,
                    "labels": {"kueue.x-k8s.io/job-name": name, "kueue.x-k8s.io/job-uid": job.body["metadata"]["uid"]},
                    "ownerReferences": [{"apiVersion": QUEUED_KINDS[kind], "kind": kind, "name": name, "uid": job.body["metadata"]["uid"]}],
                },
                "spec": {
                    "queueName": labels[QUEUE_LABEL],
                    "priorityClassName": labels.get(PRIORITY_LABEL, ""),
                    "priority": self.priorities.get(labels.get(PRIORITY_LABEL, ""), 0),
                    "podSets": [{"name": "main", "count": count, "template": job.body["spec"]["template"]}],
                },
                "status": {"conditions": []},
            }
            ref = ObjectRef("kueue.x-k8s.io/v1beta2", "Workload", body["metadata"]["name"], namespace)
            self.g._write(ref, body, None)
            self.workload_rows.append(self.g._row(ref))  # type: ignore[arg-type]
            # Kueue suspends what it has not admitted yet.
            if kind == "Job" and not job.body["spec"].get("suspend"):
                job.body["spec"]["suspend"] = True
                self.g._write(ObjectRef("batch/v1", "Job", name, namespace), job.body, job)

    def _workloads(self) -> list[_Workload]:
        result = []
        for row in self.workload_rows:
            spec = row.body["spec"]
            labels = row.body["metadata"].get("labels", {})
            job = self.jobs.get((row.namespace, labels.get("kueue.x-k8s.io/job-name")))
            local_queue = self.local_queues.get((row.namespace, spec.get("queueName", "")))
            requests: dict[str, float] = defaultdict(float)
            pod_set = spec["podSets"][0]
            for container in pod_set["template"]["spec"].get("containers", []):
                res = container.get("resources", {})
                for resource, value in (res.get("requests") or res.get("limits") or {}).items():
                    requests[resource] += _quantity(value) * pod_set["count"]
            admission = row.body.get("status", {}).get("admission")
            flavors = admission["podSetAssignments"][0]["flavors"] if admission else {}
            result.append(_Workload(
                row=row, job=job, queue=spec.get("queueName", ""),
                cluster_queue=local_queue.body["spec"]["clusterQueue"] if local_queue else None,
                priority=int(spec.get("priority", 0)), created=row.body["metadata"]["creationTimestamp"],
                requests=dict(requests), pods=pod_set["count"], admitted_flavor=dict(flavors),
            ))
        return result

    # Quota arithmetic, per (flavor, resource).
    def _quota(self, cq: str, flavor: str, resource: str) -> tuple[float, float | None, float | None] | None:
        row = self.cluster_queues.get(cq)
        if row is None:
            return None
        for group in row.body["spec"].get("resourceGroups", []):
            if resource not in group.get("coveredResources", []):
                continue
            for fq in group["flavors"]:
                if fq["name"] != flavor:
                    continue
                for r in fq["resources"]:
                    if r["name"] == resource:
                        borrow = _quantity(r["borrowingLimit"]) if "borrowingLimit" in r else None
                        lend = _quantity(r["lendingLimit"]) if "lendingLimit" in r else None
                        return _quantity(r["nominalQuota"]), borrow, lend
        return None

    def _flavor_order(self, cq: str, resource: str) -> list[str]:
        row = self.cluster_queues.get(cq)
        if row is None:
            return []
        for group in row.body["spec"].get("resourceGroups", []):
            if resource in group.get("coveredResources", []):
                return [fq["name"] for fq in group["flavors"]]
        return []

    def _cohort(self, cq: str) -> list[str]:
        cohort = self.cluster_queues[cq].body["spec"].get("cohortName")
        if not cohort:
            return [cq]
        return [name for name, row in self.cluster_queues.items() if row.body["spec"].get("cohortName") == cohort]

    def _usage(self, workloads: list[_Workload], cq: str, flavor: str, resource: str) -> float:
        return sum(w.requests.get(resource, 0) for w in workloads
                   if w.admitted and w.cluster_queue == cq and w.admitted_flavor.get(resource) == flavor)

    def _fits(self, workloads: list[_Workload], cq: str, flavor: str, resource: str, amount: float) -> tuple[bool, float]:
        """Whether `amount` more fits, and how much is missing when it does not."""
        quota = self._quota(cq, flavor, resource)
        if quota is None:
            return False, amount
        nominal, borrowing_limit, _ = quota
        used = self._usage(workloads, cq, flavor, resource)
        own_ceiling = nominal + (borrowing_limit if borrowing_limit is not None else math.inf)
        missing = max(used + amount - own_ceiling, 0)
        # The cohort lends what its queues do not use of their lendable quota.
        pool, borrowed = 0.0, 0.0
        for member in self._cohort(cq):
            member_quota = self._quota(member, flavor, resource)
            if member_quota is None:
                continue
            m_nominal, _, m_lend = member_quota
            lendable = m_nominal if m_lend is None else min(m_lend, m_nominal)
            guaranteed = m_nominal - lendable
            m_used = self._usage(workloads, member, flavor, resource) + (amount if member == cq else 0)
            pool += lendable
            borrowed += max(m_used - guaranteed, 0)
        missing = max(missing, borrowed - pool)
        return missing <= 0, missing

    def admit(self) -> None:
        workloads = self._workloads()
        pending = sorted(
            (w for w in workloads if not w.admitted and not w.finished and w.cluster_queue in self.cluster_queues),
            key=lambda w: (-w.priority, w.created, w.name),
        )
        for workload in pending:
            assignment, message = self._assign(workloads, workload)
            if assignment is None:
                assignment = self._preempt_for(workloads, workload)
            if assignment is None:
                self._set_pending(workload, message)
                continue
            workload.admitted_flavor = assignment
            self._set_admitted(workload)

    def _assign(self, workloads: list[_Workload], workload: _Workload) -> tuple[dict[str, str] | None, str]:
        assignment: dict[str, str] = {}
        problems = []
        for resource, amount in workload.requests.items():
            if resource in ("cpu", "memory") or amount == 0:
                continue  # Kueue is configured to check GPU resources only (IgnoreUndeclared).
            flavors = self._flavor_order(workload.cluster_queue or "", resource)
            if not flavors:
                return None, f"couldn't assign flavors to pod set main: resource {resource} unavailable in ClusterQueue"
            for flavor in flavors:
                fits, missing = self._fits(workloads, workload.cluster_queue or "", flavor, resource, amount)
                if fits:
                    assignment[resource] = flavor
                    break
                problems.append(f"insufficient unused quota for {resource} in flavor {flavor}, {_units(missing)} more needed")
            else:
                return None, "couldn't assign flavors to pod set main: " + ", ".join(problems)
        return assignment, ""

    def _preempt_for(self, workloads: list[_Workload], workload: _Workload) -> dict[str, str] | None:
        """Reclaims lent quota from borrowers, or makes room inside the team by lower priority."""
        cq = workload.cluster_queue or ""
        for resource, amount in workload.requests.items():
            if resource in ("cpu", "memory") or amount == 0:
                continue
            for flavor in self._flavor_order(cq, resource):
                quota = self._quota(cq, flavor, resource)
                if quota is None:
                    continue
                reclaiming = self._usage(workloads, cq, flavor, resource) + amount <= quota[0]
                candidates = []
                for other in workloads:
                    if not other.admitted or other.admitted_flavor.get(resource) != flavor:
                        continue
                    if other.cluster_queue == cq:
                        if other.priority < workload.priority:
                            candidates.append(other)
                    elif reclaiming and other.cluster_queue in self._cohort(cq):
                        lender = self._quota(other.cluster_queue or "", flavor, resource)
                        if lender and self._usage(workloads, other.cluster_queue or "", flavor, resource) > lender[0]:
                            candidates.append(other)
                # Lowest priority first, and among equals the newest, as Kueue does.
                candidates.sort(key=lambda w: w.created, reverse=True)
                candidates.sort(key=lambda w: w.priority)
                chosen: list[_Workload] = []
                fits = False
                for victim in candidates:
                    chosen.append(victim)
                    victim.admitted_flavor = {}
                    fits = self._fits(workloads, cq, flavor, resource, amount)[0]
                    if fits:
                        break
                if fits:
                    for victim in chosen:
                        in_cohort = victim.cluster_queue != cq
                        self._evict(victim, "InCohortReclamation" if in_cohort else "InClusterQueue",
                                    f"Preempted to accommodate a workload (UID: {workload.row.body['metadata']['uid']}) due to "
                                    + ("reclamation within the cohort" if in_cohort else "prioritization in the ClusterQueue"))
                    return self._assign(workloads, workload)[0]
                for victim in chosen:
                    victim.admitted_flavor = self._restore(victim)
        return None

    @staticmethod
    def _restore(workload: _Workload) -> dict[str, str]:
        admission = workload.row.body.get("status", {}).get("admission")
        return dict(admission["podSetAssignments"][0]["flavors"]) if admission else {}

    def _condition(self, workload: _Workload, type_: str, status: str, reason: str, message: str) -> None:
        conditions = [c for c in workload.row.body.setdefault("status", {}).setdefault("conditions", []) if c["type"] != type_]
        previous = next((c for c in workload.row.body["status"]["conditions"] if c["type"] == type_), None)
        stamp = previous["lastTransitionTime"] if previous and previous["status"] == status else _now_iso(self.now)
        conditions.append({"type": type_, "status": status, "reason": reason, "message": message,
                           "lastTransitionTime": stamp, "observedGeneration": 1})
        workload.row.body["status"]["conditions"] = sorted(conditions, key=lambda c: c["type"])

    def _save(self, row: SimulatedObject, body: dict[str, Any]) -> None:
        ref = ObjectRef(body["apiVersion"], body["kind"], body["metadata"]["name"], row.namespace or None)
        fresh = self.g._row(ref)
        if fresh is not None and fresh.body != body:
            self.g._write(ref, copy.deepcopy(body), fresh)

    def _set_pending(self, workload: _Workload, message: str) -> None:
        self._condition(workload, "QuotaReserved", "False", "Pending", message)
        self._save(workload.row, workload.row.body)

    def _set_admitted(self, workload: _Workload) -> None:
        body = workload.row.body
        body.setdefault("status", {})["admission"] = {
            "clusterQueue": workload.cluster_queue,
            "podSetAssignments": [{
                "name": "main", "count": workload.pods, "flavors": dict(workload.admitted_flavor),
                "resourceUsage": {r: _units(v) for r, v in workload.requests.items() if r in workload.admitted_flavor},
            }],
        }
        self._condition(workload, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {workload.cluster_queue}")
        self._condition(workload, "Admitted", "True", "Admitted", "The workload is admitted")
        body["status"]["conditions"] = [c for c in body["status"]["conditions"] if c["type"] not in ("Evicted", "Preempted")]
        self._save(workload.row, body)
        if workload.job is not None:
            job = workload.job.body
            if job["kind"] == "Job":
                job["spec"]["suspend"] = False
            pod_spec = job["spec"]["template"]["spec"]
            for flavor_name in set(workload.admitted_flavor.values()):
                flavor = self.flavors.get(flavor_name)
                if flavor is None:
                    continue
                pod_spec.setdefault("nodeSelector", {}).update(flavor.body["spec"].get("nodeLabels", {}))
                for toleration in flavor.body["spec"].get("tolerations", []):
                    if toleration not in pod_spec.setdefault("tolerations", []):
                        pod_spec["tolerations"].append(toleration)
            job.setdefault("status", {}).setdefault("startTime", _now_iso(self.now))
            self._save(workload.job, job)

    def _evict(self, workload: _Workload, reason: str, message: str) -> None:
        body = workload.row.body
        body.setdefault("status", {}).pop("admission", None)
        self._condition(workload, "Evicted", "True", "Preempted", message)
        self._condition(workload, "Preempted", "True", reason, message)
        self._condition(workload, "Admitted", "False", "NoReservation", "The workload has no reservation")
        self._condition(workload, "QuotaReserved", "False", "Pending", "Preempted; waiting for quota to be admitted again")
        self._save(workload.row, body)
        if workload.job is not None:
            job = workload.job.body
            if job["kind"] == "Job":
                job["spec"]["suspend"] = True
                self._save(workload.job, job)
            for pod in list(self.pods):
                if pod.namespace == workload.namespace and pod.body["metadata"].get("labels", {}).get("job-name") == job["metadata"]["name"] \
                        and pod.body.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                    self.g._remove(pod)
                    self.pods.remove(pod)

    # Scheduler and kubelet.
    def schedule_pods(self) -> None:
        used: dict[tuple[str, str], float] = defaultdict(float)
        for pod in self.pods:
            if pod.body.get("status", {}).get("phase") in ("Pending", "Running"):
                for resource, value in _pod_requests(pod.body).items():
                    used[(pod.body["spec"].get("nodeName", ""), resource)] += value
        for workload in self._workloads():
            if not workload.admitted or workload.job is None or workload.finished:
                continue
            job = workload.job.body
            if job["kind"] == "Job" and job["spec"].get("suspend"):
                continue
            name = job["metadata"]["name"]
            pods = [p for p in self.pods if p.namespace == workload.namespace and p.body["metadata"].get("labels", {}).get(OWNER_LABEL) == name]
            done = sum(1 for p in pods if p.body.get("status", {}).get("phase") == "Succeeded")
            active = [p for p in pods if p.body.get("status", {}).get("phase") in ("Pending", "Running")]
            if job["kind"] == "Job":
                wanted = min(int(job["spec"].get("parallelism", 1)), int(job["spec"].get("completions", 1)) - done) - len(active)
            else:
                wanted = int(job["spec"].get("replicas", 1)) - len(active)
            for index in range(max(wanted, 0)):
                pod = self._make_pod(job, workload, len(pods) + index)
                node = self._place(pod, used)
                if node:
                    pod["spec"]["nodeName"] = node
                    pod["status"] = {"phase": "Running", "startTime": _now_iso(self.now),
                                     "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}
                    for resource, value in _pod_requests(pod).items():
                        used[(node, resource)] += value
                else:
                    pod["status"] = {"phase": "Pending", "conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": "0/%d nodes are available: insufficient GPU resources on nodes of the flavor." % len(self.nodes)}]}
                ref = ObjectRef("v1", "Pod", pod["metadata"]["name"], workload.namespace)
                self.g._write(ref, pod, None)
                self.pods.append(self.g._row(ref))  # type: ignore[arg-type]

    def _make_pod(self, job: dict[str, Any], workload: _Workload, index: int) -> dict[str, Any]:
        template = copy.deepcopy(job["spec"]["template"])
        suffix = hashlib.sha256(f"{job['metadata']['uid']}-{index}-{self.now}".encode()).hexdigest()[:5]
        if job["kind"] == "StatefulSet":
            suffix = str(index)
        labels = {**template.get("metadata", {}).get("labels", {}), OWNER_LABEL: job["metadata"]["name"]}
        if job["kind"] == "Job":
            labels["batch.kubernetes.io/job-name"] = job["metadata"]["name"]
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job['metadata']['name']}-{suffix}", "namespace": workload.namespace, "labels": labels,
                         "annotations": dict(template.get("metadata", {}).get("annotations", {})),
                         "ownerReferences": [{"apiVersion": QUEUED_KINDS[job["kind"]], "kind": job["kind"], "name": job["metadata"]["name"], "uid": job["metadata"]["uid"]}]},
            "spec": template["spec"],
        }

    def _place(self, pod: dict[str, Any], used: dict[tuple[str, str], float]) -> str | None:
        selector = pod["spec"].get("nodeSelector", {})
        wanted = {r: v for r, v in _pod_requests(pod).items() if r not in ("cpu", "memory")}
        for node in self.nodes:
            labels = node.body["metadata"].get("labels", {})
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            allocatable = node.body.get("status", {}).get("allocatable", {})
            if all(used[(node.name, r)] + v <= _quantity(allocatable.get(r, 0)) for r, v in wanted.items()):
                return node.name
        return None

    def finish_pods(self) -> None:
        for pod in self.pods:
            status = pod.body.get("status", {})
            if status.get("phase") != "Running":
                continue
            owners = pod.body["metadata"].get("ownerReferences") or [{}]
            if owners[0].get("kind") != "Job":
                continue  # servers and notebooks run until they are stopped
            annotations = pod.body["metadata"].get("annotations", {})
            run_for = float(annotations.get(RUN_SECONDS_ANNOTATION, DEFAULT_RUN_SECONDS))
            started = datetime.strptime(status["startTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
            if self.now - started < run_for:
                continue
            exit_code = int(annotations.get(EXIT_CODE_ANNOTATION, "0"))
            status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            container = (pod.body["spec"].get("containers") or [{"name": "main"}])[0]["name"]
            status["containerStatuses"] = [{"name": container, "state": {"terminated": {
                "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": status["startTime"], "finishedAt": _now_iso(self.now)}}}]
            status["conditions"] = [{"type": "Ready", "status": "False", "reason": "PodCompleted"}]
            self._save(pod, pod.body)

    def write_statuses(self) -> None:
        workloads = self._workloads()
        for workload in workloads:
            if workload.job is None or not workload.admitted or workload.finished:
                continue
            job = workload.job.body
            name = job["metadata"]["name"]
            pods = [p for p in self.pods if p.namespace == workload.namespace and p.body["metadata"].get("labels", {}).get(OWNER_LABEL) == name]
            if job["kind"] != "Job":
                running = sum(1 for p in pods if p.body.get("status", {}).get("phase") == "Running")
                job.setdefault("status", {}).update({"replicas": len(pods), "readyReplicas": running})
                self._save(workload.job, job)
                continue
            succeeded = sum(1 for p in pods if p.body.get("status", {}).get("phase") == "Succeeded")
            failed = sum(1 for p in pods if p.body.get("status", {}).get("phase") == "Failed")
            active = sum(1 for p in pods if p.body.get("status", {}).get("phase") in ("Pending", "Running"))
            status = job.setdefault("status", {})
            status.update({"active": active, "succeeded": succeeded, "failed": failed})
            outcome = None
            if succeeded >= int(job["spec"].get("completions", 1)):
                outcome = ("Complete", "Job completed")
            elif failed > int(job["spec"].get("backoffLimit", 6)):
                outcome = ("Failed", "Job has reached the specified backoff limit")
            if outcome:
                status["conditions"] = [{"type": outcome[0], "status": "True", "reason": outcome[0], "message": outcome[1],
                                         "lastTransitionTime": _now_iso(self.now)}]
                status["completionTime" if outcome[0] == "Complete" else "failedTime"] = _now_iso(self.now)
                self._condition(workload, "Finished", "True", "Succeeded" if outcome[0] == "Complete" else "Failed", outcome[1])
                self._save(workload.row, workload.row.body)
            self._save(workload.job, job)
        self._write_queue_statuses(self._workloads())

    def _write_queue_statuses(self, workloads: list[_Workload]) -> None:
        live = [w for w in workloads if not w.finished]
        for name, row in self.cluster_queues.items():
            mine = [w for w in live if w.cluster_queue == name]
            usage = []
            for group in row.body["spec"].get("resourceGroups", []):
                for fq in group["flavors"]:
                    resources = []
                    for r in fq["resources"]:
                        total = self._usage(live, name, fq["name"], r["name"])
                        borrowed = max(total - _quantity(r["nominalQuota"]), 0)
                        resources.append({"name": r["name"], "total": _units(total), "borrowed": _units(borrowed)})
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
                self._save(row, row.body)


def _pod_requests(pod: dict[str, Any]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for container in pod["spec"].get("containers", []):
        res = container.get("resources", {})
        for resource, value in (res.get("requests") or res.get("limits") or {}).items():
            totals[resource] += _quantity(value)
    return totals

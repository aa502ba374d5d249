"""The scheduler, with the Job and workload controllers' part of making pods: an admitted,
unsuspended workload gets the pods it lacks, each placed on a Node whose labels match the flavor's
and that has the GPU units free (whole GPUs, MIG slices or shares alike). A pod that fits nowhere
stays Pending as Unschedulable, as on a real cluster."""

from __future__ import annotations

import copy
import hashlib
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from portal.kube.base import ObjectRef
from portal.kube.simulated.dra import Allocator
from portal.kube.simulated.kueue import Kueue, Workload
from portal.kube.simulated.state import (
    OWNER_LABEL,
    ClusterState,
    node_selected,
    node_tolerated,
    pod_requests,
    runtime_class_refusal,
    to_units,
)
from portal.kube.simulated.store import now_iso
from portal.kube.simulated.volcano import JOB_NAME_LABEL, Volcano, is_volcano_job, plugged_pod, pod_name, task_pods


class Scheduler:
    def __init__(self, state: ClusterState, queues: Sequence[Kueue | Volcano], devices: Allocator) -> None:
        self.state, self.queues, self.devices = state, queues, devices

    def schedule_pods(self) -> None:
        used: dict[tuple[str, str], float] = defaultdict(float)
        for pod in self.state.pods:
            if pod.body.get("status", {}).get("phase") in ("Pending", "Running"):
                for resource, value in pod_requests(pod.body).items():
                    used[(pod.body["spec"].get("nodeName", ""), resource)] += value
        for workload in (workload for queue in self.queues for workload in queue.workloads()):
            if not workload.admitted or workload.job is None or workload.finished:
                continue
            job = workload.job.body
            if job["kind"] == "Job" and job["spec"].get("suspend"):
                continue
            name = job["metadata"]["name"]
            pods = self.state.pods_of(workload.namespace, name)
            done = sum(1 for p in pods if p.body.get("status", {}).get("phase") == "Succeeded")
            active = [p for p in pods if p.body.get("status", {}).get("phase") in ("Pending", "Running")]
            made = {p.body["metadata"]["name"] for p in pods}
            missing: list[tuple[dict[str, Any] | None, int]]
            if is_volcano_job(job):  # a pod per replica of each task, named after it: one that ended stays
                missing = [(task, index) for task, index in task_pods(job)
                           if pod_name(name, task["name"], index) not in made]
            elif job["kind"] == "Job":
                wanted = min(int(job["spec"].get("parallelism", 1)), int(job["spec"].get("completions", 1)) - done) - len(active)
                missing = [(None, len(pods) + index) for index in range(max(wanted, 0))]
            else:
                wanted = int(job["spec"].get("replicas", 1)) - len(active)
                missing = [(None, len(pods) + index) for index in range(max(wanted, 0))]
            for task, index in missing:
                new_pod = self._make_pod(job, workload, index, task)
                if refusal := runtime_class_refusal(new_pod, self.state.runtime_classes):
                    self._failed_create(job, refusal)
                    break
                node, picked = self._place(new_pod, used)
                if node:
                    new_pod["spec"]["nodeName"] = node
                    new_pod["status"] = {
                        "phase": "Running", "startTime": now_iso(self.state.now),
                        "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
                    }
                    for resource, value in pod_requests(new_pod).items():
                        used[(node, resource)] += value
                else:
                    new_pod["status"] = {"phase": "Pending", "conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": f"0/{len(self.state.nodes)} nodes are available: "
                                   "insufficient GPU resources on nodes of the flavor."}]}
                ref = ObjectRef("v1", "Pod", new_pod["metadata"]["name"], workload.namespace)
                row = self.state.create(ref, new_pod)
                if picked:  # the devices its claims got, written as the scheduler's allocation
                    row.body["status"]["resourceClaimStatuses"] = self.devices.allocate(row.body, picked)
                    self.state.save(row, row.body)
                self.state.pods.append(row)

    def _failed_create(self, job: dict[str, Any], refusal: str) -> None:
        """What the Job (or ReplicaSet, StatefulSet) controller records when the API server refuses
        its pod: a Warning event on the owner, and no pod. Written once; it stays while the cause does."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        ref = ObjectRef("v1", "Event", f"{name}.failed-create", namespace)
        if self.state.store.get(ref) is not None:
            return
        self.state.create(ref, {
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": ref.name, "namespace": namespace},
            "involvedObject": {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": name, "namespace": namespace,
                               "uid": job["metadata"].get("uid", "")},
            "type": "Warning", "reason": "FailedCreate", "message": f"Error creating: {refusal}",
            "lastTimestamp": now_iso(self.state.now), "count": 1,
        })

    def _make_pod(self, job: dict[str, Any], workload: Workload, index: int, task: dict[str, Any] | None) -> dict[str, Any]:
        template = copy.deepcopy(task["template"] if task else job["spec"]["template"])
        suffix = hashlib.sha256(f"{job['metadata']['uid']}-{index}-{self.state.now}".encode()).hexdigest()[:5]
        if job["kind"] == "StatefulSet":
            suffix = str(index)
        labels = {**template.get("metadata", {}).get("labels", {}), OWNER_LABEL: job["metadata"]["name"]}
        annotations = dict(template.get("metadata", {}).get("annotations", {}))
        if task:  # as Volcano's job controller names and marks a task's pods
            suffix = f"{task['name']}-{index}"
            labels[JOB_NAME_LABEL] = job["metadata"]["name"]
            annotations.update({"volcano.sh/task-index": str(index), "volcano.sh/task-spec": task["name"],
                                "scheduling.k8s.io/group-name": f"{job['metadata']['name']}-{job['metadata']['uid']}"})
        elif job["kind"] == "Job":
            labels["batch.kubernetes.io/job-name"] = job["metadata"]["name"]
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job['metadata']['name']}-{suffix}", "namespace": workload.namespace, "labels": labels,
                         "annotations": annotations,
                         "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": job["kind"],
                                              "name": job["metadata"]["name"], "uid": job["metadata"]["uid"]}]},
            "spec": template["spec"],
        }
        if task:
            plugged_pod(job, pod)
        return pod

    def _place(self, pod: dict[str, Any], used: dict[tuple[str, str], float]
               ) -> tuple[str | None, dict[str, list[tuple[str, str, str]]]]:
        """The node the pod fits on, and the devices its claims would get there."""
        wanted = {r: v for r, v in pod_requests(pod).items() if r not in ("cpu", "memory")}
        for node in self.state.nodes:
            labels = node.body["metadata"].get("labels", {})
            if (not node_selected(pod["spec"], labels) or not node_tolerated(pod["spec"], node.body)
                    or (node.body.get("spec") or {}).get("unschedulable")):
                continue
            allocatable = node.body.get("status", {}).get("allocatable", {})
            if not all(used[(node.name, r)] + v <= to_units(allocatable.get(r, 0)) for r, v in wanted.items()):
                continue
            picked = self.devices.pick(pod["metadata"]["namespace"], pod["spec"], node.name)
            if picked is not None:
                return node.name, picked
        return None, {}

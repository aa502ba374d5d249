"""The kubelet and the Job controller's bookkeeping: pods run for a while
(`gpu-portal.io/simulated-run-seconds`, default 30), then succeed, or fail when the Job asks for
`gpu-portal.io/simulated-exit-code`; servers and notebooks run until stopped. Each Job,
Deployment and StatefulSet then reports its pods in its status, and a Job its outcome."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from portal.kube.simulated.kueue import Kueue
from portal.kube.simulated.models import SimulatedObject
from portal.kube.simulated.state import (
    DEFAULT_RUN_SECONDS,
    EXIT_CODE_ANNOTATION,
    RUN_SECONDS_ANNOTATION,
    ClusterState,
)
from portal.kube.simulated.store import now_iso
from portal.kube.simulated.volcano import Volcano, is_volcano_job


def pod_logs(pod: SimulatedObject | None, *, name: str, tail_lines: int | None) -> str:
    """What the simulated container printed: where it ran and how it is doing."""
    if pod is None:
        return ""
    phase = pod.body.get("status", {}).get("phase", "Pending")
    lines = [f"[simulated] pod {name} scheduled on {pod.body['spec'].get('nodeName', '-')}", f"[simulated] phase {phase}"]
    return "\n".join(lines if tail_lines is None else lines[-tail_lines:]) + "\n"


class Kubelet:
    def __init__(self, state: ClusterState, queues: Sequence[Kueue | Volcano]) -> None:
        self.state, self.queues = state, queues

    def start_bound_pods(self) -> None:
        """A pod created already bound to a node (a DaemonSet's: the device plugin, the exporter)
        starts there at once; the portal's own pods go through Kueue and the scheduler instead."""
        for pod in self.state.pods:
            if pod.body.get("status", {}).get("phase") or not pod.body["spec"].get("nodeName"):
                continue
            containers = pod.body["spec"].get("containers") or [{"name": "main"}]
            pod.body["status"] = {"phase": "Running", "startTime": now_iso(self.state.now),
                                  "conditions": [{"type": "Ready", "status": "True"}],
                                  "containerStatuses": [{"name": c["name"], "ready": True, "state": {"running": {
                                      "startedAt": now_iso(self.state.now)}}} for c in containers]}
            self.state.save(pod, pod.body)

    def finish_pods(self) -> None:
        for pod in self.state.pods:
            status = pod.body.get("status", {})
            if status.get("phase") != "Running":
                continue
            owners = pod.body["metadata"].get("ownerReferences") or [{}]
            if owners[0].get("kind") != "Job":
                continue  # servers and notebooks run until they are stopped
            annotations = pod.body["metadata"].get("annotations", {})
            run_for = float(annotations.get(RUN_SECONDS_ANNOTATION, DEFAULT_RUN_SECONDS))
            started = datetime.strptime(status["startTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
            if self.state.now - started < run_for:
                continue
            exit_code = int(annotations.get(EXIT_CODE_ANNOTATION, "0"))
            status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            container = (pod.body["spec"].get("containers") or [{"name": "main"}])[0]["name"]
            status["containerStatuses"] = [{"name": container, "state": {"terminated": {
                "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": status["startTime"], "finishedAt": now_iso(self.state.now)}}}]
            status["conditions"] = [{"type": "Ready", "status": "False", "reason": "PodCompleted"}]
            self.state.save(pod, pod.body)

    def write_statuses(self) -> None:
        """Each admitted Job, Deployment and StatefulSet counts its pods; a Job that is done says so."""
        for owner, workload in ((queue, workload) for queue in self.queues for workload in queue.workloads()):
            if workload.job is None or not workload.admitted or workload.finished or is_volcano_job(workload.job.body):
                continue  # a Volcano Job's status is its controller's (Volcano.write_job_statuses)
            job = workload.job.body
            name = job["metadata"]["name"]
            pods = self.state.pods_of(workload.namespace, name)
            if job["kind"] != "Job":
                running = sum(1 for p in pods if p.body.get("status", {}).get("phase") == "Running")
                job.setdefault("status", {}).update({"replicas": len(pods), "readyReplicas": running})
                self.state.save(workload.job, job)
                continue
            succeeded = sum(1 for p in pods if p.body.get("status", {}).get("phase") == "Succeeded")
            failed = sum(1 for p in pods if p.body.get("status", {}).get("phase") == "Failed")
            active = sum(1 for p in pods if p.body.get("status", {}).get("phase") in ("Pending", "Running"))
            status = job.setdefault("status", {})
            status.update({"active": active, "succeeded": succeeded, "failed": failed})
            outcome = None
            if succeeded >= int(job["spec"].get("completions", 1)):
                outcome = ("Complete", "CompletionsReached", "Reached expected number of succeeded pods")
            elif failed > int(job["spec"].get("backoffLimit", 6)):
                outcome = ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
            if outcome:
                status["conditions"] = [{"type": outcome[0], "status": "True", "reason": outcome[1], "message": outcome[2],
                                         "lastTransitionTime": now_iso(self.state.now)}]
                status["completionTime" if outcome[0] == "Complete" else "failedTime"] = now_iso(self.state.now)
                owner.finish(workload, "Succeeded" if outcome[0] == "Complete" else "Failed", outcome[2])
            self.state.save(workload.job, job)

"""What every workload kind declares, in one place: the interface of jobs/kinds/.

Modelled on how Kueue integrates job frameworks (one integration per kind of object, kept in a
registry by name): each kind is one module that declares a `Kind` (what it builds, which object
owns its pods, how that object's state reads as a phase, what the pages, the template editor,
the gate, the network policies and the simulated telemetry need to know of it), and the rest of
the portal asks the registry (jobs/kinds/__init__.py) rather than naming a kind.

Pure: nothing here imports Django or talks to a cluster. Phases are the values of
`jobs.models.Workload.Phase` (a test holds the two together).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from jobs.manifests import WorkloadSpec
from portal.metrics.simulated import TelemetryProfile
from tenants.queueing.base import Admission

Objects = list[dict[str, Any]]
Verdict = tuple[str, str]
# jobs.models.Workload.Phase's values, which derive() answers in.
QUEUED, ADMITTED, RUNNING, SUCCEEDED, FAILED, PREEMPTED = "queued", "admitted", "running", "succeeded", "failed", "preempted"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
VOLCANO_BATCH = "batch.volcano.sh/v1alpha1"  # tenants.queueing.volcano's Volcano Jobs


@dataclass(frozen=True)
class Kind:
    """One kind of workload. `name` is what templates store and pods carry in their kind label."""

    name: str
    label: str  # as the kind is listed: "Distributed training"
    noun: str  # one of it, in a sentence: "inference server"
    plural: str  # several, in the template editor's hints: "notebooks"
    build: Callable[[WorkloadSpec], Objects]  # every object of a workload, in the order to create them (the owner last)
    # apiVersion and kind of the object that owns its pods, which the queue admits; a queue backend
    # may run it as an object of its own (jobs.kinds.owner_of: on Volcano, a batch Job's Volcano Job).
    owner: tuple[str, str]
    # Its phase and reason from its owner, its pods and what the queue backend says of it.
    derive: Callable[[dict[str, Any], list[dict[str, Any]], Admission], Verdict]
    telemetry: TelemetryProfile  # how its pods use their GPUs on the simulated door
    runs_to_completion: bool = False  # ends by itself, at the latest at the template's maximum run time
    pod_noun: str = ""  # what one of its several pods is called ("worker", "replica"); "" for a single pod
    starts_together: bool = False  # all its pods start at once or none does (a gang of workers)
    companion_pods: int = 0  # pods it runs beside its workers, in the same gang (an MPI job's launcher)
    # The queue backends it runs on (their `name`s); empty: every one. A site on another is refused
    # a template or launch of it, in words (jobs.kinds.refusal).
    queues: tuple[str, ...] = ()
    scalable: bool = False  # its pod count may change while it runs (scale, idle scale-down to the minimum)
    serves_http: bool = False  # a port, a Service and an Ingress behind the portal's gate
    opened_by: Literal["", "owner", "team"] = ""  # who may open it through the gate: its owner, or its team
    has_token: bool = False  # a token of its own (a Secret), handed to its owner only
    # The server it runs, which the portal asks how idle it is (jobs/idle.py); "": it asks none.
    activity: Literal["", "jupyter", "code-server"] = ""
    # The API its page's "Try it" box asks through the portal (jobs/try_it.py); "": no box.
    try_it: Literal["", "openai"] = ""
    local_port: int = 8080  # where `kubectl port-forward` puts it on the user's machine
    asks_storage: bool = False  # the template editor's persistent home volume
    runs_on_cpu: bool = False  # may run on a CPU-only flavor, without a GPU (preparing data)
    # Templates from before idle policies could stop it with `idle_minutes` alone (notebooks did).
    legacy_idle_minutes: bool = False

    @property
    def portal_reaches(self) -> bool:
        """Whether the portal reaches its pods (to ask their server how idle it is, or a question
        from its page's Try it box)."""
        return bool(self.activity or self.try_it)

    @property
    def pod_count(self) -> bool:
        """Whether a launch chooses how many pods it runs (a `workers` or `replicas` parameter)."""
        return bool(self.pod_noun)


# --- Reading an owner's state: the pieces the kinds share ------------------------------------------


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions", []) or []:
        if cond.get("type") == type_:
            return cond
    return {}


def is_true(obj: dict[str, Any], type_: str) -> bool:
    return condition(obj, type_).get("status") == "True"


def running_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What counts as running, for every kind: pods the kubelet reports Running."""
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]


def completions_succeeded(job: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    """Whether a succeeded pod of this very Job stands for each of its completions. A pod's
    success is final, so no later event can take it back; pods of another Job of the same name
    (deleted and made again), pods being deleted (killed, not finished) and a second pod of
    the same index do not count, and a Job without completions is done at its first success."""
    indexed = job["spec"].get("completionMode") == "Indexed"
    done: set[str] = set()
    for pod in succeeded_pods(job, pods):
        meta = pod["metadata"]
        index = (meta.get("annotations") or {}).get(COMPLETION_INDEX) or (meta.get("labels") or {}).get(COMPLETION_INDEX)
        done.add(f"index {index}" if indexed and index is not None else f"pod {meta.get('uid') or meta['name']}")
    return len(done) >= int(job["spec"].get("completions") or 1)


def succeeded_pods(job: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods that succeeded as pods of this very Job (batch or Volcano's): not those of another
    Job of the same name (deleted and made again), nor those being deleted (killed, not finished)."""
    uid = job["metadata"].get("uid")
    found = []
    for pod in pods:
        meta = pod["metadata"]
        if (pod.get("status") or {}).get("phase") != "Succeeded" or meta.get("deletionTimestamp"):
            continue
        owners = {o.get("uid") for o in meta.get("ownerReferences", []) if o.get("kind") == "Job"}
        if not (uid and owners and uid not in owners):
            found.append(pod)
    return found


def derive_batch_job(owner: dict[str, Any], pods: list[dict[str, Any]], admission: Admission) -> Verdict:
    """A batch Job the queue lets run: terminal only from the Job's own conditions or a succeeded
    pod per completion; waiting while suspended, or while the queue holds all of its pods. On
    Volcano the owner is the Volcano Job made of it (derive_volcano_job)."""
    if owner.get("apiVersion") == VOLCANO_BATCH:
        return derive_volcano_job(owner, pods, admission)
    if is_true(owner, "Complete"):
        return SUCCEEDED, "Finished successfully"
    if is_true(owner, "Failed"):
        return FAILED, _batch_failure(owner, pods)
    # Every completion succeeded is what the Job controller will conclude a moment later: say it now.
    if completions_succeeded(owner, pods):
        return SUCCEEDED, "Finished successfully"
    if admission.evicted:
        return PREEMPTED, f"Preempted and queued again: {admission.evicted_message}".rstrip(": ")
    running = running_pods(pods)
    # Kueue suspends the Job until it admits it; Volcano leaves it running and holds its pods.
    if owner["spec"].get("suspend", False) or (admission.pending and not running):
        return QUEUED, admission.waiting
    if running:
        return RUNNING, f"{len(running)} of {owner['spec'].get('parallelism', 1)} pods running"
    return ADMITTED, admission.starting


OVERRAN = "It ran longer than its template's maximum run time, and was stopped"


def _pod_failure(pods: list[dict[str, Any]]) -> str:
    """How its last failed pod ended, in a few words: " (Error, exit code 1)", or ""."""
    for pod in reversed(pods):
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (container.get("state") or {}).get("terminated") or {}
            if (pod.get("status") or {}).get("phase") == "Failed" and ended:
                return f" ({ended.get('reason') or 'Error'}, exit code {ended.get('exitCode', '?')})"
    return ""


def _batch_failure(job: dict[str, Any], pods: list[dict[str, Any]]) -> str:
    """Why a batch Job failed, in the portal's words where Kubernetes' reason is one it knows."""
    failed = condition(job, "Failed")
    reason = failed.get("reason", "Failed")
    if reason == "DeadlineExceeded":
        return OVERRAN
    if reason == "BackoffLimitExceeded":
        tries = int((job.get("status") or {}).get("failed") or 0)
        count = {0: "", 1: " once"}.get(tries, f" {tries} times")
        return f"Its pods failed{count}{_pod_failure(pods)}, and it is not retried again"
    return f"{reason}: {failed.get('message', '')}".rstrip(": ")


def _volcano_failure(phase: str, restarts: int, pods: list[dict[str, Any]]) -> str:
    """Why a Volcano Job ended without success, from its phase and its pods, in the portal's words."""
    if phase == "Failed" and restarts:
        return f"Started again {restarts} times after evictions, the most Volcano allows it; it was not run again"
    if any((pod.get("status") or {}).get("reason") == "DeadlineExceeded" for pod in pods):
        return OVERRAN
    return f"A pod failed{_pod_failure(pods)}, and Volcano stopped the rest of the run"


def derive_volcano_job(owner: dict[str, Any], pods: list[dict[str, Any]], admission: Admission) -> Verdict:
    """A Volcano Job (a batch kind's owner on Volcano), by the phase its controller keeps. Its
    policies restart it only after an eviction and end it at a failure (tenants.queueing.volcano's
    POLICIES), so a restart is a preemption or reclaim: it reads as preempted until it runs again."""
    status = owner.get("status") or {}
    phase = (status.get("state") or {}).get("phase") or "Pending"
    restarts = int(status.get("retryCount") or 0)
    replicas = sum(int(task.get("replicas", 1)) for task in owner["spec"].get("tasks") or [])
    if phase in ("Completed", "Completing"):
        return SUCCEEDED, "Finished successfully"
    if phase in ("Failed", "Terminating", "Terminated", "Aborting", "Aborted"):
        return FAILED, _volcano_failure(phase, restarts, pods)
    # Every pod of this very Job succeeded: Volcano's job controller concludes Completed next (its
    # queue takes seconds under load); a success is final, so say it now, as for a batch Job.
    if len({pod["metadata"]["name"] for pod in succeeded_pods(owner, pods)}) >= replicas:
        return SUCCEEDED, "Finished successfully"
    running = running_pods(pods)
    again = f" (started again {restarts} time{'s' if restarts != 1 else ''} after Volcano evicted it)" if restarts else ""
    if running and phase != "Restarting":
        return RUNNING, f"{len(running)} of {replicas} pods running{again}"
    if phase == "Restarting" or (restarts and admission.pending):
        evicted = (f"its pods to give their capacity back (a team reclaiming its guarantee, or a higher tier); all "
                   f"{replicas} start" if replicas > 1 else
                   "its pod to give its capacity back (a team reclaiming its guarantee, or a higher tier); it starts")
        return PREEMPTED, f"Preempted and queued again: Volcano evicted {evicted} again when there is room"
    if admission.pending:
        return QUEUED, admission.waiting
    return ADMITTED, admission.starting


def derive_server(owner: dict[str, Any], pods: list[dict[str, Any]], admission: Admission) -> Verdict:
    """A Deployment or StatefulSet whose pods the queue gates one by one until admitted: it never
    ends by itself, so only running, preempted, waiting or starting."""
    running = running_pods(pods)
    if running:
        return RUNNING, f"{len(running)} of {owner['spec'].get('replicas', 1)} replicas running"
    if admission.evicted:
        return PREEMPTED, f"Preempted and queued again: {admission.evicted_message}".rstrip(": ")
    if admission.pending or not pods:
        return QUEUED, admission.waiting
    return ADMITTED, admission.starting

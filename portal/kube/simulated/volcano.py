"""Volcano, as far as the portal relies on it (tenants/queueing/volcano.py): a workload's PodGroup
in a team's Queue is let in when the Queue's capability and what the cluster has left allow all
of its pods, and placed whole or not at all (gang); a Queue under its deserved share takes back
what others borrowed (reclaim, from reclaimable Queues over theirs), and within a Queue a higher
priority makes room (preempt); each Queue reports what it has allocated.

Its job controller gives a Volcano Job its PodGroup, a pod per replica of each task, its phase
from its pods, and, after an eviction, a restart (its PodEvicted policy: RestartJob) counted
against its maxRetry; a failed pod ends it (PodFailed: TerminateJob), and a task's pods all
succeeded end it where the task says so (TaskCompleted: CompleteJob, an MPI job's launcher). Its
ssh and svc plugins make what Volcano's do: the Job's key pair in a Secret, its hostfiles in a
ConfigMap, a headless Service, and on each pod the host name, the mounts and the environment.

Where it is simpler than Volcano: a waiting PodGroup's pods are made only once it is placed (a
real cluster makes them at once and holds them Pending), and an eviction takes a whole workload
(Volcano takes only the pods it needs) and lets it in again when there is room. The phases and
conditions it writes are the ones tenants/queueing/volcano.py and jobs.kinds read."""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from portal.kube.base import ObjectRef
from portal.kube.simulated.kueue import Workload
from portal.kube.simulated.state import (
    OWNER_LABEL,
    ClusterState,
    node_selected,
    node_tolerated,
    pod_requests,
    to_units,
    units_text,
)

FLAVOR_LABEL = "gpu-portal.io/flavor"  # tenants.queueing.volcano's: the flavor a PodGroup is for
SCHEDULING, BATCH = "scheduling.volcano.sh/v1beta1", "batch.volcano.sh/v1alpha1"
UNCOUNTED = ("cpu", "memory", "pods")
RUNNING, COMPLETED = "Running", "Completed"
SCHEDULED = {"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready to be scheduled"}
# A Volcano Job's phases after which nothing more happens to it.
ENDED = ("Completed", "Failed", "Terminated", "Aborted")


def is_volcano_job(body: dict[str, Any]) -> bool:
    return body.get("apiVersion") == BATCH and body.get("kind") == "Job"


def job_replicas(body: dict[str, Any]) -> int:
    return sum(int(task.get("replicas", 1)) for task in body["spec"].get("tasks") or [])


def task_pods(body: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    """(task, index) of every pod a Volcano Job runs, task by task."""
    return [(task, index) for task in body["spec"].get("tasks") or [] for index in range(int(task.get("replicas", 1)))]


def pod_name(job: str, task: str, index: int) -> str:
    return f"{job}-{task}-{index}"  # Volcano's MakePodName


# --- The ssh and svc job plugins ---------------------------------------------------------------------

PLUGIN_KINDS = ("Secret", "ConfigMap", "Service")  # what they make of a Job, owned by it
SSH_KEYS = ("id_rsa", "id_rsa.pub", "authorized_keys", "config")
HOSTFILES_PATH = "/etc/volcano"
JOB_NAME_LABEL = "volcano.sh/job-name"


def _plugin_argument(job: dict[str, Any], plugin: str, flag: str, default: str) -> str:
    for argument in (job["spec"].get("plugins") or {}).get(plugin) or []:
        if argument.startswith(f"--{flag}="):
            return str(argument.split("=", 1)[1])
    return default


def _env_key(task: str) -> str:
    return task.replace("-", "_").upper()


def hostfiles(job: dict[str, Any]) -> dict[str, str]:
    """The svc plugin's ConfigMap: each task's hosts, one per line, and as VC_<TASK>_HOSTS / _NUM."""
    name, data = job["metadata"]["name"], {}
    for task in job["spec"].get("tasks") or []:
        hosts = [f"{pod_name(name, task['name'], i)}.{name}" for i in range(int(task.get("replicas", 1)))]
        data[f"{task['name']}.host"] = "\n".join(hosts)
        data[f"VC_{_env_key(task['name'])}_HOSTS"] = ",".join(hosts)
        data[f"VC_{_env_key(task['name'])}_NUM"] = str(len(hosts))
    return data


def plugin_objects(job: dict[str, Any]) -> list[dict[str, Any]]:
    """What the Job's plugins make when it is added: the ssh plugin a Secret `<job>-ssh` with one key
    pair (not a real one, on a simulated cluster), the svc plugin a ConfigMap `<job>-svc` of hostfiles
    and a headless Service `<job>` over its pods; each owned by the Job."""
    plugins = job["spec"].get("plugins") or {}
    name, namespace, uid = job["metadata"]["name"], job["metadata"]["namespace"], job["metadata"].get("uid")
    owner = [{"apiVersion": BATCH, "kind": "Job", "name": name, "uid": uid, "controller": True}]

    def meta(object_name: str) -> dict[str, Any]:
        return {"name": object_name, "namespace": namespace, "ownerReferences": owner}
    made: list[dict[str, Any]] = []
    if "ssh" in plugins:
        public = f"ssh-rsa simulated-public-key-of-{name}\n"  # authorized: the pair's own public key
        texts = {"id_rsa": f"simulated private key of {name}\n", "id_rsa.pub": public, "authorized_keys": public,
                 "config": "StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n"}
        data = {key: base64.b64encode(texts[key].encode()).decode() for key in SSH_KEYS}
        made.append({"apiVersion": "v1", "kind": "Secret", "metadata": meta(f"{name}-ssh"), "type": "Opaque", "data": data})
    if "svc" in plugins:
        made.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"{name}-svc"), "data": hostfiles(job)})
        made.append({"apiVersion": "v1", "kind": "Service", "metadata": meta(name),
                     "spec": {"clusterIP": "None", "selector": {JOB_NAME_LABEL: name}, "publishNotReadyAddresses": False}})
    return made


def plugged_pod(job: dict[str, Any], pod: dict[str, Any]) -> None:
    """What the plugins do to each pod as it is made: svc gives it its host name in the Job's
    subdomain, the hostfiles at /etc/volcano and every task's VC_ variables; ssh mounts the key pair
    at its key path (/root/.ssh unless told), readable by all where that is not root's."""
    plugins, name = job["spec"].get("plugins") or {}, job["metadata"]["name"]
    spec = pod["spec"]
    volumes, mounts, env = spec.setdefault("volumes", []), [], []
    if "svc" in plugins:
        spec.setdefault("hostname", pod["metadata"]["name"])
        spec.setdefault("subdomain", name)
        volumes.append({"name": f"{name}-svc", "configMap": {"name": f"{name}-svc"}})
        mounts.append({"name": f"{name}-svc", "mountPath": HOSTFILES_PATH})
        for task in job["spec"].get("tasks") or []:
            for suffix in ("HOSTS", "NUM"):
                key = f"VC_{_env_key(task['name'])}_{suffix}"
                env.append({"name": key, "valueFrom": {"configMapKeyRef": {"name": f"{name}-svc", "key": key}}})
    if "ssh" in plugins:
        path = _plugin_argument(job, "ssh", "ssh-key-file-path", "/root/.ssh")
        volumes.append({"name": f"{name}-ssh", "secret": {
            "secretName": f"{name}-ssh", "defaultMode": 0o600 if path == "/root/.ssh" else 0o644,
            "items": [{"key": key, "path": f".ssh/{key}"} for key in SSH_KEYS]}})
        mounts.append({"name": f"{name}-ssh", "mountPath": path, "subPath": ".ssh"})
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        container["volumeMounts"] = [*(container.get("volumeMounts") or []), *mounts]
        container["env"] = [*(container.get("env") or []), *env]
    if not volumes:
        del spec["volumes"]


def completing_task(job: dict[str, Any], pods: list[Any]) -> bool:
    """Whether a task whose completion ends the Job (TaskCompleted: CompleteJob) has all its pods succeeded."""
    for task in job["spec"].get("tasks") or []:
        if {"event": "TaskCompleted", "action": "CompleteJob"} not in (task.get("policies") or []):
            continue
        names = {pod_name(job["metadata"]["name"], task["name"], i) for i in range(int(task.get("replicas", 1)))}
        done = {p.body["metadata"]["name"] for p in pods if (p.body.get("status") or {}).get("phase") == "Succeeded"}
        if names <= done:
            return True
    return False


def job_phase(body: dict[str, Any]) -> str:
    return ((body.get("status") or {}).get("state") or {}).get("phase", "")


def placed_on(requests: dict[str, float], flavor: str) -> dict[str, str]:
    """What a placed group says it runs on: the flavor, for each GPU resource it asks for (one
    entry even if it asks for none, so that it reads as placed)."""
    return dict.fromkeys((r for r in requests if r not in UNCOUNTED), flavor) or {"": flavor}


@dataclass
class Group(Workload):
    """A PodGroup and the object whose pods it holds: the spec of each of its pods (`members`)."""

    members: list[dict[str, Any]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return (self.row.body.get("status") or {}).get("phase") == COMPLETED


class Volcano:
    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def workloads(self) -> list[Group]:
        groups = []
        by_uid = {row.body["metadata"].get("uid"): row for row in self.state.jobs.values() if is_volcano_job(row.body)}
        for row in self.state.pod_groups:
            spec, status = row.body.get("spec") or {}, row.body.get("status") or {}
            # The portal's own group is named after its owner; a Volcano Job's, made by its controller, is owned by it.
            job = self.state.jobs.get((row.namespace, row.name)) or next(
                (by_uid[o.get("uid")] for o in row.body["metadata"].get("ownerReferences") or [] if o.get("uid") in by_uid), None)
            if job is not None and is_volcano_job(job.body):
                members = [task.get("template", {}).get("spec") or {} for task, _ in task_pods(job.body)]
            else:
                template = (job.body["spec"].get("template") or {}).get("spec") or {} if job else {}
                pods = int(job.body["spec"].get("parallelism" if job.body["kind"] == "Job" else "replicas", 1)) if job else 0
                members = [template] * pods
            requests: dict[str, float] = defaultdict(float)
            for member in members:
                for resource, amount in pod_requests({"spec": member}).items():
                    requests[resource] += amount
            flavor = ((row.body["metadata"].get("labels") or {}).get(FLAVOR_LABEL, ""))
            placed = status.get("phase") in (RUNNING, COMPLETED)
            groups.append(Group(
                row=row, job=job, queue=spec.get("queue", ""), cluster_queue=spec.get("queue", ""),
                priority=self.state.pod_priorities.get(spec.get("priorityClassName", ""), 0),
                created=row.body["metadata"].get("creationTimestamp", ""),
                requests=dict(requests), pods=len(members), pod_spec=members[-1] if members else {}, members=members,
                admitted_flavor=placed_on(requests, flavor) if placed else None,
            ))
        return groups

    # --- Volcano Jobs ---------------------------------------------------------------------------

    def run_jobs(self) -> None:
        """Volcano's job controller: a Volcano Job gets its PodGroup (named after it and its uid,
        with its labels), and one restarting after an eviction waits to be let in again, or fails
        once it has restarted `maxRetry` times."""
        grouped = {owner.get("uid") for group in self.state.pod_groups
                   for owner in group.body["metadata"].get("ownerReferences") or []}
        for (namespace, name), row in self.state.jobs.items():
            job = row.body
            if not is_volcano_job(job):
                continue
            status = job.get("status") or {}
            if job_phase(job) == "Restarting":
                retries, most = int(status.get("retryCount", 0)), int(job["spec"].get("maxRetry", 3))
                status["state"] = {"phase": "Failed" if retries >= most else "Pending"}
                self.state.save(row, job)
            uid = job["metadata"].get("uid")
            if job_phase(job) in ENDED or uid in grouped:
                continue
            group: dict[str, Any] = {
                "apiVersion": SCHEDULING, "kind": "PodGroup",
                "metadata": {"name": f"{name}-{uid}", "namespace": namespace, "labels": dict(job["metadata"].get("labels") or {}),
                             "ownerReferences": [{"apiVersion": BATCH, "kind": "Job", "name": name, "uid": uid,
                                                  "controller": True}]},
                "spec": {"minMember": job["spec"].get("minAvailable", 1), "queue": job["spec"].get("queue", ""),
                         "priorityClassName": job["spec"].get("priorityClassName", "")},
                "status": {"phase": "Pending"},
            }
            ref = ObjectRef(SCHEDULING, "PodGroup", group["metadata"]["name"], namespace)
            self.state.pod_groups.append(self.state.create(ref, group))
            for made in plugin_objects(job):
                made_ref = ObjectRef("v1", made["kind"], made["metadata"]["name"], namespace)
                if self.state.store.get(made_ref) is None:
                    self.state.create(made_ref, made)

    def write_job_statuses(self, groups: list[Group]) -> None:
        """Each Volcano Job's phase from its pods: Running once `minAvailable` run, Completed when
        every pod succeeded or a task that ends it did, Terminated at a failed pod (the rest
        stopped in both); an ended Job's group is done."""
        for group in groups:
            if group.job is None or not is_volcano_job(group.job.body):
                continue
            job = group.job.body
            phase = job_phase(job)
            if phase in ENDED:
                if not group.finished:
                    self.finish(group, phase, "")
                continue
            if phase == "Restarting":
                continue
            pods = self.state.pods_of(group.namespace, job["metadata"]["name"])
            count: defaultdict[str, int] = defaultdict(int)
            for pod in pods:
                count[(pod.body.get("status") or {}).get("phase", "Pending")] += 1
            if count["Failed"] or completing_task(job, pods):
                phase = "Terminated" if count["Failed"] else "Completed"
                for pod in [p for p in pods if (p.body.get("status") or {}).get("phase") in ("Pending", "Running")]:
                    self.state.remove(pod)
                    self.state.pods.remove(pod)
            elif count["Succeeded"] >= job_replicas(job):
                phase = "Completed"
            elif count["Running"] >= int(job["spec"].get("minAvailable", 1)):
                phase = "Running"
            else:
                phase = "Pending"
            status = job.setdefault("status", {})
            status.update({"state": {"phase": phase}, "minAvailable": job["spec"].get("minAvailable", 1),
                           "running": count["Running"], "succeeded": count["Succeeded"], "failed": count["Failed"],
                           "pending": count["Pending"]})
            self.state.save(group.job, job)
            if phase in ENDED:
                self.finish(group, phase, "")

    # --- Letting groups in ----------------------------------------------------------------------

    def admit(self) -> None:
        groups = self.workloads()
        waiting = sorted((g for g in groups if not g.admitted and not g.finished and g.job is not None),
                         key=lambda g: (-g.priority, g.created, g.name))
        for group in waiting:
            queue = self.state.volcano_queues.get(group.queue)
            if queue is None:
                self._wait(group, "Pending", "")
                continue
            short = self._short(groups, group)
            if short and self._make_room(groups, group):
                short = self._short(groups, group)
            if not short:
                self._let_in(group)
            elif short == "nodes":
                self._wait(group, "Inqueue", self._unplaceable(group))
            else:
                self._wait(group, "Pending", "")

    def _gpus(self, group: Group) -> dict[str, float]:
        return {r: a for r, a in group.requests.items() if r not in UNCOUNTED and a}

    def _used(self, groups: list[Group], queue: str | None = None) -> dict[str, float]:
        used: dict[str, float] = defaultdict(float)
        for g in groups:
            if g.admitted and not g.finished and (queue is None or g.queue == queue):
                for resource, amount in self._gpus(g).items():
                    used[resource] += amount
        return used

    def _spec(self, queue: str) -> dict[str, Any]:
        row = self.state.volcano_queues.get(queue)
        return (row.body.get("spec") or {}) if row is not None else {}

    def _short(self, groups: list[Group], group: Group, leaving: Sequence[Group] = ()) -> str:
        """What keeps the group out: "queue" (its capability, or what the cluster has left after
        every Queue's reserved guarantee), "nodes" (no room to place all its pods, besides those
        of the `leaving` groups), or ""."""
        spec = self._spec(group.queue)
        capability = spec.get("capability") or {}
        mine, everyone = self._used(groups, group.queue), self._used(groups)
        # What other Queues reserve (`guarantee`) and do not use: only theirs, counted once.
        guarantees = {name: (self._spec(name).get("guarantee") or {}).get("resource") or {}
                      for name in self.state.volcano_queues if name != group.queue}
        unused = {name: self._used(groups, name) for name, guarantee in guarantees.items() if guarantee}
        for resource, amount in self._gpus(group).items():
            if resource in capability and mine[resource] + amount > to_units(capability[resource]):
                return "queue"
            reserved = sum(max(to_units(guarantees[name].get(resource, 0)) - used[resource], 0)
                           for name, used in unused.items())
            total = sum(to_units((node.body.get("status") or {}).get("allocatable", {}).get(resource, 0))
                        for node in self.state.nodes)
            if everyone[resource] + amount + reserved > total:
                return "queue"
        return "" if self._placeable(group, leaving) else "nodes"

    def _placeable(self, group: Group, leaving: Sequence[Group]) -> bool:
        """Whether every pod of the group finds a node of its selector with room, all at once."""
        gone = {(g.namespace, g.job.body["metadata"]["name"]) for g in leaving if g.job is not None}
        used: dict[tuple[str, str], float] = defaultdict(float)
        for pod in self.state.pods:
            owner = (pod.namespace, (pod.body["metadata"].get("labels") or {}).get(OWNER_LABEL))
            if (pod.body.get("status") or {}).get("phase") in ("Pending", "Running") and owner not in gone:
                for resource, value in pod_requests(pod.body).items():
                    used[(pod.body["spec"].get("nodeName", ""), resource)] += value
        for member in group.members:
            per_pod = {r: a for r, a in pod_requests({"spec": member}).items() if r not in UNCOUNTED and a}
            for node in self.state.nodes:
                allocatable = (node.body.get("status") or {}).get("allocatable", {})
                if (node_selected(member, node.body["metadata"].get("labels", {}))
                        and node_tolerated(member, node.body)
                        and all(used[(node.name, r)] + a <= to_units(allocatable.get(r, 0)) for r, a in per_pod.items())):
                    for r, a in per_pod.items():
                        used[(node.name, r)] += a
                    break
            else:
                return False
        return True

    def _make_room(self, groups: list[Group], group: Group) -> bool:
        """Reclaim, for a group within its Queue's deserved share: borrowers' work in reclaimable
        Queues over theirs; preempt: lower-priority work in its own Queue. Whole workloads, the
        lowest priority and newest first, only when that is enough."""
        deserved = self._spec(group.queue).get("deserved") or {}
        mine = self._used(groups, group.queue)
        entitled = all(mine[r] + a <= to_units(deserved.get(r, 0)) for r, a in self._gpus(group).items())
        candidates = []
        for other in groups:
            if not other.admitted or other.finished or other is group:
                continue
            if other.queue == group.queue:
                if other.priority < group.priority:
                    candidates.append(other)
            elif entitled and self._spec(other.queue).get("reclaimable", True) and self._over(groups, other.queue):
                candidates.append(other)
        # Lowest priority first, and among equals the newest.
        candidates.sort(key=lambda g: g.created, reverse=True)
        candidates.sort(key=lambda g: g.priority)
        chosen: list[Group] = []
        for victim in candidates:
            chosen.append(victim)
            victim.admitted_flavor = None
            if not self._short(groups, group, chosen):
                for evicted in chosen:
                    self._evict(evicted)
                return True
        for victim in chosen:  # not enough: nobody goes
            victim.admitted_flavor = placed_on(victim.requests, self._flavor(victim))
        return False

    def _over(self, groups: list[Group], queue: str) -> bool:
        deserved = self._spec(queue).get("deserved") or {}
        return any(amount > to_units(deserved.get(r, 0)) for r, amount in self._used(groups, queue).items())

    @staticmethod
    def _flavor(group: Group) -> str:
        return str((group.row.body["metadata"].get("labels") or {}).get(FLAVOR_LABEL, ""))

    def _unplaceable(self, group: Group) -> str:
        return (f"{group.pods}/{group.pods} tasks in gang unschedulable: pod group is not ready, {group.pods} minAvailable. "
                f"Origin reason is {group.name}: 0/{len(self.state.nodes)} nodes are unavailable: "
                f"{len(self.state.nodes)} Insufficient {next(iter(self._gpus(group)), 'cpu')}.")

    # --- Writing what happened ---------------------------------------------------------------------

    def _status(self, group: Workload, phase: str, conditions: list[dict[str, Any]]) -> None:
        body = group.row.body
        body["status"] = {"phase": phase, "conditions": conditions,
                          **({"running": group.pods} if phase == RUNNING else {})}
        self.state.save(group.row, body)

    def _let_in(self, group: Group) -> None:
        group.admitted_flavor = placed_on(group.requests, self._flavor(group))
        self._status(group, RUNNING, [SCHEDULED])

    @staticmethod
    def _scheduled(group: Workload) -> list[dict[str, Any]]:
        """Its Scheduled condition, which Volcano's gang plugin leaves when the group waits again."""
        return [c for c in (group.row.body.get("status") or {}).get("conditions") or [] if c.get("type") == "Scheduled"]

    def _wait(self, group: Group, phase: str, message: str) -> None:
        conditions = [*self._scheduled(group), *([{"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                                                   "message": message}] if message else [])]
        if (group.row.body.get("status") or {}) != {"phase": phase, "conditions": conditions}:
            self._status(group, phase, conditions)

    def _evict(self, group: Group) -> None:
        """Its pods go (Volcano deletes them); it waits to be let in again. A Volcano Job restarts
        (its PodEvicted policy), which counts against its maxRetry."""
        group.admitted_flavor = None
        if group.job is not None:
            for pod in self.state.pods_of(group.namespace, group.job.body["metadata"]["name"]):
                if (pod.body.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    self.state.remove(pod)
                    self.state.pods.remove(pod)
            if is_volcano_job(group.job.body):
                status = group.job.body.setdefault("status", {})
                status.update({"state": {"phase": "Restarting"}, "retryCount": int(status.get("retryCount", 0)) + 1})
                self.state.save(group.job, group.job.body)
        self._status(group, "Pending", self._scheduled(group))

    def finish(self, group: Workload, verdict: str, message: str) -> None:
        """The Job it holds is done: Volcano's PodGroup controller marks it Completed."""
        self._status(group, COMPLETED, [])

    def write_queue_statuses(self, groups: list[Group]) -> None:
        for name, row in self.state.volcano_queues.items():
            allocated: dict[str, float] = defaultdict(float)
            for g in groups:
                if g.admitted and not g.finished and g.queue == name:
                    for resource, amount in g.requests.items():
                        allocated[resource] += amount
            status = {"state": "Open", "allocated": {r: units_text(a) for r, a in sorted(allocated.items())},
                      "running": sum(1 for g in groups if g.queue == name and g.admitted and not g.finished),
                      "pending": sum(1 for g in groups if g.queue == name and not g.admitted and not g.finished)}
            if row.body.get("status") != status:
                row.body["status"] = status
                self.state.save(row, row.body)

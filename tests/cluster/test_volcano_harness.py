"""End-to-end checks of the control plane with Volcano as its queue backend: Volcano's scheduler,
controller manager and /pods/validate webhook (the release build-volcano.sh builds) against the
suite's Kubernetes, with the portal's shipped scheduler configuration, placing gangs on KWOK's
fake GPU nodes and keeping pods out of closed queues."""

from __future__ import annotations

import json
import uuid

import pytest

from .harness import ANNOTATION_OUTCOME, VOLCANO_CONTROLLERS, read_versions, wait_for

pytestmark = pytest.mark.cluster

SCHEDULING = ("scheduling.volcano.sh", "v1beta1")
BUS = ("bus.volcano.sh", "v1alpha1")
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"


@pytest.fixture(scope="module")
def clients(volcano_control_plane):
    import kubernetes.client as k

    api = volcano_control_plane.api_client()
    yield {"core": k.CoreV1Api(api), "batch": k.BatchV1Api(api), "custom": k.CustomObjectsApi(api),
           "ext": k.ApiextensionsV1Api(api)}
    api.close()


@pytest.fixture
def make_team(volcano_control_plane, clients):
    """make_team(gpus, capability): a fake node with `gpus` GPUs in a pool of its own, a namespace,
    and a Volcano Queue capped at `capability` GPUs."""
    made = []

    def make(*, gpus: int, capability: int) -> dict:
        sfx = uuid.uuid4().hex[:6]
        pool, ns, queue = f"vc-{sfx}", f"team-{sfx}", f"team-{sfx}"
        volcano_control_plane.add_gpu_node(f"vc-gpu-{sfx}", labels={"gpu-portal/pool": pool},
                                           allocatable={"nvidia.com/gpu": str(gpus)})
        clients["core"].create_namespace({"metadata": {"name": ns}})
        clients["custom"].create_cluster_custom_object(*SCHEDULING, "queues", {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": queue},
            "spec": {"weight": 1, "reclaimable": True, "capability": {"nvidia.com/gpu": str(capability)}}})
        made.append((ns, queue))
        wait_for(lambda: clients["core"].read_namespaced_service_account("default", ns), timeout=30,
                 message=f"default ServiceAccount in {ns}")
        wait_for(lambda: (clients["custom"].get_cluster_custom_object(*SCHEDULING, "queues", queue).get("status") or {})
                 .get("state") == "Open", timeout=30, message=f"queue {queue} to open")
        return {"namespace": ns, "queue": queue, "pool": pool}

    yield make
    for ns, queue in made:
        clients["core"].delete_namespace(ns)
        clients["custom"].delete_cluster_custom_object(*SCHEDULING, "queues", queue)


def _gang(clients, team, name: str, *, pods: int, gpus: int = 1) -> None:
    """A PodGroup of `pods` members in the team's queue and a batch Job whose pods belong to it, as
    the portal makes a distributed training on Volcano."""
    ns = team["namespace"]
    clients["custom"].create_namespaced_custom_object(*SCHEDULING, ns, "podgroups", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": name},
        "spec": {"minMember": pods, "queue": team["queue"]}})
    res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    clients["batch"].create_namespaced_job(ns, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"completions": pods, "parallelism": pods, "completionMode": "Indexed", "backoffLimit": 0, "template": {
            "metadata": {"annotations": {GROUP_ANNOTATION: name, ANNOTATION_OUTCOME: "Running"}},
            "spec": {"schedulerName": "volcano", "restartPolicy": "Never",
                     "nodeSelector": {"gpu-portal/pool": team["pool"]},
                     "containers": [{"name": "train", "image": "registry.invalid/train:latest",
                                     "resources": {"requests": res, "limits": res}}]}}}})


def _pods(clients, ns: str, job: str) -> list:
    return clients["core"].list_namespaced_pod(ns, label_selector=f"job-name={job}").items


def _running(clients, ns: str, job: str, count: int) -> bool:
    pods = _pods(clients, ns, job)
    return len(pods) == count and all(p.status.phase == "Running" and p.spec.node_name for p in pods)


def _unschedulable(clients, ns: str, group: str) -> bool:
    """The scheduler tried the PodGroup and found it cannot place the whole gang."""
    status = clients["custom"].get_namespaced_custom_object(*SCHEDULING, ns, "podgroups", group).get("status") or {}
    return any(c.get("type") == "Unschedulable" and c.get("status") == "True" for c in status.get("conditions") or [])


def test_volcano_is_the_pinned_release_and_serves_its_queues_and_pod_groups(volcano_control_plane, clients):
    built = (volcano_control_plane.volcano / "versions.txt").read_text()
    assert f"VOLCANO_VERSION={read_versions()['VOLCANO_VERSION']}" in built
    names = {crd.metadata.name for crd in clients["ext"].list_custom_resource_definition().items}
    assert {"queues.scheduling.volcano.sh", "podgroups.scheduling.volcano.sh", "jobs.batch.volcano.sh"} <= names
    assert not any(name.endswith("kueue.x-k8s.io") for name in names)  # one queue backend at a time
    default = clients["custom"].get_cluster_custom_object(*SCHEDULING, "queues", "default")
    assert default["status"]["state"] == "Open"


def test_a_gang_that_fits_runs_all_its_pods_on_the_fake_gpu_node(clients, make_team):
    team = make_team(gpus=2, capability=2)
    _gang(clients, team, "fits", pods=2)
    wait_for(lambda: _running(clients, team["namespace"], "fits", 2), timeout=60, message="both workers running")
    group = clients["custom"].get_namespaced_custom_object(*SCHEDULING, team["namespace"], "podgroups", "fits")
    assert group["status"]["phase"] == "Running"
    assert {p.spec.scheduler_name for p in _pods(clients, team["namespace"], "fits")} == {"volcano"}


def test_a_gang_that_cannot_fit_starts_none_of_its_pods_and_says_why(clients, make_team):
    """Three workers of one GPU each, where the team's node has two (and its queue room for four):
    none is bound (not two of three holding GPUs while waiting for the third), and the PodGroup
    says it is unschedulable."""
    team = make_team(gpus=2, capability=4)
    _gang(clients, team, "too-big", pods=3)

    wait_for(lambda: len(_pods(clients, team["namespace"], "too-big")) == 3
             and _unschedulable(clients, team["namespace"], "too-big"), timeout=60,
             message="the three pods made and the PodGroup saying it is unschedulable")
    assert not [p for p in _pods(clients, team["namespace"], "too-big") if p.spec.node_name]


def test_the_queues_capability_holds_a_second_gang_until_the_first_ends(clients, make_team):
    """The queue is capped at 2 GPUs on a node of 4: a second 2-GPU gang waits while the first
    runs, though the node has room for it, and runs once the first is deleted."""
    team = make_team(gpus=4, capability=2)
    _gang(clients, team, "first", pods=2)
    wait_for(lambda: _running(clients, team["namespace"], "first", 2), timeout=60, message="the first gang running")
    _gang(clients, team, "second", pods=2)
    wait_for(lambda: len(_pods(clients, team["namespace"], "second")) == 2
             and _unschedulable(clients, team["namespace"], "second"), timeout=60,
             message="the second gang's pods made and refused by the scheduler")
    assert not [p for p in _pods(clients, team["namespace"], "second") if p.spec.node_name]

    def allocated() -> str | None:
        status = clients["custom"].get_cluster_custom_object(*SCHEDULING, "queues", team["queue"]).get("status") or {}
        return (status.get("allocated") or {}).get("nvidia.com/gpu")

    wait_for(lambda: allocated() == "2", timeout=30, message="the queue to report its 2 GPUs allocated")
    clients["batch"].delete_namespaced_job("first", team["namespace"], propagation_policy="Foreground")
    wait_for(lambda: _running(clients, team["namespace"], "second", 2), timeout=90, message="the second gang running")


def _queue_state(clients, queue: str) -> str | None:
    return (clients["custom"].get_cluster_custom_object(*SCHEDULING, "queues", queue).get("status") or {}).get("state")


def _command(clients, team, action: str) -> None:
    """Asks Volcano's queue controller to open or close the team's queue, as `vcctl queue operate`
    does, and waits until it has taken the Command (it deletes each one it handles)."""
    queue = clients["custom"].get_cluster_custom_object(*SCHEDULING, "queues", team["queue"])
    cmd = clients["custom"].create_namespaced_custom_object(*BUS, team["namespace"], "commands", {
        "apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
        "metadata": {"generateName": f"{team['queue']}-{action.lower()}-"}, "action": action,
        "target": {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "name": team["queue"],
                   "uid": queue["metadata"]["uid"], "controller": True}})
    name = cmd["metadata"]["name"]
    wait_for(lambda: not [c for c in clients["custom"].list_namespaced_custom_object(
        *BUS, team["namespace"], "commands")["items"] if c["metadata"]["name"] == name],
        timeout=30, message=f"the queue controller to take the {action} Command")


def _create_pod(clients, team, name: str, *, group: str | None, scheduler: str = "volcano"):
    """A bare pod on the team's node, in PodGroup `group` if given: created, or the ApiException."""
    from kubernetes.client.exceptions import ApiException

    annotations = {ANNOTATION_OUTCOME: "Running", **({GROUP_ANNOTATION: group} if group else {})}
    try:
        return clients["core"].create_namespaced_pod(team["namespace"], {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
            "spec": {"schedulerName": scheduler, "nodeSelector": {"gpu-portal/pool": team["pool"]},
                     "containers": [{"name": "c", "image": "registry.invalid/c:1"}]}})
    except ApiException as e:
        return e


def _refusal(result) -> str:
    """The API server's message for a refused create (empty if the pod was made)."""
    from kubernetes.client.exceptions import ApiException

    return json.loads(result.body or "{}").get("message", "?") if isinstance(result, ApiException) else ""


def _group(clients, team, name: str) -> None:
    clients["custom"].create_namespaced_custom_object(*SCHEDULING, team["namespace"], "podgroups", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": name},
        "spec": {"minMember": 1, "queue": team["queue"]}})


def test_a_closed_queue_refuses_new_pods_of_its_groups_in_volcanos_words_and_reopening_lets_them_in(
        clients, make_team):
    """Closing a queue (a CloseQueue Command, which the queue controller handles) keeps new pods
    of its PodGroups out: Volcano's /pods/validate webhook refuses them, and it is the only thing
    that does in 1.10. A team whose queue stays open is not held; OpenQueue lets the first in again.
    The queue holds a PodGroup, so it stays Closing, which the webhook refuses all the same."""
    assert "queue-controller" in VOLCANO_CONTROLLERS.split(",")
    held, other = make_team(gpus=1, capability=1), make_team(gpus=1, capability=1)
    _group(clients, held, "held")
    _group(clients, other, "other")
    assert not _refusal(_create_pod(clients, held, "before", group="held"))

    _command(clients, held, "CloseQueue")
    wait_for(lambda: _queue_state(clients, held["queue"]) in ("Closing", "Closed"), timeout=30,
             message="the held team's queue to close")
    state = _queue_state(clients, held["queue"])
    assert state == "Closing"  # its PodGroup is still in it
    assert _refusal(_create_pod(clients, held, "while-closed", group="held")) == (
        'admission webhook "validatepod.volcano.sh" denied the request: failed :  can only submit job to queue '
        f"with state `Open`, queue `{held['queue']}` status is `{state}`;")
    assert not _refusal(_create_pod(clients, other, "other-team", group="other"))

    _command(clients, held, "OpenQueue")
    wait_for(lambda: _queue_state(clients, held["queue"]) == "Open", timeout=30, message="the held queue to reopen")
    assert not _refusal(_create_pod(clients, held, "after", group="held"))


def test_a_closed_queue_never_holds_pods_another_scheduler_places(clients, make_team):
    """The webhook looks only at pods scheduled by Volcano: in the namespace of a closed queue, a
    pod of the default scheduler is made even when it names the queue's PodGroup, and so is one
    that names none."""
    team = make_team(gpus=1, capability=1)
    _group(clients, team, "held")
    _command(clients, team, "CloseQueue")
    wait_for(lambda: _queue_state(clients, team["queue"]) in ("Closing", "Closed"), timeout=30,
             message="the queue to close")
    assert _refusal(_create_pod(clients, team, "volcano-pod", group="held"))  # the queue is indeed held
    assert not _refusal(_create_pod(clients, team, "default-in-group", group="held", scheduler="default-scheduler"))
    assert not _refusal(_create_pod(clients, team, "default-plain", group=None, scheduler="default-scheduler"))

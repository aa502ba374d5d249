"""Volcano's builders and readers (tenants/queueing/volcano.py): the Queues a team's grants make,
the PodGroup a workload gets, and what the portal reads back, first as pure functions, then on a
real Volcano (tests/cluster's control plane with Volcano as its queue backend)."""

from __future__ import annotations

import contextlib
import uuid

import kubernetes.utils
import pytest

from jobs import kinds
from jobs.manifests import WORKLOAD_LABEL, Placement, WorkloadSpec
from tenants import manifests as m
from tenants.catalog import UnitResource
from tenants.queueing import volcano
from tenants.queueing.base import QueuedWorkload
from tests.cluster.harness import ANNOTATION_OUTCOME, wait_for

H100 = m.FlavorSpec(name="h100-80gb", resource_name="nvidia.com/gpu", capacity=16, node_labels={"gpu": "h100"})
A100 = m.FlavorSpec(name="a100-80gb", resource_name="nvidia.com/gpu", capacity=16, node_labels={"gpu": "a100"})
MIG = m.FlavorSpec(name="a100-1g-10gb", resource_name="nvidia.com/mig-1g.10gb", capacity=56)
CGPU = m.FlavorSpec(name="a10-cgpu", resource_name="aliyun.com/gpu-mem", capacity=32, resources=(
    UnitResource("aliyun.com/gpu-mem", 6), UnitResource("aliyun.com/gpu-core.percentage", 25)))


def team(*quotas: tuple[m.FlavorSpec, int], policy: m.TeamPolicy | None = None, slug: str = "vision") -> m.TeamSpec:
    return m.TeamSpec(slug=slug, uid="uid-1", quotas=tuple(m.FlavorQuota(flavor=f, nominal=n) for f, n in quotas),
                      policy=policy or m.TeamPolicy())


def test_a_team_has_a_queue_per_flavor_deserving_its_guarantee_of_that_flavor_alone():
    """A100 and H100 both ask for nvidia.com/gpu: one Queue for both would let the team run 6 H100s
    on a guarantee of 4, so each flavor's quota is a Queue of its own."""
    queues = volcano.VolcanoBackend().team_objects(team=team((H100, 4), (A100, 2), (MIG, 7), (CGPU, 2)))
    assert [q["metadata"]["name"] for q in queues] == ["vision.h100-80gb", "vision.a100-80gb", "vision.a100-1g-10gb",
                                                       "vision.a10-cgpu"]
    h100, a100, mig, cgpu = queues
    assert h100["kind"] == "Queue" and "namespace" not in h100["metadata"]  # cluster-scoped, as a ClusterQueue
    assert h100["metadata"]["labels"] == {m.MANAGED_BY_LABEL: m.MANAGER, m.TEAM_LABEL: "vision",
                                          volcano.FLAVOR_LABEL: "h100-80gb"}
    assert h100["metadata"]["annotations"] == {m.TEAM_UID_ANNOTATION: "uid-1"}
    # CPU and memory at the team's backstops: Volcano takes a dimension left out as none deserved.
    backstops = {"cpu": "64", "memory": "512Gi"}
    assert h100["spec"] == {"weight": 1, "reclaimable": True, "deserved": {"nvidia.com/gpu": "4", **backstops}}
    assert a100["spec"]["deserved"] == {"nvidia.com/gpu": "2", **backstops}
    assert mig["spec"]["deserved"] == {"nvidia.com/mig-1g.10gb": "7", **backstops}
    assert cgpu["spec"]["deserved"] == {"aliyun.com/gpu-mem": "12", "aliyun.com/gpu-core.percentage": "50", **backstops}


@pytest.mark.parametrize("may_borrow", [True, False])
def test_a_held_teams_queues_are_given_nothing_more_and_what_they_run_is_not_reclaimed(may_borrow):
    spec = m.TeamSpec(slug="vision", uid="uid-1", held=True, policy=m.TeamPolicy(may_borrow=may_borrow),
                      quotas=(m.FlavorQuota(flavor=H100, nominal=4), m.FlavorQuota(flavor=CGPU, nominal=2)))
    h100, cgpu = volcano.VolcanoBackend().team_objects(team=spec)
    assert h100["spec"] == {"weight": 1, "reclaimable": False, "deserved": {"nvidia.com/gpu": "4", "cpu": "64",
                                                                              "memory": "512Gi"},
                            "capability": {"nvidia.com/gpu": "0"}}
    assert cgpu["spec"]["capability"] == {"aliyun.com/gpu-mem": "0", "aliyun.com/gpu-core.percentage": "0"}


@pytest.mark.parametrize(("may_borrow", "lends_idle", "capped", "reserved"),
                         [(True, True, False, False), (False, True, True, False), (True, False, False, True),
                          (False, False, True, True)])
def test_a_team_that_may_not_borrow_is_capped_at_its_guarantee_and_one_that_does_not_lend_reserves_it(
        may_borrow, lends_idle, capped, reserved):
    spec = team((H100, 4), policy=m.TeamPolicy(may_borrow=may_borrow, lends_idle=lends_idle))
    queue = volcano.make_queue(team=spec, quota=spec.quotas[0])
    assert ("capability" in queue["spec"]) == capped
    assert ("guarantee" in queue["spec"]) == reserved
    if capped:
        assert queue["spec"]["capability"] == {"nvidia.com/gpu": "4"}
    if reserved:
        assert queue["spec"]["guarantee"] == {"resource": {"nvidia.com/gpu": "4"}}


def test_a_pod_group_names_its_queue_its_gang_its_tier_and_its_flavor():
    group = volcano.make_pod_group(name="train-7", namespace="gpu-vision", queue="vision", min_member=4,
                                   priority_class="gpu-portal-normal", flavor="h100-80gb", labels={"a": "b"})
    assert group["spec"] == {"minMember": 4, "queue": "vision", "priorityClassName": "gpu-portal-normal"}
    assert group["metadata"]["labels"] == {"a": "b", volcano.FLAVOR_LABEL: "h100-80gb"}
    assert volcano.pod_fields(group="train-7") == ({volcano.GROUP_ANNOTATION: "train-7"}, {"schedulerName": "volcano"})


def group_in(phase: str, *, message: str = "", reason: str = "NotEnoughResources", members: int = 3) -> dict:
    conditions = [{"type": "Unschedulable", "status": "True", "reason": reason, "message": message}] if message else []
    return {"metadata": {"name": "g", "labels": {volcano.FLAVOR_LABEL: "h100-80gb"}}, "spec": {"minMember": members},
            "status": {"phase": phase, "conditions": conditions}}


def test_admission_says_why_a_gang_waits_in_the_portals_words_and_which_flavor_a_running_one_is_on():
    unfit = volcano.admission([group_in("Inqueue", message=(
        "1/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable; Pending: 1 Unschedulable, "
        "2 Schedulable. Origin reason is w-2: 0/2 nodes are unavailable: 2 Insufficient nvidia.com/gpu."))])
    assert unfit.pending
    assert unfit.waiting == ("Waiting for room: Volcano cannot place all 3 of its pods at once yet, within the team's "
                             "queue and on the flavor's nodes; it starts when that much frees up. The nodes say: 0/2 "
                             "nodes are unavailable: 2 Insufficient nvidia.com/gpu.")
    not_let_in = volcano.admission([group_in("Pending", members=1)])
    assert not_let_in.pending and not_let_in.waiting.startswith("Waiting for quota: Volcano has not let it into")
    assert "its pod now" in not_let_in.waiting
    running = volcano.admission([group_in("Running")])
    assert not running.pending and running.flavors == (("", "h100-80gb"),)
    assert volcano.admission([]).pending  # not seen yet
    assert volcano.admission([]).waiting == "Waiting for Volcano to see it"


def test_usage_gives_each_team_its_guarantee_use_and_borrowing_and_shares_the_borrowing_among_lenders():
    def queue(name, deserved, allocated, *, lends=True):
        spec: dict[str, dict] = {"deserved": {"nvidia.com/gpu": str(deserved), "cpu": "64", "memory": "512Gi"}}
        if not lends:
            spec["guarantee"] = {"resource": spec["deserved"]}
        return {"metadata": {"name": name, "labels": {m.TEAM_LABEL: name, volcano.FLAVOR_LABEL: "h100"}}, "spec": spec,
                "status": {"allocated": {"nvidia.com/gpu": str(allocated), "cpu": "4"}}}

    found = volcano.queue_usage([queue("vision", 4, 7), queue("nlp", 4, 1), queue("speech", 2, 0),
                                 queue("audio", 4, 0, lends=False)])
    vision, nlp, speech, audio = (found[t][0] for t in ("vision", "nlp", "speech", "audio"))
    assert (vision.flavor, vision.guaranteed, vision.in_use, vision.borrowed, vision.lent) == ("h100", 4, 7, 3, 0)
    assert [row.resource for row in found["vision"]] == ["nvidia.com/gpu"]  # its CPU and memory are not a flavor's
    assert (nlp.idle, speech.idle, audio.idle) == (3, 2, 0)  # audio does not lend
    assert (nlp.lent, speech.lent, audio.lent) == (2, 1, 0)  # vision's 3 borrowed, by idle guarantee 3:2
    assert set(volcano.queue_usage([queue("vision", 4, 7), queue("nlp", 4, 1)], slugs=["nlp"])) == {"nlp"}
    assert not any(row.held for rows in found.values() for row in rows)


@pytest.mark.parametrize("may_borrow", [True, False])
def test_a_held_teams_queue_reads_as_held_and_a_capped_one_does_not(may_borrow):
    def usage(*, held: bool, nominal: int) -> bool:
        spec = m.TeamSpec(slug="vision", uid="uid-1", held=held, policy=m.TeamPolicy(may_borrow=may_borrow),
                          quotas=(m.FlavorQuota(flavor=H100, nominal=nominal),))
        (queue,) = volcano.VolcanoBackend().team_objects(team=spec)
        (row,) = volcano.queue_usage([queue])["vision"]
        return row.held

    assert usage(held=True, nominal=4)
    assert not usage(held=False, nominal=4) and not usage(held=False, nominal=0)  # a guarantee of 0 is not a hold


def test_waiting_groups_are_listed_in_the_order_volcano_tries_them():
    def group(name, queue, created, tier="gpu-portal-normal", phase="Pending"):
        return {"metadata": {"name": name, "namespace": "gpu-vision", "creationTimestamp": created},
                "spec": {"queue": queue, "priorityClassName": tier}, "status": {"phase": phase}}

    groups = [group("old", "vision.h100", "2026-11-28T09:00:00Z"), group("new", "vision.h100", "2026-11-28T09:05:00Z"),
              group("urgent", "vision.h100", "2026-11-28T09:10:00Z", tier="gpu-portal-high"),
              group("running", "vision.h100", "2026-11-28T08:00:00Z", phase="Running"),
              group("on-a100", "vision.a100", "2026-11-28T09:07:00Z")]
    order = volcano.pending_groups(groups, priorities={t.object_name: t.value for t in m.PRIORITY_TIERS})
    # Each counted in its own flavor's queue: the A100 one waits behind nothing.
    assert [(e.owners, e.position) for e in order] == [(("urgent",), 0), (("old",), 1), (("new",), 2), (("on-a100",), 0)]


# --- On a real Volcano ---------------------------------------------------------------------------------


SCHEDULING = ("scheduling.volcano.sh", "v1beta1")
BATCH_JOBS = ("batch.volcano.sh", "v1alpha1")


@pytest.fixture(scope="module")
def custom(volcano_control_plane):
    """Clients of the Volcano control plane, whose pods may name the portal's priority tiers."""
    import kubernetes.client as k

    api = volcano_control_plane.api_client()
    for tier in m.PRIORITY_TIERS:
        with contextlib.suppress(kubernetes.utils.FailToCreateError):  # made by an earlier module of the session
            kubernetes.utils.create_from_dict(api, m.make_priority_class(tier=tier))
    yield {"custom": k.CustomObjectsApi(api), "core": k.CoreV1Api(api), "batch": k.BatchV1Api(api)}
    api.close()


@pytest.mark.cluster
def test_on_volcano_a_teams_queue_admits_its_guarantee_and_the_portal_reads_why_the_rest_waits(
        volcano_control_plane, custom):
    """A team granted 2 H100s that may not borrow, on a node of 4: its Queue is accepted and opens;
    a 2-worker gang runs and is read as running on its flavor, with 2 GPUs in use of 2; a second
    gang waits, read as waiting for room, and stands first in the team's line."""
    sfx = uuid.uuid4().hex[:6]
    spec = team((H100, 2), policy=m.TeamPolicy(may_borrow=False), slug=f"vc-{sfx}")
    pool = f"h100-{sfx}"
    volcano_control_plane.add_gpu_node(f"vc-h100-{sfx}", labels={"gpu": pool}, allocatable={"nvidia.com/gpu": "4"})
    api, core, batch = custom["custom"], custom["core"], custom["batch"]
    api.create_cluster_custom_object(*SCHEDULING, "queues", volcano.make_queue(team=spec, quota=spec.quotas[0]))
    queue = volcano.queue_name(spec.cluster_queue, H100.name)
    core.create_namespace({"metadata": {"name": spec.namespace}})
    wait_for(lambda: core.read_namespaced_service_account("default", spec.namespace), timeout=30,
             message="the namespace's default ServiceAccount")

    def read_queue():
        return api.get_cluster_custom_object(*SCHEDULING, "queues", queue)

    wait_for(lambda: (read_queue().get("status") or {}).get("state") == "Open", timeout=30, message="the queue to open")

    def launch(name):
        group = volcano.make_pod_group(name=name, namespace=spec.namespace, queue=queue, min_member=2,
                                       priority_class="gpu-portal-normal", flavor=H100.name, labels=spec.labels)
        api.create_namespaced_custom_object(*SCHEDULING, spec.namespace, "podgroups", group)
        annotations, fields = volcano.pod_fields(group=name)
        res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
        batch.create_namespaced_job(spec.namespace, {"metadata": {"name": name}, "spec": {
            "completions": 2, "parallelism": 2, "completionMode": "Indexed", "backoffLimit": 0, "template": {
                "metadata": {"annotations": {**annotations, ANNOTATION_OUTCOME: "Running"}},
                "spec": {**fields, "restartPolicy": "Never", "nodeSelector": {"gpu": pool}, "containers": [
                    {"name": "w", "image": "registry.invalid/w:1", "resources": {"requests": res, "limits": res}}]}}}})

    def read_group(name):
        return api.get_namespaced_custom_object(*SCHEDULING, spec.namespace, "podgroups", name)

    launch("first")
    wait_for(lambda: not volcano.admission([read_group("first")]).pending, timeout=60, message="the first gang running")
    assert volcano.admission([read_group("first")]).flavors == (("", H100.name),)
    wait_for(lambda: volcano.queue_usage([read_queue()])[spec.slug][0].in_use == 2, timeout=30,
             message="the queue's 2 GPUs in use")
    usage = volcano.queue_usage([read_queue()])[spec.slug]
    assert [(u.resource, u.guaranteed, u.in_use, u.borrowed) for u in usage] == [("nvidia.com/gpu", 2, 2, 0)]

    launch("second")

    def second_pods():
        return core.list_namespaced_pod(spec.namespace, label_selector="job-name=second").items

    wait_for(lambda: len(second_pods()) == 2 and volcano.admission([read_group("second")]).waiting.startswith(
        "Waiting for room"), timeout=60, message="the second gang's pods made and read as waiting for room")
    assert not [p for p in second_pods() if p.spec.node_name]
    groups = api.list_namespaced_custom_object(*SCHEDULING, spec.namespace, "podgroups")["items"]
    assert [e.owners for e in volcano.pending_groups(groups, priorities={})] == [("second",)]
    core.delete_namespace(spec.namespace)
    api.delete_cluster_custom_object(*SCHEDULING, "queues", queue)


def queued(spec: WorkloadSpec, *, team_queue: str, flavor: str) -> QueuedWorkload:
    return QueuedWorkload(name=spec.name, namespace=spec.namespace, team_queue=team_queue, flavor=flavor,
                          pods_together=spec.workers, priority_class="gpu-portal-normal", labels=spec.labels)


SPEC = WorkloadSpec(workload_id=7, name="wl-7", namespace="vision", team="vision", kind="distributed",
                    image="registry.invalid/train:1", command=(), args=(), env=(), gpu=(("nvidia.com/gpu", 1),),
                    workers=3, placements=(Placement(node_labels=(("gpu", "h100"),)),),
                    indexed_pod_name=volcano.VolcanoBackend.indexed_pod_name)


def test_a_training_shaped_for_volcano_is_a_volcano_job_whose_workers_start_together_and_restart_after_an_eviction():
    built = kinds.workload_objects(spec=SPEC)  # the site runs Kueue: a suspended Indexed Job
    service, job = volcano.shape(built, workload=queued(SPEC, team_queue="vision", flavor="h100-80gb"))
    assert service == built[0]  # untouched: the workers' headless Service
    assert (job["apiVersion"], job["kind"]) == volcano.VolcanoBackend().owner(("batch/v1", "Job")) == (volcano.BATCH, "Job")
    assert job["metadata"]["labels"] == {**SPEC.labels, volcano.FLAVOR_LABEL: "h100-80gb"}  # its PodGroup's too
    spec = job["spec"]
    assert (spec["queue"], spec["minAvailable"], spec["schedulerName"]) == ("vision.h100-80gb", 3, "volcano")
    assert spec["policies"] == [{"event": "PodEvicted", "action": "RestartJob"}, {"event": "PodFailed", "action": "TerminateJob"}]
    assert spec["plugins"] == {"svc": ["--disable-network-policy=true"]}  # host names in the Service's subdomain
    (task,) = spec["tasks"]
    assert task["name"] == "worker" and task["replicas"] == 3
    pod = task["template"]["spec"]
    assert pod["schedulerName"] == "volcano" and pod["nodeSelector"] == {"gpu": "h100"}
    assert pod["activeDeadlineSeconds"] == SPEC.max_runtime_seconds  # the run time limit, on each pod
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["MASTER_ADDR"]["value"] == "wl-7-worker-0.wl-7"  # the first worker as Volcano names it
    assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.annotations['volcano.sh/task-index']"
    built_env = {e["name"] for e in built[1]["spec"]["template"]["spec"]["containers"][0].get("env", [])}
    assert "JOB_COMPLETION_INDEX" not in built_env and built[1]["spec"]["suspend"] is True  # a copy: the build is unchanged


def test_a_server_shaped_for_volcano_gets_its_pod_group_just_before_it_and_its_pods_in_that_group():
    spec = WorkloadSpec(**{**SPEC.__dict__, "kind": "inference", "port": 8000, "workers": 2})
    built = kinds.workload_objects(spec=spec)
    shaped = volcano.shape(built, workload=queued(spec, team_queue="vision", flavor="h100-80gb"))
    kinds_in_order = [obj["kind"] for obj in shaped]
    group = shaped[kinds_in_order.index("Deployment") - 1]
    assert group["kind"] == "PodGroup" and group["spec"]["queue"] == "vision.h100-80gb"
    assert group["spec"]["minMember"] == 2 and group["metadata"]["name"] == "wl-7"
    deployment = shaped[kinds_in_order.index("Deployment")]
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"][volcano.GROUP_ANNOTATION] == "wl-7"
    assert template["spec"]["schedulerName"] == "volcano"
    assert volcano.GROUP_ANNOTATION not in (built[kinds_in_order.index("Deployment") - 1]["spec"]["template"]
                                            .get("metadata", {}).get("annotations", {}))  # a copy


@pytest.mark.cluster
@pytest.mark.parametrize(("room", "runs"), [(4, True), (2, False)], ids=["fits", "one-short"])
def test_on_volcano_a_distributed_training_the_portal_builds_starts_all_its_workers_or_none(
        volcano_control_plane, custom, room, runs):
    """The portal's own distributed training (jobs.kinds' objects, shaped for Volcano) of 3 workers
    of one GPU: on a node with 4 GPUs all three run; with 2, none is bound (the gang waits whole)."""
    sfx = uuid.uuid4().hex[:6]
    spec_team = team((H100, 4), slug=f"vd-{sfx}")
    pool = f"h100-{sfx}"
    volcano_control_plane.add_gpu_node(f"vd-h100-{sfx}", labels={"gpu": pool}, allocatable={"nvidia.com/gpu": str(room)})
    api, core = custom["custom"], custom["core"]
    api.create_cluster_custom_object(*SCHEDULING, "queues", volcano.make_queue(team=spec_team, quota=spec_team.quotas[0]))
    core.create_namespace({"metadata": {"name": spec_team.namespace}})
    wait_for(lambda: core.read_namespaced_service_account("default", spec_team.namespace), timeout=30,
             message="the namespace's default ServiceAccount")
    spec = WorkloadSpec(workload_id=7, name="wl-7", namespace=spec_team.namespace, team=spec_team.slug,
                        kind="distributed", image="registry.invalid/train:1", command=(), args=(), env=(),
                        gpu=(("nvidia.com/gpu", 1),), cpu=1, memory_gib=1, workers=3,
                        placements=(Placement(node_labels=(("gpu", pool),)),),
                        annotations=((ANNOTATION_OUTCOME, "Running"),))
    objects = volcano.shape(kinds.workload_objects(spec=spec),
                            workload=queued(spec, team_queue=spec_team.cluster_queue, flavor=H100.name))
    for obj in objects:
        if obj["apiVersion"] == volcano.BATCH:
            api.create_namespaced_custom_object(*BATCH_JOBS, spec.namespace, "jobs", obj)
        else:
            kubernetes.utils.create_from_dict(core.api_client, obj, namespace=spec.namespace)

    def group():  # made by Volcano's job controller, with the Job's labels
        groups = api.list_namespaced_custom_object(*SCHEDULING, spec.namespace, "podgroups")["items"]
        return next((g for g in groups if g["metadata"].get("labels", {}).get(WORKLOAD_LABEL) == "7"), None)

    def pods():
        return core.list_namespaced_pod(spec.namespace, label_selector=f"{WORKLOAD_LABEL}=7").items

    if runs:
        wait_for(lambda: len(pods()) == 3 and all(p.status.phase == "Running" for p in pods()), timeout=60,
                 message="all three workers running")
        assert sorted(p.spec.hostname for p in pods()) == [f"wl-7-worker-{i}" for i in range(3)]  # svc plugin's
        assert {p.spec.subdomain for p in pods()} == {spec.service_name}
        assert not volcano.admission([group()]).pending
    else:
        wait_for(lambda: len(pods()) == 3 and group() is not None
                 and volcano.admission([group()]).waiting.startswith("Waiting for room"),
                 timeout=60, message="all three workers made and the gang read as waiting for room")
        assert not [p for p in pods() if p.spec.node_name]
    core.delete_namespace(spec.namespace)
    api.delete_cluster_custom_object(*SCHEDULING, "queues", volcano.queue_name(spec_team.cluster_queue, H100.name))


"""Priority tiers on both clusters: a team's high priority makes room only through Kueue, by its
rules inside the team's own queue; a pod never evicts another team's pod through
kube-scheduler. And a pod PriorityClass from before, which still preempts, is recreated.

The scenario that matters is a node fuller than Kueue knows: quota is a number per flavor, not a
node, so Kueue admits a workload whose pod then finds no room (a node down, a flavor's capacity
set above its nodes). kube-scheduler's own preemption knows no teams: a pending pod whose class
preempts evicts any lower-priority pod on the node, another team's included."""

from __future__ import annotations

import time
from typing import Any

import pytest

from jobs import manifests as job_manifests
from jobs import services as job_services
from jobs import sync
from jobs.kinds import training
from jobs.models import Priority, Workload, WorkloadKind
from portal.kube import KubeError, NodeSpec, ObjectRef, gateway
from portal.kube.simulated import SimulatedGateway
from tenants import manifests, reconcile, services
from tenants.models import Flavor, Team
from tenants.queueing import kueue
from tests.contract.scenarios import HOLD, existing, launch
from tests.helpers import ensure_priced

pytestmark = pytest.mark.django_db

PRIORITY_CLASS = "scheduling.k8s.io/v1"
HIGH = manifests.PRIORITY_TIERS[2]


def pods_of(team: Team, workload_id: int | None = None) -> list[dict[str, Any]]:
    labels = {job_manifests.WORKLOAD_LABEL: str(workload_id)} if workload_id else None
    return gateway().list("v1", "Pod", namespace=team.namespace, labels=labels)[0]


def unschedulable(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions", []))


def running_untouched(pod: dict[str, Any]) -> bool:
    """Running, not being deleted, and not marked as a preemption victim."""
    conditions = (pod.get("status") or {}).get("conditions", [])
    return (pod["status"].get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
            and not any(c["type"] == "DisruptionTarget" and c["status"] == "True" for c in conditions))


@pytest.fixture
def full_node(cluster, site, django_capture_on_commit_callbacks) -> Any:
    """A flavor whose one node holds 2 GPUs while the portal grants 4 of it: two teams of 2 each."""
    with django_capture_on_commit_callbacks(execute=True):
        flavor = services.flavor_save(actor=site.admin, flavor=Flavor(
            name=cluster.unique("Small"), slug=cluster.unique("small"), resource_name="nvidia.com/gpu", gpu_model="L4",
            capacity_units=4, node_labels={"gpu-portal.io/test-flavor": cluster.unique("small")},
        ))
    ensure_priced(flavor)
    teams = {}
    for name in ("alpha", "beta"):
        team = site.team(name)
        lead = team.memberships.get().user
        with django_capture_on_commit_callbacks(execute=True):
            request = services.quota_request_create(requester=lead, team=team, lines=[services.LineInput(flavor=flavor, units=2)],
                                                    justification="contract")
            services.quota_request_approve(quota_request=request, approver=site.admin)
        team.refresh_from_db()
        teams[name] = (team, lead)
    template = job_services.template_create(
        user=site.admin, slug=cluster.unique("prio-train"), name="Train", kind=WorkloadKind.TRAINING, flavors=[flavor],
        image="registry.example.com/ml/runtime:1", command=["python", "main.py"], default_cpu=1, default_memory_gib=1,
        allowed_priorities=list(Priority.values),
    )
    if isinstance(cluster.gateway, SimulatedGateway):
        # The simulated cluster makes nodes from the catalog (4 GPUs of this flavor): take them
        # away, so that, as on the real one, the flavor's only node is the one of 2 GPUs below.
        others = [n for n in cluster.gateway.list("v1", "Node")[0]
                  if n["metadata"]["labels"].get("gpu-portal.io/test-flavor") != flavor.slug]
        cluster.gateway.expect_nodes([NodeSpec(name=n["metadata"]["name"], labels=n["metadata"]["labels"],
                                               allocatable=n["status"]["allocatable"]) for n in others])
    cluster.add_gpu_node(cluster.unique("small-node"), labels={"gpu-portal.io/test-flavor": flavor.slug},
                         allocatable={"nvidia.com/gpu": 2})
    return flavor, teams, template


def test_a_high_priority_pod_on_a_full_node_never_evicts_another_teams_running_pod(
    cluster, full_node, settings, django_capture_on_commit_callbacks,
):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    flavor, teams, template = full_node
    (alpha, alpha_lead), (beta, beta_lead) = teams["alpha"], teams["beta"]
    low = launch(beta, beta_lead, template, flavor, django_capture_on_commit_callbacks, units=2, priority=Priority.LOW)
    cluster.wait_for(lambda: [p for p in pods_of(beta, low.pk) if running_untouched(p)], what="beta's low job to run")
    (victim,) = pods_of(beta, low.pk)

    high = launch(alpha, alpha_lead, template, flavor, django_capture_on_commit_callbacks, units=2, priority=Priority.HIGH)
    assert high.phase == Workload.Phase.QUEUED, high.reason
    # Kueue admits it (alpha's own 2 are free), and its pod finds the node full.
    pending = cluster.wait_for(lambda: [p for p in pods_of(alpha, high.pk) if unschedulable(p)],
                               what="alpha's high pod to be unschedulable on the full node")
    assert pending[0]["spec"]["priorityClassName"] == "gpu-portal-high"
    if cluster.name == "real":  # the API server copies the class's policy and value into the pod
        assert (pending[0]["spec"]["preemptionPolicy"], pending[0]["spec"]["priority"]) == ("Never", 10000)

    # The scheduler retries a pending pod (at once, then with backoff): watch for ten seconds,
    # longer than the control below takes to see the eviction.
    for _ in range(20):
        if cluster.name == "real":
            time.sleep(0.5)
        else:
            cluster.gateway.advance(1)
        (still,) = pods_of(beta, low.pk)
        assert still["metadata"]["uid"] == victim["metadata"]["uid"] and running_untouched(still), still.get("status")
        assert all(p["status"].get("phase") == "Pending" for p in pods_of(alpha, high.pk))
    sync.sync_all()
    low.refresh_from_db()
    assert low.phase == Workload.Phase.RUNNING


def _old_high_class() -> dict[str, Any]:
    return {**manifests.make_priority_class(tier=HIGH), "preemptionPolicy": "PreemptLowerPriority"}


def _set_class(obj: dict[str, Any]) -> None:
    ref = ObjectRef(PRIORITY_CLASS, "PriorityClass", obj["metadata"]["name"])
    gateway().delete(ref)
    gateway().apply(obj)


def test_a_pod_priority_class_that_still_preempts_is_recreated_by_the_periodic_pass(cluster, site):
    ref = ObjectRef(PRIORITY_CLASS, "PriorityClass", HIGH.object_name)
    _set_class(_old_high_class())
    with pytest.raises(KubeError) as refused:  # why the pass must recreate it: no update may change the policy
        gateway().apply(manifests.make_priority_class(tier=HIGH))
    assert refused.value.status == 422 and "preemptionPolicy" in str(refused.value)

    repaired = reconcile.cluster_reconcile()

    assert f"PriorityClass {HIGH.object_name}" in repaired.applied
    assert not [key for key in repaired.errors if "PriorityClass" in key]
    live = existing(ref)
    assert (live["preemptionPolicy"], live["value"]) == ("Never", 10000)
    assert f"PriorityClass {HIGH.object_name}" not in reconcile.cluster_reconcile().applied


def test_the_platform_reconcile_recreates_a_preempting_class_too(cluster, site):
    _set_class(_old_high_class())
    reconcile.platform_reconcile()
    assert existing(ObjectRef(PRIORITY_CLASS, "PriorityClass", HIGH.object_name))["preemptionPolicy"] == "Never"


def test_a_priority_class_the_portal_did_not_create_is_not_deleted(cluster, site):
    name = cluster.unique("someone-elses")
    theirs = {"apiVersion": PRIORITY_CLASS, "kind": "PriorityClass", "metadata": {"name": name},
              "value": 5, "preemptionPolicy": "PreemptLowerPriority"}
    gateway().apply(theirs, field_manager="someone-by-hand")
    reconcile.cluster_reconcile()
    assert existing(ObjectRef(PRIORITY_CLASS, "PriorityClass", name))["preemptionPolicy"] == "PreemptLowerPriority"
    gateway().delete(ObjectRef(PRIORITY_CLASS, "PriorityClass", name))


# --- Why the test above can fail: the same full node with a class that preempts ------------------


@pytest.mark.parametrize("cluster", [pytest.param("real", marks=pytest.mark.cluster)], indirect=True)
def test_on_the_real_scheduler_a_preempting_class_would_evict_the_other_teams_pod(
    cluster, full_node, settings, django_capture_on_commit_callbacks,
):
    """The control: what the portal's PriorityClasses did before. A pod outside Kueue (a Job with no
    queue) at a class that preempts, on the same full node, makes kube-scheduler evict beta's pod."""
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    flavor, teams, template = full_node
    (alpha, _), (beta, beta_lead) = teams["alpha"], teams["beta"]
    low = launch(beta, beta_lead, template, flavor, django_capture_on_commit_callbacks, units=2, priority=Priority.LOW)
    cluster.wait_for(lambda: [p for p in pods_of(beta, low.pk) if running_untouched(p)], what="beta's low job to run")
    (victim,) = pods_of(beta, low.pk)
    preempting = cluster.unique("preempting")
    gateway().apply({"apiVersion": PRIORITY_CLASS, "kind": "PriorityClass", "metadata": {"name": preempting},
                     "value": 10000, "preemptionPolicy": "PreemptLowerPriority"})
    try:
        job = training.make_training_job(spec=job_manifests.WorkloadSpec(
            workload_id=999999, name="outside-kueue", namespace=alpha.namespace, team=alpha.slug, kind="training",
            image="registry.example.com/ml/runtime:1", command=("true",), args=(), env=(), gpu=(("nvidia.com/gpu", 2),),
            cpu=1, memory_gib=1, annotations=tuple(HOLD.items()),  # no queue's labels: Kueue leaves it alone
        ))
        assert not {kueue.QUEUE_LABEL, kueue.PRIORITY_LABEL} & set(job["metadata"]["labels"])
        job["spec"]["suspend"] = False
        job["spec"]["template"]["spec"] |= {"priorityClassName": preempting, "nodeSelector": dict(flavor.node_labels)}
        gateway().apply(job)

        def evicted() -> bool:
            now = [p for p in pods_of(beta, low.pk) if p["metadata"]["uid"] == victim["metadata"]["uid"]]
            return not now or not running_untouched(now[0])

        cluster.wait_for(evicted, what="kube-scheduler to preempt beta's pod for alpha's", timeout=60)
    finally:
        gateway().delete(ObjectRef("batch/v1", "Job", "outside-kueue", alpha.namespace))
        gateway().delete(ObjectRef(PRIORITY_CLASS, "PriorityClass", preempting))

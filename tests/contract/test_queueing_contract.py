"""The queueing contract on every queue backend: the same scenarios and assertions, through the
portal's own services, on the simulated cluster, on a real Kueue and on a real Volcano.

Each says what a user sees (a workload's phase after a sync, its pods bound or not) and what the
team pass keeps true, never a backend's own objects, so one scenario holds both backends to it."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from billing import periods
from billing.budgets import services as budgets
from jobs import selectors as job_selectors
from jobs import services as job_services
from jobs import sync
from jobs.models import Priority, Workload
from portal.kube import NodeSpec, ObjectRef, gateway, ref_of
from portal.kube.simulated import SimulatedGateway
from tenants import desired, queueing, reconcile
from tenants import services as tenant_services
from tenants.queueing.base import HELD_WAITING
from tests.billing.budget_helpers import priced, use
from tests.contract.conftest import clusters
from tests.contract.scenarios import HOLD, QUICK, launch, pods_of, queue_usage, running
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


cluster = clusters("simulated", "simulated-volcano", "real", "volcano")


@pytest.fixture(autouse=True)
def the_sites_node_alone(cluster, site):
    """The simulated cluster also makes nodes from the catalog (8 GPUs of the site's flavor): take
    them away, so that, as on the real one, the flavor's only node is the site's of 8."""
    if isinstance(cluster.gateway, SimulatedGateway):
        kept = cluster.unique("gpu-node")
        cluster.gateway.expect_nodes([
            NodeSpec(name=n["metadata"]["name"], labels=n["metadata"]["labels"], allocatable=n["status"]["allocatable"],
                     taints=(n.get("spec") or {}).get("taints") or ())
            for n in cluster.gateway.list("v1", "Node")[0] if n["metadata"]["name"] == kept])


def waiting(workload: Workload) -> bool:
    """The workload reads queued and none of its pods is bound to a node."""
    sync.sync_all()
    workload.refresh_from_db()
    return workload.phase == Workload.Phase.QUEUED and not [p for p in pods_of(workload) if p["spec"].get("nodeName")]


def capped(site, team, capture):
    """The team may not borrow: its guarantee is all it gets."""
    with capture(execute=True):
        tenant_services.team_update(actor=site.admin, team=team, may_borrow=False)
    return team


def stop(workload: Workload, capture) -> None:
    with capture(execute=True):
        job_services.workload_stop(user=workload.owner, workload=workload)


def test_quota_admits_what_fits_and_the_rest_waits_until_it_frees(cluster, site, templates, settings,
                                                                 django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    capture = django_capture_on_commit_callbacks
    team = capped(site, site.team("quota", gpus=2), capture)
    lead = team.memberships.get().user
    first = launch(team, lead, templates["training"], site.flavor, capture, units=2)
    cluster.wait_for(lambda: running(first), what="the first training, within the team's 2 GPUs, to run")
    second = launch(team, lead, templates["training"], site.flavor, capture, units=2)
    cluster.wait_for(lambda: waiting(second), what="the second training, beyond the team's quota, to wait")
    assert second.reason.startswith("Waiting"), second.reason
    # It keeps waiting while the first runs, and starts once the first is stopped.
    assert waiting(second) and running(first)
    stop(first, capture)
    cluster.wait_for(lambda: running(second), what="the second training to run once the first's GPUs are free")


def test_a_distributed_training_that_cannot_fit_all_its_workers_starts_none(cluster, site, templates, settings,
                                                                           django_capture_on_commit_callbacks):
    """Of the node's 8 GPUs a training holds 6; a distributed training of 2 workers of 2 GPUs (4)
    waits whole, none of its workers bound, and starts all of them once the 6 are free."""
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    capture = django_capture_on_commit_callbacks
    team = site.team("gang", gpus=8)
    lead = team.memberships.get().user
    big = launch(team, lead, templates["training"], site.flavor, capture, units=6)
    cluster.wait_for(lambda: running(big), what="the 6-GPU training to run")
    gang = launch(team, lead, templates["distributed"], site.flavor, capture, units=2, parameters={"workers": 2})
    cluster.wait_for(lambda: waiting(gang), what="the distributed training to wait whole")
    assert waiting(gang)  # still none bound on a second look
    stop(big, capture)
    cluster.wait_for(lambda: running(gang) and len(pods_of(gang)) == 2, what="both workers to run together")


def test_a_held_team_starts_nothing_new_and_what_runs_goes_on_until_the_hold_is_lifted(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    """Billing's hard stop holds a team (200 USD spent of a 100 USD budget; the portal then refuses
    its launches): a training that waited for the team's quota before the hold keeps waiting when
    the quota frees, what runs goes on, and it starts once the budget is raised."""
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    capture = django_capture_on_commit_callbacks
    team = capped(site, site.team("hold", gpus=2), capture)
    lead = team.memberships.get().user
    first = launch(team, lead, templates["training"], site.flavor, capture, units=1)
    second = launch(team, lead, templates["training"], site.flavor, capture, units=1)
    waits = launch(team, lead, templates["training"], site.flavor, capture, units=1)
    cluster.wait_for(lambda: running(first) and running(second) and waiting(waits),
                     what="two trainings running on the team's 2 GPUs and a third waiting")

    finance = UserFactory.create(username=cluster.unique("fin"), is_finance=True)
    priced(site.flavor)
    use(team, site.flavor, gpu_hours=20, at=periods.hour_floor(timezone.now()))
    with capture(execute=True):
        budgets.budget_set(actor=finance, team=team, amount="100", currency="USD", hard_stop=True)
    stop(first, capture)
    cluster.wait_for(lambda: not pods_of(first) and queue_usage(team.slug, site.flavor.slug)[0] == 1,
                     what="the stopped training's pod to go and the team's queue to count 1 GPU in use")
    assert waiting(waits) and running(second)  # the freed GPU is not given to held work; what runs goes on
    cluster.wait_for(lambda: waiting(waits) and job_selectors.why_waiting(workload=waits).reason == HELD_WAITING,
                     what="the held training's page to say its team's queue is on hold")
    assert waits.reason == HELD_WAITING  # the lists and the API say it too, on every backend

    with capture(execute=True):
        budgets.budget_set(actor=finance, team=team, amount="1000", currency="USD", hard_stop=True)
    cluster.wait_for(lambda: running(waits), what="the held training to run once the hold is lifted")


def test_the_team_pass_repairs_a_team_queue_changed_behind_its_back_and_leaves_others_alone(
        cluster, site, django_capture_on_commit_callbacks):
    team = site.team("drift", gpus=3)
    _, spec = desired.team_specs([team.pk])[team.pk]
    kind = queueing.backend().team_queue_kind
    queue = next(obj for obj in desired.team_objects(spec) if (obj["apiVersion"], obj["kind"]) == kind)
    ref = ref_of(queue)
    # Someone edits the team's queue: its whole spec replaced by one that guarantees nothing.
    foreign = {"apiVersion": kind[0], "kind": kind[1], "metadata": {"name": f"foreign-{cluster.suffix}"},
               "spec": queue["spec"]}
    gateway().apply({"apiVersion": kind[0], "kind": kind[1], "metadata": {"name": ref.name}, "spec": {
        **queue["spec"], **_nothing(queue)}}, field_manager="someone-else")
    gateway().apply(foreign, field_manager="someone-else")
    assert not reconcile.contains(gateway().get(ref), queue)

    result = reconcile.cluster_reconcile()
    assert str(ref) in result.applied
    assert reconcile.contains(gateway().get(ref), queue)
    assert gateway().get(ObjectRef(kind[0], kind[1], foreign["metadata"]["name"])) is not None  # not the portal's
    assert reconcile.cluster_reconcile().writes == 0  # and once repaired, a pass writes nothing
    gateway().delete(ObjectRef(kind[0], kind[1], foreign["metadata"]["name"]))


def _nothing(queue: dict) -> dict:
    """A team queue's spec fields that guarantee nothing, in its backend's terms."""
    if queue["kind"] == "Queue":  # Volcano
        return {"deserved": dict.fromkeys(queue["spec"]["deserved"], "0")}
    groups = [{**group, "flavors": [{**flavor, "resources": [{**r, "nominalQuota": "0"} for r in flavor["resources"]]}
                                    for flavor in group["flavors"]]} for group in queue["spec"]["resourceGroups"]]
    return {"resourceGroups": groups}


def bound_units(workload: Workload) -> int:
    """The GPU units of the workload's pods bound to a node and not being deleted."""
    return sum(int(c["resources"]["limits"].get(workload.flavor.resource_name, 0))
               for pod in pods_of(workload) if pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp")
               and (pod.get("status") or {}).get("phase") in ("Pending", "Running") for c in pod["spec"]["containers"])


def test_a_lender_gets_its_guarantee_back_from_a_borrower(cluster, site, templates, settings,
                                                          django_capture_on_commit_callbacks):
    """Two teams of 4 GPUs on a node of 8: one serves with 3 replicas of 2 GPUs (its 4 and 2 the
    other leaves idle); when the lender launches a training of 4, it gets them back, the borrower
    is cut back to its own guarantee or less, and none of it has failed."""
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    capture = django_capture_on_commit_callbacks
    lender, borrower = site.team("lender", gpus=4), site.team("borrower", gpus=4)
    served = launch(borrower, borrower.memberships.get().user, templates["inference"], site.flavor, capture, units=2,
                    parameters={"workers": 3})
    cluster.wait_for(lambda: running(served) and bound_units(served) == 6,
                     what="the borrower's 3 replicas to run on 6 GPUs, 2 of them borrowed")
    training = launch(lender, lender.memberships.get().user, templates["training"], site.flavor, capture, units=4)
    cluster.wait_for(lambda: running(training) and bound_units(served) <= 4,
                     what="the lender's training to run on its 4 GPUs, taken back from the borrower")
    served.refresh_from_db()
    assert served.phase != Workload.Phase.FAILED, served.reason


def test_a_higher_priority_launch_makes_room_within_its_team(cluster, site, settings,
                                                            django_capture_on_commit_callbacks):
    """A team of 4 GPUs that may not borrow serves at low priority on all 4; its high-priority
    training of 2 takes 2 of them, and the server goes on with what is left, or waits whole."""
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    capture = django_capture_on_commit_callbacks
    team = capped(site, site.team("prio", gpus=4), capture)
    lead = team.memberships.get().user
    made = {kind: job_services.template_create(
        user=site.admin, slug=cluster.unique(f"prio-{kind}"), name=kind.title(), kind=kind, flavors=[site.flavor],
        image="registry.example.com/ml/runtime:1", command=["python", "main.py"], max_units=8, default_cpu=1,
        default_memory_gib=1, port=8080 if kind == "inference" else 0, allowed_priorities=list(Priority.values),
        parameters=[{"name": "workers", "type": "int", "default": 2, "min": 1, "max": 8}] if kind == "inference" else [],
    ) for kind in ("inference", "training")}
    low = launch(team, lead, made["inference"], site.flavor, capture, units=2, parameters={"workers": 2},
                 priority=Priority.LOW)
    cluster.wait_for(lambda: running(low) and bound_units(low) == 4, what="the low-priority server on all 4 GPUs")
    high = launch(team, lead, made["training"], site.flavor, capture, units=2, priority=Priority.HIGH)
    # On Kueue the training may be evicted once by the harness's short waitForPodsReady (15 s) while
    # its victim's pod winds down, and admitted again after the requeue backoff.
    cluster.wait_for(lambda: running(high) and bound_units(low) <= 2, timeout=150,
                     what="the high-priority training to run on 2 GPUs taken from the low-priority server")
    low.refresh_from_db()
    assert low.phase != Workload.Phase.FAILED, low.reason


# What a lender takes back from a borrower: a training (Kueue requeues its Job, Volcano restarts
# it), and a one-replica server (its pod is evicted and made again, and waits).
RECLAIMED = {"training": {}, "inference": {"parameters": {"workers": 1}}}


@pytest.mark.parametrize("kind", list(RECLAIMED))
def test_work_its_lender_reclaims_is_preempted_not_failed_while_it_waits_and_runs_again(
        cluster, site, templates, settings, django_capture_on_commit_callbacks, kind):
    """Two teams of 4 GPUs on a node of 8: the borrower's workload runs on 6 (2 of them the
    lender's); when the lender launches a training of 4, the borrower's is preempted (not still
    running, not failed) for as long as it waits, and it runs again once the lender's ends."""
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    capture = django_capture_on_commit_callbacks
    lender = site.team("lend", gpus=4)
    # The lender's queue is the older, as a site's teams are made days apart: Volcano 1.10 orders
    # queues of equal share by creation time, to the second, and only then by uid, and the older
    # borrower of a server it evicts wins the freed GPUs back (docs/queue-backends.md).
    made = int(time.time())
    cluster.wait_for(lambda: int(time.time()) > made, what="a second to pass after the lender's queue was made")
    borrower = site.team("borrow", gpus=4)
    borrowed = launch(borrower, borrower.memberships.get().user, templates[kind], site.flavor, capture, units=6,
                      **RECLAIMED[kind])
    cluster.wait_for(lambda: running(borrowed) and bound_units(borrowed) == 6,
                     what=f"the borrower's {kind} workload to run on 6 GPUs, 2 of them borrowed")
    own = launch(lender, lender.memberships.get().user, templates["training"], site.flavor, capture, units=4)

    def preempted() -> bool:
        sync.sync_all()
        borrowed.refresh_from_db()
        return running(own) and borrowed.phase == Workload.Phase.PREEMPTED and bound_units(borrowed) == 0

    cluster.wait_for(preempted, timeout=150, what=f"the lender's training to run and the borrower's {kind} to read preempted")
    assert borrowed.reason.startswith("Preempted"), borrowed.reason
    sync.sync_all()  # and it stays so while it waits
    borrowed.refresh_from_db()
    assert borrowed.phase == Workload.Phase.PREEMPTED, borrowed.reason
    stop(own, capture)
    cluster.wait_for(lambda: running(borrowed) and bound_units(borrowed) == 6, timeout=150,
                     what=f"the borrower's {kind} workload to run again once the lender's GPUs are free")
    assert not borrowed.transitions.filter(phase=Workload.Phase.FAILED).exists()


def test_a_training_that_finishes_succeeds_one_whose_pod_fails_fails_saying_why_and_both_free_the_quota(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    team = site.team("ends", gpus=4)
    lead = team.memberships.get().user
    settings.PORTAL_POD_ANNOTATIONS = QUICK
    done = launch(team, lead, templates["training"], site.flavor, capture, units=2)
    settings.PORTAL_POD_ANNOTATIONS = {**QUICK, "kwok.gpu-portal.test/outcome": "Failed",
                                       "gpu-portal.io/simulated-exit-code": "1"}
    broken = launch(team, lead, templates["training"], site.flavor, capture, units=2)

    def ended(workload: Workload, phase: str) -> bool:
        sync.sync_all()
        workload.refresh_from_db()
        return workload.phase == phase

    cluster.wait_for(lambda: ended(done, Workload.Phase.SUCCEEDED), timeout=120, what="the first training to succeed")
    # Kueue's batch Job tries a failing pod three times; Volcano's Job ends at the first failure.
    cluster.wait_for(lambda: ended(broken, Workload.Phase.FAILED), timeout=120, what="the second training to fail")
    assert broken.reason and "fail" in broken.reason.lower(), broken.reason
    cluster.wait_for(lambda: queue_usage(team.slug, site.flavor.slug)[0] == 0, what="the team's queue to count nothing in use")

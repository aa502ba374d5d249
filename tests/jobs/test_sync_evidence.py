"""The status sync records a terminal phase only on evidence no later event can contradict.

Watches of different kinds deliver in no common order, and the full pass lists five kinds one
after another, so what the sync reads is never one instant of the cluster. These tests feed
the informer the real objects of a training job's life on the simulated cluster, in every
order the per-kind watches could deliver them, and check partial snapshots, proof of gone and
stopping what a failed workload left behind."""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection
from django.urls import reverse

from jobs import kinds, services, sync
from jobs.kinds.base import COMPLETION_INDEX, is_true
from jobs.models import RunInterval, Workload, WorkloadTransition
from jobs.watch import WorkloadInformer
from portal.kube import KubeError, ObjectRef, WatchEvent, gateway, ref_of, reset_gateway
from portal.kube.counting import CountingGateway
from portal.kube.simulated import SimulatedGateway
from portal.models import AuditEvent
from tests.helpers import api, launch

pytestmark = pytest.mark.django_db

KINDS = ("Job", "Deployment", "StatefulSet", "Pod", "Workload")
HTMX = {"HTTP_HX_REQUEST": "true"}


@dataclass(frozen=True)
class Life:
    """A training job's objects at each step of its life, as the simulated cluster made them."""

    workload: Workload
    job_admitted: dict[str, Any]
    job_complete: dict[str, Any]
    pod_running: dict[str, Any]
    pod_succeeded: dict[str, Any]
    kueue_admitted: dict[str, Any]


def _objects(kind: str, api_version: str, namespace: str) -> list[dict[str, Any]]:
    return gateway().list(api_version, kind, namespace=namespace)[0]


@pytest.fixture
def life(ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks) -> Life:
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, flavor, units=2)
    simulated.advance(1)
    (job_admitted,) = _objects("Job", "batch/v1", "vision")
    (pod_running,) = _objects("Pod", "v1", "vision")
    (kueue_admitted,) = _objects("Workload", "kueue.x-k8s.io/v1beta2", "vision")
    simulated.advance(40)
    (job_complete,) = _objects("Job", "batch/v1", "vision")
    (pod_succeeded,) = _objects("Pod", "v1", "vision")
    assert not job_admitted["spec"]["suspend"] and pod_running["status"]["phase"] == "Running"
    assert is_true(job_complete, "Complete") and pod_succeeded["status"]["phase"] == "Succeeded"
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.QUEUED and workload.seen_in_cluster_at is None
    return Life(workload, job_admitted, job_complete, pod_running, pod_succeeded, kueue_admitted)


def started_informer() -> WorkloadInformer:
    """An informer whose watches have each listed an empty cluster: every kind is ready."""
    informer = WorkloadInformer()
    informer.handle([(kind, WatchEvent("RELISTED", {"items": []})) for kind in KINDS])
    return informer


def streams(life: Life, relisted: str, at: int) -> dict[str, list[tuple[str, WatchEvent]]]:
    """Each kind's watch stream, in its own order, with a RELISTED of one kind at a position of
    its stream: a fresh list then carries that kind's state as of that point."""
    per_kind = {
        "Job": [WatchEvent("ADDED", life.job_admitted), WatchEvent("MODIFIED", life.job_complete)],
        "Pod": [WatchEvent("ADDED", life.pod_running), WatchEvent("MODIFIED", life.pod_succeeded)],
        "Workload": [WatchEvent("ADDED", life.kueue_admitted)],
    }
    events = per_kind[relisted]
    state = [events[at - 1].object] if at else []
    per_kind[relisted] = [*events[:at], WatchEvent("RELISTED", {"items": copy.deepcopy(state)}), *events[at:]]
    return {kind: [(kind, event) for event in events] for kind, events in per_kind.items()}


def interleavings(per_kind: dict[str, list[tuple[str, WatchEvent]]]) -> Iterator[list[tuple[str, WatchEvent]]]:
    """Every order of all events that keeps each kind's own order (a watch is ordered per resource)."""
    labelled = [(kind, index) for kind, events in per_kind.items() for index in range(len(events))]
    for order in set(itertools.permutations(kind for kind, _ in labelled)):
        cursor = dict.fromkeys(per_kind, 0)
        sequence = []
        for kind in order:
            sequence.append(per_kind[kind][cursor[kind]])
            cursor[kind] += 1
        yield sequence


def reset(workload: Workload) -> None:
    """Back to just submitted: queued, never seen by the sync, no intervals."""
    Workload.objects.filter(pk=workload.pk).update(phase=Workload.Phase.QUEUED, reason="Waiting for Kueue to admit it",
                                                   finished_at=None, seen_in_cluster_at=None)
    WorkloadTransition.objects.filter(workload=workload).exclude(phase__in=("submitting", "queued")).delete()
    RunInterval.objects.filter(workload=workload).delete()


def describe(sequence: list[tuple[str, WatchEvent]]) -> str:
    def state(event: WatchEvent) -> str:
        if event.type == "RELISTED":
            return f"{len(event.object['items'])} items"
        if event.object["kind"] == "Job":
            return "Complete" if is_true(event.object, "Complete") else "active"
        return (event.object.get("status") or {}).get("phase") or "admitted"
    return ", ".join(f"{kind} {event.type} ({state(event)})" for kind, event in sequence)


@pytest.mark.parametrize(("relisted", "positions"), [("Job", 3), ("Pod", 3), ("Workload", 2)])
def test_in_every_order_the_watches_could_deliver_a_finished_job_ends_succeeded_never_failed(life, relisted, positions):
    workload = life.workload
    orders = 0
    for at in range(positions):
        for sequence in interleavings(streams(life, relisted, at)):
            reset(workload)
            informer = started_informer()
            for event in sequence:
                informer.handle([event])  # one event a batch: every intermediate cache is synced
            workload.refresh_from_db()
            # The timeline keeps every phase recorded on the way, so a verdict taken back later would show.
            failed = workload.transitions.filter(phase=Workload.Phase.FAILED).first()
            assert failed is None, f"failed ({failed.reason}) on the way through: {describe(sequence)}"
            assert workload.phase == Workload.Phase.SUCCEEDED, f"{workload.phase} after: {describe(sequence)}"
            assert workload.transitions.filter(phase=Workload.Phase.SUCCEEDED).count() == 1
            (interval,) = RunInterval.objects.filter(workload=workload)
            assert interval.pod_uid == life.pod_running["metadata"]["uid"] and interval.units == 2
            assert interval.ended_at is not None and interval.ended_at > interval.started_at, describe(sequence)
            orders += 1
    # 6 events: 6!/(3!2!1!) = 60 interleavings at each of 3 places for a Job or Pod RELISTED,
    # 6!/(2!2!2!) = 90 at each of 2 places for a Workload RELISTED.
    assert orders == 180


def test_what_the_watches_deliver_before_every_kind_is_listed_is_synced_once_all_are(life):
    informer = WorkloadInformer()
    assert informer.handle([("Job", WatchEvent("RELISTED", {"items": [life.job_admitted]})),
                            ("Pod", WatchEvent("RELISTED", {"items": [life.pod_running]}))]) is None
    life.workload.refresh_from_db()
    assert life.workload.phase == Workload.Phase.QUEUED
    # The last kind to list has nothing of this workload, yet the workload is synced now.
    informer.handle([(kind, WatchEvent("RELISTED", {"items": []})) for kind in ("Deployment", "StatefulSet", "Workload")])
    life.workload.refresh_from_db()
    assert life.workload.phase == Workload.Phase.RUNNING


def test_a_pod_delivered_before_its_job_leaves_the_workload_queued(life):
    informer = started_informer()
    informer.handle([("Pod", WatchEvent("ADDED", life.pod_running))])
    life.workload.refresh_from_db()
    assert life.workload.phase == Workload.Phase.QUEUED
    assert life.workload.seen_in_cluster_at is not None  # the direct read found the Job
    assert RunInterval.objects.get(workload=life.workload).ended_at is None  # its GPUs are counted already


def test_a_workload_whose_objects_never_reached_the_cluster_is_left_alone_without_a_read(life, simulated):
    Workload.objects.filter(pk=life.workload.pk).update(phase=Workload.Phase.SUBMITTING, submitted_at=None)
    counting = CountingGateway(simulated)
    reset_gateway(counting)  # the simulated fixture drops it again afterwards
    informer = started_informer()
    calls = counting.total
    informer.handle([("Pod", WatchEvent("ADDED", life.pod_running))])
    life.workload.refresh_from_db()
    assert life.workload.phase == Workload.Phase.SUBMITTING and life.workload.seen_in_cluster_at is None
    assert counting.total == calls  # nothing to prove gone, so nothing read


def test_a_job_deleted_before_any_sync_saw_it_is_failed_as_gone_by_the_next_pass(life):
    gateway().delete(ObjectRef("batch/v1", "Job", life.workload.k8s_name, "vision"))
    sync.sync_all()
    life.workload.refresh_from_db()
    assert (life.workload.phase, life.workload.reason) == (Workload.Phase.FAILED, sync.GONE_REASON)


def test_a_job_deleted_outside_the_portal_after_it_was_seen_fails_as_gone(life, simulated):
    informer = started_informer()
    informer.handle([("Job", WatchEvent("ADDED", life.job_admitted)), ("Pod", WatchEvent("ADDED", life.pod_running))])
    life.workload.refresh_from_db()
    assert life.workload.phase == Workload.Phase.RUNNING and life.workload.seen_in_cluster_at is not None

    gateway().delete(ObjectRef("batch/v1", "Job", life.workload.k8s_name, "vision"))
    informer.handle([("Job", WatchEvent("DELETED", life.job_admitted))])

    life.workload.refresh_from_db()
    assert (life.workload.phase, life.workload.reason) == (Workload.Phase.FAILED, sync.GONE_REASON)


def test_a_job_missing_only_from_the_cache_is_not_failed_while_a_direct_read_finds_it(life, simulated):
    informer = started_informer()
    informer.handle([("Job", WatchEvent("ADDED", life.job_admitted)), ("Pod", WatchEvent("ADDED", life.pod_running))])
    # A relist of Jobs that, by whatever lag, lacks the Job: the cluster still has it.
    informer.handle([("Job", WatchEvent("RELISTED", {"items": []}))])
    life.workload.refresh_from_db()
    assert life.workload.phase == Workload.Phase.RUNNING, life.workload.reason
    assert gateway().get(ObjectRef("batch/v1", "Job", life.workload.k8s_name, "vision")) is not None


class Unreachable(SimulatedGateway):
    """A cluster whose API server does not answer reads."""

    asked: list[ObjectRef]

    def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        self.asked = [*getattr(self, "asked", []), ref]
        raise KubeError("connection refused", ref=ref)


def test_a_cluster_that_does_not_answer_the_direct_read_proves_nothing(life):
    sync.sync_snapshot(sync.Snapshot.of({"Job": [life.job_admitted], "Pod": [life.pod_running]}))
    life.workload.refresh_from_db()
    assert life.workload.phase == Workload.Phase.RUNNING and life.workload.seen_in_cluster_at is not None

    unreachable = Unreachable()
    reset_gateway(unreachable)
    sync.sync_snapshot(sync.Snapshot.of({}))
    life.workload.refresh_from_db()
    assert sync.owner_ref(life.workload) in unreachable.asked  # the sync did try to prove it gone
    assert life.workload.phase == Workload.Phase.RUNNING
    assert RunInterval.objects.get(workload=life.workload).ended_at is None


@pytest.mark.parametrize("missing", ["Job", "Pod", "Workload"])
def test_a_partial_snapshot_of_a_seen_workload_whose_job_exists_never_fails_it(life, missing):
    sync.sync_snapshot(sync.Snapshot.of({"Job": [life.job_admitted], "Pod": [life.pod_running],
                                         "Workload": [life.kueue_admitted]}))
    life.workload.refresh_from_db()
    assert life.workload.phase == Workload.Phase.RUNNING and life.workload.seen_in_cluster_at is not None
    full = {"Job": [life.job_admitted], "Pod": [life.pod_running], "Workload": [life.kueue_admitted]}
    sync.sync_snapshot(sync.Snapshot.of({kind: objects for kind, objects in full.items() if kind != missing}))
    life.workload.refresh_from_db()
    assert life.workload.phase != Workload.Phase.FAILED, life.workload.reason
    assert RunInterval.objects.get(workload=life.workload).started_at is not None


def test_the_full_pass_fails_a_job_deleted_after_it_was_seen_and_only_that_one(life, ready_team, member, training, flavor,
                                                                             simulated, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        newer = launch(member, ready_team, training, flavor, units=1)
    sync.sync_all()
    life.workload.refresh_from_db()
    newer.refresh_from_db()
    assert life.workload.seen_in_cluster_at is not None and newer.seen_in_cluster_at is not None

    class JobsListedEarlier(SimulatedGateway):
        """The full pass's list of Jobs answered before the newer Job was made, the other lists after."""

        def list(self, api_version: str, kind: str, **options: Any) -> tuple[list[dict[str, Any]], str]:
            items, version = super().list(api_version, kind, **options)
            return ([j for j in items if j["metadata"]["name"] != newer.k8s_name] if kind == "Job" else items), version

    earlier = JobsListedEarlier()
    earlier.offset = simulated.offset
    reset_gateway(earlier)
    sync.sync_all()
    newer.refresh_from_db()
    assert newer.phase != Workload.Phase.FAILED, newer.reason

    reset_gateway(simulated)
    gateway().delete(ObjectRef("batch/v1", "Job", newer.k8s_name, "vision"))
    sync.sync_all()
    newer.refresh_from_db()
    assert (newer.phase, newer.reason) == (Workload.Phase.FAILED, sync.GONE_REASON)
    life.workload.refresh_from_db()
    assert life.workload.phase == Workload.Phase.SUCCEEDED


def _job(*, uid: str = "job-uid", completions: int | None = None, indexed: bool = False, **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"suspend": False, "parallelism": completions or 1}
    if completions is not None:
        spec["completions"] = completions
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "wl-x", "uid": uid}, "spec": spec, "status": status}


def _pod(name: str, phase: str, *, job_uid: str = "job-uid", index: str | None = None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}",
                            "ownerReferences": [{"kind": "Job", "name": "wl-x", "uid": job_uid}]}
    if index is not None:
        meta["annotations"] = {COMPLETION_INDEX: index}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {}, "status": {"phase": phase}}


def _derived(workload: Workload, job: dict[str, Any], pods: list[dict[str, Any]]) -> tuple[str, str] | None:
    key = sync.key_of(workload)
    snapshot = sync.Snapshot()
    snapshot.owners[key] = job
    snapshot.pods[key] = pods
    return sync.derive(workload, snapshot)


@pytest.mark.parametrize(("job", "pods", "phase"), [
    (_job(), [_pod("a", "Succeeded")], Workload.Phase.SUCCEEDED),
    (_job(), [_pod("a", "Succeeded", job_uid="an-earlier-job")], Workload.Phase.ADMITTED),
    (_job(), [_pod("a", "Succeeded", deleting=True)], Workload.Phase.ADMITTED),
    (_job(completions=2, indexed=True), [_pod("a", "Succeeded", index="0"), _pod("b", "Succeeded", index="0")],
     Workload.Phase.ADMITTED),
    (_job(completions=2, indexed=True), [_pod("a", "Succeeded", index="0"), _pod("b", "Succeeded", index="1")],
     Workload.Phase.SUCCEEDED),
    (_job(completions=2), [_pod("a", "Succeeded"), _pod("b", "Failed")], Workload.Phase.ADMITTED),
    (_job(conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]), [_pod("a", "Failed")],
     Workload.Phase.FAILED),
    (_job(conditions=[{"type": "Complete", "status": "True"}]), [], Workload.Phase.SUCCEEDED),
    (_job(), [], Workload.Phase.ADMITTED),
], ids=["one-success", "earlier-job", "killed-pod", "same-index-twice", "every-index", "one-of-two",
        "job-failed", "job-complete", "nothing-yet"])
def test_a_job_ends_only_on_its_own_condition_or_a_success_for_every_completion(life, job, pods, phase):
    derived = _derived(life.workload, job, pods)
    assert derived is not None and derived[0] == phase


def test_a_workload_without_its_owner_in_the_snapshot_is_left_to_the_proof_of_gone(life):
    assert sync.derive(life.workload, sync.Snapshot.of({"Pod": [life.pod_running]})) is None


def test_an_interval_a_lagging_cache_lacks_ends_at_its_pods_own_finish_time(life):
    # A fresher reader (the full pass) opened the interval while the pod ran.
    sync.sync_snapshot(sync.Snapshot.of({"Job": [life.job_admitted], "Pod": [life.pod_running]}))
    interval = RunInterval.objects.get(workload=life.workload)
    assert interval.ended_at is None
    informer = started_informer()
    informer.handle([("Job", WatchEvent("ADDED", life.job_admitted))])  # its pod cache has not caught up
    interval.refresh_from_db()
    # Not "now" from the pod's absence: the direct read found it finished, at its own time.
    assert interval.ended_at == sync._pod_interval(life.pod_succeeded)[1]


def test_an_open_interval_stays_open_while_a_direct_read_shows_its_pod_running(life, ready_team, member, training, flavor,
                                                                               simulated, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        held = launch(member, ready_team, training, flavor, units=1, parameters={"epochs": 5})
    simulated.advance(1)
    sync.sync_all()
    interval = RunInterval.objects.get(workload=held)
    assert interval.ended_at is None
    informer = started_informer()
    (job,) = [j for j in _objects("Job", "batch/v1", "vision") if j["metadata"]["name"] == held.k8s_name]
    informer.handle([("Job", WatchEvent("ADDED", job))])  # the pod cache is empty: it lags
    interval.refresh_from_db()
    assert interval.ended_at is None
    gateway().delete(ObjectRef("batch/v1", "Job", held.k8s_name, "vision"))  # its pod goes with it
    informer.handle([("Job", WatchEvent("DELETED", job))])
    interval.refresh_from_db()
    assert interval.ended_at is not None
    held.refresh_from_db()
    assert (held.phase, held.reason) == (Workload.Phase.FAILED, sync.GONE_REASON)


def test_the_owner_kind_the_sync_reads_is_the_one_the_manifests_make(life):
    for kind in kinds.runnable():
        life.workload.template_version.template.kind = kind
        owners = [ref_of(o) for o in kinds.workload_objects(spec=services.workload_spec(life.workload))
                  if o["kind"] in ("Job", "Deployment", "StatefulSet")]
        assert owners == [sync.owner_ref(life.workload)]


# --- A failed workload that still holds GPUs can be stopped --------------------------------------


@pytest.fixture
def failed_but_running(ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks) -> Workload:
    """Recorded failed (as the old sync did from a lagging cache) while its pod runs on."""
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, flavor, units=2)
    simulated.advance(1)
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING
    services.record_transition(workload, Workload.Phase.FAILED, sync.GONE_REASON)
    return workload


def test_stopping_a_failed_workload_deletes_what_is_left_and_keeps_it_failed(failed_but_running, member, simulated,
                                                                          django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=member, workload=failed_but_running)
    assert gateway().get(ObjectRef("batch/v1", "Job", failed_but_running.k8s_name, "vision")) is None
    assert gateway().list("v1", "Pod", namespace="vision")[0] == []
    failed_but_running.refresh_from_db()
    assert failed_but_running.phase == Workload.Phase.FAILED
    assert AuditEvent.objects.filter(action="workload.stopped", message__contains="deleted what was left").count() == 1
    sync.sync_all()
    assert RunInterval.objects.get(workload=failed_but_running).ended_at is not None


def test_the_api_stops_a_failed_workload_that_still_runs(failed_but_running, member, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = api(member).post(f"/api/workloads/{failed_but_running.pk}/stop/")
    assert response.status_code == 200, response.json()
    assert response.json()["phase"] == "failed"
    assert gateway().get(ObjectRef("batch/v1", "Job", failed_but_running.k8s_name, "vision")) is None


def test_a_workload_that_failed_before_reaching_the_cluster_has_nothing_to_stop(ready_team, member, admin_user, flavor,
                                                                               django_capture_on_commit_callbacks):
    gateway().delete(ObjectRef("v1", "Namespace", "vision"))
    bad = services.template_create(user=admin_user, slug="nowhere", name="Nowhere", kind="training", flavors=[flavor],
                                   image="x", parameters=[])
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, bad, flavor)
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.FAILED
    response = api(member).post(f"/api/workloads/{workload.pk}/stop/")
    assert response.status_code == 409
    assert "there is nothing to stop" in response.json()["message"]


def test_the_page_offers_stop_for_a_failed_workload_only_while_its_pods_are_there(failed_but_running, member, as_user,
                                                                                 django_capture_on_commit_callbacks):
    client = as_user(member)
    live = client.get(reverse("jobs:workload-live", args=[failed_but_running.pk]), **HTMX).content.decode()
    assert "Failed" in live and 'data-testid="stop"' in live
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("jobs:workload-stop", args=[failed_but_running.pk]), **HTMX)
    live = client.get(reverse("jobs:workload-live", args=[failed_but_running.pk]), **HTMX).content.decode()
    assert "Failed" in live and 'data-testid="stop"' not in live


def test_a_workload_stopped_while_the_sync_read_the_cluster_stays_stopped(life, member, simulated,
                                                                         django_capture_on_commit_callbacks):
    sync.sync_snapshot(sync.Snapshot.of({"Job": [life.job_admitted], "Pod": [life.pod_running]}))
    life.workload.refresh_from_db()
    assert life.workload.phase == Workload.Phase.RUNNING

    class StoppedDuringTheRead(SimulatedGateway):
        """The member stops the workload just as the sync asks the cluster about its Job."""

        def get(self, ref: ObjectRef) -> dict[str, Any] | None:
            if ref.kind == "Job":
                with django_capture_on_commit_callbacks(execute=True):
                    services.workload_stop(user=member, workload=life.workload)
            return super().get(ref)

    reset_gateway(StoppedDuringTheRead())
    sync.sync_snapshot(sync.Snapshot.of({"Pod": [life.pod_running]}))
    life.workload.refresh_from_db()
    assert (life.workload.phase, life.workload.reason) == (Workload.Phase.STOPPED, "Stopped by alice")


class ScriptedWatches(SimulatedGateway):
    """The simulated cluster's reads, with watches that deliver a script per kind, each on its
    own clock: the order across kinds is the script's, as real watches make no promise of one."""

    def __init__(self, script: dict[str, list[tuple[float, WatchEvent]]]) -> None:
        super().__init__()
        self.script = script
        self.finished = threading.Event()

    def watch(self, api_version: str, kind: str, **options: Any) -> Iterator[WatchEvent]:
        yield WatchEvent("RELISTED", {"items": []})
        for delay, event in self.script.get(kind, []):
            time.sleep(delay)
            yield event
        self.finished.wait(10)  # a watch that stays open, quiet, until the test ends


# The informer closes stale connections between batches, as it must in a long-lived process:
# on PostgreSQL that needs a real transaction per test, not the wrapping one pytest-django gives.
@pytest.mark.django_db(transaction=True)
def test_the_running_informer_does_not_fail_a_job_whose_pod_it_hears_of_first(life):
    cluster = ScriptedWatches({
        "Pod": [(0.0, WatchEvent("ADDED", life.pod_running)), (0.4, WatchEvent("MODIFIED", life.pod_succeeded))],
        "Workload": [(0.0, WatchEvent("ADDED", life.kueue_admitted))],
        "Job": [(0.2, WatchEvent("ADDED", life.job_admitted)), (0.4, WatchEvent("MODIFIED", life.job_complete))],
    })
    reset_gateway(cluster)
    workload = life.workload
    deadline = time.monotonic() + 10
    informer = WorkloadInformer(batch_seconds=0.01)
    try:
        informer.run(until=lambda: time.monotonic() > deadline or Workload.objects.filter(
            pk=workload.pk, phase__in=Workload.FINAL_PHASES).exists())
    finally:
        cluster.finished.set()
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.SUCCEEDED, workload.reason
    assert not workload.transitions.filter(phase=Workload.Phase.FAILED).exists()
    assert RunInterval.objects.get(workload=workload).ended_at is not None


class RecordsTransactionDepth(SimulatedGateway):
    """A cluster that notes how deep in database transactions each direct read is made."""

    depths: list[int]

    def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        self.depths = [*getattr(self, "depths", []), len(connection.atomic_blocks)]
        return super().get(ref)


def test_a_pod_missing_from_the_snapshot_is_read_before_the_sync_opens_its_transaction(life):
    sync.sync_snapshot(sync.Snapshot.of({"Job": [life.job_admitted], "Pod": [life.pod_running]}))
    recording = RecordsTransactionDepth()
    reset_gateway(recording)
    outside = len(connection.atomic_blocks)  # the test's own transaction

    sync.sync_snapshot(sync.Snapshot.of({"Job": [life.job_admitted]}))

    assert recording.depths and set(recording.depths) == {outside}


def test_a_namespace_whose_last_object_was_deleted_leaves_nothing_in_the_informers_index(life):
    informer = started_informer()
    informer.handle([("Job", WatchEvent("ADDED", life.job_admitted)), ("Pod", WatchEvent("ADDED", life.pod_running))])
    assert set(informer.namespaces["Job"]) == set(informer.namespaces["Pod"]) == {"vision"}

    informer.handle([("Pod", WatchEvent("DELETED", life.pod_running)), ("Job", WatchEvent("DELETED", life.job_admitted))])
    assert dict(informer.namespaces["Job"]) == dict(informer.namespaces["Pod"]) == {}
    informer.handle([("Pod", WatchEvent("DELETED", life.pod_running))])  # a second delete (after a relist) is harmless
    assert dict(informer.namespaces["Pod"]) == {}


def test_the_informer_keeps_objects_without_their_managed_fields(life):
    import copy

    informer = started_informer()
    fields = [{"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:status": {}}}]
    job, pod = copy.deepcopy(life.job_admitted), copy.deepcopy(life.pod_running)
    job["metadata"]["managedFields"] = pod["metadata"]["managedFields"] = fields
    informer.handle([("Job", WatchEvent("RELISTED", {"items": [job]})), ("Pod", WatchEvent("ADDED", pod))])

    kept = [*informer.store["Job"].values(), *informer.store["Pod"].values()]
    assert len(kept) == 2 and not any("managedFields" in obj["metadata"] for obj in kept)
    life.workload.refresh_from_db()
    assert life.workload.phase == Workload.Phase.RUNNING

"""Two status writers at once (two watchers during a rolling update, a watcher and the periodic
full pass, a frozen leader that resumes): each reads the workloads, then writes what its snapshot
says. A writer whose read is stale must not write again what the other has just written: no
transition twice, no run interval twice, whatever the interleaving."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from django.utils import timezone

from jobs import sync
from jobs.models import RunInterval, Workload
from tenants import queueing
from tests.helpers import launch, make_ready

pytestmark = pytest.mark.django_db


def interleaved(snapshot: sync.Snapshot) -> Callable[[], None]:
    """A fence for the first writer that, the first time it is called (after the first writer
    read the workloads, before it writes), lets a second writer sync the same snapshot in full."""
    done = False

    def other_writer_goes_first() -> None:
        nonlocal done
        if not done:
            done = True
            sync.sync_snapshot(snapshot)

    return other_writer_goes_first


def steps(workload: Workload) -> list[tuple[str, str]]:
    return [(t.phase, t.reason) for t in workload.transitions.order_by("at", "pk")]


def running_in_a_fresh_view(team, member, training, flavor, simulated, capture) -> tuple[Workload, sync.Snapshot]:
    """A training launched and recorded running by a first writer, with the snapshot it read."""
    with capture(execute=True):
        workload = launch(member, team, training, flavor, units=1)
    simulated.advance(1)
    now = sync.Snapshot.read()
    sync.sync_snapshot(now)
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING
    return workload, now


def test_a_writer_with_a_stale_read_does_not_write_again_the_wait_the_other_writer_recorded(
        team, member, training, flavor, simulated, django_capture_on_commit_callbacks):
    team = make_ready(team, flavor, units=1, may_borrow=False)
    with django_capture_on_commit_callbacks(execute=True):
        first = launch(member, team, training, flavor, units=1)
        waiting = launch(member, team, training, flavor, units=1)
    simulated.advance(1)
    snapshot = sync.Snapshot.read()

    sync.sync_snapshot(snapshot, fence=interleaved(snapshot))

    first.refresh_from_db()
    waiting.refresh_from_db()
    assert first.phase == Workload.Phase.RUNNING
    # Only the reason changes (queued, now for quota): the phase alone cannot tell the stale writer.
    assert waiting.phase == Workload.Phase.QUEUED and waiting.reason.startswith("Waiting for quota"), waiting.reason
    for workload in (first, waiting):
        assert len(steps(workload)) == len(set(steps(workload))), steps(workload)
    assert RunInterval.objects.filter(workload=first).count() == 1


def test_a_writer_whose_snapshot_is_older_does_not_put_a_running_workload_back_in_the_queue(
        ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks):
    # The second watcher's informer still shows the Job suspended, waiting for Kueue, after the
    # first recorded it running (seen in CI as running, queued, running).
    workload, now = running_in_a_fresh_view(ready_team, member, training, flavor, simulated,
                                            django_capture_on_commit_callbacks)
    # The same Job as a lagging informer last saw it: suspended, no pods yet.
    (job,) = [copy.deepcopy(obj) for obj in now.owners.values() if obj["kind"] == "Job"]
    job["spec"]["suspend"], job["status"] = True, {}
    older = sync.Snapshot.of({"Job": [job]})
    assert sync.derive(workload, older) == (Workload.Phase.QUEUED, "Waiting for Kueue to admit it")  # what it would say

    sync.sync_snapshot(older)

    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING
    assert [phase for phase, _ in steps(workload)] == ["submitting", "queued", "running"]


@pytest.mark.parametrize("backend", ["kueue", "volcano"])
def test_a_writer_whose_snapshot_is_older_does_not_take_back_why_the_queue_said_a_workload_waits(
        backend, settings, team, member, training, flavor, simulated, django_capture_on_commit_callbacks):
    # The second watcher's informer has not yet seen the queue say why the workload waits (seen in
    # CI as waiting for Kueue, for quota, for Kueue, for quota).
    settings.PORTAL_QUEUE_BACKEND = backend
    team = make_ready(team, flavor, units=1, may_borrow=False)
    with django_capture_on_commit_callbacks(execute=True):
        launch(member, team, training, flavor, units=1)
        waiting = launch(member, team, training, flavor, units=1)
    simulated.advance(1)
    now = sync.Snapshot.read()
    sync.sync_snapshot(now)
    waiting.refresh_from_db()
    unseen = queueing.backend().unseen
    assert waiting.phase == Workload.Phase.QUEUED and waiting.reason.startswith("Waiting for quota"), waiting.reason
    said = steps(waiting)
    # The same objects as a lagging informer last saw them: the queue's of this workload not yet there.
    older = copy.deepcopy(now)
    older.queued[sync.key_of(waiting)] = []
    assert sync.derive(waiting, older) == (Workload.Phase.QUEUED, unseen)  # what it would say

    sync.sync_snapshot(older)

    waiting.refresh_from_db()
    assert steps(waiting) == said and waiting.reason.startswith("Waiting for quota")
    # Once the queue itself has said nothing yet, its first word is recorded as ever.
    waiting.reason = unseen
    waiting.save(update_fields=["reason"])
    sync.sync_snapshot(now)
    waiting.refresh_from_db()
    assert waiting.reason.startswith("Waiting for quota"), waiting.reason


def test_a_writer_whose_snapshot_is_older_does_not_take_a_running_workload_back_to_starting(
        ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks):
    # The second watcher's informer still shows the Job admitted with its pod not yet started,
    # after the first recorded it running (seen in CI as admitted, running, admitted, running).
    workload, now = running_in_a_fresh_view(ready_team, member, training, flavor, simulated,
                                            django_capture_on_commit_callbacks)
    # The same pod as a lagging informer last saw it: bound to no node, not started.
    older = copy.deepcopy(now)
    (pod,) = older.pods[sync.key_of(workload)]
    pod["spec"].pop("nodeName", None)
    pod["status"] = {"phase": "Pending"}
    assert (sync.derive(workload, older) or ("",))[0] == Workload.Phase.ADMITTED  # what it would say

    sync.sync_snapshot(older)

    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING
    assert [phase for phase, _ in steps(workload)] == ["submitting", "queued", "running"]
    assert RunInterval.objects.get(workload=workload).ended_at is None  # its pod runs on, by a direct read

    # Once its pod has ended (a Job's retry: the first pod failed), a new pod starting is news.
    RunInterval.objects.filter(workload=workload).update(ended_at=timezone.now())
    sync.sync_snapshot(older)
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.ADMITTED, steps(workload)

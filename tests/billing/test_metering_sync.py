"""Metering through what the status sync records: pods with several containers, restarts,
preemption and re-admission, a reused name, the borrowed/guaranteed flip, and the refresh on close."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from billing import metering
from billing.models import UsageHour
from jobs import manifests, sync
from jobs.models import RunInterval, RunIntervalSwitch, Workload
from tenants import selectors as tenant_selectors
from tests.billing.metering_helpers import at, make_interval, make_workload, total, usage
from tests.factories import FlavorFactory, QuotaGrantFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def h100(db):
    return FlavorFactory.create(name="H100", slug="h100", resource_name="nvidia.com/gpu", capacity_units=8)


@pytest.fixture
def vision(db):
    return TeamFactory.create(slug="vision", name="Vision")


@pytest.fixture
def alice(db):
    return UserFactory.create(username="alice")


def _iso(instant: dt.datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(workload: Workload, uid: str, *, started: dt.datetime, finished: dt.datetime | None = None,
        containers: tuple[int, ...] = (1,), init_gpus: int = 0, name: str | None = None) -> dict[str, Any]:
    """A pod as the API server shows it: its containers' GPU limits and their states."""
    def state(index: int) -> dict[str, Any]:
        if finished is None:
            return {"running": {"startedAt": _iso(started + dt.timedelta(seconds=index))}}
        return {"terminated": {"startedAt": _iso(started + dt.timedelta(seconds=index)), "finishedAt": _iso(finished)}}
    return {
        "metadata": {"uid": uid, "name": name or f"{workload.k8s_name}-{uid}", "namespace": workload.team.namespace,
                     "labels": {manifests.MANAGED_BY_LABEL: "gpu-portal", manifests.WORKLOAD_LABEL: str(workload.pk)}},
        "spec": {"nodeName": "gpu-node-1",
                 "initContainers": [{"name": "fetch", "resources": {"limits": {"nvidia.com/gpu": str(init_gpus)}}}],
                 "containers": [{"name": f"c{n}", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
                                for n, gpus in enumerate(containers)]},
        "status": {"phase": "Running" if finished is None else "Succeeded",
                   "initContainerStatuses": [{"state": {"terminated": {
                       "startedAt": _iso(started - dt.timedelta(minutes=5)), "finishedAt": _iso(started)}}}],
                   "containerStatuses": [{"name": f"c{n}", "state": state(n)} for n in range(len(containers))]},
    }


def record(workload: Workload, pods: list[dict[str, Any]]) -> sync.SyncResult:
    result = sync.SyncResult()
    sync.record_intervals(Workload.objects.get(pk=workload.pk), pods, result, unseen={})
    return result


def test_a_pod_with_several_containers_and_an_init_container_is_one_interval_counted_once(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100, units=3)
    # Two app containers hold 2 + 1 GPUs; the init container's GPU is handed on to them, not added.
    record(workload, [pod(workload, "p1", started=at("2026-10-07 10:00"), finished=at("2026-10-07 11:00"),
                          containers=(2, 1), init_gpus=3)])

    (interval,) = RunInterval.objects.all()
    assert interval.units == 3
    assert interval.started_at == at("2026-10-07 10:00")  # the first app container's start, after the init
    metering.rollups_refresh(until=at("2026-10-08 00:00"))
    assert usage() == {at("2026-10-07 10:00"): 3 * 3600}


def test_a_restarted_container_stays_in_its_pods_one_interval(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100)
    record(workload, [pod(workload, "p1", started=at("2026-10-07 10:00"))])
    # The container crashed and restarted at 10:20: same pod, same UID, a later startedAt.
    record(workload, [pod(workload, "p1", started=at("2026-10-07 10:20"))])
    record(workload, [pod(workload, "p1", started=at("2026-10-07 10:20"), finished=at("2026-10-07 10:50"))])

    (interval,) = RunInterval.objects.all()
    assert (interval.started_at, interval.ended_at) == (at("2026-10-07 10:00"), at("2026-10-07 10:50"))
    metering.rollups_refresh(until=at("2026-10-08 00:00"))
    assert total() == 50 * 60


def test_preemption_and_readmission_count_each_pod_once_without_overlap(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100, units=2)
    record(workload, [pod(workload, "first", started=at("2026-10-07 10:00"), containers=(2,))])
    metering.rollups_refresh(until=at("2026-10-07 10:30"))
    # Preempted: the pod is gone at 10:40 (the sync's direct read said so); re-admitted, a new pod from 10:45.
    record(workload, [pod(workload, "first", started=at("2026-10-07 10:00"), finished=at("2026-10-07 10:40"),
                          containers=(2,))])
    record(workload, [pod(workload, "second", started=at("2026-10-07 10:45"), finished=at("2026-10-07 11:30"),
                          containers=(2,), name="wl-same-name")])
    # Reading the same cluster again changes nothing.
    record(workload, [pod(workload, "second", started=at("2026-10-07 10:45"), finished=at("2026-10-07 11:30"),
                          containers=(2,), name="wl-same-name")])

    metering.rollups_refresh(until=at("2026-10-08 00:00"))

    assert RunInterval.objects.count() == 2
    assert usage() == {at("2026-10-07 10:00"): 2 * (40 + 15) * 60, at("2026-10-07 11:00"): 2 * 30 * 60}
    assert metering.recompute(start=at("2026-10-07 00:00"), end=at("2026-10-08 00:00")) == []


def test_a_workload_name_reused_with_a_new_uid_is_a_second_interval(h100, vision, alice):
    first = make_workload(team=vision, owner=alice, flavor=h100, name="train")
    again = make_workload(team=vision, owner=alice, flavor=h100, name="train")
    record(first, [pod(first, "uid-a", started=at("2026-10-07 10:00"), finished=at("2026-10-07 10:30"), name="train-0")])
    record(again, [pod(again, "uid-b", started=at("2026-10-07 10:30"), finished=at("2026-10-07 11:00"), name="train-0")])

    metering.rollups_refresh(until=at("2026-10-08 00:00"))

    assert sorted(RunInterval.objects.values_list("pod_uid", "workload_id")) == [("uid-a", first.pk), ("uid-b", again.pk)]
    assert usage() == {at("2026-10-07 10:00"): 3600}


def test_a_flip_to_borrowed_splits_the_seconds_and_a_recomputation_reproduces_it(h100, vision, alice):
    workload = make_workload(team=vision, owner=alice, flavor=h100, units=2)
    make_interval(workload, at("2026-10-07 10:00"))
    metering.rollups_refresh(until=at("2026-10-07 10:20"))

    # The lender reclaimed its quota: from 10:30 this workload runs on borrowed quota, from 11:15 on its own again.
    sync.record_switch(workload_ids=[workload.pk], borrowed=True, at=at("2026-10-07 10:30"))
    sync.record_switch(workload_ids=[workload.pk], borrowed=False, at=at("2026-10-07 11:15"))
    metering.rollups_refresh(until=at("2026-10-07 12:00"))

    assert usage(borrowed=False) == {at("2026-10-07 10:00"): 2 * 1800, at("2026-10-07 11:00"): 2 * 2700}
    assert usage(borrowed=True) == {at("2026-10-07 10:00"): 2 * 1800, at("2026-10-07 11:00"): 2 * 900}
    assert total() == 2 * 2 * 3600  # each second once, in one state
    assert metering.recompute(start=at("2026-10-07 00:00"), end=at("2026-10-08 00:00")) == []


def older_finishes_at_10_40(h100, vision, alice, monkeypatch) -> None:
    """One H100 guaranteed, two workloads running on it from 10:00: the newer one borrowed from its
    start (metered to 10:30), until the older one finishes at 10:40, which is now."""
    QuotaGrantFactory.create(team=vision, flavor=h100, units=1, valid_from=at("2026-09-01 00:00"))
    older = make_workload(team=vision, owner=alice, flavor=h100)
    newer = make_workload(team=vision, owner=alice, flavor=h100)
    Workload.objects.filter(pk=older.pk).update(submitted_at=at("2026-10-07 09:00"))
    Workload.objects.filter(pk=newer.pk).update(submitted_at=at("2026-10-07 09:30"))
    make_interval(older, at("2026-10-07 10:00"), at("2026-10-07 10:40"))
    make_interval(newer, at("2026-10-07 10:00"))
    monkeypatch.setattr(timezone, "now", lambda: at("2026-10-07 10:00:05"))
    sync.mark_borrowed()  # the newer one is beyond the guarantee: borrowed, from its start (not yet metered)
    metering.rollups_refresh(until=at("2026-10-07 10:30"))
    Workload.objects.filter(pk=older.pk).update(phase=Workload.Phase.SUCCEEDED)
    monkeypatch.setattr(timezone, "now", lambda: at("2026-10-07 10:40"))


def test_mark_borrowed_records_the_flip_when_the_guaranteed_workload_ahead_finishes(h100, vision, alice, monkeypatch):
    older_finishes_at_10_40(h100, vision, alice, monkeypatch)
    sync.mark_borrowed()
    monkeypatch.setattr(timezone, "now", lambda: at("2026-10-07 11:00"))
    metering.rollups_refresh()

    assert RunIntervalSwitch.objects.get().at == at("2026-10-07 10:40")
    newer_rows = {row.borrowed: row.unit_seconds for row in UsageHour.objects.filter(
        owner_username="alice", hour=at("2026-10-07 10:00"), borrowed=True)}
    assert newer_rows == {True: 40 * 60}
    assert total(borrowed=False) == 40 * 60 + 20 * 60  # the older one's 40 minutes, then the newer one's last 20


def test_closing_an_interval_in_the_sync_refreshes_the_rollups_after_commit(h100, vision, alice,
                                                                            django_capture_on_commit_callbacks):
    workload = make_workload(team=vision, owner=alice, flavor=h100)
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": workload.k8s_name, "namespace": vision.namespace, "uid": "job-1",
                        "labels": {manifests.MANAGED_BY_LABEL: "gpu-portal", manifests.WORKLOAD_LABEL: str(workload.pk)}},
           "spec": {"suspend": False, "parallelism": 1, "completions": 1},
           "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    running = pod(workload, "p1", started=at("2026-10-07 10:00"))
    with django_capture_on_commit_callbacks(execute=True):
        sync.sync_snapshot(sync.Snapshot.of({"Job": [job], "Pod": [running]}))
    assert not UsageHour.objects.exists()  # opening an interval waits for the periodic refresh

    finished = pod(workload, "p1", started=at("2026-10-07 10:00"), finished=at("2026-10-07 10:10"))
    with django_capture_on_commit_callbacks(execute=True):
        result = sync.sync_snapshot(sync.Snapshot.of({"Job": [job], "Pod": [finished]}))

    assert result.intervals_closed == 1
    assert usage() == {at("2026-10-07 10:00"): 600}
    assert RunInterval.objects.get().settled


def test_two_writers_marking_borrowed_at_once_record_the_flip_once(h100, vision, alice, monkeypatch):
    # Two watchers at once (a rolling update): the second reads the same flip before the first writes it.
    older_finishes_at_10_40(h100, vision, alice, monkeypatch)
    guarantees = tenant_selectors.guarantees_by_flavor
    other_went = False

    def other_writer_goes_first(**kwargs: Any) -> Any:
        nonlocal other_went
        if not other_went:  # the first writer has read the admitted workloads; it writes after this
            other_went = True
            sync.mark_borrowed()
        return guarantees(**kwargs)

    monkeypatch.setattr(tenant_selectors, "guarantees_by_flavor", other_writer_goes_first)
    sync.mark_borrowed()

    assert other_went
    assert list(RunIntervalSwitch.objects.values_list("at", "borrowed")) == [(at("2026-10-07 10:40"), False)]


def test_usage_is_the_persons_so_a_new_account_with_a_deleted_ones_username_reads_none_of_its_cost(h100, vision):
    """Usage was keyed by username: a new alice read the deleted alice's team cost on her page."""
    from billing.models import Rate
    from billing.usage import selectors

    Rate.objects.create(flavor=h100, price_per_gpu_hour=2, effective_from=at("2026-10-01 00:00"))
    old = UserFactory.create(username="alice")
    run = make_workload(team=vision, owner=old, flavor=h100, units=2)
    make_interval(run, at("2026-10-05 08:00"), at("2026-10-05 10:00"))
    run.delete()
    old.delete()
    new = UserFactory.create(username="alice")
    make_interval(make_workload(team=vision, owner=new, flavor=h100), at("2026-10-06 08:00"), at("2026-10-06 09:00"))
    metering.rollups_refresh(until=at("2026-11-01 00:00"))

    mine = selectors.personal_usage(user=new, month=dt.date(2026, 10, 1))
    assert [(line.label, line.gpu_hours, line.cost) for line in mine.by_team] == [("Vision", Decimal("1.00"), Decimal("2.00"))]
    team = selectors.team_month_usage(team=vision, month=dt.date(2026, 10, 1), now=at("2026-11-02 00:00"))
    assert sorted((line.label, line.gpu_hours) for line in team.by_person) == [
        ("alice", Decimal("1.00")), ("alice", Decimal("4.00"))]  # two people, each their own line
    assert metering.recompute(start=at("2026-10-01 00:00"), end=at("2026-11-01 00:00")) == []

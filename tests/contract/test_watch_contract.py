"""The watch-driven sync on both clusters: phases arrive as they happen, without a full pass."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection

from jobs.models import RunInterval, Workload
from jobs.watch import WorkloadInformer
from portal.kube import reset_gateway
from portal.kube.counting import CountingGateway
from portal.kube.simulated import SimulatedGateway
from tests.contract.scenarios import launch

# Watches run in threads with their own database connections: that needs PostgreSQL.
pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_the_informer_follows_a_job_across_watch_restarts_without_losing_or_doubling_its_interval(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    # The job runs longer than a watch round, so every watch expires and starts over from a
    # fresh list at least once while the pod runs.
    settings.PORTAL_POD_ANNOTATIONS = {"kwok.gpu-portal.test/run-duration": "6s", "gpu-portal.io/simulated-run-seconds": "6"}
    team = site.team("watched", gpus=1)
    # The informer finds the gateway through gateway(): the wrapper sees each watch it opens.
    counting = CountingGateway(cluster.gateway)
    reset_gateway(counting)
    informer = WorkloadInformer(watch_seconds=1)
    worker = threading.Thread(target=informer.run, daemon=True)
    worker.start()
    try:
        workload = launch(team, team.memberships.get().user, templates["training"], site.flavor,
                          django_capture_on_commit_callbacks, units=1)
        deadline = time.monotonic() + 60
        while True:
            workload.refresh_from_db()
            if workload.phase == Workload.Phase.SUCCEEDED or time.monotonic() > deadline:
                break
            # Round by round: the next check comes once the Pod watch has started over. The simulated
            # clock moves two seconds a round, so its 6 s pod runs across restarts as the real one does.
            rounds = counting.kinds[("watch", "Pod")]
            counting.wait_for_calls("watch", "Pod", at_least=rounds + 1, timeout=max(deadline - time.monotonic(), 0))
            if isinstance(cluster.gateway, SimulatedGateway):
                cluster.gateway.advance(2)
    finally:
        informer.stop()
        worker.join(timeout=10)
        for thread in informer.threads:
            thread.join(timeout=10)  # a watch ends at its timeout; let it go before the database does
    assert workload.phase == Workload.Phase.SUCCEEDED, workload.reason
    phases = [t.phase for t in workload.transitions.all()]
    assert phases[:2] == ["submitting", "queued"] and phases.count("succeeded") == 1 and phases.count("running") == 1
    # Each round the informer opens starts from a fresh list: the first, and restarts while the pod ran.
    assert counting.kinds[("watch", "Pod")] >= 3
    assert RunInterval.objects.filter(workload=workload).count() == 1
    assert RunInterval.objects.filter(workload=workload, ended_at__isnull=False).count() == 1
    # The portal's own share of the status lag: from a batch's first event to the commit showing it.
    assert informer.lags and all(0 <= lag < 5 for lag in informer.lags), list(informer.lags)
    # What the cache keeps is what the sync reads: the API server's managedFields are dropped.
    kept = [obj for objects in informer.store.values() for obj in objects.values()]
    assert any(obj["metadata"]["name"] == workload.k8s_name for obj in kept)
    assert not [obj["metadata"]["name"] for obj in kept if "managedFields" in obj["metadata"]]


def closing(run: Callable[[], None]) -> Callable[[], None]:
    """A thread's target that closes its database connection when done (the test database is
    dropped after the test, which it cannot be with a thread's connection still open)."""
    def target() -> None:
        try:
            run()
        finally:
            connection.close()
    return target


def test_two_watchers_at_once_write_no_transition_twice_and_no_interval_twice(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    # As during a rolling update (or with leader election off): both watchers see every event and
    # both write. The second workload waits for the first's quota, so its reason changes while queued.
    settings.PORTAL_POD_ANNOTATIONS = {"kwok.gpu-portal.test/run-duration": "2s", "gpu-portal.io/simulated-run-seconds": "2"}
    team = site.team("twice", gpus=1)
    member = team.memberships.get().user
    watchers = [WorkloadInformer(watch_seconds=2) for _ in range(2)]
    threads = [threading.Thread(target=closing(watcher.run), daemon=True) for watcher in watchers]
    for thread in threads:
        thread.start()
    try:
        workloads = [launch(team, member, templates["training"], site.flavor, django_capture_on_commit_callbacks, units=1)
                     for _ in range(2)]
        done = {Workload.Phase.SUCCEEDED, Workload.Phase.FAILED}
        deadline = time.monotonic() + 60
        while Workload.objects.filter(pk__in=[w.pk for w in workloads]).exclude(phase__in=done).exists():
            assert time.monotonic() < deadline, [(w.phase, w.reason) for w in Workload.objects.filter(team=team)]
            if isinstance(cluster.gateway, SimulatedGateway):
                cluster.gateway.advance(1)
            time.sleep(0.3)
    finally:
        for watcher in watchers:
            watcher.stop()
        for thread in [*threads, *(t for watcher in watchers for t in watcher.threads)]:
            thread.join(timeout=10)  # a watch ends at its timeout; let it go before the database does
    for workload in workloads:
        workload.refresh_from_db()
        assert workload.phase == Workload.Phase.SUCCEEDED, workload.reason
        steps = [(t.phase, t.reason) for t in workload.transitions.order_by("at", "pk")]
        # Two writers recording one change would leave the same step twice in a row; the one whose
        # view lags must not take a step back either (jobs.sync._behind: CI recorded "Waiting for
        # Kueue", "Waiting for quota", "Waiting for Kueue", "Waiting for quota" before it).
        assert all(a != b for a, b in zip(steps, steps[1:], strict=False)), steps
        phases = [phase for phase, _ in steps]
        # A run shorter than a watch's delivery may be seen only finished: running at most once.
        assert phases.count("running") <= 1 and phases.count("succeeded") == 1, steps
        intervals = RunInterval.objects.filter(workload=workload)
        assert intervals.count() == 1 and intervals.filter(ended_at__isnull=False).count() == 1
    # The second waited for the first's quota, in words, once.
    waits = [t.reason for t in workloads[1].transitions.all() if t.reason.startswith("Waiting for quota")]
    assert len(waits) == 1, waits

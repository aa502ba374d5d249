"""What the worker and the watcher record, exported on the web's /metrics at scrape time: the
series the alerting rules in deploy/prometheus/ are written against."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from jobs.models import Workload, WorkloadTransition
from jobs.observability import Step, queue_waits
from tests.helpers import launch

NOW = timezone.now()


def samples(client) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    body = client.get("/metrics").content.decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(body) for sample in family.samples}


def test_a_wait_runs_from_entering_the_queue_to_admission_and_a_requeue_starts_a_new_one():
    at = [NOW - timedelta(minutes=m) for m in (50, 45, 30, 20, 12)]
    steps = [Step(1, "submitting", at[0]), Step(1, "queued", at[1]), Step(1, "running", at[2]),
             Step(1, "preempted", at[3]), Step(1, "queued", at[3]), Step(1, "admitted", at[4])]
    assert queue_waits(steps, now=NOW, since=NOW - timedelta(hours=1)) == {1: 8 * 60.0}


def test_a_workload_still_waiting_counts_its_wait_so_far_and_one_stopped_in_the_queue_counts_none():
    steps = [Step(1, "submitting", NOW - timedelta(hours=5)), Step(1, "queued", NOW - timedelta(hours=5)),
             Step(2, "queued", NOW - timedelta(minutes=9)), Step(2, "stopped", NOW - timedelta(minutes=2)),
             Step(3, "queued", NOW - timedelta(hours=3)), Step(3, "running", NOW - timedelta(hours=2))]
    assert queue_waits(steps, now=NOW, since=NOW - timedelta(hours=1)) == {1: 5 * 3600.0}


def test_team_reconcile_state_and_guarantees_are_exported_per_team_and_flavor(client, ready_team, other_team, flavor):
    other_team.sync_error = "namespace speech exists without the portal's label"
    other_team.save()
    got = samples(client)
    vision = frozenset({("team", "vision"), ("namespace", "vision")})
    speech = frozenset({("team", "speech"), ("namespace", "speech")})
    assert got[("portal_team_reconcile_failing", vision)] == 0
    assert got[("portal_team_reconcile_failing", speech)] == 1
    assert got[("portal_team_reconcile_pending", vision)] == 0
    assert got[("portal_quota_guaranteed_units", vision | {("flavor", "h100-80gb")})] == 4


def test_heartbeats_and_the_last_team_pass_are_exported_as_unix_times(client, db):
    from portal.health import TEAM_PASS, WATCHER, heartbeat_record

    assert not any(name == "portal_heartbeat_timestamp_seconds" for name, _ in samples(client))  # none recorded yet
    heartbeat_record(name=WATCHER, at=NOW - timedelta(seconds=5))
    heartbeat_record(name=TEAM_PASS, at=NOW - timedelta(minutes=3))
    got = samples(client)

    def beat(name: str) -> float:
        return got[("portal_heartbeat_timestamp_seconds", frozenset({("name", name)}))]

    assert beat("watcher") == (NOW - timedelta(seconds=5)).timestamp()
    assert beat("team-pass") == (NOW - timedelta(minutes=3)).timestamp()


def test_held_units_and_queue_waits_are_exported_per_team_and_flavor(client, ready_team, member, training, flavor):
    running = launch(member, ready_team, training, flavor, units=2)
    waiting = launch(member, ready_team, training, flavor, units=1)
    Workload.objects.filter(pk=running.pk).update(phase=Workload.Phase.RUNNING)
    Workload.objects.filter(pk=waiting.pk).update(phase=Workload.Phase.QUEUED)
    WorkloadTransition.objects.filter(workload__in=[running, waiting]).delete()
    WorkloadTransition.objects.bulk_create([
        WorkloadTransition(workload=running, phase="queued", at=NOW - timedelta(minutes=31)),
        WorkloadTransition(workload=running, phase="running", at=NOW - timedelta(minutes=20)),
        WorkloadTransition(workload=waiting, phase="queued", at=NOW - timedelta(hours=2)),
    ])
    got = samples(client)
    labels = frozenset({("team", "vision"), ("namespace", "vision"), ("flavor", "h100-80gb")})
    assert got[("portal_gpu_units_held", labels)] == 2
    assert got[("portal_workloads", labels | {("phase", "queued")})] == 1
    assert got[("portal_workloads", labels | {("phase", "running")})] == 1
    assert got[("portal_workload_queue_wait_seconds_bucket", labels | {("le", "600.0")})] == 0
    assert got[("portal_workload_queue_wait_seconds_bucket", labels | {("le", "1800.0")})] == 1
    assert got[("portal_workload_queue_wait_seconds_bucket", labels | {("le", "+Inf")})] == 2
    assert got[("portal_workload_queue_wait_seconds_gcount", labels)] == 2


def test_a_scrape_costs_the_same_few_queries_for_many_workloads(client, ready_team, member, training, flavor):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            client.get("/metrics")
        return len(captured)

    launch(member, ready_team, training, flavor)
    few = queries()
    for _ in range(5):
        launch(member, ready_team, training, flavor)
    assert queries() == few


def test_the_workload_series_name_the_teams_namespace_with_its_prefix_in_three_queries(
    client, ready_team, member, training, flavor, settings,
):
    from jobs.observability import WorkloadCollector

    waiting = launch(member, ready_team, training, flavor)
    Workload.objects.filter(pk=waiting.pk).update(phase=Workload.Phase.QUEUED)
    settings.PORTAL_NAMESPACE_PREFIX = "gpu-"
    with CaptureQueriesContext(connection) as captured:
        families = list(WorkloadCollector().collect())
    assert len(captured) == 3
    namespaces = {sample.labels["namespace"] for family in families for sample in family.samples}
    assert namespaces == {"gpu-vision"}

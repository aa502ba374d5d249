"""Tasks through the production broker: a real Redis (started by `make test`) and a real worker."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from celery.contrib.testing.worker import start_worker

from portal.celery import app
from tenants import tasks
from tenants.models import Team
from tests.factories import FlavorFactory, QuotaGrantFactory, TeamFactory
from tests.helpers import use_queue, wait_for

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def redis_worker():
    if not os.environ.get("REDIS_URL"):
        pytest.fail("REDIS_URL is not set: run this through `make test`, which starts Redis")
    assert app.conf.broker_url.startswith("redis://")
    eager, default_queue = app.conf.task_always_eager, app.conf.task_default_queue
    app.conf.task_always_eager = False
    # A queue of this test's own: the suite's Redis is shared with tests on the other xdist worker.
    use_queue(f"redis-worker-{uuid.uuid4().hex[:8]}")
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
            yield
    finally:
        app.conf.task_always_eager = eager
        use_queue(default_queue)


def test_a_team_change_travels_through_redis_to_a_worker_that_reconciles_it(redis_worker):
    team = TeamFactory.create(slug="vision")
    QuotaGrantFactory(team=team, flavor=FlavorFactory(slug="h100-80gb"), units=4)
    Team.objects.filter(pk=team.pk).update(config_version=5)

    tasks.team_reconcile.delay(team.pk)

    wait_for(lambda: Team.objects.get(pk=team.pk).sync_state == Team.SyncState.IN_SYNC,
             what="the worker to reconcile the team", timeout=20)
    assert Team.objects.get(pk=team.pk).applied_version == 5


@pytest.fixture
def scripted_cluster(monkeypatch):
    from portal import tasks as portal_tasks
    from portal.kube import reset_gateway
    from portal.kube.simulated import SimulatedGateway

    monkeypatch.setattr(portal_tasks, "RETRY_DELAY_BASE", 0.05)  # the policy, minus the minutes of waiting

    def install(**script):
        from tests.scripted_gateway import ScriptedGateway

        cluster = ScriptedGateway(SimulatedGateway(), **script)
        reset_gateway(cluster)
        return cluster

    yield install
    reset_gateway(None)


def test_a_worker_retries_an_outage_through_redis_a_bounded_number_of_times_then_records_it(redis_worker, scripted_cluster):
    from portal.tasks import CLUSTER_TASK_RETRIES
    from tests.scripted_gateway import unavailable

    cluster = scripted_cluster(always=unavailable("etcdserver: request timed out"))
    team = TeamFactory.create(slug="vision")

    tasks.team_reconcile.delay(team.pk)

    wait_for(lambda: cluster.attempts == 1 + CLUSTER_TASK_RETRIES, what="the bounded retries", timeout=20)
    time.sleep(1)  # room for a retry too many to show up
    team.refresh_from_db()
    assert cluster.attempts == 1 + CLUSTER_TASK_RETRIES
    assert team.sync_error == "etcdserver: request timed out"


def test_a_worker_records_a_refusal_at_once_and_does_not_retry_it(redis_worker, scripted_cluster):
    from tests.scripted_gateway import refusal

    cluster = scripted_cluster(always=refusal("rejected as invalid: spec.cohortName: Invalid value"))
    team = TeamFactory.create(slug="vision")

    tasks.team_reconcile.delay(team.pk)

    wait_for(lambda: Team.objects.filter(pk=team.pk).exclude(sync_error="").exists(), what="the refusal recorded", timeout=20)
    time.sleep(1)
    assert cluster.attempts == 1
    assert Team.objects.get(pk=team.pk).sync_error == "rejected as invalid: spec.cohortName: Invalid value"

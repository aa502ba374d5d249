"""Tasks through the production broker: a real Redis (started by `make test`) and a real worker."""

from __future__ import annotations

import os
import time

import pytest
from celery.contrib.testing.worker import start_worker

from portal.celery import app
from tenants import tasks
from tenants.models import Team
from tests.factories import FlavorFactory, QuotaGrantFactory, TeamFactory

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def redis_worker():
    if not os.environ.get("REDIS_URL"):
        pytest.fail("REDIS_URL is not set: run this through `make test`, which starts Redis")
    assert app.conf.broker_url.startswith("redis://")
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = False
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
            yield
    finally:
        app.conf.task_always_eager = eager


def test_a_team_change_travels_through_redis_to_a_worker_that_reconciles_it(redis_worker):
    team = TeamFactory(slug="vision")
    QuotaGrantFactory(team=team, flavor=FlavorFactory(slug="h100-80gb"), units=4)
    Team.objects.filter(pk=team.pk).update(config_version=5)

    tasks.team_reconcile.delay(team.pk)

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        team.refresh_from_db()
        if team.sync_state == "in_sync":
            break
        time.sleep(0.1)
    assert (team.sync_state, team.applied_version) == ("in_sync", 5)

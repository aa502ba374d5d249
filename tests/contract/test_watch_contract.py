"""The watch-driven sync on both clusters: phases arrive as they happen, without a full pass."""

from __future__ import annotations

import threading
import time

import pytest

from jobs.models import RunInterval, Workload
from jobs.watch import WorkloadInformer
from portal.kube.simulated import SimulatedGateway
from tests.contract.test_tenancy_contract import site  # noqa: F401 - the fixture
from tests.contract.test_workload_contract import QUICK, launch, templates  # noqa: F401 - the fixture

# Watches run in threads with their own database connections: that needs PostgreSQL.
pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_the_informer_follows_a_job_from_queue_to_success_and_records_its_interval(cluster, site, templates, settings,
                                                                                   django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = QUICK
    team = site.team("watched", gpus=1)
    informer = WorkloadInformer(watch_seconds=5)
    worker = threading.Thread(target=informer.run, daemon=True)
    worker.start()
    try:
        workload = launch(team, team.memberships.get().user, templates["training"], site.flavor,
                          django_capture_on_commit_callbacks, units=1)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if isinstance(cluster.gateway, SimulatedGateway):
                cluster.gateway.advance(1)
            workload.refresh_from_db()
            if workload.phase == Workload.Phase.SUCCEEDED:
                break
            time.sleep(0.3)
    finally:
        informer.stop()
        worker.join(timeout=10)
        for thread in informer.threads:
            thread.join(timeout=10)  # a watch ends at its timeout; let it go before the database does
    assert workload.phase == Workload.Phase.SUCCEEDED, workload.reason
    assert [t.phase for t in workload.transitions.all()][:2] == ["submitting", "queued"]
    assert RunInterval.objects.filter(workload=workload, ended_at__isnull=False).count() == 1

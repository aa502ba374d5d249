"""The simulated cluster takes writes from several processes at once (the web process and the
worker's threads): each write and the controllers' catch-up after it run one at a time on
PostgreSQL (portal.kube.simulated.store.Store.writing), so concurrent launches never deadlock.
Without it, 7 of these 8 threads ended in PostgreSQL's "deadlock detected"."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from portal.kube import gateway
from tests.contract.scenarios import probe_job

pytestmark = pytest.mark.django_db(transaction=True)

THREADS, EACH = 8, 10
TIERS = ("gpu-portal-low", "gpu-portal-normal", "gpu-portal-high")


def test_eight_threads_applying_jobs_at_once_all_land_and_none_deadlocks(ready_team, simulated):
    errors: list[str] = []
    start = threading.Barrier(THREADS)

    def launch(thread: int) -> None:
        try:
            start.wait()
            for index in range(EACH):
                # Mixed tiers, so that each catch-up reorders the waiting workloads it writes.
                gateway().apply(probe_job(ready_team.namespace, f"job-{thread}-{index}", gpus=1,
                                          priority=TIERS[(thread + index) % len(TIERS)]))
                simulated.tick()  # as the beat's tick does, between the launches
        except Exception as error:  # a deadlock ends a write with an OperationalError
            errors.append(repr(error))
        finally:
            connection.close()  # this thread's own

    threads = [threading.Thread(target=launch, args=(thread,)) for thread in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert len(gateway().list("batch/v1", "Job", namespace=ready_team.namespace)[0]) == THREADS * EACH

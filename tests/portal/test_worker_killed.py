"""A Celery worker killed (`kill -9`) in the middle of submissions and team reconciles, then
started again: a real worker process on the suite's Redis, tasks acknowledged late, a short
visibility timeout and a look for expired tasks every second, so that what the dead worker held
goes to the next one within seconds.

The invariant: every workload is submitted exactly once (one Job in the cluster, one step to
queued, none left `submitting`), every team converges (in sync at its latest configuration),
and no cluster object is made twice. The worker and the test share the simulated cluster
through the database, as the demo's worker and web do.

Scaled for CI (30 submissions, 5 team reconciles); `PORTAL_FAULT_SCALE=full` runs the issue's
100 and 20 (`make bench`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from jobs import tasks as job_tasks
from jobs.models import Workload
from portal.celery import app
from portal.kube import ObjectRef
from tenants import tasks as tenant_tasks
from tenants.models import Team
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.helpers import child_database_url, launch, make_ready, use_queue, wait_for

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

FULL = os.environ.get("PORTAL_FAULT_SCALE") == "full"
SUBMISSIONS, TEAMS = (100, 20) if FULL else (30, 5)
VISIBILITY_TIMEOUT = 2
ROOT = Path(__file__).resolve().parents[2]
SHARED_DATABASE = "a worker process shares the test's database"


class Worker:
    """`celery worker` as the demo runs it (threads), on a queue of this test's own."""

    def __init__(self, tmp_path: Path, queue: str) -> None:
        self.log_path = tmp_path / "worker.log"
        self.env = {**os.environ, "DATABASE_URL": child_database_url(SHARED_DATABASE), "PORTAL_CLUSTER": "simulated",
                    "CELERY_TASK_DEFAULT_QUEUE": queue, "CELERY_VISIBILITY_TIMEOUT_SECONDS": str(VISIBILITY_TIMEOUT),
                    "CELERY_UNACKED_RESTORE_SECONDS": "1",
                    "PORTAL_IMAGE_REGISTRIES": ",".join(django_settings.PORTAL_IMAGE_REGISTRIES),
                    "PORTAL_VAR_DIR": str(tmp_path / "var"), "LOG_FORMAT": "text", "PYTHONUNBUFFERED": "1"}
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child writes it
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=threads", "--concurrency=4",
             "--without-gossip", "--without-mingle", "--loglevel=INFO", "-n", f"faults-{self.starts}@%h"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.starts += 1

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        print(self.log_path.read_text(errors="replace")[-4000:])  # shown when the test fails


@pytest.fixture
def worker(tmp_path) -> Iterator[Worker]:
    if not os.environ.get("REDIS_URL"):
        pytest.fail("REDIS_URL is not set: run this through scripts/with-services.sh, which starts Redis")
    queue = f"faults-{uuid.uuid4().hex[:8]}"  # the suite's Redis is shared: never another test's tasks
    eager, default_queue = app.conf.task_always_eager, app.conf.task_default_queue
    app.conf.task_always_eager = False
    use_queue(queue)
    made = Worker(tmp_path, queue)
    try:
        yield made
    finally:
        made.stop()
        app.conf.task_always_eager = eager
        use_queue(default_queue)


def test_a_worker_killed_mid_submissions_leaves_every_workload_submitted_once_and_every_team_in_sync(
        flavor, training, simulated, worker, settings):
    settings.PORTAL_LAUNCH_RATE = (10_000, 60)
    teams = [make_ready(TeamFactory.create(slug=f"killed-{n}"), flavor, units=4) for n in range(TEAMS)]
    members = []
    for team in teams:
        members.append(UserFactory(username=f"{team.slug}-member"))
        MembershipFactory(team=team, user=members[-1])
    # Each team's configuration moves on (as after a grant), so its reconcile has something to apply.
    Team.objects.filter(pk__in=[t.pk for t in teams]).update(config_version=7)

    worker.start()
    workloads = []
    for n in range(SUBMISSIONS):
        # Committed here (no transaction around the test), so each submission is queued at once.
        workloads.append(launch(members[n % TEAMS], teams[n % TEAMS], training, flavor, units=1))
        if n % (SUBMISSIONS // TEAMS) == 0:
            tenant_tasks.team_reconcile.delay(teams[n // (SUBMISSIONS // TEAMS)].pk)
    ids = [w.pk for w in workloads]

    def submitting() -> int:
        return Workload.objects.filter(pk__in=ids, phase=Workload.Phase.SUBMITTING).count()

    wait_for(lambda: submitting() <= SUBMISSIONS - 3, what="the worker to submit a few", timeout=90)
    worker.kill()
    left = submitting()
    assert left > 0, "the worker finished before it was killed: nothing was cut short"

    worker.start()
    restarted = time.monotonic()
    # What the dead worker had taken waits for the visibility timeout and the restarted worker's
    # next look for it (CELERY_UNACKED_RESTORE_SECONDS; kombu's own look comes every 100 s, which
    # made this take 103 s and time out in CI). The figure is printed below. One message escapes
    # that: a kill between Redis's BRPOP and kombu recording the message as unacked loses it, as
    # kombu's Redis transport takes with BRPOP, not BRPOPLPUSH (celery/kombu#305; a CI run on
    # 2026-11-27 lost one of 30 submissions so). The broker alone must bring back all but that one.
    # The deadline is generous: under the full suite's load a submission took up to 1.5 s and a
    # team reconcile 5 s (a CI-like run on 2026-11-29 was still submitting when 60 s ran out).
    wait_for(lambda: submitting() <= 1, what=f"the restarted worker to submit the {left} left, all but one a kill may lose",
             timeout=180)
    restored = time.monotonic() - restarted
    # Then what a site's beat runs anyway, and the watcher's team pass: the pass that sends a
    # submission again (its 120 s bound shortened here; creating is idempotent, so a second one for
    # a workload already sent must change nothing) and the team pass, through the worker.
    settings.PORTAL_SUBMITTING_BOUND_SECONDS = 0
    job_tasks.workloads_resubmit_lost()  # it reads and sends; the worker submits
    tenant_tasks.cluster_reconcile.delay()
    wait_for(lambda: submitting() == 0, what="the lost-submission pass to send what the kill lost", timeout=30)
    submitted = time.monotonic() - restarted
    wait_for(lambda: not Team.objects.filter(pk__in=[t.pk for t in teams]).exclude(applied_version=7).exists(),
             what="every team to converge", timeout=90)
    print(f"killed with {left} of {SUBMISSIONS} submissions left; after the restart all but at most one submitted in "
          f"{restored:.1f} s, all in {submitted:.1f} s, teams in sync in "
          f"{time.monotonic() - restarted:.1f} s (visibility timeout {VISIBILITY_TIMEOUT} s)")

    for workload in Workload.objects.filter(pk__in=ids).select_related("team"):
        steps = [t.phase for t in workload.transitions.all()]
        assert steps[:2] == ["submitting", "queued"] and steps.count("queued") == 1, (workload.pk, steps)
        assert workload.submitted_at is not None
    for team in Team.objects.filter(pk__in=[t.pk for t in teams]):
        assert (team.sync_state, team.sync_error) == ("in_sync", ""), team.slug
        jobs, _ = simulated.list("batch/v1", "Job", namespace=team.namespace)
        names = [job["metadata"]["name"] for job in jobs]
        assert len(names) == len(set(names)) == SUBMISSIONS // TEAMS, names
        assert simulated.get(ObjectRef("kueue.x-k8s.io/v1beta2", "LocalQueue", "default", team.namespace)) is not None

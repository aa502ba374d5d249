"""Leader election on the real control plane, with real processes: two watchers (`manage.py
watch_workloads`) and two beats (`manage.py run_beat`) at once, the leader killed (`kill -9`) or
frozen (SIGSTOP) and the other taking over within the lease time; no transition written twice,
no run interval doubled, never two beats sending. The lease times are short (3 s lease, 2 s
renew deadline, 0.5 s retry period) so that this takes seconds.

The processes share the test's PostgreSQL database (hence `services`: the rows the test writes
must be committed for them to see)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from jobs.models import RunInterval, Workload
from portal.kube import ObjectRef, gateway
from portal.leader import LEASE_API
from tests.contract.scenarios import launch
from tests.helpers import child_database_url, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.services, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS, RENEW_DEADLINE, RETRY_PERIOD = 3, 2.0, 0.5
# A follower takes over a lease duration after it last saw the Lease change: up to one retry
# period (jittered) after the leader's last renewal, plus one more until its next try, plus the
# time a loaded 2-core machine takes to run a process that was waiting.
TAKEOVER_BOUND = LEASE_SECONDS + 2 * 1.2 * RETRY_PERIOD + 1.5
ROOT = Path(__file__).resolve().parents[2]
SHARED_DATABASE = "leader election across processes needs the test's PostgreSQL"


class Candidates:
    """Processes of one command competing for one Lease, each logging to a file of its own."""

    def __init__(self, control_plane: Any, tmp_path: Path, namespace: str, lease: str, argv: list[str]) -> None:
        self.namespace, self.lease, self.argv, self.tmp_path = namespace, lease, argv, tmp_path
        self.env = {**os.environ, "DATABASE_URL": child_database_url(SHARED_DATABASE), "PORTAL_CLUSTER": "kubernetes",
                    "KUBECONFIG": str(control_plane.kubeconfig_path), "PORTAL_LEADER_ELECTION": "1",
                    "POD_NAMESPACE": namespace, "PORTAL_LEADER_LEASE": lease, "PORTAL_BEAT_LEASE": lease,
                    "PORTAL_LEASE_DURATION_SECONDS": str(LEASE_SECONDS),
                    "PORTAL_LEASE_RENEW_DEADLINE_SECONDS": str(RENEW_DEADLINE),
                    "PORTAL_LEASE_RETRY_PERIOD_SECONDS": str(RETRY_PERIOD),
                    "PORTAL_NAMESPACE_PREFIX": django_settings.PORTAL_NAMESPACE_PREFIX,
                    # The embedded file-system broker in the test's folder: beat's messages go nowhere shared.
                    "PORTAL_VAR_DIR": str(tmp_path / "var"), "LOG_FORMAT": "text", "PYTHONUNBUFFERED": "1"}
        self.env.pop("REDIS_URL", None)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, *names: str) -> None:
        for name in names:
            log = open(self.tmp_path / f"{name}.log", "wb")  # noqa: SIM115 - the child writes it
            self.processes[name] = subprocess.Popen(
                [sys.executable, "manage.py", *self.argv], cwd=ROOT, env={**self.env, "POD_NAME": name},
                stdout=log, stderr=subprocess.STDOUT)

    def log(self, name: str) -> str:
        return (self.tmp_path / f"{name}.log").read_text(errors="replace")

    def holder(self) -> str:
        lease = gateway().get(ObjectRef(LEASE_API, "Lease", self.lease, self.namespace))
        return ((lease or {}).get("spec") or {}).get("holderIdentity") or ""

    def leader(self) -> str:
        """The name (POD_NAME) of the process that holds the Lease, or ''."""
        return self.holder().rpartition("_")[0]

    def stop_all(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is None:
                process.kill()
                process.wait()
            print(f"--- {name} ---\n{self.log(name)[-3000:]}")  # shown when the test fails


@pytest.fixture
def candidates(control_plane, cluster, tmp_path) -> Iterator[Callable[..., Candidates]]:
    namespace = cluster.unique("portal")
    gateway().apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    made: list[Candidates] = []

    def make(lease: str, argv: list[str]) -> Candidates:
        made.append(Candidates(control_plane, tmp_path, namespace, lease, argv))
        return made[-1]

    yield make
    for group in made:
        group.stop_all()
    gateway().delete(ObjectRef("v1", "Namespace", namespace))


def sends(log: str, entry: str) -> list[float]:
    """When (epoch seconds) this beat sent the entry, from its log's timestamps."""
    times = []
    for line in log.splitlines():
        if f"beat sent {entry} " in line:
            # The children log in local time, which Django made the same TIME_ZONE here.
            times.append(dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp())  # noqa: DTZ007
    return times


@pytest.mark.parametrize("cluster", [pytest.param("real", marks=pytest.mark.cluster)], indirect=True)
def test_two_watchers_elect_one_writer_and_a_killed_leader_is_replaced_without_a_doubled_transition(
        cluster, site, templates, candidates, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = {"kwok.gpu-portal.test/run-duration": "6s"}
    team = site.team("elected", gpus=1)
    watchers = candidates("watcher", ["watch_workloads"])
    watchers.start("w1", "w2")
    first = wait_for(watchers.leader, what="a watcher to take the Lease")
    second = {"w1": "w2", "w2": "w1"}[first]

    workload = launch(team, team.memberships.get().user, templates["training"], site.flavor,
                      django_capture_on_commit_callbacks, units=1)
    wait_for(lambda: Workload.objects.get(pk=workload.pk).phase == Workload.Phase.RUNNING,
             what=f"{first}, the leader, to record the workload running")
    # The follower says it waits after its first try, which a slow start may bring after the leader's
    # first write: wait for the line rather than race it.
    wait_for(lambda: "waits: Lease" in watchers.log(second), what=f"{second} to say it waits for the Lease")
    assert "acquired" not in watchers.log(second)

    watchers.processes[first].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: watchers.leader() == second, what=f"{second} to take over", timeout=30)
    takeover = time.monotonic() - killed
    workload = wait_for(lambda: Workload.objects.filter(pk=workload.pk, phase=Workload.Phase.SUCCEEDED).first(),
                        what=f"{second}, the new leader, to record the workload succeeded")

    watchers.processes[second].send_signal(signal.SIGTERM)
    assert watchers.processes[second].wait(timeout=30) == 0, watchers.log(second)
    assert watchers.holder() == ""  # released on SIGTERM: a next watcher need not wait out the lease
    assert takeover <= TAKEOVER_BOUND, f"took {takeover:.1f} s"
    steps = [(t.phase, t.reason) for t in workload.transitions.order_by("at", "pk")]
    assert len(steps) == len(set(steps)), steps  # nothing written twice
    assert [phase for phase, _ in steps].count(Workload.Phase.RUNNING) == 1
    assert [phase for phase, _ in steps].count(Workload.Phase.SUCCEEDED) == 1
    intervals = list(RunInterval.objects.filter(workload=workload))
    assert len(intervals) == 1 and intervals[0].ended_at is not None


@pytest.mark.parametrize("cluster", [pytest.param("real", marks=pytest.mark.cluster)], indirect=True)
def test_two_beats_never_send_at_once_when_the_leader_is_frozen_resumed_or_killed(cluster, candidates):
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    every = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(name="leader-test-tick", task="portal.tasks.heartbeat", interval=every)
    beats = candidates("beat", ["run_beat"])
    beats.start("b1", "b2")
    first = wait_for(beats.leader, what="a beat to take the Lease")
    second = {"b1": "b2", "b2": "b1"}[first]
    wait_for(lambda: len(sends(beats.log(first), "leader-test-tick")) >= 2, what=f"{first} to send", timeout=30)

    # Frozen (a stopped container, a starved node): it cannot renew, and the other takes over.
    beats.processes[first].send_signal(signal.SIGSTOP)
    frozen_at = time.time()
    frozen = time.monotonic()
    wait_for(lambda: beats.leader() == second, what=f"{second} to take over from the frozen {first}", timeout=30)
    first_takeover = time.monotonic() - frozen
    wait_for(lambda: len(sends(beats.log(second), "leader-test-tick")) >= 2, what=f"{second} to send", timeout=30)

    # Resumed, it finds its leadership lapsed on its own clock and sends nothing.
    beats.processes[first].send_signal(signal.SIGCONT)
    wait_for(lambda: f"lost Lease {beats.namespace}/beat" in beats.log(first), what=f"{first} to see it lost", timeout=30)
    time.sleep(1.5)  # a second of its 1-second schedule in which it must stay silent

    beats.processes[second].send_signal(signal.SIGKILL)
    killed_at = time.time()
    killed = time.monotonic()
    wait_for(lambda: beats.leader() == first, what=f"{first} to take over again", timeout=30)
    second_takeover = time.monotonic() - killed
    retaken_at = time.time()
    wait_for(lambda: [t for t in sends(beats.log(first), "leader-test-tick") if t > retaken_at],
             what=f"{first} to send again", timeout=30)
    beats.processes[first].send_signal(signal.SIGTERM)
    assert beats.processes[first].wait(timeout=30) == 0, beats.log(first)

    slack = 0.01  # log timestamps are to the millisecond
    first_sends, second_sends = sends(beats.log(first), "leader-test-tick"), sends(beats.log(second), "leader-test-tick")
    assert not [t for t in first_sends if frozen_at + slack < t < killed_at], "the resumed beat sent while the other led"
    assert second_sends and all(frozen_at < t < killed_at + slack for t in second_sends)
    assert first_takeover <= TAKEOVER_BOUND, f"took {first_takeover:.1f} s"
    assert second_takeover <= TAKEOVER_BOUND, f"took {second_takeover:.1f} s"
    assert beats.holder() == ""

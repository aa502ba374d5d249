"""Leader election on the simulated cluster, with clocks moved by hand: who leads, when a follower
may take over, and that a leader stops writing before a follower can start."""

from __future__ import annotations

import pytest

from jobs.models import RunInterval, Workload
from jobs.sync import Snapshot, sync_snapshot
from portal.kube import ObjectRef, reset_gateway
from portal.kube.simulated import SimulatedGateway
from portal.leader import LEASE_API, LeaderElector, LeadershipLost, LeaseConfig
from tests.helpers import launch

pytestmark = pytest.mark.django_db
NAMESPACE = "gpu-portal"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def lease_cluster():
    simulated = SimulatedGateway()
    simulated.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    reset_gateway(simulated)
    yield simulated
    reset_gateway(None)


@pytest.fixture
def clock():
    return Clock()


def candidate(name: str, clock: Clock) -> LeaderElector:
    config = LeaseConfig(name="watcher", namespace=NAMESPACE, identity=name, lease_duration=15, renew_deadline=10,
                         retry_period=2)
    return LeaderElector(config, clock=clock)


def lease(cluster) -> dict:
    return cluster.get(ObjectRef(LEASE_API, "Lease", "watcher", NAMESPACE))["spec"]


def test_the_first_candidate_creates_the_lease_and_leads_and_the_second_follows(lease_cluster, clock):
    a, b = candidate("a", clock), candidate("b", clock)

    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False

    assert a.leading() and not b.leading()
    assert lease(lease_cluster)["holderIdentity"] == "a"
    assert lease(lease_cluster)["leaseTransitions"] == 0


def test_renewals_keep_a_follower_out_however_long_they_go_on(lease_cluster, clock):
    a, b = candidate("a", clock), candidate("b", clock)
    a.try_acquire_or_renew()
    acquired = lease(lease_cluster)["acquireTime"]

    for _ in range(20):  # 20 × 2 s: longer than the lease, renewed every retry period
        clock.now += 2
        assert a.try_acquire_or_renew() is True
        assert b.try_acquire_or_renew() is False

    assert lease(lease_cluster)["holderIdentity"] == "a"
    assert lease(lease_cluster)["acquireTime"] == acquired  # a renewal is not a new acquisition
    assert lease(lease_cluster)["renewTime"] >= acquired


def test_a_follower_takes_over_only_a_lease_duration_after_it_last_saw_the_lease_change(lease_cluster, clock):
    a, b = candidate("a", clock), candidate("b", clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()  # b sees a's lease now; a then dies and renews no more

    clock.now += 14.9
    assert b.try_acquire_or_renew() is False
    clock.now += 0.2
    assert b.try_acquire_or_renew() is True

    assert lease(lease_cluster)["holderIdentity"] == "b"
    assert lease(lease_cluster)["leaseTransitions"] == 1


def test_a_leader_that_cannot_renew_stops_leading_before_any_follower_may_take_over(lease_cluster, clock):
    a, b = candidate("a", clock), candidate("b", clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    # From here a's renewals fail (say, the API server is out of its reach).

    clock.now += 9.9
    a.fence()
    clock.now += 0.2  # past the renew deadline
    assert not a.leading()
    with pytest.raises(LeadershipLost):
        a.fence()
    assert b.try_acquire_or_renew() is False  # and b still waits: 10.1 s < the 15 s lease


def test_a_lapse_the_work_sees_first_is_logged_once_and_the_candidate_campaigns_again(lease_cluster, clock, caplog):
    a = candidate("a", clock)
    terms = []

    def work(elector: LeaderElector) -> None:
        terms.append(elector.leading())
        if len(terms) == 1:
            clock.now += 10.1  # frozen past the renew deadline: the work sees it before the renewer does
            assert not elector.leading()
        else:
            elector.stop()

    caplog.set_level("INFO", logger="portal.leader")
    a.lead(work)

    assert terms == [True, True]
    said = [record.getMessage() for record in caplog.records]
    assert [line for line in said if "lost Lease" in line] == [f"a lost Lease {NAMESPACE}/watcher: not renewed within 10.0 s"]
    assert f"a campaigns again for Lease {NAMESPACE}/watcher" in said
    assert lease(lease_cluster)["holderIdentity"] == ""  # released on the way out


def test_of_two_candidates_writing_from_the_same_read_only_one_wins(lease_cluster, clock):
    a, b = candidate("a", clock), candidate("b", clock)
    a.try_acquire_or_renew()
    c = candidate("c", clock)
    b.try_acquire_or_renew()
    c.try_acquire_or_renew()
    clock.now += 16  # a died; b and c both see an expired lease

    class ReadThenRace:
        """b's read happens, then c writes before b does."""

        def __init__(self) -> None:
            self.raced = False

        def __call__(self):
            if not self.raced:
                self.raced = True
                assert c.try_acquire_or_renew() is True
            return lease_cluster

    b.cluster = ReadThenRace()
    assert b.try_acquire_or_renew() is False  # its write named the version c replaced: 409

    assert lease(lease_cluster)["holderIdentity"] == "c"
    assert lease(lease_cluster)["leaseTransitions"] == 1


def test_a_released_lease_is_taken_at_the_next_try_without_waiting_out_the_duration(lease_cluster, clock):
    a, b = candidate("a", clock), candidate("b", clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()

    a.release()

    assert not a.leading()
    assert lease(lease_cluster)["holderIdentity"] == ""
    assert b.try_acquire_or_renew() is True
    assert lease(lease_cluster)["holderIdentity"] == "b"


def test_a_former_leader_does_not_release_a_lease_another_now_holds(lease_cluster, clock):
    a, b = candidate("a", clock), candidate("b", clock)
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock.now += 16
    b.try_acquire_or_renew()

    a.release()

    assert lease(lease_cluster)["holderIdentity"] == "b"


def test_lease_times_that_would_let_two_lead_are_refused():
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        LeaseConfig(name="x", namespace="y", identity="z", lease_duration=10, renew_deadline=10, retry_period=2)


def test_a_fenced_sync_writes_nothing_once_leadership_is_lost(ready_team, member, training, flavor, simulated,
                                                                django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, flavor, units=1)
    simulated.advance(1)
    snapshot = Snapshot.read()  # the job admitted and its pod running: a transition and an interval to write
    transitions = workload.transitions.count()

    def lost() -> None:
        raise LeadershipLost("no longer the leader")

    with pytest.raises(LeadershipLost):
        sync_snapshot(snapshot, fence=lost)

    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.QUEUED and workload.transitions.count() == transitions
    assert not RunInterval.objects.filter(workload=workload).exists()
    assert sync_snapshot(snapshot).changed == 1  # the same snapshot, unfenced, is recorded
    assert RunInterval.objects.filter(workload=workload).count() == 1

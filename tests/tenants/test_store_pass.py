"""The team pass from a watch-kept store (tenants.reconcile.cluster_reconcile(store=…)).

The invariant: a store is a cache, so the pass writes nothing on what the store alone shows. Each
difference is read again directly before it is applied, nothing is deleted without a direct read
that still finds it the portal's and unwanted, and no team is refused on a stale root. Here the
store is fed by hand, so every staleness a lagging watch can produce is made on purpose and the
API calls are counted; tests/contract/test_tenancy_contract.py runs the store's own watches on
both clusters."""

from __future__ import annotations

import random
import threading
import time

import pytest

from portal.kube import ObjectRef, WatchEvent, reset_gateway
from portal.kube.counting import CountingGateway
from portal.kube.store import KindStore
from portal.leader import LeadershipLost
from tenants import desired, manifests, reconcile
from tenants.queueing.kueue import KUEUE
from tests.factories import TeamFactory
from tests.helpers import make_ready

pytestmark = pytest.mark.django_db

QUOTA = ObjectRef("v1", "ResourceQuota", "gpu-portal", "vision")
NAMESPACE = ObjectRef("v1", "Namespace", "vision")
QUEUE = ObjectRef(KUEUE, "ClusterQueue", "vision")


def filled(store: KindStore, cluster, kinds=None) -> KindStore:
    """The store as its watches leave it right after listing `kinds` (all it follows unless told; the others not yet)."""
    for api_version, kind in kinds if kinds is not None else reconcile.owned_kinds():
        items, _ = cluster.list(api_version, kind, labels=reconcile.MANAGED)
        store.deliver(api_version, kind, WatchEvent("RELISTED", {"items": items}))
    return store


def counted(cluster) -> CountingGateway:
    counting = CountingGateway(cluster)
    reset_gateway(counting)  # the simulated fixture drops it again afterwards
    return counting


def drifted_quota(cluster) -> dict:
    quota = cluster.get(QUOTA)
    quota["spec"]["hard"]["pods"] = "0"
    return quota


@pytest.fixture
def two_teams(team, other_team, flavor, simulated):
    make_ready(team, flavor)
    make_ready(other_team, flavor)
    return team, other_team


def test_a_pass_from_a_store_with_nothing_to_change_asks_the_api_server_nothing(two_teams, simulated):
    store = filled(reconcile.owned_store(), simulated)
    counting = counted(simulated)

    result = reconcile.cluster_reconcile(store=store)

    assert (counting.total, result.reads, result.writes, result.errors) == (0, 0, 0, {})


def test_a_finished_pass_records_when_it_compared_the_teams_and_a_failed_one_does_not(two_teams, simulated, monkeypatch):
    from portal.health import TEAM_PASS, heartbeat_at
    from portal.kube import KubeError

    assert heartbeat_at(TEAM_PASS) is None
    reconcile.cluster_reconcile(store=filled(reconcile.owned_store(), simulated))
    first = heartbeat_at(TEAM_PASS)
    assert first is not None

    def unanswered() -> None:
        raise KubeError("the API server did not answer")

    monkeypatch.setattr(reconcile, "live_objects", unanswered)
    with pytest.raises(KubeError):
        reconcile.cluster_reconcile()
    assert heartbeat_at(TEAM_PASS) == first


def test_until_every_kind_is_listed_the_pass_lists_instead(two_teams, simulated):
    store = filled(reconcile.owned_store(), simulated, kinds=reconcile.owned_kinds()[:-1])
    assert store.snapshot() is None
    counting = counted(simulated)

    result = reconcile.cluster_reconcile(store=store)

    assert result.reads == counting.total == len(reconcile.owned_kinds()) and result.writes == 0


def test_drift_the_store_shows_is_read_again_and_repaired(two_teams, simulated):
    store = filled(reconcile.owned_store(), simulated)
    wanted = simulated.get(QUOTA)["spec"]["hard"]["pods"]
    simulated.apply(drifted_quota(simulated), field_manager="someone-by-hand")
    store.deliver("v1", "ResourceQuota", WatchEvent("MODIFIED", simulated.get(QUOTA)))
    counting = counted(simulated)

    result = reconcile.cluster_reconcile(store=store)

    assert result.applied == [str(QUOTA)] and not result.deleted and not result.errors
    assert counting.calls == {"get": 1, "apply": 1}
    assert simulated.get(QUOTA)["spec"]["hard"]["pods"] == wanted != "0"


def test_drift_the_store_still_shows_after_the_cluster_was_repaired_writes_nothing(two_teams, simulated):
    # The team's own reconcile repaired it; the watch has not delivered that yet.
    store = filled(reconcile.owned_store(), simulated)
    store.deliver("v1", "ResourceQuota", WatchEvent("MODIFIED", drifted_quota(simulated)))
    counting = counted(simulated)

    result = reconcile.cluster_reconcile(store=store)

    assert (result.writes, result.confirmed, result.errors) == (0, 1, {})
    assert counting.calls == {"get": 1}


def test_an_object_a_lagging_store_lacks_is_read_before_it_is_applied(two_teams, simulated):
    store = filled(reconcile.owned_store(), simulated)
    store.deliver("v1", "ResourceQuota", WatchEvent("DELETED", simulated.get(QUOTA)))
    counting = counted(simulated)

    result = reconcile.cluster_reconcile(store=store)

    assert (result.writes, result.confirmed, counting.calls) == (0, 1, {"get": 1})


def test_what_the_store_holds_but_the_cluster_already_deleted_is_not_deleted_again(two_teams, simulated):
    team, _ = two_teams
    store = filled(reconcile.owned_store(), simulated)
    team.delete()
    simulated.delete(NAMESPACE)  # the teardown got there first; the watches have not said so yet
    simulated.delete(QUEUE)
    counting = counted(simulated)

    result = reconcile.cluster_reconcile(store=store)

    assert (result.deleted, result.errors) == ([], {})
    assert counting.calls.get("delete", 0) == 0


def test_what_someone_took_over_since_the_store_saw_it_is_not_deleted(two_teams, simulated):
    team, _ = two_teams
    store = filled(reconcile.owned_store(), simulated)
    team.delete()
    namespace = simulated.get(NAMESPACE)
    taken = {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "vision", "labels": {manifests.MANAGED_BY_LABEL: "someone-else"}}}
    simulated.apply(taken, field_manager=manifests.MANAGER)  # the portal's label, given away
    assert simulated.get(NAMESPACE)["metadata"]["uid"] == namespace["metadata"]["uid"]

    result = reconcile.cluster_reconcile(store=store)

    assert str(NAMESPACE) not in result.deleted
    assert simulated.get(NAMESPACE) is not None


def test_the_pass_deletes_what_it_no_longer_wants_once_a_direct_read_agrees(two_teams, simulated):
    team, _ = two_teams
    store = filled(reconcile.owned_store(), simulated)
    team.delete()

    result = reconcile.cluster_reconcile(store=store)

    assert result.deleted == [str(QUEUE), str(NAMESPACE)]
    assert simulated.get(NAMESPACE) is None or simulated.get(NAMESPACE)["metadata"].get("deletionTimestamp")


def test_a_root_a_stale_store_shows_as_someone_elses_does_not_refuse_the_team(two_teams, simulated):
    store = filled(reconcile.owned_store(), simulated)
    stale = simulated.get(NAMESPACE)
    stale["metadata"]["annotations"][manifests.TEAM_UID_ANNOTATION] = "00000000-0000-0000-0000-000000000000"
    store.deliver("v1", "Namespace", WatchEvent("MODIFIED", stale))

    result = reconcile.cluster_reconcile(store=store)

    assert (result.errors, result.writes) == ({}, 0)


def test_a_root_that_really_is_someone_elses_still_refuses_the_team(team, flavor, simulated):
    simulated.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vision", "labels": {"owner": "ops"}}},
                    field_manager="someone-by-hand")
    store = filled(reconcile.owned_store(), simulated)

    result = reconcile.cluster_reconcile(store=store)

    assert list(result.errors) == ["vision"] and "was not created by the portal" in result.errors["vision"]
    assert not [ref for ref in result.applied if "vision" in ref]


@pytest.mark.parametrize("seed", range(12))
def test_a_new_teams_objects_arriving_kind_by_kind_in_any_order_never_make_the_pass_write(seed, two_teams, flavor, simulated):
    """A team was provisioned after the store listed; each kind's watch delivers its objects
    on its own time. A pass run between any two deliveries writes nothing and refuses nothing."""
    store = filled(reconcile.owned_store(), simulated)
    newcomer = make_ready(TeamFactory.create(slug="recsys", name="Recsys"), flavor)
    order = list(reconcile.owned_kinds())
    random.Random(seed).shuffle(order)
    for api_version, kind in order:
        result = reconcile.cluster_reconcile(store=store)
        assert (result.writes, result.errors) == (0, {}), (kind, result.applied, result.deleted)
        for item in simulated.list(api_version, kind, labels=reconcile.MANAGED)[0]:
            if newcomer.slug in (item["metadata"]["name"], item["metadata"].get("namespace")):
                store.deliver(api_version, kind, WatchEvent("ADDED", item))
    final = reconcile.cluster_reconcile(store=store)
    assert (final.writes, final.confirmed, final.errors) == (0, 0, {})


@pytest.mark.django_db(transaction=True)
def test_the_watchers_passes_repair_drift_from_the_store_and_stop_with_the_fence(flavor, simulated):
    team = make_ready(TeamFactory.create(slug="vision", name="Vision"), flavor)
    leading = threading.Event()
    leading.set()

    def fence() -> None:
        if not leading.is_set():
            raise LeadershipLost("no longer the leader")

    passes = reconcile.StorePasses(seconds=0.05, fence=fence, store=reconcile.owned_store(watch_seconds=5)).start()
    try:
        assert passes.store.wait_listed(timeout=30)
        wanted = simulated.get(QUOTA)["spec"]["hard"]["pods"]
        simulated.apply(drifted_quota(simulated), field_manager="someone-by-hand")
        deadline = time.monotonic() + 30
        while simulated.get(QUOTA)["spec"]["hard"]["pods"] != wanted:
            assert time.monotonic() < deadline, "the watcher's pass never repaired the quota"
            time.sleep(0.05)

        leading.clear()
        time.sleep(0.2)  # a pass under way when leadership went may finish; none starts after
        simulated.apply(drifted_quota(simulated), field_manager="someone-by-hand")
        time.sleep(1)
        assert simulated.get(QUOTA)["spec"]["hard"]["pods"] == "0"
    finally:
        passes.stop()
        passes.thread.join(timeout=10)
    assert team.slug == "vision" and not passes.thread.is_alive()


def test_the_watcher_runs_the_team_pass_unless_it_is_turned_off(settings, simulated):
    from jobs.management.commands.watch_workloads import team_passes

    settings.PORTAL_TEAM_PASS_SECONDS = 0
    assert team_passes() is None
    settings.PORTAL_TEAM_PASS_SECONDS = 3600
    passes = team_passes()
    assert passes is not None
    try:
        assert passes.seconds == 3600 and passes.thread.is_alive() and len(passes.store.threads) == len(reconcile.owned_kinds())
    finally:
        passes.stop()


def test_a_gpu_limit_the_portal_no_longer_sets_in_its_resource_quota_is_removed_once_and_others_limits_stay(
        team, flavor, simulated):
    """A GPU limit from before the queue bounded GPUs alone is a difference the pass repairs,
    though every limit the portal sets holds; a limit someone else added (storage) is theirs."""
    make_ready(team, flavor)
    quota = simulated.get(QUOTA)
    quota["spec"]["hard"]["requests.nvidia.com/gpu"] = "8"
    simulated.replace(quota)
    assert reconcile.contains(simulated.get(QUOTA), next(
        obj for obj in desired.team_objects(desired.team_specs([team.pk])[team.pk][1]) if obj["kind"] == "ResourceQuota"))
    assert str(QUOTA) in reconcile.cluster_reconcile().applied
    assert "requests.nvidia.com/gpu" not in simulated.get(QUOTA)["spec"]["hard"]
    assert reconcile.cluster_reconcile().writes == 0
    quota = simulated.get(QUOTA)
    quota["spec"]["hard"]["requests.storage"] = "1Ti"
    simulated.replace(quota)
    assert reconcile.cluster_reconcile().writes == 0
    assert simulated.get(QUOTA)["spec"]["hard"]["requests.storage"] == "1Ti"

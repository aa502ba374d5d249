"""The gateway's promises, kept by both clusters: idempotent apply, deletes that tolerate
absence, watches that survive expiry, and errors that name the object and say why."""

from __future__ import annotations

import threading

import pytest

from portal.kube import KubeError, ObjectRef, gateway
from tenants import desired, reconcile, services
from tenants.queueing.kueue import KUEUE
from tests.contract.scenarios import team_objects
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"gpu-portal.io/test": "gateway"}}}


def test_applying_the_same_object_twice_changes_nothing_the_second_time(cluster):
    name = cluster.unique("twice")
    first = gateway().apply(namespace(name))
    second = gateway().apply(namespace(name))
    assert first["metadata"]["uid"] == second["metadata"]["uid"]
    assert first["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]
    gateway().delete(ObjectRef("v1", "Namespace", name))


def test_deleting_what_is_not_there_counts_as_deleted(cluster):
    gateway().delete(ObjectRef(KUEUE, "ClusterQueue", cluster.unique("never-was")))
    assert gateway().get(ObjectRef(KUEUE, "ClusterQueue", cluster.unique("never-was"))) is None


def test_an_invalid_object_is_refused_with_the_object_and_the_reason(cluster):
    with pytest.raises(KubeError) as refused:
        gateway().apply(namespace("Not_A_Name"))
    assert refused.value.status == 422
    assert str(refused.value).startswith("Namespace Not_A_Name: rejected as invalid: metadata.name")


def test_an_object_in_a_missing_namespace_is_refused_as_not_found(cluster):
    with pytest.raises(KubeError) as refused:
        gateway().apply({"apiVersion": KUEUE, "kind": "LocalQueue",
                         "metadata": {"name": "default", "namespace": cluster.unique("nowhere")},
                         "spec": {"clusterQueue": "x"}})
    assert refused.value.status == 404
    assert "not found" in str(refused.value)


def test_a_list_narrowed_by_a_field_selector_returns_only_the_matching_objects(cluster):
    wanted, other = cluster.unique("fields-wanted"), cluster.unique("fields-other")
    gateway().apply(namespace(wanted))
    gateway().apply(namespace(other))
    labels = {"gpu-portal.io/test": "gateway"}
    items, _ = gateway().list("v1", "Namespace", labels=labels, fields={"metadata.name": wanted})
    assert [item["metadata"]["name"] for item in items] == [wanted]
    assert gateway().list("v1", "Namespace", labels=labels, fields={"metadata.name": cluster.unique("no-such")})[0] == []
    gateway().delete(ObjectRef("v1", "Namespace", wanted))
    gateway().delete(ObjectRef("v1", "Namespace", other))


def test_listing_several_kinds_at_once_answers_what_listing_each_kind_answers(cluster):
    name = cluster.unique("kinds")
    labels = {"gpu-portal.io/test": cluster.unique("list-kinds")}
    gateway().apply({**namespace(name), "metadata": {"name": name, "labels": labels}})
    gateway().apply({"apiVersion": "v1", "kind": "LimitRange",
                     "metadata": {"name": "defaults", "namespace": name, "labels": labels},
                     "spec": {"limits": [{"type": "Container", "default": {"cpu": "1"}}]}})
    kinds = [("v1", "Namespace"), ("v1", "LimitRange"), (KUEUE, "ClusterQueue")]

    listed = gateway().list_kinds(kinds, labels=labels)

    names = {kind: [(item["kind"], item["metadata"]["name"]) for item in items] for (_, kind), items in listed.items()}
    assert names == {"Namespace": [("Namespace", name)], "LimitRange": [("LimitRange", "defaults")], "ClusterQueue": []}
    one_by_one = {kind: gateway().list(api_version, kind, labels=labels)[0] for api_version, kind in kinds}
    assert names == {kind: [(item["kind"], item["metadata"]["name"]) for item in items] for kind, items in one_by_one.items()}
    gateway().delete(ObjectRef("v1", "Namespace", name))


def test_a_watch_from_a_version_sees_the_changes_after_it(cluster):
    name = cluster.unique("watched")
    gateway().apply(namespace(name))
    _, version = gateway().list("v1", "Namespace", labels={"gpu-portal.io/test": "gateway"})

    gateway().apply({**namespace(name), "metadata": {**namespace(name)["metadata"], "labels": {
        "gpu-portal.io/test": "gateway", "step": "two"}}})

    events = []
    for event in gateway().watch("v1", "Namespace", labels={"gpu-portal.io/test": "gateway"},
                                 resource_version=version, timeout_seconds=5):
        events.append(event)
        if event.type == "MODIFIED" and event.object["metadata"]["labels"].get("step") == "two":
            break
    assert events[-1].object["metadata"]["name"] == name

    gateway().delete(ObjectRef("v1", "Namespace", name))


def test_a_reconcile_cut_off_half_way_is_completed_by_the_next_and_creates_nothing_twice(
    cluster, django_capture_on_commit_callbacks,
):
    reconcile.platform_reconcile()
    admin = UserFactory.create(username="root", is_platform_admin=True)
    team = services.team_create(actor=admin, slug=cluster.unique("halfway"), name="Halfway")
    _, spec = desired.team_specs([team.pk])[team.pk]
    for obj in desired.team_objects(spec)[:3]:  # the worker died after three objects
        gateway().apply(obj)
    assert len(team_objects(team.slug)) == 3

    reconcile.team_reconcile(team_id=team.pk)
    reconcile.team_reconcile(team_id=team.pk)

    assert len(team_objects(team.slug)) == 10
    assert [ref for ref in reconcile.cluster_reconcile().applied if team.slug in ref] == []


@pytest.mark.services  # concurrent writers need PostgreSQL; SQLite's in-memory test database locks
def test_two_reconciles_at_once_converge_to_the_same_objects(cluster, transactional_db):
    admin = UserFactory.create(username="root2", is_platform_admin=True)
    team = services.team_create(actor=admin, slug=cluster.unique("twins"), name="Twins")
    errors: list[Exception] = []

    def run() -> None:
        try:
            reconcile.team_reconcile(team_id=team.pk)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(team_objects(team.slug)) == 10
    team.refresh_from_db()
    assert team.sync_state == "in_sync"

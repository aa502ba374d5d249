"""A team's data volumes: members make, grow and delete them from the portal within the team's
storage quota per class; launches mount them by name.

Invariants: a volume is a PersistentVolumeClaim in the team's own namespace that carries the
portal's proof of ownership; nothing beyond the quota is asked for; a volume only grows; one that
something mounts is not deleted; every change is audited; a claim the portal did not make is never
changed; a call that fails half way is finished by the repair pass; another team's volume is 404."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from jobs import selectors, services, volumes
from jobs.models import TeamVolume, Workload, WorkloadKind
from portal.errors import DomainError, StateConflict
from portal.kube import KubeError, ObjectRef, gateway, reset_gateway
from portal.kube.counting import CountingGateway
from portal.models import AuditEvent
from tenants import manifests
from tests.helpers import api, launch, make_ready

pytestmark = pytest.mark.django_db


@pytest.fixture
def storage_team(team, flavor, simulated):
    team.storage_quota = {"standard": 100, "fast-ssd": 20}
    team.save()
    return make_ready(team, flavor)


@pytest.fixture
def with_data(admin_user, flavor):
    return services.template_create(
        user=admin_user, slug="with-data", name="Training on a volume", kind=WorkloadKind.TRAINING, flavors=[flavor],
        image="quay.io/acme/train:1", command=["python", "train.py"], default_units=1, max_units=4,
        parameters=[{"name": "data", "type": "volume", "mount_path": "/data"}])


def claim_of(team: Any, name: str) -> Any:
    return gateway().get(ObjectRef("v1", "PersistentVolumeClaim", name, team.namespace))


def quota_of(team: Any) -> Any:
    return gateway().get(ObjectRef("v1", "ResourceQuota", "gpu-portal", team.namespace))


def foreign_claim(namespace: str, name: str, gib: int = 1, storage_class: str = "standard") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": {"storageClassName": storage_class, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": f"{gib}Gi"}}}}


# --- Making one ----------------------------------------------------------------------------------


def test_a_member_makes_a_volume_the_team_owns_in_its_namespace_and_launches_are_offered_it(storage_team, member):
    volume = volumes.volume_create(actor=member, team=storage_team, name="imagenet", storage_class="standard", size_gib=40)

    live = claim_of(storage_team, "imagenet")
    assert live is not None and live["spec"]["storageClassName"] == "standard"
    assert live["spec"]["resources"]["requests"]["storage"] == "40Gi" and live["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert manifests.owned_by_team(live, uid=str(storage_team.uid))
    assert live["metadata"]["labels"][manifests.VOLUME_LABEL] == "imagenet"
    volume.refresh_from_db()
    assert volume.applied and volume.created_by == member
    assert selectors.team_claims(team=storage_team) == ["imagenet"]
    event = AuditEvent.objects.get(action="volume.created")
    assert event.team_id == storage_team.pk and "alice made the volume imagenet (40 GiB of standard)" in event.message


def test_the_namespace_quota_holds_each_storage_class_the_team_was_given(storage_team):
    hard = quota_of(storage_team)["spec"]["hard"]
    assert hard["standard.storageclass.storage.k8s.io/requests.storage"] == "100Gi"
    assert hard["fast-ssd.storageclass.storage.k8s.io/requests.storage"] == "20Gi"


@pytest.mark.parametrize(("name", "storage_class", "size", "field", "words"), [
    ("big", "standard", 101, "size_gib", "101 GiB of standard is more than vision has left of its storage quota (100 GiB"),
    ("fast", "slow-hdd", 1, "storage_class",
     "vision has no storage quota of the class “slow-hdd”; its classes: fast-ssd, standard"),
    ("Bad_Name", "standard", 1, "name", "Use lower-case letters, digits and '-'"),
    ("zero", "standard", 0, "size_gib", "greater than or equal to 1"),
])
def test_a_volume_beyond_the_quota_or_badly_named_is_refused_in_words_and_nothing_is_made(
        storage_team, member, name, storage_class, size, field, words):
    with pytest.raises(DomainError) as refusal:
        volumes.volume_create(actor=member, team=storage_team, name=name, storage_class=storage_class, size_gib=size)
    assert refusal.value.field == field and words in refusal.value.message, refusal.value.message
    assert not TeamVolume.objects.exists()
    assert not gateway().list("v1", "PersistentVolumeClaim", namespace=storage_team.namespace)[0]


def test_claims_made_outside_the_portal_count_against_the_quota_and_their_names_are_taken(storage_team, member):
    gateway().apply(foreign_claim(storage_team.namespace, "corpus", gib=90))
    with pytest.raises(DomainError, match="already has a volume named “corpus”"):
        volumes.volume_create(actor=member, team=storage_team, name="corpus", storage_class="standard", size_gib=1)
    with pytest.raises(DomainError, match="more than vision has left of its storage quota \\(10 GiB of 100 GiB\\)"):
        volumes.volume_create(actor=member, team=storage_team, name="more", storage_class="standard", size_gib=11)
    volumes.volume_create(actor=member, team=storage_team, name="more", storage_class="standard", size_gib=10)
    lines = {line.storage_class: line for line in volumes.team_storage(team=storage_team).lines}
    assert (lines["standard"].asked_gib, lines["standard"].free_gib) == (100, 0)


def test_only_the_teams_members_make_its_volumes(storage_team, outsider):
    from django.core.exceptions import PermissionDenied
    with pytest.raises(PermissionDenied):
        volumes.volume_create(actor=outsider, team=storage_team, name="theirs", storage_class="standard", size_gib=1)


# --- Growing one -----------------------------------------------------------------------------------


def test_a_volume_grows_within_the_quota_and_never_shrinks(storage_team, member):
    volume = volumes.volume_create(actor=member, team=storage_team, name="scratch", storage_class="fast-ssd", size_gib=10)
    with pytest.raises(DomainError, match="A volume only grows: give more than its 10 GiB"):
        volumes.volume_resize(actor=member, volume=volume, size_gib=5)
    with pytest.raises(DomainError, match="needs 11 GiB more of fast-ssd; vision has 10 GiB left"):
        volumes.volume_resize(actor=member, volume=volume, size_gib=21)
    volumes.volume_resize(actor=member, volume=volume, size_gib=20)
    assert claim_of(storage_team, "scratch")["spec"]["resources"]["requests"]["storage"] == "20Gi"
    volume.refresh_from_db()
    assert (volume.size_gib, volume.applied) == (20, True)
    assert AuditEvent.objects.filter(action="volume.resized", data__from_gib=10, data__to_gib=20).exists()


def test_growth_the_cluster_refuses_is_said_and_the_volume_keeps_its_size(storage_team, member, simulated, monkeypatch):
    volume = volumes.volume_create(actor=member, team=storage_team, name="scratch", storage_class="standard", size_gib=10)

    def refuse(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise KubeError("persistentvolumeclaims \"scratch\" is forbidden: only dynamically provisioned pvc can be resized",
                        status=403)

    monkeypatch.setattr(simulated, "apply", refuse)
    with pytest.raises(DomainError, match="The cluster refused to grow scratch: .*allowVolumeExpansion"):
        volumes.volume_resize(actor=member, volume=volume, size_gib=20)
    volume.refresh_from_db()
    assert (volume.size_gib, volume.applied) == (10, True)


# --- Deleting one ----------------------------------------------------------------------------------


def test_a_volume_a_workload_mounts_is_not_deleted_until_it_stops(storage_team, member, with_data, flavor,
                                                                  django_capture_on_commit_callbacks):
    volume = volumes.volume_create(actor=member, team=storage_team, name="imagenet", storage_class="standard", size_gib=10)
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, storage_team, with_data, flavor, parameters={"data": "imagenet"})
    (row,) = volumes.team_storage(team=storage_team).rows
    assert row.used_by == (workload.name,) and not row.deletable

    with pytest.raises(StateConflict, match=f"imagenet is in use by {workload.name}; stop that first. Nothing was deleted."):
        volumes.volume_delete(actor=member, volume=volume)
    assert claim_of(storage_team, "imagenet") is not None

    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=member, workload=workload)
    Workload.objects.filter(pk=workload.pk).update(phase=Workload.Phase.STOPPED)
    volumes.volume_delete(actor=member, volume=volume)
    assert claim_of(storage_team, "imagenet") is None and not TeamVolume.objects.exists()
    event = AuditEvent.objects.get(action="volume.deleted")
    assert "alice deleted the volume imagenet (10 GiB) of vision and its data" in event.message


def test_a_pod_made_outside_the_portal_that_mounts_a_volume_keeps_it_from_deletion(storage_team, member):
    volume = volumes.volume_create(actor=member, team=storage_team, name="shared", storage_class="standard", size_gib=1)
    gateway().apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "debug", "namespace": storage_team.namespace},
                     "spec": {"containers": [{"name": "c", "image": "busybox"}],
                              "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "shared"}}]}})
    with pytest.raises(StateConflict, match="shared is in use by pod debug"):
        volumes.volume_delete(actor=member, volume=volume)


# --- Half done, finished by the repair pass ------------------------------------------------------


def test_a_volume_the_cluster_did_not_take_is_kept_and_made_by_the_repair_pass(storage_team, member, simulated, monkeypatch):
    def away(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise KubeError("etcdserver: request timed out", status=503)

    with monkeypatch.context() as patch:
        patch.setattr(simulated, "apply", away)
        volume = volumes.volume_create(actor=member, team=storage_team, name="later", storage_class="standard", size_gib=5)
    assert not volume.applied and claim_of(storage_team, "later") is None
    (row,) = volumes.team_storage(team=storage_team).rows
    assert row.phase == "Not in the cluster yet"

    assert volumes.volumes_repair() == 1
    volume.refresh_from_db()
    assert volume.applied and claim_of(storage_team, "later")["spec"]["resources"]["requests"]["storage"] == "5Gi"


def test_a_deletion_the_cluster_did_not_take_is_finished_by_the_repair_pass(storage_team, member, simulated, monkeypatch):
    volume = volumes.volume_create(actor=member, team=storage_team, name="old", storage_class="standard", size_gib=5)

    def away(ref: ObjectRef, **kwargs: Any) -> None:
        raise KubeError("connection refused")

    with monkeypatch.context() as patch:
        patch.setattr(simulated, "delete", away)
        volumes.volume_delete(actor=member, volume=volume)
    volume.refresh_from_db()
    assert volume.state == TeamVolume.State.DELETING and claim_of(storage_team, "old") is not None
    assert volumes.team_storage(team=storage_team).rows[0].going

    assert volumes.volumes_repair() == 1
    assert claim_of(storage_team, "old") is None and not TeamVolume.objects.exists()


def test_the_repair_pass_never_takes_over_a_claim_the_portal_did_not_make(storage_team, member, simulated, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(simulated, "apply", lambda obj, **kwargs: (_ for _ in ()).throw(KubeError("away")))
        volume = volumes.volume_create(actor=member, team=storage_team, name="taken", storage_class="standard", size_gib=5)
    gateway().apply(foreign_claim(storage_team.namespace, "taken", gib=1))

    assert volumes.volumes_repair() == 0
    assert claim_of(storage_team, "taken")["spec"]["resources"]["requests"]["storage"] == "1Gi"
    volume.refresh_from_db()
    assert not volume.applied


def test_with_nothing_unfinished_the_repair_pass_reads_nothing(storage_team, member, simulated):
    volumes.volume_create(actor=member, team=storage_team, name="done", storage_class="standard", size_gib=5)
    counting = CountingGateway(simulated)
    reset_gateway(counting)
    assert volumes.volumes_repair() == 0
    assert counting.total == 0


# --- Pages and API ---------------------------------------------------------------------------------


def test_the_volumes_page_makes_grows_and_deletes_with_htmx(storage_team, member, client):
    client.force_login(member)
    url = reverse("jobs:team-volumes", args=[storage_team.slug])
    page = client.get(url)
    assert page.status_code == 200 and b"has no data volume yet" in page.content

    made = client.post(reverse("jobs:volume-create", args=[storage_team.slug]),
                       {"name": "imagenet", "storage_class": "standard", "size_gib": "40"}, HTTP_HX_REQUEST="true")
    assert made.status_code == 200 and "Made the volume imagenet (40 GiB of standard)." in made.content.decode()
    too_big = client.post(reverse("jobs:volume-create", args=[storage_team.slug]),
                          {"name": "more", "storage_class": "standard", "size_gib": "61"}, HTTP_HX_REQUEST="true")
    assert too_big.status_code == 200 and "61 GiB of standard is more than vision has left" in too_big.content.decode()

    grown = client.post(reverse("jobs:volume-resize", args=[storage_team.slug, "imagenet"]), {"size_gib": "50"},
                        HTTP_HX_REQUEST="true")
    assert "imagenet now asks for 50 GiB." in grown.content.decode()
    gone = client.post(reverse("jobs:volume-delete", args=[storage_team.slug, "imagenet"]), HTTP_HX_REQUEST="true")
    assert "Deleted the volume imagenet and its data." in gone.content.decode()
    assert claim_of(storage_team, "imagenet") is None


def test_a_plain_form_post_is_answered_with_the_page_again(storage_team, member, client):
    client.force_login(member)
    made = client.post(reverse("jobs:volume-create", args=[storage_team.slug]),
                       {"name": "imagenet", "storage_class": "standard", "size_gib": "4"})
    assert made.status_code == 302 and made["Location"] == reverse("jobs:team-volumes", args=[storage_team.slug])


def test_another_teams_volumes_are_404_on_the_page_its_forms_and_the_api(storage_team, member, outsider, client):
    volume = volumes.volume_create(actor=member, team=storage_team, name="imagenet", storage_class="standard", size_gib=4)
    client.force_login(outsider)
    for response in (client.get(reverse("jobs:team-volumes", args=[storage_team.slug])),
                     client.post(reverse("jobs:volume-create", args=[storage_team.slug]),
                                 {"name": "x", "storage_class": "standard", "size_gib": "1"}),
                     client.post(reverse("jobs:volume-resize", args=[storage_team.slug, "imagenet"]), {"size_gib": "9"}),
                     client.post(reverse("jobs:volume-delete", args=[storage_team.slug, "imagenet"]))):
        assert response.status_code == 404
    caller = api(outsider)
    assert caller.get("/api/volumes/").json()["results"] == []
    assert caller.get(f"/api/volumes/{volume.pk}/").status_code == 404
    assert caller.patch(f"/api/volumes/{volume.pk}/", {"size_gib": 9}, format="json").status_code == 404
    assert caller.delete(f"/api/volumes/{volume.pk}/").status_code == 404
    refused = caller.post("/api/volumes/", {"team": "vision", "name": "x", "storage_class": "standard", "size_gib": 1},
                          format="json")
    assert refused.status_code == 400 and "There is no team “vision” that you can see." in str(refused.json())
    assert claim_of(storage_team, "imagenet")["spec"]["resources"]["requests"]["storage"] == "4Gi"


def test_the_api_makes_lists_grows_and_deletes_a_volume(storage_team, member, with_data, flavor,
                                                        django_capture_on_commit_callbacks):
    caller = api(member)
    made = caller.post("/api/volumes/", {"team": "vision", "name": "imagenet", "storage_class": "standard",
                                         "size_gib": 4, "shared": True}, format="json")
    assert made.status_code == 201, made.json()
    body = made.json()
    assert (body["team"], body["name"], body["size_gib"], body["shared"]) == ("vision", "imagenet", 4, True)
    assert body["applied"] and body["created_by"] == "alice"
    assert claim_of(storage_team, "imagenet")["spec"]["accessModes"] == ["ReadWriteMany"]
    assert [v["name"] for v in caller.get("/api/volumes/?team=vision").json()["results"]] == ["imagenet"]
    bad = caller.patch(f"/api/volumes/{body['id']}/", {"size_gib": 2}, format="json")
    assert bad.status_code == 400 and "A volume only grows" in str(bad.json())
    assert caller.patch(f"/api/volumes/{body['id']}/", {"size_gib": 8}, format="json").json()["size_gib"] == 8

    with django_capture_on_commit_callbacks(execute=True):
        launch(member, storage_team, with_data, flavor, parameters={"data": "imagenet"})
    busy = caller.delete(f"/api/volumes/{body['id']}/")
    assert busy.status_code == 409 and "is in use by" in str(busy.json())
    assert claim_of(storage_team, "imagenet") is not None


def test_a_platform_admin_sets_a_teams_storage_quota_in_words_and_the_namespace_follows(
        storage_team, admin_user, client, django_capture_on_commit_callbacks):
    from tenants import reconcile
    client.force_login(admin_user)
    form = client.get(reverse("tenants:team-edit", args=[storage_team.slug]))
    assert "fast-ssd: 20, standard: 100" in form.content.decode()
    data = {"slug": storage_team.slug, "name": storage_team.name, "cost_center": "", "description": "",
            "may_borrow": "on", "lends_idle": "on", "fair_share_weight": "1", "cpu_limit_cores": "64", "memory_limit_gib": "512",
            "pod_limit": "100",
            "requires_second_approver": "on"}
    bad = client.post(reverse("tenants:team-edit", args=[storage_team.slug]), {**data, "storage_quota": "standard 500"})
    assert bad.status_code == 400 and "Write “standard 500” as a storage class and its GiB" in bad.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("tenants:team-edit", args=[storage_team.slug]), {**data, "storage_quota": "standard: 500"})
    storage_team.refresh_from_db()
    assert storage_team.storage_quota == {"standard": 500}
    reconcile.team_reconcile(team_id=storage_team.pk)
    hard = quota_of(storage_team)["spec"]["hard"]
    assert hard["standard.storageclass.storage.k8s.io/requests.storage"] == "500Gi"
    assert "fast-ssd.storageclass.storage.k8s.io/requests.storage" not in hard
    refused = api(admin_user).patch("/api/teams/vision/", {"storage_quota": {"Fast SSD": 1}}, format="json")
    assert refused.status_code == 400 and "is not a storage class name" in str(refused.json())


def test_a_volume_the_cluster_itself_refuses_is_not_kept_and_the_trail_says_so(storage_team, member, simulated, monkeypatch):
    def over(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise KubeError('persistentvolumeclaims "big" is forbidden: exceeded quota: gpu-portal', status=403)

    monkeypatch.setattr(simulated, "apply", over)
    with pytest.raises(DomainError, match="The cluster refused the volume big: .*exceeded quota"):
        volumes.volume_create(actor=member, team=storage_team, name="big", storage_class="standard", size_gib=5)
    assert not TeamVolume.objects.exists()
    assert list(AuditEvent.objects.filter(action__startswith="volume.").values_list("action", flat=True).order_by("pk")) == [
        "volume.created", "volume.refused"]


def test_the_simulated_cluster_binds_a_claim_to_storage_of_its_size_and_grows_it(storage_team, member, simulated):
    volume = volumes.volume_create(actor=member, team=storage_team, name="imagenet", storage_class="standard", size_gib=40)
    simulated.advance(1)
    (row,) = volumes.team_storage(team=storage_team).rows
    assert (row.phase, row.capacity) == ("Bound", "40Gi")
    volumes.volume_resize(actor=member, volume=volume, size_gib=60)
    simulated.advance(1)
    (row,) = volumes.team_storage(team=storage_team).rows
    assert (row.phase, row.capacity, row.asked_gib) == ("Bound", "60Gi", 60)


def test_finance_sees_every_team_but_not_its_volumes(storage_team, member, finance_user, client):
    # As on the launch form: finance reads every team's costs, never the names of its data.
    volumes.volume_create(actor=member, team=storage_team, name="imagenet", storage_class="standard", size_gib=4)
    client.force_login(finance_user)
    assert client.get(reverse("tenants:team-detail", args=[storage_team.slug])).status_code == 200
    assert b"Data volumes" not in client.get(reverse("tenants:team-detail", args=[storage_team.slug])).content
    assert client.get(reverse("jobs:team-volumes", args=[storage_team.slug])).status_code == 403
    assert api(finance_user).get("/api/volumes/").json()["results"] == []

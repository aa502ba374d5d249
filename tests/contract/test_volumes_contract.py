"""A team's data volumes on both clusters: the claim a member makes is in the team's namespace as
the portal's, its storage quota per class is the namespace's ResourceQuota, a volume grows, and
deletion takes it away. On the real control plane the API server itself enforces that quota (a
claim made around the portal beyond it is refused) and binds the claim to a volume, which is what
lets it grow; there is no storage driver, so a static PersistentVolume of a class made for the test
stands in for the storage."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from jobs import volumes
from portal.errors import DomainError
from portal.kube import KubeError, ObjectRef, gateway
from tenants import manifests, reconcile

pytestmark = pytest.mark.django_db


@pytest.fixture
def storage_class(cluster):
    """A StorageClass that allows growth, and a 20 GiB PersistentVolume of it for a claim to bind."""
    name = cluster.unique("standard")
    if cluster.control_plane is None:
        yield name
        return
    api = k8s_config.new_client_from_config(str(cluster.control_plane.kubeconfig_path))
    storage, core = k8s_client.StorageV1Api(api), k8s_client.CoreV1Api(api)
    storage.create_storage_class(cast(Any, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                                  "provisioner": "kubernetes.io/no-provisioner", "allowVolumeExpansion": True,
                                  "volumeBindingMode": "Immediate"}))  # the client sends a dict as it is
    core.create_persistent_volume(cast(Any, {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                                   "spec": {"storageClassName": name, "capacity": {"storage": "20Gi"},
                                            "accessModes": ["ReadWriteOnce"], "hostPath": {"path": f"/tmp/{name}"},
                                            "persistentVolumeReclaimPolicy": "Retain"}}))
    yield name
    core.delete_persistent_volume(name)
    storage.delete_storage_class(name)


def _claim(team: Any, name: str) -> Any:
    return gateway().get(ObjectRef("v1", "PersistentVolumeClaim", name, team.namespace))


def test_a_member_makes_grows_and_deletes_a_data_volume_within_the_teams_storage_quota(
        cluster, site, storage_class, django_capture_on_commit_callbacks):
    team = site.team("storage")
    team.storage_quota = {storage_class: 12}
    team.save()
    reconcile.team_reconcile(team_id=team.pk)
    lead = team.memberships.get().user
    quota: Any = gateway().get(ObjectRef("v1", "ResourceQuota", "gpu-portal", team.namespace))
    assert quota["spec"]["hard"][manifests.storage_quota_key(storage_class)] == "12Gi"

    volume = volumes.volume_create(actor=lead, team=team, name="corpus", storage_class=storage_class, size_gib=4)
    live = _claim(team, "corpus")
    assert live is not None and volume.applied
    assert manifests.owned_by_team(live, uid=str(team.uid))
    assert (live["spec"]["storageClassName"], live["spec"]["resources"]["requests"]["storage"]) == (storage_class, "4Gi")
    with pytest.raises(DomainError, match="more than .* has left of its storage quota \\(8 GiB of 12 GiB\\)"):
        volumes.volume_create(actor=lead, team=team, name="more", storage_class=storage_class, size_gib=9)

    if cluster.control_plane is not None:
        # The namespace's quota holds on its own: a claim made around the portal beyond it is refused.
        def quota_used() -> str:
            quota = gateway().get(ObjectRef("v1", "ResourceQuota", "gpu-portal", team.namespace)) or {}
            return str(((quota.get("status") or {}).get("used") or {}).get(manifests.storage_quota_key(storage_class)))

        cluster.wait_for(lambda: quota_used() == "4Gi", what="the quota to count the claim")
        with pytest.raises(KubeError) as refused:
            gateway().apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                             "metadata": {"name": "around", "namespace": team.namespace},
                             "spec": {"storageClassName": storage_class, "accessModes": ["ReadWriteOnce"],
                                      "resources": {"requests": {"storage": "9Gi"}}}})
        assert refused.value.status == 403 and "exceeded quota" in str(refused.value)
    cluster.wait_for(lambda: (_claim(team, "corpus") or {}).get("status", {}).get("phase") == "Bound",
                     what="the claim to bind to the class's volume")

    volumes.volume_resize(actor=lead, volume=volume, size_gib=8)
    assert _claim(team, "corpus")["spec"]["resources"]["requests"]["storage"] == "8Gi"
    (row,) = volumes.team_storage(team=team).rows
    assert (row.name, row.asked_gib, row.made) == ("corpus", 8, volume) and row.deletable

    volumes.volume_delete(actor=lead, volume=volume)
    cluster.wait_for(lambda: _claim(team, "corpus") is None, what="the claim to go")

"""Leases through the gateway on both clusters: create once, replace only at the version read.
Leader election (portal.leader) rests on exactly these two promises."""

from __future__ import annotations

import pytest

from portal.kube import KubeError, ObjectRef, gateway
from portal.leader import LEASE_API

pytestmark = pytest.mark.django_db


def lease(name: str, namespace: str, holder: str) -> dict:
    return {"apiVersion": LEASE_API, "kind": "Lease", "metadata": {"name": name, "namespace": namespace},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}}


def test_a_lease_is_created_once_and_replaced_only_at_the_version_last_read(cluster):
    namespace = cluster.unique("lease")
    gateway().apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    created = gateway().create(lease("portal", namespace, "a"))

    with pytest.raises(KubeError) as second:
        gateway().create(lease("portal", namespace, "b"))
    assert second.value.status == 409

    renewed = gateway().replace({**created, "spec": {**created["spec"], "holderIdentity": "a", "leaseTransitions": 0}})
    assert renewed["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    # b read the Lease before a renewed it: its write names a version that is gone.
    with pytest.raises(KubeError) as stale:
        gateway().replace({**created, "spec": {**created["spec"], "holderIdentity": "b"}})
    assert stale.value.status == 409
    held = gateway().get(ObjectRef(LEASE_API, "Lease", "portal", namespace))
    assert held is not None and held["spec"]["holderIdentity"] == "a"

    # Naming no version, a PUT is unconditional: for a Lease the API server creates a missing one.
    assert gateway().replace(lease("nobody", namespace, "c"))["spec"]["holderIdentity"] == "c"
    gateway().delete(ObjectRef("v1", "Namespace", namespace))

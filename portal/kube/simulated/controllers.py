"""One round of the simulated controllers over one consistent read of the cluster."""

from __future__ import annotations

from portal.kube.base import ObjectRef
from portal.kube.simulated.dra import Allocator
from portal.kube.simulated.kubelet import Kubelet
from portal.kube.simulated.kueue import Kueue
from portal.kube.simulated.scheduler import Scheduler
from portal.kube.simulated.state import ClusterState
from portal.kube.simulated.store import Store
from portal.kube.simulated.volcano import Volcano


def controllers_reconcile(store: Store) -> None:
    """Lets Kueue and Volcano, the scheduler and the kubelet catch up with what was written, in
    the order a real cluster would get there: workloads exist, finished pods free their quota,
    queues admit, admitted pods are placed, and statuses tell the result. Kueue takes what
    carries its queue label, Volcano the PodGroups: a site's workloads go to one of them."""
    state = ClusterState.read(store)
    kueue, volcano = Kueue(state), Volcano(state)
    kubelet = Kubelet(state, (kueue, volcano))
    kueue.create_workloads()
    volcano.run_jobs()
    kubelet.start_bound_pods()
    kubelet.finish_pods()
    kueue.admit()
    volcano.admit()
    devices = Allocator(state)
    Scheduler(state, (kueue, volcano), devices).schedule_pods()
    devices.collect()
    kubelet.write_statuses()
    volcano.write_job_statuses(volcano.workloads())
    kueue.write_queue_statuses(kueue.workloads())
    volcano.write_queue_statuses(volcano.workloads())
    claims_bind(store)


def claims_bind(store: Store) -> None:
    """The storage driver the simulated cluster has: every claim is bound at once to storage of the
    size it asks for, and grows when it asks for more (a real class binds, maybe at first use, and
    grows where it allows expansion)."""
    for row in store.objects("PersistentVolumeClaim", api_version="v1"):
        spec = row.body.get("spec") or {}
        asked = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        status = {"phase": "Bound", "accessModes": spec.get("accessModes") or [], "capacity": {"storage": asked}}
        if asked and row.body.get("status") != status and not row.body["metadata"].get("deletionTimestamp"):
            ref = ObjectRef("v1", "PersistentVolumeClaim", row.name, row.body["metadata"].get("namespace"))
            store.write(ref, {**row.body, "status": status}, store.get(ref, lock=True))

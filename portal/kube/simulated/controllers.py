"""One round of the simulated controllers over one consistent read of the cluster."""

from __future__ import annotations

from portal.kube.simulated.dra import Allocator
from portal.kube.simulated.kubelet import Kubelet
from portal.kube.simulated.kueue import Kueue
from portal.kube.simulated.scheduler import Scheduler
from portal.kube.simulated.state import ClusterState
from portal.kube.simulated.store import Store


def controllers_reconcile(store: Store) -> None:
    """Lets Kueue, the scheduler and the kubelet catch up with what was written, in the order
    a real cluster would get there: workloads exist, finished pods free their quota, queues
    admit, admitted pods are placed, and statuses tell the result."""
    state = ClusterState.read(store)
    kueue = Kueue(state)
    kubelet = Kubelet(state, kueue)
    kueue.create_workloads()
    kubelet.start_bound_pods()
    kubelet.finish_pods()
    kueue.admit()
    devices = Allocator(state)
    Scheduler(state, kueue, devices).schedule_pods()
    devices.collect()
    kubelet.write_statuses()
    kueue.write_queue_statuses(kueue.workloads())

"""The simulated cluster: the embedded default for the demo and for fast tests.

It keeps the same object dicts a real API server would, in the database, and plays just enough
of Kueue or Volcano, the scheduler and the kubelet to make the portal's story true without a cluster:

- store.py: the objects and the change log (their ids are resourceVersions);
- apiserver.py: apply, defaults, validation, get, list, delete, and watches;
- kueue.py: Workloads, admission by quota, borrowing in the cohort, preemption, queue statuses;
- volcano.py: PodGroups let into Queues whole, reclaim and preemption, Queue statuses;
- scheduler.py: pods of admitted workloads placed on Nodes of the flavor;
- kubelet.py: pods run, then finish; logs; Job statuses;
- gateway.py: `SimulatedGateway`, all of it behind the gateway interface.

It is a stand-in kept honest by the contract suite (tests/contract), which runs the same
scenarios here and on a real control plane. This package is also a Django app (label
`simulated_cluster`), installed only when `PORTAL_CLUSTER` is "simulated".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from portal.kube.simulated.gateway import SimulatedGateway

__all__ = ["SimulatedGateway"]


def __getattr__(name: str) -> Any:
    # Django imports this package to find the app before models may be loaded, so the gateway
    # (which needs the models) is imported on first use.
    if name == "SimulatedGateway":
        from portal.kube.simulated.gateway import SimulatedGateway

        return SimulatedGateway
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

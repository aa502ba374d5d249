"""The contract suite runs every scenario twice: on the simulated cluster and on the real
control plane from tests/cluster, with the same assertions."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from portal.kube import Gateway, reset_gateway
from portal.kube.simulated import SimulatedGateway


class ClusterUnderTest:
    def __init__(self, name: str, gateway: Gateway, control_plane: Any = None) -> None:
        self.name, self.gateway, self.control_plane = name, gateway, control_plane
        self.suffix = uuid.uuid4().hex[:6]

    def unique(self, name: str) -> str:
        """Names unique to this test: the real cluster lives for the whole session."""
        return f"{name}-{self.suffix}"

    def add_gpu_node(self, name: str, *, labels: dict[str, str], allocatable: dict[str, int]) -> None:
        if self.control_plane is not None:
            self.control_plane.add_gpu_node(name, labels=labels, allocatable={k: str(v) for k, v in allocatable.items()})
        else:
            assert isinstance(self.gateway, SimulatedGateway)
            existing = [
                {"name": n["metadata"]["name"], "labels": n["metadata"]["labels"], "allocatable": n["status"]["allocatable"]}
                for n in self.gateway.list("v1", "Node")[0]
            ]
            self.gateway.sync_nodes([*existing, {"name": name, "labels": labels, "allocatable": allocatable}])

    def wait_for(self, predicate: Callable[[], Any], *, what: str, timeout: float = 60) -> Any:
        """Polls until predicate() is truthy. On the simulated cluster time moves a second a poll."""
        deadline = time.monotonic() + timeout
        while True:
            if isinstance(self.gateway, SimulatedGateway):
                self.gateway.advance(1)
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} on the {self.name} cluster")
            if not isinstance(self.gateway, SimulatedGateway):
                time.sleep(0.25)


@pytest.fixture(params=["simulated", pytest.param("real", marks=pytest.mark.cluster)])
def cluster(request, settings, db):
    if request.param == "real":
        from portal.kube.kubernetes import KubernetesGateway

        control_plane = request.getfixturevalue("control_plane")
        gateway: Gateway = KubernetesGateway.from_kubeconfig(str(control_plane.kubeconfig_path))
    else:
        control_plane = None
        gateway = SimulatedGateway()
    under_test = ClusterUnderTest(request.param, gateway, control_plane)
    # Each test gets its own cohort so borrowing never reaches another test's queues.
    settings.PORTAL_COHORT = under_test.unique("cohort")
    reset_gateway(gateway)
    yield under_test
    reset_gateway(None)

"""The contract suite runs every scenario twice: on the simulated cluster and on the real
control plane from tests/cluster, with the same assertions."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from jobs import kinds
from jobs import services as job_services
from portal.kube import Gateway, NodeSpec, reset_gateway
from portal.kube.simulated import SimulatedGateway
from portal.models import User
from tenants import services
from tenants.models import Flavor, Membership
from tests.contract.scenarios import wait_for_quota_status
from tests.factories import MembershipFactory, UserFactory
from tests.helpers import ensure_priced


class ClusterUnderTest:
    def __init__(self, name: str, gateway: Gateway, control_plane: Any = None) -> None:
        self.name, self.gateway, self.control_plane = name, gateway, control_plane
        self.suffix = uuid.uuid4().hex[:6]

    def unique(self, name: str) -> str:
        """Names unique to this test: the real cluster lives for the whole session."""
        return f"{name}-{self.suffix}"

    def add_gpu_node(self, name: str, *, labels: dict[str, str], allocatable: dict[str, int],
                     taints: list[dict[str, str]] | None = None) -> None:
        if self.control_plane is not None:
            self.control_plane.add_gpu_node(name, labels=labels, allocatable={k: str(v) for k, v in allocatable.items()},
                                            taints=taints)
        else:
            self._simulated_nodes([*self._simulated_nodes_but(name), NodeSpec(name=name, labels=labels,
                                                                              allocatable=allocatable, taints=taints or ())])

    def set_allocatable(self, name: str, allocatable: dict[str, int]) -> None:
        """Devices of the node turn unhealthy: its allocatable drops below its capacity."""
        if self.control_plane is not None:
            self.control_plane.set_node_allocatable(name, allocatable)
            return
        (node,) = [n for n in self.gateway.list("v1", "Node")[0] if n["metadata"]["name"] == name]
        others = self._simulated_nodes_but(name)
        self._simulated_nodes([*others, NodeSpec(
            name=name, labels=node["metadata"]["labels"], allocatable={**node["status"]["allocatable"], **allocatable},
            taints=(node.get("spec") or {}).get("taints") or (), capacity=node["status"]["capacity"])])

    def delete_node(self, name: str) -> None:
        if self.control_plane is not None:
            self.control_plane.delete_node(name)
        else:
            self._simulated_nodes(self._simulated_nodes_but(name))

    def _simulated_nodes_but(self, name: str) -> list[NodeSpec]:
        assert isinstance(self.gateway, SimulatedGateway)
        return [NodeSpec(name=n["metadata"]["name"], labels=n["metadata"]["labels"], allocatable=n["status"]["allocatable"],
                         taints=(n.get("spec") or {}).get("taints") or (), capacity=n["status"]["capacity"])
                for n in self.gateway.list("v1", "Node")[0] if n["metadata"]["name"] != name]

    def _simulated_nodes(self, nodes: list[NodeSpec]) -> None:
        assert isinstance(self.gateway, SimulatedGateway)
        self.gateway.expect_nodes(nodes)

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


def cluster_under_test(request: pytest.FixtureRequest, settings: Any, param: str) -> ClusterUnderTest:
    """The cluster a contract scenario runs on: "simulated", "real" (the control plane with Kueue),
    "volcano" (the control plane with Volcano, the site's queue backend for the test) or
    "simulated-volcano" (the simulated cluster, playing Volcano)."""
    gateway: Gateway
    if param.startswith("simulated"):
        control_plane, gateway = None, SimulatedGateway()
    else:
        from portal.kube.kubernetes import KubernetesGateway

        control_plane = request.getfixturevalue("volcano_control_plane" if param == "volcano" else "control_plane")
        gateway = KubernetesGateway.from_kubeconfig(str(control_plane.kubeconfig_path))
    if param.endswith("volcano"):
        settings.PORTAL_QUEUE_BACKEND = "volcano"
    under_test = ClusterUnderTest(param, gateway, control_plane)
    # Each test gets its own cohort so borrowing never reaches another test's queues.
    settings.PORTAL_COHORT = under_test.unique("cohort")
    return under_test


def clusters(*params: str) -> Any:
    """A `cluster` fixture for the scenarios of a module, over those of cluster_under_test's clusters;
    the control-plane ones are marked `cluster`."""
    @pytest.fixture(params=[p if p.startswith("simulated") else pytest.param(p, marks=pytest.mark.cluster) for p in params])
    def cluster(request, settings, db):
        under_test = cluster_under_test(request, settings, request.param)
        reset_gateway(under_test.gateway)
        yield under_test
        reset_gateway(None)
    return cluster


cluster = clusters("simulated", "real")


@pytest.fixture
def site(cluster, django_capture_on_commit_callbacks):
    """An admin, a GPU flavor with a node to run on, and a helper to make provisioned teams."""
    admin = UserFactory.create(username="root", is_platform_admin=True)
    with django_capture_on_commit_callbacks(execute=True):
        flavor = services.flavor_save(actor=admin, flavor=Flavor(
            name=cluster.unique("H100"), slug=cluster.unique("h100"), resource_name="nvidia.com/gpu", gpu_model="H100",
            capacity_units=8, node_labels={"gpu-portal.io/test-flavor": cluster.unique("h100")},
        ))
    cluster.add_gpu_node(cluster.unique("gpu-node"), labels={"gpu-portal.io/test-flavor": flavor.slug},
                         allocatable={"nvidia.com/gpu": 8})
    ensure_priced(flavor)

    class Site:
        admin: User
        flavor: Flavor

        def team(self, name: str, *, gpus: int = 0) -> Any:
            with django_capture_on_commit_callbacks(execute=True):
                team = services.team_create(actor=admin, slug=cluster.unique(name), name=name)
                lead = UserFactory(username=cluster.unique(f"{name}-lead"))
                MembershipFactory(team=team, user=lead, role=Membership.Role.LEAD)
                if gpus:
                    self.grant(team, lead, gpus)
            wait_for_quota_status(cluster, team.slug)
            team.refresh_from_db()
            return team

        def grant(self, team: Any, lead: Any, units: int, ends_on: dt.date | None = None, *,
                  of: Flavor | None = None) -> None:
            with django_capture_on_commit_callbacks(execute=True):
                qr = services.quota_request_create(
                    requester=lead, team=team, lines=[services.LineInput(flavor=of or flavor, units=units)],
                    justification="contract", ends_on=ends_on)
                services.quota_request_approve(quota_request=qr, approver=admin)

    site = Site()
    site.admin, site.flavor = admin, flavor
    return site


@pytest.fixture
def templates(site):
    def make(kind: str, **extra: Any) -> Any:
        return job_services.template_create(
            user=site.admin, slug=f"{kind}-{site.flavor.slug}"[:40], name=kind.title(), kind=kind, flavors=[site.flavor],
            image="registry.example.com/ml/runtime:1", command=["python", "main.py"], max_units=8, default_cpu=1,
            default_memory_gib=1, port=8080 if kinds.get(kind).serves_http else 0,
            parameters=([{"name": "workers", "type": "int", "default": 2, "min": 1, "max": 8}]
                        if kind in ("distributed", "inference", "mpi") else []),
            **extra,
        )
    return {kind: make(kind) for kind in kinds.runnable()}  # the kinds the site's queue backend runs

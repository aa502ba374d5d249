"""Gang scheduling on the real control plane, with Kueue's waitForPodsReady as the portal requires
it (deploy/kueue/controller_manager_config.yaml): a distributed job is admitted with all its
workers or none, and one whose workers cannot all be placed is evicted and queued again whole,
never left half-running. The simulated cluster places what it admits, so this is real-only."""

from __future__ import annotations

from typing import Any

import pytest

from jobs import manifests, sync
from jobs.models import Workload
from portal.kube import gateway
from tests.contract.scenarios import HOLD, launch

pytestmark = [pytest.mark.django_db, pytest.mark.cluster]


def pods_of(workload: Workload) -> list[dict[str, Any]]:
    return gateway().list("v1", "Pod", namespace=workload.team.namespace,
                          labels={manifests.WORKLOAD_LABEL: str(workload.pk)})[0]


def running(pods: list[dict[str, Any]]) -> int:
    return sum(1 for pod in pods if (pod.get("status") or {}).get("phase") == "Running"
               and not pod["metadata"].get("deletionTimestamp"))


def kueue_workload(workload: Workload) -> dict[str, Any] | None:
    items = gateway().list("kueue.x-k8s.io/v1beta2", "Workload", namespace=workload.team.namespace)[0]
    return next((item for item in items if any(ref.get("name") == workload.k8s_name
                                              for ref in item["metadata"].get("ownerReferences", []))), None)


def evicted_for_pods_ready(workload: Workload) -> bool:
    found = kueue_workload(workload) or {}
    return any(c["type"] == "Evicted" and c["status"] == "True" and c.get("reason") == "PodsReadyTimeout"
               for c in (found.get("status") or {}).get("conditions", []))


@pytest.mark.parametrize("cluster", ["real"], indirect=True)
def test_a_distributed_job_runs_all_its_workers_or_is_requeued_whole(cluster, site, templates, settings,
                                                                     django_capture_on_commit_callbacks):
    import kubernetes.client

    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team = site.team("gang", gpus=8)
    lead = team.memberships.get().user
    # A pod outside Kueue holds 4 of the node's 8 GPUs: the team's quota says 8 are free, the node has 4.
    core = kubernetes.client.CoreV1Api(cluster.control_plane.api_client())
    blocker = cluster.unique("gpu-holder")
    core.create_namespaced_pod("kube-system", {  # type: ignore[arg-type]  # the client takes a plain dict
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": blocker, "annotations": {"kwok.gpu-portal.test/outcome": "Running"}},
        "spec": {"nodeSelector": site.flavor.node_labels, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "hold", "image": "hold", "resources": {
                     "requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}}]},
    })
    workload = launch(team, lead, templates["distributed"], site.flavor, django_capture_on_commit_callbacks,
                      units=2, parameters={"workers": 4})

    # Kueue admits the four workers together (8 units of quota); two are placed, two cannot be.
    cluster.wait_for(lambda: running(pods_of(workload)) == 2 and len(pods_of(workload)) == 4,
                     what="two of the four workers to run and two to wait for a node")
    cluster.wait_for(lambda: evicted_for_pods_ready(workload), timeout=60,
                     what="Kueue to evict the half-placed job when its pods are not all ready in time")
    cluster.wait_for(lambda: running(pods_of(workload)) == 0, what="the evicted job's running workers to be removed")
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.phase in (Workload.Phase.PREEMPTED, Workload.Phase.QUEUED), workload.reason

    # With the node's GPUs back, the requeued job is admitted again, all four workers at once.
    core.delete_namespaced_pod(blocker, "kube-system", grace_period_seconds=0)
    cluster.wait_for(lambda: running(pods_of(workload)) == 4, timeout=90, what="all four workers to run together")

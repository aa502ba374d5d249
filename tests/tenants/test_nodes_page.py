"""The nodes behind the catalog, page and API (issue 24 §5): per flavor, the nodes the last node
check kept, what they advertise beside the catalog's capacity and the guarantees, their health
(unhealthy devices, not ready, cordoned), how they share their GPUs, and the portal's workloads
on each; platform admins only. The check keeps only GPU nodes and writes only what changed."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from jobs import sync, xid
from jobs.models import Workload
from portal.health import NODE_CHECK, heartbeat_at
from portal.kube import KubeError, NodeSpec
from portal.models import AuditEvent
from tenants import nodes, reconcile, services
from tenants.models import GpuNode
from tenants.services import LineInput
from tests.conftest import login
from tests.factories import QuotaGrantFactory
from tests.helpers import api, launch

pytestmark = pytest.mark.django_db

TIME_SLICED_4 = {nodes.SHARING_STRATEGY_LABEL: "time-slicing", nodes.REPLICAS_LABEL: "4", nodes.GPU_COUNT_LABEL: "8"}


def node_body(name: str, labels: dict[str, str], capacity: dict[str, int], allocatable: dict[str, int] | None = None,
              **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": spec,
            "status": {"capacity": {k: str(v) for k, v in capacity.items()},
                       "allocatable": {k: str(v) for k, v in (allocatable or capacity).items()},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_the_check_keeps_the_gpu_nodes_and_the_ones_a_flavor_selects_and_no_other(simulated, flavor, monkeypatch):
    bodies = [
        node_body("gpu-0", {**flavor.node_labels, "nvidia.com/gpu.product": "H100", "kubernetes.io/os": "linux"},
                  {"nvidia.com/gpu": 8, "cpu": 64}, {"nvidia.com/gpu": 7, "cpu": 63}),
        node_body("pool-empty-0", dict(flavor.node_labels), {"cpu": 64}),  # the flavor's pool, its device plugin down
        node_body("amd-0", {"amd.com/gpu.family": "AI"}, {"amd.com/gpu": 8}),
        node_body("cpu-0", {"kubernetes.io/os": "linux"}, {"cpu": 64}),
    ]
    monkeypatch.setattr(simulated, "list", lambda *a, **k: (bodies, "1"))
    nodes.check_flavors()
    kept = {row.name: row for row in GpuNode.objects.all()}
    assert set(kept) == {"gpu-0", "pool-empty-0", "amd-0"}
    gpu = kept["gpu-0"]
    assert gpu.gpus == {"nvidia.com/gpu": [8, 7]} and gpu.unhealthy == 1 and gpu.ready and not gpu.cordoned
    # Only GPU labels and the ones flavors select by: not every label a node carries.
    assert gpu.labels == {**flavor.node_labels, "nvidia.com/gpu.product": "H100"}
    assert heartbeat_at(NODE_CHECK) is not None


def test_a_quiet_check_writes_nothing_and_a_node_gone_is_gone(simulated, flavor, monkeypatch):
    bodies = [node_body("gpu-0", dict(flavor.node_labels), {"nvidia.com/gpu": 8}),
              node_body("gpu-1", dict(flavor.node_labels), {"nvidia.com/gpu": 8})]
    monkeypatch.setattr(simulated, "list", lambda *a, **k: (bodies, "1"))
    nodes.check_flavors()
    first = dict(GpuNode.objects.values_list("name", "changed_at"))
    nodes.check_flavors()
    assert dict(GpuNode.objects.values_list("name", "changed_at")) == first
    bodies[0]["status"]["allocatable"]["nvidia.com/gpu"] = "6"  # two devices went unhealthy
    del bodies[1]
    nodes.check_flavors()
    assert list(GpuNode.objects.values_list("name", "gpus")) == [("gpu-0", {"nvidia.com/gpu": [8, 6]})]
    assert GpuNode.objects.get().changed_at > first["gpu-0"]


def test_the_page_shows_each_flavors_nodes_their_health_and_the_workloads_on_them(
        simulated, admin_user, ready_team, member, training, flavor, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, flavor, units=2)
    simulated.advance(5)
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.RUNNING
    (node_name,) = set(workload.intervals.values_list("node", flat=True))
    simulated.expect_nodes([
        NodeSpec(name=node_name, labels=dict(flavor.node_labels), allocatable={flavor.resource_name: 16}),
        NodeSpec(name="t4-0", labels={"nvidia.com/gpu.product": "Tesla-T4", **TIME_SLICED_4},
                 allocatable={"nvidia.com/gpu.shared": 32}, taints=[{"key": "nvidia.com/gpu.shared", "effect": "NoSchedule"}]),
    ])
    login(admin_user).post(reverse("tenants:node-list"))
    page = login(admin_user).get(reverse("tenants:node-list")).content.decode()
    assert f'data-testid="pool-{flavor.slug}"' in page and f'data-testid="node-{node_name}"' in page
    assert 'data-testid="pool-catalog">16<' in page and 'data-testid="pool-offered">16<' in page
    assert f'href="/workloads/{workload.pk}/">{workload.name}</a> <span class="small muted">{ready_team.slug} · 2 units' in page
    # The T4 node is no flavor's: counted apart, with its sharing and its taint.
    assert 'data-testid="pool-unmatched"' in page and 'data-testid="node-t4-0"' in page
    assert "time-slicing, 4 replicas per GPU" in page and "taint nvidia.com/gpu.shared:NoSchedule" in page
    only_flavor = login(admin_user).get(reverse("tenants:node-list") + f"?flavor={flavor.slug}").content.decode()
    assert f'data-testid="node-{node_name}"' in only_flavor and 'data-testid="node-t4-0"' not in only_flavor
    no_flavor = login(admin_user).get(reverse("tenants:node-list") + "?flavor=-").content.decode()
    assert f'data-testid="node-{node_name}"' not in no_flavor and 'data-testid="node-t4-0"' in no_flavor


def test_the_nodes_that_need_attention_are_one_filter_away_and_the_list_is_paged(simulated, admin_user, flavor):
    simulated.expect_nodes([
        NodeSpec(name=f"h100-{index:02}", labels=dict(flavor.node_labels), allocatable={flavor.resource_name: 8})
        for index in range(60)])
    nodes.check_flavors()
    GpuNode.objects.filter(name="h100-07").update(gpus={flavor.resource_name: [8, 6]})
    GpuNode.objects.filter(name="h100-42").update(cordoned=True)
    client = login(admin_user)
    first = client.get(reverse("tenants:node-list")).content.decode()
    assert first.count('<tr data-testid="node-') == 50 and "Page 1 of 2 · 60 in all" in first
    assert 'data-testid="node-h100-59"' in client.get(reverse("tenants:node-list") + "?page=2").content.decode()
    attention = client.get(reverse("tenants:node-list") + "?attention=1").content.decode()
    assert attention.count('<tr data-testid="node-') == 2
    assert "6 of 8" in attention and "2 unhealthy" in attention and 'data-testid="cordoned"' in attention


def test_a_catalog_above_what_the_nodes_offer_and_guarantees_resting_on_it_are_said(
        simulated, admin_user, team, lead, flavor):
    QuotaGrantFactory(team=team, flavor=flavor, units=12)
    simulated.expect_nodes([NodeSpec(name="h100-0", labels=dict(flavor.node_labels), allocatable={flavor.resource_name: 8})])
    nodes.check_flavors()
    page = login(admin_user).get(reverse("tenants:node-list")).content.decode()
    assert ("The catalog says 16 units but the nodes offer 8: teams and departments are guaranteed 12, more than is "
            "there, and some of their work will wait.") in page


def test_the_api_lists_every_kept_node_once_for_platform_admins(simulated, admin_user, flavor):
    simulated.expect_nodes([NodeSpec(name="h100-0", labels=dict(flavor.node_labels), allocatable={flavor.resource_name: 8})])
    nodes.check_flavors()
    body = api(admin_user).get("/api/nodes/").json()
    assert body["count"] == 1
    (row,) = body["results"]
    assert {key: row[key] for key in ("name", "flavors", "gpus", "unhealthy", "ready", "cordoned", "workloads")} == {
        "name": "h100-0", "flavors": [flavor.name], "gpus": {flavor.resource_name: [8, 8]}, "unhealthy": 0,
        "ready": True, "cordoned": False, "workloads": []}


@pytest.mark.parametrize("who", ["member", "lead"])
def test_the_page_and_the_api_are_for_platform_admins_only(simulated, request, who):
    person = request.getfixturevalue(who)
    assert login(person).get(reverse("tenants:node-list")).status_code == 403
    assert login(person).post(reverse("tenants:node-list")).status_code == 403
    assert api(person).get("/api/nodes/").status_code == 403


def test_check_now_on_a_cluster_that_does_not_answer_says_so_and_keeps_the_last_picture(
        simulated, admin_user, flavor, monkeypatch):
    reconcile.platform_reconcile()
    kept = list(GpuNode.objects.values_list("name", flat=True))
    assert kept

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise KubeError("connection refused")

    monkeypatch.setattr(simulated, "list", unreachable)
    client = login(admin_user)
    response = client.post(reverse("tenants:node-list"), follow=True)
    assert "The cluster did not answer, so the nodes were not checked: connection refused" in response.content.decode()
    assert list(GpuNode.objects.values_list("name", flat=True)) == kept


def test_a_platform_admin_cordons_and_uncordons_a_node_audited_and_its_taints_stay(simulated, admin_user, flavor):
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    simulated.expect_nodes([NodeSpec(name="h100-0", labels=dict(flavor.node_labels), allocatable={flavor.resource_name: 8},
                                     taints=[taint])])
    nodes.check_flavors()
    client = login(admin_user)
    assert 'data-testid="cordon"' in client.get(reverse("tenants:node-detail", args=["h100-0"])).content.decode()
    client.post(reverse("tenants:node-cordon", args=["h100-0"]))
    (body,) = simulated.list("v1", "Node")[0]
    assert body["spec"] == {"taints": [taint], "unschedulable": True}
    assert GpuNode.objects.get(name="h100-0").cordoned
    page = client.get(reverse("tenants:node-detail", args=["h100-0"])).content.decode()
    assert 'data-testid="cordoned"' in page and 'data-testid="uncordon"' in page
    client.post(reverse("tenants:node-cordon", args=["h100-0"]), {"cordoned": "0"})
    (body,) = simulated.list("v1", "Node")[0]
    assert body["spec"] == {"taints": [taint], "unschedulable": False}
    assert list(AuditEvent.objects.filter(action__startswith="node.").order_by("pk").values_list("action", "message")) == [
        ("node.cordoned", "root cordoned node h100-0"), ("node.uncordoned", "root made schedulable again node h100-0")]


def test_a_cordoned_node_takes_no_new_pod_on_the_simulated_cluster(
        simulated, admin_user, ready_team, member, training, flavor, django_capture_on_commit_callbacks):
    names = [n["metadata"]["name"] for n in simulated.list("v1", "Node")[0]]
    nodes.check_flavors()
    for name in names:
        services.node_cordon(actor=admin_user, node=GpuNode.objects.get(name=name), cordoned=True)
    reconcile.platform_reconcile()  # the catalog's nodes are made again: the cordons stay
    assert all(GpuNode.objects.filter(name__in=names).values_list("cordoned", flat=True))
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, flavor)
    simulated.advance(30)
    sync.sync_all()
    workload.refresh_from_db()
    assert workload.phase != Workload.Phase.RUNNING


def test_a_drain_stops_the_portals_workloads_on_the_node_and_no_other(
        simulated, admin_user, ready_team, member, training, flavor, django_capture_on_commit_callbacks):
    simulated.expect_nodes([NodeSpec(name=f"h100-{i}", labels=dict(flavor.node_labels), allocatable={flavor.resource_name: 2})
                            for i in range(2)])
    with django_capture_on_commit_callbacks(execute=True):
        first = launch(member, ready_team, training, flavor, units=2, name="on-one")
        second = launch(member, ready_team, training, flavor, units=2, name="on-other")
    simulated.advance(5)
    sync.sync_all()
    where = {w.name: w.intervals.get().node for w in (first, second)}
    assert len(set(where.values())) == 2
    nodes.check_flavors()
    client = login(admin_user)
    page = client.get(reverse("tenants:node-detail", args=[where["on-one"]])).content.decode()
    assert ">on-one</a>" in page and ">on-other</a>" not in page and "Drain: cordon and stop 1 workload" in page
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("jobs:node-drain", args=[where["on-one"]]))
    simulated.advance(5)
    sync.sync_all()
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.phase == Workload.Phase.STOPPED and second.phase == Workload.Phase.RUNNING
    assert first.intervals.get().ended_at is not None and second.intervals.get().ended_at is None
    assert GpuNode.objects.get(name=where["on-one"]).cordoned
    assert AuditEvent.objects.get(action="node.drained").message == (
        f"root drained node {where['on-one']}: stopped on-one (#{first.pk}) of {ready_team.slug}")


@pytest.mark.parametrize("who", ["member", "lead"])
def test_only_platform_admins_cordon_or_drain(simulated, request, who, flavor):
    simulated.expect_nodes([NodeSpec(name="h100-0", labels=dict(flavor.node_labels), allocatable={flavor.resource_name: 8})])
    nodes.check_flavors()
    person = request.getfixturevalue(who)
    client = login(person)
    assert client.get(reverse("tenants:node-detail", args=["h100-0"])).status_code == 403
    assert client.post(reverse("tenants:node-cordon", args=["h100-0"])).status_code == 403
    assert client.post(reverse("jobs:node-drain", args=["h100-0"])).status_code == 403
    (body,) = simulated.list("v1", "Node")[0]
    assert not body["spec"].get("unschedulable")


def test_a_node_the_check_never_kept_is_404(simulated, admin_user):
    client = login(admin_user)
    assert client.get(reverse("tenants:node-detail", args=["nowhere"])).status_code == 404
    assert client.post(reverse("tenants:node-cordon", args=["nowhere"])).status_code == 404
    assert client.post(reverse("jobs:node-drain", args=["nowhere"])).status_code == 404


def test_an_approval_that_would_promise_more_than_the_nodes_offer_says_so(simulated, admin_user, team, lead, flavor):
    QuotaGrantFactory(team=team, flavor=flavor, units=6)
    qr = services.quota_request_create(requester=lead, team=team, lines=[LineInput(flavor=flavor, units=4)],
                                              justification="The spring run")
    simulated.expect_nodes([NodeSpec(name="h100-0", labels=dict(flavor.node_labels), allocatable={flavor.resource_name: 8})])
    nodes.check_flavors()
    page = login(admin_user).get(reverse("tenants:approvals")).content.decode()
    assert ('data-testid="fit-nodes">The nodes offer only 8 units of it now (the catalog says 16): approving promises '
            "capacity that is not there") in page
    assert f'id="approval-{qr.pk}"' in page
    # With the nodes the catalog says, nothing is said.
    simulated.expect_nodes([NodeSpec(name=f"h100-{i}", labels=dict(flavor.node_labels), allocatable={flavor.resource_name: 8})
                            for i in range(2)])
    nodes.check_flavors()
    assert 'data-testid="fit-nodes"' not in login(admin_user).get(reverse("tenants:approvals")).content.decode()


def test_a_nodes_page_shows_its_gpus_now_and_the_xids_they_reported(
        simulated, gpu_metrics, admin_user, ready_team, member, training, flavor, settings,
        django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = {"gpu-portal.io/simulated-run-seconds": "86400"}
    with django_capture_on_commit_callbacks(execute=True):
        workload = launch(member, ready_team, training, flavor, units=2)
    simulated.advance(1)
    sync.sync_all()
    simulated.advance(60)
    workload.refresh_from_db()
    (interval,) = workload.intervals.all()
    nodes.check_flavors()
    client = login(admin_user)
    page = client.get(reverse("tenants:node-detail", args=[interval.node])).content.decode()
    assert 'data-testid="node-telemetry"' in page and "held by a pod" in page and "None recorded." in page
    gpu_metrics.set_xid(namespace=ready_team.namespace, pod=interval.pod_name, code=79)
    xid.xid_sweep()  # the worker's sweep records it, as it does for billing's credit
    page = client.get(reverse("tenants:node-detail", args=[interval.node])).content.decode()
    assert "<strong>XID 79</strong>" in page
    assert (f'held by <a href="/workloads/{workload.pk}/">{workload.name}</a> ({ready_team.slug}): the GPU fell off the '
            "bus: it no longer answers; the hardware failed: drain the node and have the GPU checked.") in page
    # The history is the node's own: another node's page shows none of it.
    other = GpuNode.objects.exclude(name=interval.node).first()
    assert other is not None
    assert "XID 79" not in client.get(reverse("tenants:node-detail", args=[other.name])).content.decode()


def _stack_pod(name: str, node: str, app: str, *, ready: bool = True, reason: str = "") -> dict[str, Any]:
    state = {"running": {}} if ready else {"waiting": {"reason": reason}}
    return {"metadata": {"name": name, "namespace": "gpu-operator", "labels": {"app": app}}, "spec": {"nodeName": node},
            "status": {"phase": "Running", "containerStatuses": [{"name": "main", "ready": ready, "state": state}]}}


def test_the_gpu_stack_pods_on_each_node_are_shown_and_a_node_without_them_needs_attention(
        simulated, admin_user, flavor, settings, monkeypatch):
    settings.PORTAL_DEVICE_PLUGIN_POD_LABELS = (("app", "nvidia-device-plugin-daemonset"),)
    settings.PORTAL_GPU_EXPORTER_POD_LABELS = (("app", "nvidia-dcgm-exporter"),)
    bodies = [node_body(f"gpu-{i}", dict(flavor.node_labels), {"nvidia.com/gpu": 8}) for i in range(3)]
    pods = {"nvidia-device-plugin-daemonset": [_stack_pod("dp-0", "gpu-0", "nvidia-device-plugin-daemonset"),
                                               _stack_pod("dp-1", "gpu-1", "nvidia-device-plugin-daemonset", ready=False,
                                                          reason="CrashLoopBackOff")],
            "nvidia-dcgm-exporter": [_stack_pod("ex-0", "gpu-0", "nvidia-dcgm-exporter"),
                                     _stack_pod("ex-1", "gpu-1", "nvidia-dcgm-exporter")]}
    calls: list[tuple[str, dict[str, str] | None]] = []

    def listing(api_version: str, kind: str, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
        calls.append((kind, kwargs.get("labels")))
        return (bodies if kind == "Node" else pods[kwargs["labels"]["app"]]), "1"

    monkeypatch.setattr(simulated, "list", listing)
    nodes.check_flavors()
    assert calls == [("Node", None), ("Pod", {"app": "nvidia-device-plugin-daemonset"}), ("Pod", {"app": "nvidia-dcgm-exporter"})]
    stack = dict(GpuNode.objects.values_list("name", "stack"))
    assert stack == {"gpu-0": {"device plugin": "running", "exporter": "running"},
                     "gpu-1": {"device plugin": "not ready (CrashLoopBackOff)", "exporter": "running"},
                     "gpu-2": {"device plugin": "none", "exporter": "none"}}
    attention = login(admin_user).get(reverse("tenants:node-list") + "?attention=1").content.decode()
    assert 'data-testid="node-gpu-0"' not in attention
    assert "device plugin not ready (CrashLoopBackOff)" in attention
    assert "no device plugin<" in attention and "no exporter<" in attention
    assert 'data-testid="pool-stack-down">2<' in attention


def test_with_namespaced_reads_the_gpu_stack_is_not_looked_for(simulated, flavor, settings, monkeypatch):
    settings.PORTAL_NAMESPACED_READS = True
    settings.PORTAL_DEVICE_PLUGIN_POD_LABELS = (("app", "nvidia-device-plugin-daemonset"),)
    kinds: list[str] = []
    real = simulated.list

    def listing(api_version: str, kind: str, **kwargs: Any) -> Any:
        kinds.append(kind)
        return real(api_version, kind, **kwargs)

    monkeypatch.setattr(simulated, "list", listing)
    reconcile.platform_reconcile()
    assert "Pod" not in kinds
    assert all(stack == {} for stack in GpuNode.objects.values_list("stack", flat=True))

"""Shared GPU flavors on both clusters (issue 24 §1): a time-sliced, an MPS and a MIG pool, and a
mixed-strategy MIG node serving two profiles, each labelled by GPU Feature Discovery as the device
plugin shares it and tainted so that only its flavors land there. A launch on each runs on its
pool with the taint tolerated, the team's queue counts its units of the pool's resource, and
metering bills each unit at its fraction of a GPU-hour. A node that joins the time-sliced pool
split another way makes the next node check refuse launches in words; once it leaves, launches go
again."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pytest
from django.db.models import Min

from billing import metering
from billing.models import Account
from billing.periods import hour_floor
from jobs import selectors as job_selectors
from jobs import services
from jobs.models import RunInterval, Workload
from portal.errors import DomainError
from portal.kube import gateway
from tenants import catalog, nodes
from tenants import services as tenant_services
from tenants.models import Flavor
from tenants.queueing import backend
from tests.contract.scenarios import HOLD, launch, phase_of, pods_of, queue_usage, running
from tests.helpers import ensure_priced

pytestmark = pytest.mark.django_db

SHARED_TAINT = {"key": "nvidia.com/gpu.shared", "value": "present", "effect": "NoSchedule"}


def sharing(replicas: int, gpus: int) -> dict[str, str]:
    return {nodes.SHARING_STRATEGY_LABEL: "time-slicing", nodes.REPLICAS_LABEL: str(replicas),
            nodes.GPU_COUNT_LABEL: str(gpus)}


def add_flavor(site: Any, capture: Any, slug: str, **fields: Any) -> Flavor:
    """A flavor saved through the catalog, selecting the test's nodes labelled with its slug."""
    with capture(execute=True):
        return tenant_services.flavor_save(actor=site.admin, flavor=Flavor(
            slug=slug, node_labels={"gpu-portal.io/test-flavor": slug}, **fields))


def t4_pool(cluster: Any, site: Any, capture: Any, *, gpus: int) -> Flavor:
    """A flavor and a tainted KWOK node of `gpus` T4s, each shared four ways (time-sliced)."""
    pool = cluster.unique("t4-shared")
    flavor = add_flavor(site, capture, pool, name=cluster.unique("T4 shared"), resource_name="nvidia.com/gpu.shared",
                        sharing_mode=Flavor.SharingMode.TIME_SLICED, gpu_model="NVIDIA T4", fraction_numerator=1,
                        fraction_denominator=4, capacity_units=4 * gpus, tolerations=[catalog.SHARED_TAINT])
    cluster.add_gpu_node(cluster.unique("t4-node"), labels={"gpu-portal.io/test-flavor": pool, **sharing(4, gpus)},
                         allocatable={"nvidia.com/gpu.shared": 4 * gpus}, taints=[SHARED_TAINT])
    ensure_priced(flavor, "0.40")
    return flavor


def team_on(site: Any, templates: Any, flavor: Flavor, name: str, units: int) -> tuple[Any, Any, Any]:
    """A team guaranteed `units` of the flavor, its lead, and the training template allowed on it."""
    template = templates["training"]
    services.template_revise(user=site.admin, template=template, flavors=[site.flavor, flavor])
    team = site.team(name)
    lead = team.memberships.get().user
    site.grant(team, lead, units, of=flavor)
    return team, lead, template


def node_body(name: str) -> dict[str, Any]:
    """The Node as the cluster has it now."""
    (body,) = [node for node in gateway().list("v1", "Node")[0] if node["metadata"]["name"] == name]
    return body


@pytest.fixture
def t4(cluster, site, django_capture_on_commit_callbacks) -> Flavor:
    """A T4 pool of two GPUs, each shared four ways: eight units of nvidia.com/gpu.shared."""
    return t4_pool(cluster, site, django_capture_on_commit_callbacks, gpus=2)


def billed_gpu_seconds(team: Any, flavor: Flavor | None = None) -> dict[tuple[str, Fraction], Fraction]:
    """GPU-seconds metering makes of the team's first minute of running (on `flavor`, if given), by
    flavor and the fraction of a GPU each unit was metered at."""
    intervals = RunInterval.objects.filter(team=team)
    if flavor is not None:
        intervals = intervals.filter(flavor=flavor)
    first = intervals.aggregate(first=Min("started_at"))["first"]
    until = first + dt.timedelta(minutes=1)
    rows = metering.usage_rows(metering.Window(hour_floor(first), until), until=until)
    account = Account.for_team(team)
    slugs = {f.pk: f.slug for f in Flavor.objects.all()}
    seconds: dict[tuple[str, Fraction], Fraction] = {}
    for key, unit_seconds in rows.items():
        if key[1] == account.pk and (flavor is None or key[2] == flavor.pk):
            share = (slugs[key[2]], Fraction(key[-2], key[-1]))
            seconds[share] = seconds.get(share, Fraction(0)) + unit_seconds * share[1]
    return seconds


@dataclass(frozen=True)
class Pool:
    """A node pool of one sharing mode, as GPU Feature Discovery labels it and the catalog prices it."""

    mode: str
    resource: str
    per_gpu: int  # units one GPU offers: replicas, or slices of one MIG profile
    labels: dict[str, str]
    taint: dict[str, str]
    toleration: dict[str, str]


POOLS = {
    "time-sliced": Pool(Flavor.SharingMode.TIME_SLICED, "nvidia.com/gpu.shared", 4, sharing(4, 2), SHARED_TAINT,
                        catalog.SHARED_TAINT),
    "mps": Pool(Flavor.SharingMode.MPS, "nvidia.com/gpu.shared", 4,
                {**sharing(4, 2), nodes.SHARING_STRATEGY_LABEL: "mps"}, SHARED_TAINT, catalog.SHARED_TAINT),
    "mig": Pool(Flavor.SharingMode.MIG, "nvidia.com/mig-1g.10gb", 7,
                {"nvidia.com/mig.strategy": "mixed", nodes.SHARING_STRATEGY_LABEL: "none", nodes.GPU_COUNT_LABEL: "2"},
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, catalog.NVIDIA_TAINT),
}


@pytest.mark.parametrize("mode", sorted(POOLS))
def test_a_launch_on_a_shared_flavor_runs_on_its_tainted_pool_is_counted_in_its_units_and_billed_by_its_fraction(
        cluster, site, templates, settings, mode, django_capture_on_commit_callbacks):
    pool, slug = POOLS[mode], cluster.unique(f"pool-{mode}")
    flavor = add_flavor(site, django_capture_on_commit_callbacks, slug, name=cluster.unique(f"Shared {mode}"),
                        resource_name=pool.resource, sharing_mode=pool.mode, gpu_model="NVIDIA A100 80GB",
                        fraction_numerator=1, fraction_denominator=pool.per_gpu, capacity_units=2 * pool.per_gpu,
                        tolerations=[pool.toleration])
    cluster.add_gpu_node(cluster.unique(f"node-{mode}"), labels={"gpu-portal.io/test-flavor": slug, **pool.labels},
                         allocatable={pool.resource: 2 * pool.per_gpu}, taints=[pool.taint])
    ensure_priced(flavor, "0.40")
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    assert nodes.check_flavors(flavors=[flavor])[flavor.pk].problem == ""
    team, lead, template = team_on(site, templates, flavor, f"share-{mode}", 4)

    workload = launch(team, lead, template, flavor, django_capture_on_commit_callbacks, units=2)
    cluster.wait_for(lambda: running(workload), what=f"the launch on the {mode} pool to run")
    (pod,) = pods_of(workload)
    (node,) = [n for n in gateway().list("v1", "Node")[0] if n["metadata"]["name"] == pod["spec"]["nodeName"]]
    assert node["metadata"]["labels"]["gpu-portal.io/test-flavor"] == slug
    assert pool.toleration in pod["spec"]["tolerations"]
    assert pod["spec"]["containers"][0]["resources"]["limits"][pool.resource] == "2"
    assert cluster.wait_for(lambda: queue_usage(team.slug, slug) == (2, 0), what=f"the queue to count 2 units of {mode}")
    assert billed_gpu_seconds(team) == {(slug, Fraction(1, pool.per_gpu)): Fraction(2 * 60, pool.per_gpu)}

    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=workload)


def test_a_node_that_joins_the_pool_split_another_way_refuses_launches_until_it_leaves(
        cluster, site, t4, templates, django_capture_on_commit_callbacks):
    template = templates["training"]
    services.template_revise(user=site.admin, template=template, flavors=[site.flavor, t4])
    team = site.team("share-bad")
    lead = team.memberships.get().user
    site.grant(team, lead, 2, of=t4)
    stray = cluster.unique("t4-halves")
    cluster.add_gpu_node(stray, labels={"gpu-portal.io/test-flavor": t4.slug, **sharing(2, 2)},
                         allocatable={"nvidia.com/gpu.shared": 4}, taints=[SHARED_TAINT])
    verdict = nodes.check_flavors(flavors=[t4])[t4.pk]
    assert verdict.problem == (f"Node {stray} splits each GPU 2 ways, so one unit of nvidia.com/gpu.shared is 1/2 of a GPU, "
                               f"but {t4.name} prices a unit as 1/4 of one.")
    t4.refresh_from_db()
    with pytest.raises(DomainError) as refused:
        launch(team, lead, template, t4, django_capture_on_commit_callbacks, units=1)
    assert refused.value.field == "flavor" and refused.value.message.startswith(f"Node {stray} splits each GPU 2 ways")
    assert not Workload.objects.filter(team=team).exists()
    assert gateway().list("batch/v1", "Job", namespace=team.namespace)[0] == []

    cluster.delete_node(stray)
    assert nodes.check_flavors(flavors=[t4])[t4.pk].problem == ""
    t4.refresh_from_db()
    workload = launch(team, lead, template, t4, django_capture_on_commit_callbacks, units=1)
    assert workload.phase != Workload.Phase.FAILED
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=workload)


def test_a_mixed_mig_node_serves_two_profiles_each_counted_in_its_own_units_and_billed_at_its_slice(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    """One node of two A100s under the mixed MIG strategy: one cut into seven 1g.10gb slices, the
    other into two 3g.40gb. Two flavors select it, one per profile; a launch on each lands there,
    the team's queue counts each in its own profile's units, and each slice bills its sevenths."""
    node, pool = cluster.unique("mig-mixed"), cluster.unique("mig-mixed")
    profiles = {"1g.10gb": (1, 7), "3g.40gb": (3, 2)}  # sevenths of a GPU a slice is, and slices on its GPU
    flavors = {}
    with django_capture_on_commit_callbacks(execute=True):
        for profile, (sevenths, slices) in profiles.items():
            flavors[profile] = tenant_services.flavor_save(actor=site.admin, flavor=Flavor(
                name=cluster.unique(f"A100 {profile}"), slug=cluster.unique(f"mig-{profile.split('.')[0]}"),
                resource_name=f"nvidia.com/mig-{profile}", sharing_mode=Flavor.SharingMode.MIG,
                gpu_model="NVIDIA A100 80GB", fraction_numerator=sevenths, fraction_denominator=7, capacity_units=slices,
                node_labels={"gpu-portal.io/test-flavor": pool}, tolerations=[catalog.NVIDIA_TAINT]))
            ensure_priced(flavors[profile], "2.00")
    cluster.add_gpu_node(node, labels={"gpu-portal.io/test-flavor": pool, "nvidia.com/mig.strategy": "mixed",
                                       nodes.SHARING_STRATEGY_LABEL: "none", nodes.GPU_COUNT_LABEL: "2"},
                         allocatable={f"nvidia.com/mig-{p}": slices for p, (_, slices) in profiles.items()},
                         taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    verdicts = nodes.check_flavors(flavors=list(flavors.values()))
    assert [verdicts[f.pk].problem for f in flavors.values()] == ["", ""]
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    template = templates["training"]
    services.template_revise(user=site.admin, template=template, flavors=[site.flavor, *flavors.values()])
    team = site.team("mig-mixed")
    lead = team.memberships.get().user
    for flavor in flavors.values():
        site.grant(team, lead, 2, of=flavor)

    small = launch(team, lead, template, flavors["1g.10gb"], django_capture_on_commit_callbacks, units=2)
    large = launch(team, lead, template, flavors["3g.40gb"], django_capture_on_commit_callbacks, units=1)
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in gateway().list("v1", "Node")[0]}
    for workload in (small, large):
        cluster.wait_for(lambda w=workload: running(w), what=f"{workload.flavor.name} to run")
        (pod,) = pods_of(workload)
        # On the real cluster, this node; the simulated one also makes nodes of the catalog's own.
        assert labels[pod["spec"]["nodeName"]]["gpu-portal.io/test-flavor"] == pool
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert {k: v for k, v in limits.items() if k.startswith("nvidia.com/")} == {
            workload.flavor.resource_name: str(workload.units)}
    assert cluster.wait_for(lambda: (queue_usage(team.slug, flavors["1g.10gb"].slug),
                                     queue_usage(team.slug, flavors["3g.40gb"].slug)) == ((2, 0), (1, 0)),
                            what="the queue to count each profile in its own units")
    # Each launch's own first minute: the second started after the first, by a second or more under load.
    assert {**billed_gpu_seconds(team, flavors["1g.10gb"]), **billed_gpu_seconds(team, flavors["3g.40gb"])} == {
        (flavors["1g.10gb"].slug, Fraction(1, 7)): Fraction(2 * 60, 7),
        (flavors["3g.40gb"].slug, Fraction(3, 7)): Fraction(60 * 3, 7)}
    with django_capture_on_commit_callbacks(execute=True):
        for workload in (small, large):
            services.workload_stop(user=lead, workload=workload)


@dataclass(frozen=True)
class Pair:
    """A pool whose unit asks for several resources: its flavor's fields and what a node of it advertises."""

    mode: str
    resource: str
    per_unit: int
    extra: list[dict[str, Any]]
    allocatable: dict[str, int]  # two cards' worth
    wants: dict[str, str]  # what a pod of 2 units writes
    quota: dict[str, int]  # what a pod of 2 units counts in the team's queue, per resource
    one_unit: dict[str, int]  # and a pod of 1


PAIRS = {
    # Alibaba's cGPU: a quarter of an A10 is 6 GiB of its memory with 25 % of its compute.
    "cgpu": Pair(Flavor.SharingMode.GPU_MEMORY, "aliyun.com/gpu-mem", 6,
                 [{"name": "aliyun.com/gpu-core.percentage", "per_unit": 25}],
                 {"aliyun.com/gpu-mem": 48, "aliyun.com/gpu-core.percentage": 200},
                 {"aliyun.com/gpu-mem": "12", "aliyun.com/gpu-core.percentage": "50"},
                 {"aliyun.com/gpu-mem": 12, "aliyun.com/gpu-core.percentage": 50},
                 {"aliyun.com/gpu-mem": 6, "aliyun.com/gpu-core.percentage": 25}),
    # HAMi: a quarter of a T4 is one vGPU of 4096 MiB and 25 % of the card, each vGPU's.
    "vgpu": Pair(Flavor.SharingMode.VGPU, "nvidia.com/gpu", 1,
                 [{"name": "nvidia.com/gpumem", "per_unit": 4096, "per_device": True},
                  {"name": "nvidia.com/gpucores", "per_unit": 25, "per_device": True}],
                 {"nvidia.com/gpu": 8, "nvidia.com/gpumem": 32768, "nvidia.com/gpucores": 200},
                 {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "25"},
                 {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 4096, "nvidia.com/gpucores": 25},
                 {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4096, "nvidia.com/gpucores": 25}),
}


def queue_resources(slug: str, flavor: str) -> dict[str, int]:
    """What the team's queue reports in use of each resource of the flavor, as the backend reads it."""
    return {row.resource: row.in_use for row in backend().usage(slugs=[slug]).get(slug, []) if row.flavor == flavor}


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_a_launch_on_a_flavor_whose_unit_asks_for_several_resources_holds_each_and_is_billed_by_its_units(
        cluster, site, templates, settings, kind, django_capture_on_commit_callbacks):
    pair, slug = PAIRS[kind], cluster.unique(f"pair-{kind}")
    flavor = add_flavor(site, django_capture_on_commit_callbacks, slug, name=cluster.unique(f"Pair {kind}"),
                        resource_name=pair.resource, resource_per_unit=pair.per_unit, extra_resources=pair.extra,
                        sharing_mode=pair.mode, gpu_model="NVIDIA A10", fraction_numerator=1, fraction_denominator=4,
                        capacity_units=8, tolerations=[catalog.SHARED_TAINT])
    # A node of the pool that lacks one of the resources: nothing could start, and the check says so.
    lacking = cluster.unique(f"lacking-{kind}")
    cluster.add_gpu_node(lacking, labels={"gpu-portal.io/test-flavor": slug},
                         allocatable={pair.resource: pair.allocatable[pair.resource]}, taints=[SHARED_TAINT])
    assert nodes.judge(flavor, [node_body(lacking)]).problem.startswith(
        f"A unit of {flavor.name} asks for {flavor.resources_display}, and no node of it advertises all of them: {lacking} "
        "(no ")
    cluster.delete_node(lacking)
    node = cluster.unique(f"node-{kind}")
    cluster.add_gpu_node(node, labels={"gpu-portal.io/test-flavor": slug}, allocatable=pair.allocatable, taints=[SHARED_TAINT])
    # As many units as its scarcest resource gives.
    assert nodes.judge(flavor, [node_body(node)]) == nodes.NodeVerdict(nodes=1, offered=8)
    assert nodes.check_flavors(flavors=[flavor])[flavor.pk].problem == ""
    flavor.refresh_from_db()
    ensure_priced(flavor, "0.40")
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team, lead, template = team_on(site, templates, flavor, f"pair-{kind}", 2)

    workload = launch(team, lead, template, flavor, django_capture_on_commit_callbacks, units=2)
    cluster.wait_for(lambda: running(workload), what=f"the launch on the {kind} pool to run")
    (pod,) = pods_of(workload)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert {name: value for name, value in limits.items() if name not in ("cpu", "memory")} == pair.wants
    assert cluster.wait_for(lambda: queue_usage(team.slug, slug) == (2, 0), what=f"the queue to count 2 units of {kind}")
    assert queue_resources(team.slug, slug) == pair.quota  # Kueue counts every resource of the pod at once
    assert workload.intervals.get().units == 2
    assert billed_gpu_seconds(team) == {(slug, Fraction(1, 4)): Fraction(2 * 60, 4)}

    # The team's 2 units are in use and no other team lends any: one more waits for quota, said in units.
    more = launch(team, lead, template, flavor, django_capture_on_commit_callbacks, units=1)
    cluster.wait_for(lambda: phase_of(more) == Workload.Phase.QUEUED and "Waiting for quota" in more.reason,
                     what="one more unit to wait for quota")
    assert "1 unit short" in more.reason
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=workload)
    cluster.wait_for(lambda: running(more), what="the waiting unit to run once the first launch stops")
    cluster.wait_for(lambda: queue_resources(team.slug, slug) == pair.one_unit, what="the queue to count one unit of each")
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=more)


DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver, whose DeviceClass of whole GPUs bears its name


def publish_devices(node: str, count: int) -> dict[str, Any]:
    """What the DRA driver's plugin on `node` publishes (a ResourceSlice of its GPUs), and what its
    chart installs (the DeviceClass selecting them). Returns the slice."""
    gateway().apply({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
                     "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
    return gateway().apply({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{index}"} for index in range(count)]}})


def claims_of(workload: Workload) -> list[dict[str, Any]]:
    pods = {pod["metadata"]["name"] for pod in pods_of(workload)}
    return [claim for claim in gateway().list("resource.k8s.io/v1", "ResourceClaim", namespace=workload.team.namespace)[0]
            if any(owner.get("name") in pods for owner in claim["metadata"].get("ownerReferences") or [])]


def test_a_flavor_claimed_through_a_device_class_runs_on_devices_its_nodes_publish_and_is_counted_and_billed_in_devices(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    slug, node = cluster.unique("dra-h100"), cluster.unique("dra-node")
    flavor = add_flavor(site, django_capture_on_commit_callbacks, slug, name=cluster.unique("H100 DRA"),
                        resource_name="dra.nvidia.com/gpu", device_class_name=DRIVER, gpu_model="NVIDIA H100 80GB HBM3",
                        capacity_units=4, tolerations=[catalog.NVIDIA_TAINT])
    cluster.add_gpu_node(node, labels={"gpu-portal.io/test-flavor": slug}, allocatable={},
                         taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    body = node_body(node)
    publish_devices(node, 4)
    assert nodes.judge(flavor, [body], nodes.Devices.read()) == nodes.NodeVerdict(nodes=1, offered=4)
    assert nodes.check_flavors(flavors=[flavor])[flavor.pk].problem == ""
    elsewhere = Flavor(**{**{f.attname: getattr(flavor, f.attname) for f in Flavor._meta.concrete_fields},
                          "device_class_name": "absent.example.com"})
    assert nodes.judge(elsewhere, [body], nodes.Devices.read()).problem.startswith(
        "The DeviceClass absent.example.com is not in the cluster, so no pod claiming it can start")
    flavor.refresh_from_db()
    ensure_priced(flavor, "2.00")
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team, lead, template = team_on(site, templates, flavor, "dra", 3)

    workload = launch(team, lead, template, flavor, django_capture_on_commit_callbacks, units=2)
    cluster.wait_for(lambda: running(workload), what="the launch claiming two GPUs to run")
    (pod,) = pods_of(workload)
    assert pod["spec"]["nodeName"] == node
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["claims"] == [{"name": "gpu"}] and not any("nvidia.com" in name for name in resources["limits"])
    (claim,) = cluster.wait_for(lambda: [c for c in claims_of(workload) if (c.get("status") or {}).get("allocation")],
                                what="the pod's claim to be allocated")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2 and {(r["driver"], r["pool"]) for r in results} == {(DRIVER, node)}
    # The workload's page says which devices its pod got.
    assert job_selectors.live_picture(workload=workload).claimed == [
        (pod["metadata"]["name"], [f"{DRIVER} {node}/{r['device']}" for r in results])]
    assert cluster.wait_for(lambda: queue_usage(team.slug, slug) == (2, 0), what="Kueue to count the two devices claimed")
    assert workload.intervals.get().units == 2
    assert billed_gpu_seconds(team) == {(slug, Fraction(1)): Fraction(2 * 60)}

    # Three are guaranteed and two claimed: two more wait for quota, in units.
    more = launch(team, lead, template, flavor, django_capture_on_commit_callbacks, units=2)
    cluster.wait_for(lambda: phase_of(more) == Workload.Phase.QUEUED and "Waiting for quota" in more.reason,
                     what="two more devices to wait for quota")
    assert "1 unit short" in more.reason
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=workload)
        services.workload_stop(user=lead, workload=more)
    cluster.wait_for(lambda: not claims_of(workload), what="the claim to go with its pod")


def test_a_device_class_kueue_does_not_map_leaves_the_launch_waiting_and_says_why(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    """Kueue admits nothing claiming a DeviceClass its deviceClassMappings do not name: the launch
    waits, and says so in words, instead of running uncounted."""
    unmapped, slug, node = "tpu.example.com", cluster.unique("dra-unmapped"), cluster.unique("dra-unmapped-node")
    gateway().apply({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": unmapped},
                     "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{unmapped}"'}}]}})
    cluster.add_gpu_node(node, labels={"gpu-portal.io/test-flavor": slug}, allocatable={})
    flavor = add_flavor(site, django_capture_on_commit_callbacks, slug, name=cluster.unique("TPU"),
                        resource_name="dra.example.com/tpu", device_class_name=unmapped, gpu_model="Acme TPU",
                        capacity_units=2)
    ensure_priced(flavor, "1.00")
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team, lead, template = team_on(site, templates, flavor, "dra-unmapped", 2)
    workload = launch(team, lead, template, flavor, django_capture_on_commit_callbacks, units=1)
    cluster.wait_for(lambda: phase_of(workload) == Workload.Phase.QUEUED and unmapped in workload.reason,
                     what="the launch to wait for a mapping of its DeviceClass")
    assert workload.reason.startswith(f"Waiting: Kueue does not count devices of the DeviceClass {unmapped}")
    assert not pods_of(workload)
    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=workload)

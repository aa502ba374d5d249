"""A time-sliced flavor on both clusters (issue 24 §1): a pool whose GPUs the device plugin splits
four ways, labelled by GPU Feature Discovery and tainted so that only shared flavors land there.
A launch on the flavor runs on that pool with the taint tolerated, the team's queue counts its
units of the shared resource, and metering bills each unit as a quarter of a GPU-hour. A node
that joins the pool split another way makes the next node check refuse launches in words; once
it leaves, launches go again."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction
from typing import Any

import pytest
from django.db.models import Min

from billing import metering
from billing.models import Account
from billing.periods import hour_floor
from jobs import services
from jobs.models import RunInterval, Workload
from portal.errors import DomainError
from portal.kube import gateway
from tenants import catalog, nodes
from tenants import services as tenant_services
from tenants.models import Flavor
from tests.contract.scenarios import HOLD, launch, pods_of, queue_usage, running
from tests.helpers import ensure_priced

pytestmark = pytest.mark.django_db

SHARED_TAINT = {"key": "nvidia.com/gpu.shared", "value": "present", "effect": "NoSchedule"}


def sharing(replicas: int, gpus: int) -> dict[str, str]:
    return {nodes.SHARING_STRATEGY_LABEL: "time-slicing", nodes.REPLICAS_LABEL: str(replicas),
            nodes.GPU_COUNT_LABEL: str(gpus)}


@pytest.fixture
def t4(cluster, site, django_capture_on_commit_callbacks) -> Flavor:
    """A T4 pool of two GPUs, each shared four ways: eight units of nvidia.com/gpu.shared."""
    pool = cluster.unique("t4-shared")
    with django_capture_on_commit_callbacks(execute=True):
        flavor = tenant_services.flavor_save(actor=site.admin, flavor=Flavor(
            name=cluster.unique("T4 shared"), slug=pool, resource_name="nvidia.com/gpu.shared",
            sharing_mode=Flavor.SharingMode.TIME_SLICED, gpu_model="NVIDIA T4", fraction_numerator=1,
            fraction_denominator=4, capacity_units=8, node_labels={"gpu-portal.io/test-flavor": pool},
            tolerations=[catalog.SHARED_TAINT]))
    cluster.add_gpu_node(cluster.unique("t4-node"), labels={"gpu-portal.io/test-flavor": pool, **sharing(4, 2)},
                         allocatable={"nvidia.com/gpu.shared": 8}, taints=[SHARED_TAINT])
    ensure_priced(flavor, "0.40")
    return flavor


def billed_gpu_seconds(team: Any) -> dict[tuple[str, Fraction], Fraction]:
    """GPU-seconds metering makes of the team's first minute of running, by flavor and the fraction
    of a GPU each unit was metered at."""
    first = RunInterval.objects.filter(team=team).aggregate(first=Min("started_at"))["first"]
    until = first + dt.timedelta(minutes=1)
    rows = metering.usage_rows(metering.Window(hour_floor(first), until), until=until)
    account = Account.for_team(team)
    slugs = {f.pk: f.slug for f in Flavor.objects.all()}
    seconds: dict[tuple[str, Fraction], Fraction] = {}
    for key, unit_seconds in rows.items():
        if key[1] == account.pk:
            share = (slugs[key[2]], Fraction(key[-2], key[-1]))
            seconds[share] = seconds.get(share, Fraction(0)) + unit_seconds * share[1]
    return seconds


def test_a_launch_on_a_time_sliced_flavor_runs_on_its_tainted_pool_is_counted_in_its_units_and_billed_by_the_quarter(
        cluster, site, t4, templates, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    assert nodes.check_flavors(flavors=[t4])[t4.pk].problem == ""
    template = templates["training"]
    services.template_revise(user=site.admin, template=template, flavors=[site.flavor, t4])
    team = site.team("share")
    lead = team.memberships.get().user
    site.grant(team, lead, 4, of=t4)

    workload = launch(team, lead, template, t4, django_capture_on_commit_callbacks, units=2)
    cluster.wait_for(lambda: running(workload), what="the launch on the shared T4s to run")
    (pod,) = pods_of(workload)
    (node,) = [n for n in gateway().list("v1", "Node")[0] if n["metadata"]["name"] == pod["spec"]["nodeName"]]
    assert node["metadata"]["labels"]["gpu-portal.io/test-flavor"] == t4.slug
    assert catalog.SHARED_TAINT in pod["spec"]["tolerations"]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.shared"] == "2"
    assert cluster.wait_for(lambda: queue_usage(team.slug, t4.slug) == (2, 0), what="the queue to count 2 shared units")
    assert billed_gpu_seconds(team) == {(t4.slug, Fraction(1, 4)): Fraction(2 * 60, 4)}

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

"""A CPU-only notebook, on both clusters and both queue backends: no GPU asked, admitted by the
queue without quota of it (Kueue leaves CPU and memory to the namespace: IgnoreUndeclared; the
team's Volcano Queue of the flavor deserves only the team's CPU and memory backstops), held to the
flavor's nodes, bounded by the team's guarantee at launch, and billed per unit-hour with no
GPU-hours."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from jobs import selectors, services
from jobs.models import RunInterval, Workload
from portal.errors import DomainError
from tenants import services as tenant_services
from tenants.models import Flavor
from tests.contract.conftest import clusters
from tests.contract.scenarios import HOLD, launch, metered, pods_of, queue_usage, running
from tests.helpers import ensure_priced

pytestmark = pytest.mark.django_db

cluster = clusters("simulated", "real", "simulated-volcano", "volcano")


@pytest.fixture
def cpu(cluster, site, django_capture_on_commit_callbacks) -> Flavor:
    """A CPU-only flavor of 4 cores and 16 GiB a unit, on a pool of its own: 2 nodes of 16 cores."""
    pool = cluster.unique("cpu")
    with django_capture_on_commit_callbacks(execute=True):
        flavor = tenant_services.flavor_save(actor=site.admin, flavor=Flavor(
            name=cluster.unique("CPU"), slug=pool, resource_name="cpu", sharing_mode=Flavor.SharingMode.CPU,
            gpu_model="CPU only", fraction_numerator=0, fraction_denominator=1, resource_per_unit=4,
            memory_gib_per_unit=16, capacity_units=8, node_labels={"gpu-portal.io/test-flavor": pool},
        ))
    for index in range(2):
        cluster.add_gpu_node(cluster.unique(f"cpu-node-{index}"), labels={"gpu-portal.io/test-flavor": pool},
                             allocatable={"cpu": 16, "memory": "64Gi"})
    ensure_priced(flavor, "0.40")
    return flavor


def test_a_cpu_notebook_runs_on_the_pool_asks_no_gpu_and_is_billed_per_unit_hour(
        cluster, site, cpu, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    template = services.template_create(
        user=site.admin, slug=cluster.unique("cpu-nb"), name="CPU notebook", kind="notebook", flavors=[cpu],
        image="registry.example.com/ml/runtime:1", max_units=4, port=8888)
    team = site.team("prep", gpus=1)
    lead = team.memberships.get().user
    site.grant(team, lead, 2, of=cpu)

    notebook = launch(team, lead, template, cpu, django_capture_on_commit_callbacks, units=2)
    assert (notebook.cpu, notebook.memory_gib) == (8, 32)
    cluster.wait_for(lambda: running(notebook), what="the CPU notebook to run")

    (pod,) = pods_of(notebook)
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"] == {"cpu": "8", "memory": "32Gi"}  # no GPU resource at all
    assert pod["spec"]["nodeSelector"] == {"gpu-portal.io/test-flavor": cpu.slug}
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in cluster.gateway.list("v1", "Node")[0]}
    assert nodes[pod["spec"]["nodeName"]].get("gpu-portal.io/test-flavor") == cpu.slug
    # The team's GPU queue is untouched: the notebook took none of its quota.
    assert queue_usage(team.slug, site.flavor.slug) == (0, 0)
    usage = selectors.team_queue_usage(team=team, flavor=cpu)
    assert usage is not None and (usage.guaranteed, usage.in_use, usage.free) == (2, 2, 0)

    # Its guarantee is spent: one more unit is refused in words, never queued.
    with pytest.raises(DomainError, match=r"has 2 .* units and uses 2; 1 more would be 3"):
        launch(team, lead, template, cpu, django_capture_on_commit_callbacks, units=1)
    assert not Workload.objects.filter(team=team).exclude(pk=notebook.pk).exists()

    cluster.wait_for(lambda: RunInterval.objects.filter(workload=notebook).exists(), what="its run interval")
    (interval,) = RunInterval.objects.filter(workload=notebook)
    assert (interval.flavor, interval.units, interval.fraction_numerator) == (cpu, 2, 0)

    # Metering's own rows of its first ten minutes (the intervals and the rate card alone decide
    # them), folded into figures by the one rule every page uses.
    lines, rows = metered(team, start=interval.started_at, until=interval.started_at + dt.timedelta(minutes=10))
    assert sum(row["unit_seconds"] for row in rows) == 2 * 600
    # No GPU-hour at all; 2 units × 600 s at 0.40 a unit-hour is 0.1333….
    total = lines.total()
    assert (total.gpu_hours, total.cost) == (Decimal("0.00"), Decimal("0.13"))

    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=notebook)
    cluster.wait_for(lambda: not pods_of(notebook), what="its pod to go")

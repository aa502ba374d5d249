"""CPU-only flavors (issue 26 §2): a notebook or a VS Code workspace for preparing data, on a pool of
CPU nodes without a GPU. A unit is cores and memory, no part of a GPU (fraction 0/1), priced per
unit-hour; the queues leave it alone and the portal bounds a team's units at launch. The same run
on both clusters and both queue backends: tests/contract/test_cpu_flavor_contract.py."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from billing.models import Rate, StatementLine
from billing.money import cost, priced_numerator
from billing.rates.card import RateCard
from billing.statements import exports
from billing.usage.workloads import workload_costs
from jobs import reclaim, selectors, services, sync
from jobs.models import RunInterval, Workload, WorkloadIdleState
from portal.errors import DomainError
from portal.models import Notification
from tenants import catalog, cluster_selectors, desired, nodes
from tenants.manifests import FlavorQuota, TeamSpec
from tenants.models import Flavor
from tenants.queueing import kueue, volcano
from tests.conftest import login
from tests.factories import FlavorFactory, QuotaGrantFactory
from tests.helpers import api, launch, make_ready

pytestmark = pytest.mark.django_db


def cpu_flavor(**changes: Any) -> Flavor:
    fields = {**catalog.PRESETS_BY_KEY["cpu-4c-16g"].form_initial(), "capacity_units": 16, **changes}
    return Flavor(**fields)


@pytest.fixture
def cpu(db) -> Flavor:
    flavor = cpu_flavor()
    flavor.full_clean()
    flavor.save()
    return flavor


@pytest.fixture
def cpu_notebook(admin_user, cpu):
    return services.template_create(user=admin_user, slug="cpu-notebook", name="CPU notebook", kind="notebook",
                                    flavors=[cpu], image="quay.io/jupyter/scipy-notebook:2025-01-13", port=8888,
                                    max_units=4)


# --- The catalog ---------------------------------------------------------------------------------


def test_a_cpu_only_flavor_from_its_preset_is_cores_and_memory_and_no_part_of_a_gpu(cpu):
    assert (cpu.resource_name, cpu.fraction, cpu.is_cpu) == ("cpu", 0, True)
    assert cpu.cpu_and_memory(3) == (12, 48)
    assert cpu.pod_requests(3) == {}  # its units are the container's CPU and memory, no device
    assert cpu.resources_display == "4 CPU cores + 16 GiB memory"
    assert cpu.fraction_display == "no GPU"
    assert "no GPU" in cpu.isolation and "unit-hour" in cpu.attribution


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"resource_name": "nvidia.com/gpu"}, "resource_name", "A CPU-only flavor's resource is cpu"),
    ({"fraction_numerator": 1}, "fraction_numerator", "its fraction is 0/1"),
    ({"memory_gib_per_unit": 0}, "memory_gib_per_unit", "at least 1 GiB"),
    ({"extra_resources": [{"name": "example.com/x", "per_unit": 1}]}, "extra_resources", "cores and memory alone"),
    ({"device_class_name": "gpu.nvidia.com"}, "device_class_name", "cores and memory alone"),
    ({"sharing_mode": "exclusive"}, "resource_name", "cpu is the resource of a CPU-only flavor alone"),
])
def test_a_cpu_only_flavor_that_is_anything_else_is_refused_in_words(changes, field, words):
    with pytest.raises(ValidationError) as refused:
        cpu_flavor(**changes).full_clean()
    assert words in " ".join(refused.value.message_dict[field])


def test_a_gpu_flavor_with_memory_per_unit_is_refused_and_the_database_refuses_a_gpu_flavor_of_no_gpu(flavor):
    flavor.memory_gib_per_unit = 8
    with pytest.raises(ValidationError, match="belongs to a CPU-only flavor"):
        flavor.full_clean()
    with pytest.raises(IntegrityError), transaction.atomic():
        Flavor.objects.filter(pk=flavor.pk).update(fraction_numerator=0)


def test_an_admin_adds_the_cpu_preset_from_the_catalog_page(admin_user):
    page = login(admin_user).get(reverse("tenants:flavor-create") + "?preset=cpu-4c-16g").content.decode()
    assert "gpu-portal.io/pool" in page and "per unit-hour" in page
    form = {**{key: value for key, value in catalog.PRESETS_BY_KEY["cpu-4c-16g"].form_initial().items()
               if not isinstance(value, (dict, list))},
            "node_labels": '{"gpu-portal.io/pool": "cpu"}', "tolerations": "[]", "extra_resources": "[]",
            "capacity_units": "32", "is_active": "on"}
    response = login(admin_user).post(reverse("tenants:flavor-create"), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    made = Flavor.objects.get(slug="cpu-4c-16g")
    assert (made.is_cpu, made.fraction_numerator, made.memory_gib_per_unit, made.resource_per_unit) == (True, 0, 16, 4)


# --- Queues and nodes ----------------------------------------------------------------------------


def spec_with(team, *flavors_and_units: tuple[Flavor, int], held: bool = False) -> TeamSpec:
    spec = desired.team_specs(team_ids=[team.pk])[team.pk][1]
    quotas = tuple(FlavorQuota(flavor=desired.flavor_spec(f), nominal=units) for f, units in flavors_and_units)
    return TeamSpec(**{**spec.__dict__, "quotas": quotas, "held": held})


def test_a_team_queue_holds_no_quota_of_a_cpu_only_flavor_on_either_backend(team, flavor, cpu):
    QuotaGrantFactory(team=team, flavor=cpu, units=2)
    spec = spec_with(team, (flavor, 4), (cpu, 2))
    groups = kueue.make_cluster_queue(team=spec)["spec"]["resourceGroups"]
    assert [g["coveredResources"] for g in groups] == [["nvidia.com/gpu"]]  # Kueue leaves CPU alone (IgnoreUndeclared)
    (queue,) = [q for q in volcano.VolcanoBackend().team_objects(team=spec) if q["metadata"]["labels"].get(
        volcano.FLAVOR_LABEL) == cpu.slug]
    assert queue["spec"]["deserved"] == {"cpu": spec.policy.cpu, "memory": spec.policy.memory}
    assert "capability" not in queue["spec"]
    (held,) = volcano.VolcanoBackend().team_objects(team=spec_with(team, (cpu, 2), held=True))
    assert held["spec"]["capability"] == {"cpu": "0"}  # a held team's CPU Queue admits nothing new


def node(name: str, *, cpu: str, memory: str, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"gpu-portal.io/pool": "cpu", **(labels or {})}},
            "spec": extra.get("spec", {}),
            "status": {"allocatable": {"cpu": cpu, "memory": memory}, "capacity": {"cpu": "16", "memory": "64Gi"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_the_node_check_counts_a_cpu_pools_units_from_allocatable_cores_and_memory(cpu):
    # kubelet keeps some of each node for the system: 15.8 cores make 3 units of 4, 62 GiB make 3 of 16.
    verdict = nodes.judge(cpu, [node("cpu-a", cpu="15800m", memory="62Gi"), node("cpu-b", cpu="16", memory="33554432Ki")])
    assert (verdict.problem, verdict.offered) == ("", 3 + 2)
    assert any("make 5 now" in warning for warning in verdict.warnings)  # the catalog says 16

    tainted = node("cpu-c", cpu="16", memory="64Gi",
                   spec={"taints": [{"key": "dedicated", "value": "etl", "effect": "NoSchedule"}]})
    refused = nodes.judge(cpu, [tainted])
    assert "Every node of CPU 4c/16GiB has a taint its pods do not tolerate" in refused.problem


def test_the_simulated_cluster_gives_a_cpu_pool_nodes_of_cores_and_memory(cpu):
    pool = [n for n in desired.simulated_nodes() if n["name"].startswith(f"sim-{cpu.slug}")]
    assert [n["allocatable"] for n in pool] == [{"cpu": 64, "memory": "256Gi"}]  # 16 units of 4 cores and 16 GiB
    assert all(n["labels"] == {"gpu-portal.io/pool": "cpu"} for n in pool)


# --- Templates and launches ----------------------------------------------------------------------


def test_a_template_runs_on_gpus_or_on_cpus_and_only_kinds_that_may_run_without_a_gpu(admin_user, flavor, cpu):
    with pytest.raises(DomainError, match="a template runs on GPUs or on CPUs alone") as mixed:
        services.template_create(user=admin_user, slug="both", name="Both", kind="notebook", flavors=[flavor, cpu],
                                 image="quay.io/jupyter/scipy-notebook:2025-01-13", port=8888)
    assert mixed.value.field == "flavors"
    with pytest.raises(DomainError, match="need a GPU; CPU-only flavors run notebooks and VS Code workspaces"):
        services.template_create(user=admin_user, slug="cpu-train", name="CPU training", kind="training", flavors=[cpu],
                                 image="pytorch/pytorch:2.5", command=["python", "t.py"])


def test_a_cpu_launch_takes_its_cores_and_memory_from_its_units_and_refuses_others(
        ready_team, member, cpu_notebook, cpu, simulated):
    make_ready(ready_team, cpu, units=4)
    notebook = launch(member, ready_team, cpu_notebook, cpu, units=2)
    assert (notebook.cpu, notebook.memory_gib, notebook.units) == (8, 32, 2)
    container = services.workload_spec(notebook)
    assert (container.cpu, container.memory_gib, container.gpu) == (8, 32, ())

    with pytest.raises(DomainError, match="so 1 unit is 4 cores and 16 GiB; choose the units, not the cores") as refused:
        launch(member, ready_team, cpu_notebook, cpu, units=1, cpu=6)
    assert refused.value.field == "cpu"
    with pytest.raises(DomainError, match="choose the units, not the memory"):
        launch(member, ready_team, cpu_notebook, cpu, units=1, memory_gib=64)
    assert launch(member, ready_team, cpu_notebook, cpu, units=1, cpu=4, memory_gib=16).units == 1  # the same is fine


def test_a_team_takes_no_more_cpu_units_than_its_guarantee_and_waits_for_none(
        ready_team, member, cpu_notebook, cpu, simulated):
    with pytest.raises(DomainError, match="has no CPU 4c/16GiB quota: request quota first"):
        launch(member, ready_team, cpu_notebook, cpu, units=1)
    make_ready(ready_team, cpu, units=3)
    first = launch(member, ready_team, cpu_notebook, cpu, units=2)
    with pytest.raises(DomainError, match=r"has 3 CPU 4c/16GiB units and uses 2; 2 more would be 4") as refused:
        launch(member, ready_team, cpu_notebook, cpu, units=2)
    assert refused.value.field == "units"
    assert Workload.objects.filter(team=ready_team).count() == 1
    usage = selectors.team_queue_usage(team=ready_team, flavor=cpu)
    assert usage is not None and (usage.guaranteed, usage.in_use, usage.free) == (3, 2, 1)

    with pytest.raises(DomainError):  # no borrowing: another team's idle CPU units are not lent
        launch(member, ready_team, cpu_notebook, cpu, units=4)
    services.workload_stop(user=member, workload=first)
    assert launch(member, ready_team, cpu_notebook, cpu, units=3).units == 3  # a stopped one gives its units back


def test_the_launch_form_asks_for_cpu_units_and_the_hint_counts_the_teams_own(
        ready_team, member, cpu_notebook, cpu, simulated):
    make_ready(ready_team, cpu, units=2)
    client = login(member)
    page = client.get(reverse("jobs:workload-launch") + f"?team={ready_team.slug}&template={cpu_notebook.pk}")
    html = page.content.decode()
    assert "CPU units" in html and "CPU flavor" in html and 'name="cpu"' not in html and 'name="memory_gib"' not in html
    hint = client.get(reverse("jobs:launch-hint"), {"team": ready_team.slug, "template": cpu_notebook.pk,
                                                    "flavor": cpu.slug, "units": 2}).content.decode()
    assert "Fits your guarantee" in hint and "2 × (4 CPU cores + 16 GiB memory), no GPU" in hint
    launch(member, ready_team, cpu_notebook, cpu, units=1)
    hint = client.get(reverse("jobs:launch-hint"), {"team": ready_team.slug, "template": cpu_notebook.pk,
                                                    "flavor": cpu.slug, "units": 2}).content.decode()
    assert "has 2 CPU 4c/16GiB units and uses 1; 2 more would be 3" in hint


def test_the_api_launches_on_a_cpu_flavor_and_says_the_refusal_on_its_field(
        ready_team, member, cpu_notebook, cpu, simulated):
    make_ready(ready_team, cpu, units=2)
    client = api(member)
    body = {"team": ready_team.slug, "template": cpu_notebook.pk, "flavor": cpu.slug, "units": 1}
    made = client.post("/api/workloads/", {**body, "cpu": 5}, format="json")
    assert made.status_code == 400 and "choose the units, not the cores" in made.json()["errors"]["cpu"][0]
    made = client.post("/api/workloads/", body, format="json")
    assert made.status_code == 201, made.json()
    assert (made.json()["cpu"], made.json()["memory_gib"]) == (4, 16)


# --- Money ---------------------------------------------------------------------------------------


def test_a_cpu_unit_is_priced_whole_and_adds_no_gpu_hour():
    assert priced_numerator(0, 1) == 1 and priced_numerator(1, 7) == 1 and priced_numerator(3, 7) == 3
    # 2 units for 30 minutes at 0.40 a unit-hour: 0.40; a 1/7 MIG unit's price is a seventh of a GPU-hour's.
    assert cost(unit_seconds=3600, numerator=0, denominator=1, price_per_gpu_hour=Decimal("0.40")) == Decimal("0.40")
    assert cost(unit_seconds=7 * 3600, numerator=1, denominator=7, price_per_gpu_hour=Decimal("2")) == 2


def test_a_cpu_workload_costs_its_unit_hours_at_the_unit_price_and_no_gpu_hours(
        ready_team, member, cpu_notebook, cpu, simulated):
    make_ready(ready_team, cpu, units=2)
    Rate.objects.filter(flavor=cpu).update(price_per_gpu_hour=Decimal("0.40"))
    notebook = launch(member, ready_team, cpu_notebook, cpu, units=2)
    start = dt.datetime(2026, 3, 2, 9, tzinfo=dt.UTC)
    RunInterval.objects.create(workload=notebook, pod_name="cpu-0", node="sim-cpu-0", flavor=cpu, resource_name="cpu",
                               units=2, fraction_numerator=0, fraction_denominator=1, started_at=start,
                               ended_at=start + dt.timedelta(minutes=90))
    (figure,) = workload_costs(workload_ids=[notebook.pk]).values()
    # 2 units × 1.5 h = 3 unit-hours × 0.40 = 1.20; no GPU-hour.
    assert (figure.gpu_hours, figure.cpu_unit_hours, figure.cost) == (Decimal("0.00"), Decimal("3.00"), Decimal("1.20"))
    hourly = RateCard.read().hourly_cost(cpu, 2, start)
    assert hourly is not None and hourly.amount == Decimal("0.80")
    page = login(member).get(reverse("jobs:workload-detail", args=[notebook.pk])).content.decode()
    assert "3.00 CPU unit-h · 1.20 USD" in page


def test_a_statement_line_of_a_cpu_flavor_shows_unit_hours_and_its_unit_price():
    line = StatementLine(fraction_numerator=0, fraction_denominator=1, guaranteed_unit_seconds=3 * 3600,
                                 borrowed_unit_seconds=0, guaranteed_gpu_hours=Decimal(0), borrowed_gpu_hours=Decimal(0))
    assert (line.per_unit_hour, line.unit_hours, line.gpu_hours) == (True, Decimal(3), Decimal(0))
    assert "priced_per" in exports.COLUMNS


def test_a_cpu_flavor_is_priced_per_unit_hour_on_the_rate_card(finance_user, cpu):
    from billing.rates import services as rate_services

    rate_services.rate_set(actor=finance_user, flavor=cpu, price_per_gpu_hour="0.35")
    page = login(finance_user).get(reverse("billing:rate-card")).content.decode()
    assert "0.3500 USD per unit-hour" in page
    with pytest.raises(DomainError, match="A price per unit-hour is zero or more"):
        rate_services.rate_set(actor=finance_user, flavor=cpu, price_per_gpu_hour="-1")


def test_a_gpu_flavor_keeps_its_gpu_hours(ready_team, member, training, flavor, simulated):
    # The same arithmetic on a whole GPU: 1 unit for an hour is 1 GPU-hour at its price.
    workload = launch(member, ready_team, training, flavor, units=1)
    start = dt.datetime(2026, 3, 2, 9, tzinfo=dt.UTC)
    RunInterval.objects.create(workload=workload, pod_name="p", node="n", flavor=flavor, resource_name=flavor.resource_name,
                               units=1, fraction_numerator=1, fraction_denominator=1, started_at=start,
                               ended_at=start + dt.timedelta(hours=1))
    (figure,) = workload_costs(workload_ids=[workload.pk]).values()
    assert (figure.gpu_hours, figure.cpu_unit_hours) == (Decimal("1.00"), Decimal("0.00"))


def test_cpu_units_in_use_count_the_teams_active_workloads_only(ready_team, member, cpu_notebook, cpu, simulated):
    make_ready(ready_team, cpu, units=4)
    launch(member, ready_team, cpu_notebook, cpu, units=1)
    done = launch(member, ready_team, cpu_notebook, cpu, units=2)
    Workload.objects.filter(pk=done.pk).update(phase=Workload.Phase.SUCCEEDED)
    assert selectors.cpu_units_in_use(team=ready_team, flavor=cpu) == 1
    other = FlavorFactory.create(name="CPU big", slug="cpu-big", resource_name="cpu", sharing_mode="cpu", fraction_numerator=0,
                          memory_gib_per_unit=64, resource_per_unit=16, capacity_units=4,
                          node_labels={"gpu-portal.io/pool": "big"})
    assert selectors.cpu_units_in_use(team=ready_team, flavor=other) == 0


# --- Idle without a GPU --------------------------------------------------------------------------


@pytest.fixture
def running_cpu_notebook(ready_team, member, admin_user, cpu, simulated, django_capture_on_commit_callbacks):
    make_ready(ready_team, cpu, units=2)
    template = services.template_create(user=admin_user, slug="cpu-lab", name="CPU lab", kind="notebook", flavors=[cpu],
                                        image="quay.io/jupyter/scipy-notebook", port=8888, idle_minutes=60)
    with django_capture_on_commit_callbacks(execute=True):
        notebook = launch(member, ready_team, template, cpu)
    simulated.advance(1)
    sync.sync_all()
    notebook.refresh_from_db()
    assert notebook.phase == Workload.Phase.RUNNING
    return notebook


def _ago(minutes: float) -> str:
    return (timezone.now() - dt.timedelta(minutes=minutes)).isoformat()


def test_a_cpu_notebook_nobody_uses_is_warned_then_stopped_by_its_own_word(
        running_cpu_notebook, jupyter, member, django_capture_on_commit_callbacks):
    # No GPU to judge: Jupyter's last activity starts the 60-minute window, never before the pod did.
    jupyter.status = {"last_activity": _ago(30), "kernels": 1, "connections": 0}
    t0 = timezone.now()
    assert reclaim.idle_sweep(now=t0).busy == [running_cpu_notebook.pk]
    assert reclaim.idle_sweep(now=t0 + dt.timedelta(minutes=50)).busy == [running_cpu_notebook.pk]
    with django_capture_on_commit_callbacks(execute=True):
        assert reclaim.idle_sweep(now=t0 + dt.timedelta(minutes=61)).warned == [running_cpu_notebook.pk]
    note = Notification.objects.get(recipient=member)
    assert "has been idle 61 min (its notebook not used)" in note.message and "use its CPUs" not in note.message
    page = login(member).get(reverse("jobs:workload-detail", args=[running_cpu_notebook.pk])).content.decode()
    assert "nobody has used it since" in page and "idle when it has not been used for 60 minutes" in page
    with django_capture_on_commit_callbacks(execute=True):
        assert reclaim.idle_sweep(now=t0 + dt.timedelta(minutes=77)).stopped == [running_cpu_notebook.pk]
    running_cpu_notebook.refresh_from_db()
    assert running_cpu_notebook.phase == Workload.Phase.STOPPED
    assert running_cpu_notebook.reason.startswith("Stopped: idle 77 minutes with its notebook not used")


def test_a_cpu_notebook_used_after_its_warning_is_no_longer_idle(running_cpu_notebook, jupyter):
    # Jupyter never reports a use later than its own clock, so the pod started three hours ago and
    # the warning came ten minutes ago.
    RunInterval.objects.filter(workload=running_cpu_notebook).update(started_at=timezone.now() - dt.timedelta(hours=3))
    jupyter.status = {"last_activity": _ago(90), "kernels": 1, "connections": 0}
    assert reclaim.idle_sweep().warned == [running_cpu_notebook.pk]
    WorkloadIdleState.objects.filter(workload=running_cpu_notebook).update(
        warned_at=timezone.now() - dt.timedelta(minutes=10))
    jupyter.status = {"last_activity": _ago(5), "kernels": 1, "connections": 1}
    sweep = reclaim.idle_sweep()
    assert (sweep.busy, sweep.stopped) == ([running_cpu_notebook.pk], [])
    state = WorkloadIdleState.objects.get(workload=running_cpu_notebook)
    assert (state.warned_at, state.action_due_at, state.idle_since) == (None, None, None)


def test_a_cpu_notebook_the_portal_cannot_ask_is_never_judged_idle(running_cpu_notebook, settings, member):
    settings.PORTAL_NOTEBOOK_STATUS_URL = "http://127.0.0.1:9/{namespace}/{name}"
    t0 = timezone.now()
    for minutes in (0, 61, 600):
        sweep = reclaim.idle_sweep(now=t0 + dt.timedelta(minutes=minutes))
        assert sweep.no_metrics == [running_cpu_notebook.pk] and sweep.warned == []
    page = login(member).get(reverse("jobs:workload-detail", args=[running_cpu_notebook.pk])).content.decode()
    assert "Its server has not said when it was last used, so it is never judged idle." in page
    assert "no GPU" in page and "Units" in page
    charts = login(member).get(reverse("jobs:workload-telemetry", args=[running_cpu_notebook.pk])).content.decode()
    assert "CPUs without a GPU: there is no GPU use to show" in charts


def test_the_team_page_counts_its_cpu_units_and_leaves_them_out_of_gpu_use(ready_team, member, cpu_notebook, cpu, simulated):
    make_ready(ready_team, cpu, units=3)
    launch(member, ready_team, cpu_notebook, cpu, units=2)
    picture = cluster_selectors.team_cluster_picture(team=ready_team)
    (row,) = [row for row in picture.usage if row.flavor == cpu.name]
    assert (row.guaranteed, row.in_use, row.borrowed, row.lent, row.counted_by_portal) == (3, 2, 0, 0, True)
    answer = api(member).get(f"/api/teams/{ready_team.slug}/cluster/").json()
    assert {"flavor": cpu.name, "resource": "cpu", "guaranteed": 3, "in_use": 2, "borrowed": 0, "lent": 0,
            "counted_by_portal": True} in answer["usage"]
    client = login(member)
    assert "counted by the portal" in client.get(reverse("tenants:team-cluster", args=[ready_team.slug])).content.decode()
    Workload.objects.filter(team=ready_team).update(phase=Workload.Phase.RUNNING)
    use = client.get(reverse("jobs:team-gpu-use", args=[ready_team.slug])).content.decode()
    assert "cpu-notebook" not in use  # no GPU use to show


def test_a_cpu_launch_names_one_flavor_and_accepts_no_other(ready_team, member, admin_user, cpu, simulated):
    # Two CPU pools share the resource cpu, yet no queue chooses between them: the pod would land on
    # either and be billed as the one named.
    big = FlavorFactory.create(name="CPU big", slug="cpu-big", resource_name="cpu", sharing_mode="cpu",
                               fraction_numerator=0, memory_gib_per_unit=16, resource_per_unit=4, capacity_units=4,
                               node_labels={"gpu-portal.io/pool": "big"})
    template = services.template_create(user=admin_user, slug="two-pools", name="Two pools", kind="notebook",
                                        flavors=[cpu, big], image="quay.io/jupyter/scipy-notebook", port=8888)
    make_ready(ready_team, cpu, units=2)
    with pytest.raises(DomainError, match="is CPU-only: no queue chooses among CPU flavors") as refused:
        launch(member, ready_team, template, cpu, also_accept=(big,))
    assert refused.value.field == "also_accept"
    page = login(member).get(reverse("jobs:workload-launch") + f"?team={ready_team.slug}&template={template.pk}")
    assert 'data-testid="also-accept"' not in page.content.decode()


def test_a_cpu_guarantee_raises_the_namespaces_cpu_and_memory_backstops_by_its_units(team, cpu, flavor):
    QuotaGrantFactory(team=team, flavor=cpu, units=3)
    QuotaGrantFactory(team=team, flavor=flavor, units=4)  # a GPU guarantee moves neither
    spec = desired.team_specs(team_ids=[team.pk])[team.pk][1]
    assert (spec.policy.cpu, spec.policy.memory) == (str(team.cpu_limit_cores + 12), f"{team.memory_limit_gib + 48}Gi")

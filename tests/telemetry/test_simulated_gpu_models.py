"""Simulated telemetry follows each flavor's GPU: a pod's memory and power stay within what its
units of that card hold and draw (a MIG slice its profile's memory, a share of a GPU its share), and
the hottest GPU under any card's thermal slowdown. A T4 share never draws 491 W nor holds 79.6 GiB."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from demo.site import FLAVORS as DEMO_FLAVORS
from jobs import services as job_services
from jobs import sync
from jobs.models import Workload, WorkloadKind
from portal.metrics.base import PodSpan
from tenants.catalog import GENERIC_GPU, GPU_MODELS, PRESETS, gpu_model
from tenants.models import Flavor
from tests.helpers import launch, make_ready

pytestmark = pytest.mark.django_db

# One unit's memory (GiB) and power (W) at most, from the cards' data sheets: a whole card's, a MIG
# slice's own memory and its sevenths of the card's power, a share's fraction of both.
UNIT_LIMITS = {
    "nvidia-h100": (80, 700), "nvidia-a100": (80, 400), "amd-mi300x": (192, 750), "intel-max-1550": (128, 600),
    "nvidia-mig-1g.10gb": (10, 400 / 7), "nvidia-mig-1g.20gb": (20, 400 / 7), "nvidia-mig-2g.20gb": (20, 800 / 7),
    "nvidia-mig-3g.40gb": (40, 1200 / 7), "nvidia-mig-4g.40gb": (40, 1600 / 7), "nvidia-mig-7g.80gb": (80, 400),
    "nvidia-time-slicing": (24 / 4, 150 / 4), "nvidia-mps": (24 / 4, 150 / 4),
    "aliyun-gpu-mem-t4": (1, 70 / 16), "aliyun-gpu-mem-a10": (1, 150 / 24), "aliyun-cgpu-a10": (24 / 4, 150 / 4),
    "hami-t4": (16 / 4, 70 / 4),
    "demo-h100-80gb": (80, 700), "demo-a100-1g-10gb": (10, 300 / 7), "demo-t4-shared": (16 / 4, 70 / 4),
}
HOTTEST_C = 83  # below every data-centre card's thermal slowdown
UNITS = 2


def _flavors() -> list[tuple[str, dict[str, Any]]]:
    """Every GPU preset and demo flavor: a CPU-only one has no GPU to report."""
    return ([(preset.key, preset.form_initial()) for preset in PRESETS if preset.sharing_mode != "cpu"]
            + [(f"demo-{spec['slug']}", {k: v for k, v in spec.items() if k != "capacity_units"}) for spec in DEMO_FLAVORS])


def test_every_preset_and_demo_flavor_has_its_limits_written_down_here():
    assert {key for key, _ in _flavors()} == set(UNIT_LIMITS)


def test_the_table_holds_each_cards_memory_and_power_and_a_safe_generic():
    cards = {name: gpu_model(name) for name in (
        "NVIDIA Tesla T4", "NVIDIA L4", "NVIDIA A10", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB",
        "NVIDIA H100 80GB HBM3", "NVIDIA H200", "Tesla-T4", "NVIDIA-H100-80GB-HBM3")}
    assert {name: (card.watts, card.memory_gib) for name, card in cards.items()} == {
        "NVIDIA Tesla T4": (70, 16), "NVIDIA L4": (72, 24), "NVIDIA A10": (150, 24), "NVIDIA A100-SXM4-40GB": (400, 40),
        "NVIDIA A100-SXM4-80GB": (400, 80), "NVIDIA H100 80GB HBM3": (700, 80), "NVIDIA H200": (700, 141),
        "Tesla-T4": (70, 16), "NVIDIA-H100-80GB-HBM3": (700, 80)}
    assert gpu_model("Acme Tensor Brick") == GENERIC_GPU
    assert all(GENERIC_GPU.memory_gib <= card.memory_gib and GENERIC_GPU.watts <= card.watts for _, card in GPU_MODELS)


@pytest.mark.parametrize(("key", "fields"), _flavors(), ids=[key for key, _ in _flavors()])
def test_simulated_memory_power_and_temperature_stay_within_the_flavors_gpu(
        key, fields, team, member, admin_user, simulated, gpu_metrics, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = {"gpu-portal.io/simulated-run-seconds": "86400"}
    flavor = Flavor.objects.create(**fields, capacity_units=8 * fields["fraction_denominator"])
    make_ready(team, flavor, units=8)
    template = job_services.template_create(
        user=admin_user, slug="train", name="Train", kind=WorkloadKind.TRAINING, flavors=[flavor],
        image="pytorch/pytorch:2.5", command=["python", "train.py"], default_units=1, max_units=8)
    with django_capture_on_commit_callbacks(execute=True):
        job = launch(member, team, template, flavor, units=UNITS)
    simulated.advance(1)
    sync.sync_all()
    job.refresh_from_db()
    assert job.phase == Workload.Phase.RUNNING, job.reason
    simulated.advance(600)

    (interval,) = job.intervals.all()
    start = interval.started_at
    series = gpu_metrics.workload_series(namespace=team.namespace, pods=[PodSpan(interval.pod_name, start)],
                                         start=start, end=start + dt.timedelta(minutes=10))
    if interval.resource_name.startswith("nvidia.com/"):  # what DCGM sees: NVIDIA's device plugin's GPUs
        assert series.has_data
    memory_gib, watts = UNIT_LIMITS[key]
    # A time-sliced, MPS or vGPU card is reported whole, as DCGM does: its memory, and its power
    # split among the pods on it (this one alone, holding two of its replicas, so all of it).
    units = fields["fraction_denominator"] if fields["sharing_mode"] in ("time-sliced", "mps", "vgpu") else UNITS
    assert all(0 < p.value <= units * memory_gib * 1024 for p in series.memory_total_mib), series.memory_total_mib[:1]
    assert all(0 < used.value <= total.value for used, total in zip(series.memory_used_mib, series.memory_total_mib,
                                                                     strict=True))
    assert all(0 < p.value <= units * watts for p in series.power_watts), series.power_watts[:1]
    assert all(20 < p.value <= HOTTEST_C for p in series.temperature_c)
    if series.has_data:
        # The devices the pod held for its ten minutes: its units where each is a device, else the cards its
        # replicas are on, which it has to itself (two of a card's four replicas fill one card first).
        hours = gpu_metrics.device_hours(namespaces=[team.namespace], start=start, end=start + dt.timedelta(minutes=10))
        cards = UNITS if flavor.unit_is_a_device else -(-UNITS // (flavor.fraction_denominator // flavor.fraction_numerator))
        assert hours[team.namespace].covered == pytest.approx(cards / 6, rel=0.15)

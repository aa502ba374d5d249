"""Golden ResourceFlavors for every preset of the GPU catalog: what a flavor made from the preset
puts in the cluster, compared whole, with the resource name, sharing mode and fraction of a GPU
the preset gives a unit."""

from __future__ import annotations

from typing import Any

import pytest

from tenants import catalog, desired
from tenants.models import Flavor
from tenants.queueing import kueue

PLATFORM_LABELS = {"app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/role": "flavor"}

GOLDEN: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "nvidia-h100": ("nvidia.com/gpu", "exclusive", "1", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "h100-80gb", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "nvidia-a100": ("nvidia.com/gpu", "exclusive", "1", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "a100-80gb", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "amd-mi300x": ("amd.com/gpu", "exclusive", "1", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "mi300x", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {"amd.com/gpu.family": "AI", "amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"},
                 "tolerations": [{"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "intel-max-1550": ("gpu.intel.com/i915", "exclusive", "1", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "intel-max-1550", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {"intel.feature.node.kubernetes.io/gpu": "true", "gpu.intel.com/family": "Max_Series"},
                 "tolerations": [{"key": "gpu.intel.com/i915", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "nvidia-mig-1g.10gb": ("nvidia.com/mig-1g.10gb", "mig", "1/7", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "a100-mig-1g-10gb", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {
                            "nvidia.com/gpu.present": "true",
                            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                            "nvidia.com/mig.capable": "true",
                            "nvidia.com/mig.strategy": "mixed",
                           },
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "nvidia-mig-1g.20gb": ("nvidia.com/mig-1g.20gb", "mig", "1/7", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "a100-mig-1g-20gb", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {
                            "nvidia.com/gpu.present": "true",
                            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                            "nvidia.com/mig.capable": "true",
                            "nvidia.com/mig.strategy": "mixed",
                           },
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "nvidia-mig-2g.20gb": ("nvidia.com/mig-2g.20gb", "mig", "2/7", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "a100-mig-2g-20gb", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {
                            "nvidia.com/gpu.present": "true",
                            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                            "nvidia.com/mig.capable": "true",
                            "nvidia.com/mig.strategy": "mixed",
                           },
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "nvidia-mig-3g.40gb": ("nvidia.com/mig-3g.40gb", "mig", "3/7", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "a100-mig-3g-40gb", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {
                            "nvidia.com/gpu.present": "true",
                            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                            "nvidia.com/mig.capable": "true",
                            "nvidia.com/mig.strategy": "mixed",
                           },
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "nvidia-mig-4g.40gb": ("nvidia.com/mig-4g.40gb", "mig", "4/7", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "a100-mig-4g-40gb", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {
                            "nvidia.com/gpu.present": "true",
                            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                            "nvidia.com/mig.capable": "true",
                            "nvidia.com/mig.strategy": "mixed",
                           },
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "nvidia-mig-7g.80gb": ("nvidia.com/mig-7g.80gb", "mig", "1", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "a100-mig-7g-80gb", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {
                            "nvidia.com/gpu.present": "true",
                            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                            "nvidia.com/mig.capable": "true",
                            "nvidia.com/mig.strategy": "mixed",
                           },
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "nvidia-time-slicing": ("nvidia.com/gpu.shared", "time-sliced", "1/4", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "a10-shared", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {
                            "nvidia.com/gpu.present": "true",
                            "nvidia.com/gpu.product": "NVIDIA-A10-SHARED",
                            "nvidia.com/gpu.replicas": "4",
                            "nvidia.com/gpu.sharing-strategy": "time-slicing",
                           },
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                 {"key": "nvidia.com/gpu.shared", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "nvidia-mps": ("nvidia.com/gpu.shared", "mps", "1/4", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "a10-mps", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {
                            "nvidia.com/gpu.present": "true",
                            "nvidia.com/gpu.product": "NVIDIA-A10-SHARED",
                            "nvidia.com/gpu.replicas": "4",
                            "nvidia.com/gpu.sharing-strategy": "mps",
                           },
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                 {"key": "nvidia.com/gpu.shared", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "aliyun-gpu-mem-t4": ("aliyun.com/gpu-mem", "gpu-memory", "1/16", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "t4-gpu-mem", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {"gpushare": "true", "nvidia.com/gpu.product": "Tesla-T4"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "aliyun-gpu-mem-a10": ("aliyun.com/gpu-mem", "gpu-memory", "1/24", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "a10-gpu-mem", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {"gpushare": "true", "nvidia.com/gpu.product": "NVIDIA-A10"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "aliyun-cgpu-a10": ("aliyun.com/gpu-mem", "gpu-memory", "1/4", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "a10-cgpu-4", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {"ack.node.gpu.schedule": "core_mem", "nvidia.com/gpu.product": "NVIDIA-A10"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "hami-t4": ("nvidia.com/gpu", "vgpu", "1/4", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "t4-vgpu-4", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {"gpu": "on", "nvidia.com/gpu.product": "Tesla-T4"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                 {"key": "nvidia.com/gpu.shared", "operator": "Exists", "effect": "NoSchedule"}]},
    }),
    "cpu-4c-16g": ("cpu", "cpu", "0", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "cpu-4c-16g", "labels": PLATFORM_LABELS},
        "spec": {"nodeLabels": {"gpu-portal.io/pool": "cpu"}},
    }),
}
# What a pod of 2 units asks for on each preset whose unit is more than one of its resource; every
# other preset's pod asks for 2 of its resource.
GOLDEN_REQUESTS: dict[str, dict[str, int]] = {
    "aliyun-cgpu-a10": {"aliyun.com/gpu-mem": 12, "aliyun.com/gpu-core.percentage": 50},
    "hami-t4": {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 4096, "nvidia.com/gpucores": 25},  # each vGPU's
}


def test_every_preset_has_a_golden_manifest_and_every_sharing_mode_a_meaning():
    assert sorted(GOLDEN) == sorted(catalog.PRESETS_BY_KEY)
    for mode in Flavor.SharingMode.values:
        assert catalog.ISOLATION[mode] and catalog.ATTRIBUTION[mode]
    assert "Hardware-isolated" in catalog.ISOLATION["mig"] and "no memory isolation" in catalog.ISOLATION["time-sliced"]
    assert "limited isolation" in catalog.ISOLATION["mps"]


@pytest.mark.django_db
@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_a_flavor_made_from_a_preset_gives_its_golden_resource_flavor(key):
    resource_name, sharing_mode, fraction, golden = GOLDEN[key]
    flavor = Flavor(**catalog.PRESETS_BY_KEY[key].form_initial(), capacity_units=8)
    flavor.full_clean()
    assert (flavor.resource_name, flavor.sharing_mode, str(flavor.fraction)) == (resource_name, sharing_mode, fraction)
    assert kueue.make_resource_flavor(flavor=desired.flavor_spec(flavor)) == golden


@pytest.mark.django_db
@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_a_pod_on_a_flavor_made_from_a_preset_asks_for_its_golden_resources(key):
    flavor = Flavor(**catalog.PRESETS_BY_KEY[key].form_initial(), capacity_units=8)
    flavor.full_clean()
    if flavor.is_cpu:  # its units are the pod's CPU and memory, which the container asks for
        assert (flavor.pod_requests(2), flavor.cpu_and_memory(2)) == ({}, (8, 32))
        assert flavor.units_of(8) == 2
        return
    assert flavor.pod_requests(2) == GOLDEN_REQUESTS.get(key, {flavor.resource_name: 2})
    assert flavor.units_of(flavor.pod_requests(2)[flavor.resource_name]) == 2

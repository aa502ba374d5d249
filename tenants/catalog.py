"""The GPU catalog's presets and what each sharing mode means. Pure data: no Django.

A preset fills the flavor form with what a common kind of GPU capacity looks like in a cluster:
the extended resource its device plugin advertises, the fraction of a physical GPU one unit is,
and the node labels and taints that NVIDIA's GPU Feature Discovery (or AMD's and Intel's
labellers, or the GPU-share scheduler) put on the nodes that carry it. The admin still reviews
every field: product names and replica counts differ from cluster to cluster.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

EXCLUSIVE, MIG, TIME_SLICED, MPS, GPU_MEMORY, VGPU, CPU = (
    "exclusive", "mig", "time-sliced", "mps", "gpu-memory", "vgpu", "cpu")

# What the launch form tells a data scientist about the isolation they get on a flavor.
ISOLATION: Mapping[str, str] = {
    EXCLUSIVE: "Whole GPUs of your own: nothing else runs on them.",
    MIG: "Hardware-isolated: a MIG slice has its own memory and compute, so a neighbour on the same GPU can neither "
         "slow it down nor read its memory.",
    TIME_SLICED: "Time-sliced: takes turns on a GPU with other workloads, with no memory isolation: a neighbour can use "
                 "up the card's memory and slows yours down.",
    MPS: "MPS: runs beside other workloads on one GPU at the same time, with limited isolation: memory and compute are "
         "capped per workload, but a crash in one can take down the others.",
    GPU_MEMORY: "Memory-sliced: a share of the card's memory, counted in GiB; compute is shared with the other workloads "
                "on the card, without isolation.",
    VGPU: "Virtual GPU: a slice of a card whose memory is capped and whose compute is limited to its share by the vGPU "
          "layer (HAMi, Volcano's vGPU); a neighbour on the card cannot take your memory, but a crash of the card takes "
          "down every slice.",
    CPU: "CPU only: cores and memory of your own on the flavor's nodes, and no GPU; for preparing data and light work.",
}

# How usage and telemetry are attributed to a workload on each kind of flavor.
ATTRIBUTION: Mapping[str, str] = {
    EXCLUSIVE: "Each GPU's metrics belong to the one pod using it; cost is GPU-hours × 1.",
    MIG: "DCGM reports each MIG instance on its own, so metrics belong to the pod holding the slice; cost is the "
         "slice's fraction of a GPU-hour.",
    TIME_SLICED: "DCGM reports the whole GPU to each pod taking turns on it: its busy time, power and GPU-hours are "
                 "divided among the pods by the replicas each holds (a team's totals count the card once), and a pod's "
                 "own use cannot be told from its neighbours'; cost is each unit's fraction of a GPU-hour.",
    MPS: "DCGM reports the whole GPU to each MPS client: its busy time, power and GPU-hours are divided among the "
         "clients by the replicas each holds, and a client's own use cannot be told from the others'; cost is each "
         "unit's fraction of a GPU-hour.",
    GPU_MEMORY: "DCGM sees the whole GPU but not the pods on it (the share scheduler's device plugin does not tell "
                "it), so workloads here have no GPU metrics of their own; cost is priced per GiB of the card (one "
                "unit is one GiB's share of a GPU-hour).",
    VGPU: "A vGPU layer hands its pods device IDs of its own, so DCGM reports a card to its pods only where the "
          "exporter can name them; what it reports is divided among the pods on the card as for a time-sliced one. "
          "Cost is each unit's fraction of a GPU-hour (one unit is one vGPU).",
    CPU: "No GPU, so no GPU metrics and no GPU-hours; cost is unit-hours × the flavor's price per unit-hour (a unit "
         "is its cores and memory).",
}

NVIDIA_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# The taint a site puts on its shared GPU nodes (time-sliced, MPS, HAMi's vGPU: each advertises
# nvidia.com/gpu or a rename of it), so that only a flavor that says it shares lands there: a pod
# that asked for a whole GPU never gets a slice of one.
SHARED_TAINT = {"key": "nvidia.com/gpu.shared", "operator": "Exists", "effect": "NoSchedule"}
AMD_TAINT = {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
INTEL_TAINT = {"key": "gpu.intel.com/i915", "operator": "Exists", "effect": "NoSchedule"}
# No preset names a RuntimeClass: whether pods need one depends on how the site installed NVIDIA's
# container toolkit, not on the GPU. The GPU operator makes `nvidia` containerd's default runtime
# (its toolkit's CONTAINERD_SET_AS_DEFAULT), so pods need none; K3s and RKE2 register the `nvidia`
# runtime beside runc without making it the default, so there pods must name it. AMD's and Intel's
# device plugins hand their devices to any runtime, so their presets never need one.
NVIDIA_RUNTIME_NOTE = ("Set the runtime class to “nvidia” where containerd's default runtime is not NVIDIA's (K3s, RKE2, "
                       "a toolkit installed without making it the default); the GPU operator's default needs none.")


@dataclass(frozen=True)
class UnitResource:
    """One resource a unit of a flavor asks its device plugin for, and how much of it."""

    name: str
    amount: int = 1  # per unit
    # Read by the device plugin as each device's share (HAMi's nvidia.com/gpumem and gpucores,
    # Volcano's vgpu-memory and vgpu-cores): written once in a pod, whatever its units, and given
    # to every device the pod gets. Otherwise the pod writes `amount` × its units.
    per_device: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "per_unit": self.amount, **({"per_device": True} if self.per_device else {})}


def pod_requests(resources: Sequence[UnitResource], units: int) -> dict[str, int]:
    """What a pod holding `units` units of a flavor with these resources writes in its requests."""
    return {r.name: r.amount if r.per_device else r.amount * units for r in resources}


def quota_amounts(resources: Sequence[UnitResource], units: int) -> dict[str, int]:
    """`units` units in each resource, as a queue's quota counts them. A per-device amount is
    written once per pod and every pod holds at least one unit, so `units` × amount bounds what
    pods holding `units` units in all can write: the unit count (the first resource) is what binds."""
    return {r.name: r.amount * units for r in resources}


@dataclass(frozen=True)
class FlavorPreset:
    key: str
    label: str
    name: str
    slug: str
    resource_name: str
    sharing_mode: str
    gpu_model: str
    fraction: Fraction
    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    note: str = ""
    runtime_class_name: str = ""
    resource_per_unit: int = 1
    extra_resources: tuple[UnitResource, ...] = ()
    memory_gib_per_unit: int = 0  # a CPU-only flavor's unit: its memory beside its cores

    def form_initial(self) -> dict[str, Any]:
        """The flavor form's fields as this preset fills them."""
        return {
            "name": self.name, "slug": self.slug, "resource_name": self.resource_name, "sharing_mode": self.sharing_mode,
            "gpu_model": self.gpu_model, "fraction_numerator": self.fraction.numerator,
            "fraction_denominator": self.fraction.denominator, "node_labels": dict(self.node_labels),
            "tolerations": [dict(t) for t in self.tolerations], "runtime_class_name": self.runtime_class_name,
            "resource_per_unit": self.resource_per_unit, "extra_resources": [r.as_json() for r in self.extra_resources],
            "memory_gib_per_unit": self.memory_gib_per_unit,
        }


def _gfd(product: str, **extra: str) -> dict[str, str]:
    """The labels GPU Feature Discovery writes on an NVIDIA node, for the ResourceFlavor to select."""
    return {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product, **extra}


def _mig(profile: str, slices: int) -> FlavorPreset:
    return FlavorPreset(
        key=f"nvidia-mig-{profile}", label=f"NVIDIA MIG {profile} (A100/H100 80GB, {slices}/7 of a GPU)",
        name=f"A100 80GB MIG {profile}", slug=f"a100-mig-{profile.replace('.', '-')}",
        resource_name=f"nvidia.com/mig-{profile}", sharing_mode=MIG, gpu_model="NVIDIA A100-SXM4-80GB",
        fraction=Fraction(slices, 7),
        node_labels=_gfd("NVIDIA-A100-SXM4-80GB", **{"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed"}),
        tolerations=(NVIDIA_TAINT,),
        note="GFD's mixed MIG strategy: each profile is its own resource. On H100 80GB the same profiles exist; change "
             f"the product label. {NVIDIA_RUNTIME_NOTE}",
    )


def _shared(mode: str, label: str, replicas: int) -> FlavorPreset:
    strategy = "time-slicing" if mode == TIME_SLICED else "mps"
    return FlavorPreset(
        key=f"nvidia-{strategy}", label=label, name=f"A10 {'shared' if mode == TIME_SLICED else 'MPS'}",
        slug=f"a10-{'shared' if mode == TIME_SLICED else 'mps'}", resource_name="nvidia.com/gpu.shared", sharing_mode=mode,
        gpu_model="NVIDIA A10", fraction=Fraction(1, replicas),
        node_labels=_gfd("NVIDIA-A10-SHARED", **{"nvidia.com/gpu.replicas": str(replicas),
                                                 "nvidia.com/gpu.sharing-strategy": strategy}),
        tolerations=(NVIDIA_TAINT, SHARED_TAINT),
        note=f"The device plugin's {strategy} config with renameByDefault: {replicas} replicas per GPU, each one unit; the "
             "flavor's page shows the config. Taint the pool's nodes nvidia.com/gpu.shared:NoSchedule so that only shared "
             f"flavors land there. {NVIDIA_RUNTIME_NOTE}",
    )


def _gpu_memory(card: str, gib: int, product: str) -> FlavorPreset:
    return FlavorPreset(
        key=f"aliyun-gpu-mem-{card.lower()}", label=f"Memory-sliced {card} {gib} GiB (aliyun.com/gpu-mem, per GiB)",
        name=f"{card} GPU memory", slug=f"{card.lower()}-gpu-mem", resource_name="aliyun.com/gpu-mem",
        sharing_mode=GPU_MEMORY, gpu_model=f"NVIDIA {card} {gib}GB", fraction=Fraction(1, gib),
        node_labels={"gpushare": "true", "nvidia.com/gpu.product": product}, tolerations=(NVIDIA_TAINT,),
        note=f"The GPU-share scheduler extender: one unit is one GiB of the card's memory. {NVIDIA_RUNTIME_NOTE}",
    )


def _cgpu(card: str, gib: int, product: str, parts: int) -> FlavorPreset:
    memory, core = gib // parts, 100 // parts
    return FlavorPreset(
        key=f"aliyun-cgpu-{card.lower()}", label=f"cGPU {card}, 1/{parts} of a card ({memory} GiB aliyun.com/gpu-mem + {core} % "
                                                f"aliyun.com/gpu-core.percentage)",
        name=f"{card} cGPU 1/{parts}", slug=f"{card.lower()}-cgpu-{parts}", resource_name="aliyun.com/gpu-mem",
        sharing_mode=GPU_MEMORY, gpu_model=f"NVIDIA {card} {gib}GB", fraction=Fraction(1, parts),
        resource_per_unit=memory, extra_resources=(UnitResource("aliyun.com/gpu-core.percentage", core),),
        node_labels={"ack.node.gpu.schedule": "core_mem", "nvidia.com/gpu.product": product}, tolerations=(NVIDIA_TAINT,),
        note=f"Alibaba's cGPU with memory and compute isolation (nodes labelled ack.node.gpu.schedule=core_mem): one unit "
             f"is {memory} GiB of the card's memory with {core} % of its compute, both in the team's quota. "
             f"{NVIDIA_RUNTIME_NOTE}",
    )


PRESETS: tuple[FlavorPreset, ...] = (
    FlavorPreset(
        key="nvidia-h100", label="NVIDIA H100 80GB, whole GPUs (nvidia.com/gpu)", name="H100 80GB", slug="h100-80gb",
        resource_name="nvidia.com/gpu", sharing_mode=EXCLUSIVE, gpu_model="NVIDIA H100 80GB HBM3", fraction=Fraction(1),
        node_labels=_gfd("NVIDIA-H100-80GB-HBM3"), tolerations=(NVIDIA_TAINT,), note=NVIDIA_RUNTIME_NOTE,
    ),
    FlavorPreset(
        key="nvidia-a100", label="NVIDIA A100 80GB, whole GPUs (nvidia.com/gpu)", name="A100 80GB", slug="a100-80gb",
        resource_name="nvidia.com/gpu", sharing_mode=EXCLUSIVE, gpu_model="NVIDIA A100-SXM4-80GB", fraction=Fraction(1),
        node_labels=_gfd("NVIDIA-A100-SXM4-80GB"), tolerations=(NVIDIA_TAINT,), note=NVIDIA_RUNTIME_NOTE,
    ),
    FlavorPreset(
        key="amd-mi300x", label="AMD Instinct MI300X, whole GPUs (amd.com/gpu)", name="MI300X", slug="mi300x",
        resource_name="amd.com/gpu", sharing_mode=EXCLUSIVE, gpu_model="AMD Instinct MI300X", fraction=Fraction(1),
        node_labels={"amd.com/gpu.family": "AI", "amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"},
        tolerations=(AMD_TAINT,), note="Labels from AMD's GPU node labeller.",
    ),
    FlavorPreset(
        key="intel-max-1550", label="Intel Data Center GPU Max 1550, whole GPUs (gpu.intel.com/i915)",
        name="Intel Max 1550", slug="intel-max-1550", resource_name="gpu.intel.com/i915", sharing_mode=EXCLUSIVE,
        gpu_model="Intel Data Center GPU Max 1550", fraction=Fraction(1),
        node_labels={"intel.feature.node.kubernetes.io/gpu": "true", "gpu.intel.com/family": "Max_Series"},
        tolerations=(INTEL_TAINT,), note="Labels from Node Feature Discovery's Intel GPU rules.",
    ),
    _mig("1g.10gb", 1),
    _mig("1g.20gb", 1),
    _mig("2g.20gb", 2),
    _mig("3g.40gb", 3),
    _mig("4g.40gb", 4),
    _mig("7g.80gb", 7),
    _shared(TIME_SLICED, "NVIDIA time-sliced, 4 replicas per GPU (nvidia.com/gpu.shared)", 4),
    _shared(MPS, "NVIDIA MPS, 4 replicas per GPU (nvidia.com/gpu.shared)", 4),
    _gpu_memory("T4", 16, "Tesla-T4"),
    _gpu_memory("A10", 24, "NVIDIA-A10"),
    _cgpu("A10", 24, "NVIDIA-A10", 4),
    FlavorPreset(
        key="hami-t4", label="HAMi vGPU, a quarter of a T4 (nvidia.com/gpu + 4096 MiB nvidia.com/gpumem + 25 % "
                             "nvidia.com/gpucores per vGPU)",
        name="T4 vGPU 1/4", slug="t4-vgpu-4", resource_name="nvidia.com/gpu", sharing_mode=VGPU, gpu_model="NVIDIA T4 16GB",
        fraction=Fraction(1, 4),
        extra_resources=(UnitResource("nvidia.com/gpumem", 4096, per_device=True),
                         UnitResource("nvidia.com/gpucores", 25, per_device=True)),
        node_labels={"gpu": "on", "nvidia.com/gpu.product": "Tesla-T4"}, tolerations=(NVIDIA_TAINT, SHARED_TAINT),
        note="HAMi's device plugin on nodes labelled gpu=on, each card split four ways (deviceSplitCount); its webhook "
             "sends the pods to its scheduler. Memory (MiB) and cores (%) are each vGPU's: a pod of 2 units gets two "
             "such vGPUs. Taint the pool nvidia.com/gpu.shared:NoSchedule so that only vGPU flavors land there. "
             f"{NVIDIA_RUNTIME_NOTE}",
    ),
)

PRESETS = (*PRESETS, FlavorPreset(
    key="cpu-4c-16g", label="CPU only, 4 cores + 16 GiB per unit (no GPU)", name="CPU 4c/16GiB", slug="cpu-4c-16g",
    resource_name="cpu", sharing_mode=CPU, gpu_model="CPU only", fraction=Fraction(0), resource_per_unit=4,
    memory_gib_per_unit=16, node_labels={"gpu-portal.io/pool": "cpu"},
    note="A pool of CPU nodes for notebooks and VS Code workspaces that prepare data: label its nodes "
         "gpu-portal.io/pool=cpu (or name the label your pool has). A unit is 4 cores and 16 GiB; its price on the rate "
         "card is per unit-hour. Kueue leaves CPU and memory alone, so the portal bounds each team's units at launch.",
),)

PRESETS_BY_KEY: Mapping[str, FlavorPreset] = {preset.key: preset for preset in PRESETS}


# --- What each GPU model holds and draws ----------------------------------------------------------


@dataclass(frozen=True)
class GpuModel:
    """One card of a GPU model at most: its memory and its board power limit (TDP)."""

    name: str
    memory_gib: int
    watts: int


def _pattern(words: str) -> re.Pattern[str]:
    return re.compile(rf"\b(?:{words})\b")


# Matched in order against a model's name as a flavor or GPU Feature Discovery writes it (case,
# '-' and '_' aside), so the first match names the card: a PCIe or NVL card before its SXM sibling,
# an 80 GB A100 before the 40 GB one. Figures are NVIDIA's, AMD's and Intel's data sheets.
GPU_MODELS: tuple[tuple[re.Pattern[str], GpuModel], ...] = (
    (_pattern(r"h200"), GpuModel("NVIDIA H200", memory_gib=141, watts=700)),
    (_pattern(r"h100\b.*\bnvl"), GpuModel("NVIDIA H100 NVL", memory_gib=94, watts=400)),
    (_pattern(r"h100\b.*\bpcie"), GpuModel("NVIDIA H100 PCIe", memory_gib=80, watts=350)),
    (_pattern(r"h100"), GpuModel("NVIDIA H100 SXM", memory_gib=80, watts=700)),
    (_pattern(r"a100\b.*\b80 ?gb\b.*\bpcie|a100\b.*\bpcie\b.*\b80 ?gb"),
     GpuModel("NVIDIA A100 80GB PCIe", memory_gib=80, watts=300)),
    (_pattern(r"a100\b.*\bpcie"), GpuModel("NVIDIA A100 40GB PCIe", memory_gib=40, watts=250)),
    (_pattern(r"a100\b.*\b80 ?gb"), GpuModel("NVIDIA A100 80GB SXM", memory_gib=80, watts=400)),
    (_pattern(r"a100"), GpuModel("NVIDIA A100 40GB SXM", memory_gib=40, watts=400)),
    (_pattern(r"a10"), GpuModel("NVIDIA A10", memory_gib=24, watts=150)),
    (_pattern(r"l40s"), GpuModel("NVIDIA L40S", memory_gib=48, watts=350)),
    (_pattern(r"l4"), GpuModel("NVIDIA L4", memory_gib=24, watts=72)),
    (_pattern(r"t4"), GpuModel("NVIDIA T4", memory_gib=16, watts=70)),
    (_pattern(r"mi300x"), GpuModel("AMD Instinct MI300X", memory_gib=192, watts=750)),
    (_pattern(r"max 1550"), GpuModel("Intel Data Center GPU Max 1550", memory_gib=128, watts=600)),
)
# A model the table does not know is taken for the smallest data-centre card (a T4's figures), so
# nothing drawn for it is more than any real card holds or draws.
GENERIC_GPU = GpuModel("a GPU the catalog does not know", memory_gib=16, watts=70)


def gpu_model(name: str) -> GpuModel:
    """The card a flavor's model names (`GENERIC_GPU` for one the table does not know)."""
    words = re.sub(r"[-_\s]+", " ", name.lower())
    return next((model for pattern, model in GPU_MODELS if pattern.search(words)), GENERIC_GPU)


MIG_PROFILE = re.compile(r"mig-(?P<compute>[0-9]+)g\.(?P<memory>[0-9]+)gb$")


@dataclass(frozen=True)
class UnitLimits:
    """What one unit of a flavor holds and draws at most."""

    memory_mib: int
    milliwatts: int


def unit_limits(*, gpu_model_name: str, resource_name: str, fraction: Fraction) -> UnitLimits:
    """One unit of a flavor: a whole GPU holds and draws the card's figures; a MIG slice its
    profile's memory (a 1g.10gb slice, 10 GiB) and its fraction of the card's power; any other
    share of a GPU (time-sliced, MPS, a GiB of memory) its fraction of both. Rounded down."""
    card = gpu_model(gpu_model_name)
    memory = card.memory_gib * fraction
    if profile := MIG_PROFILE.search(resource_name):
        memory = min(Fraction(int(profile["memory"])), Fraction(card.memory_gib))
    return UnitLimits(memory_mib=math.floor(memory * 1024), milliwatts=math.floor(card.watts * 1000 * fraction))

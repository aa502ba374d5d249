"""The simulated door: plausible, deterministic DCGM values for the simulated cluster's pods.

Each running pod that holds GPUs reports by its workload kind's `TelemetryProfile` (the pod's
kind label names the kind; each kind in jobs/kinds/ declares its profile and jobs fills
`KIND_PROFILES`): a steady one keeps its GPUs busy (80-95 %, training), a daily one follows a
day's traffic (10-50 %, an inference server), a busy-then-idle one works its first 20 minutes
and then sits idle (about 1 %, a notebook) holding part of its memory, which is the waste the
portal exists to show. Values are functions of the pod's name, its
start and the minute, so the same question gets the same answer in the web and worker processes.

Memory and power follow the GPUs the pod's node has: the simulated cluster's nodes say what one
unit of theirs holds and draws at most (`UNIT_MEMORY_LABEL`, `UNIT_MILLIWATTS_LABEL`, written from
the catalog's table of GPU models by `tenants.desired.simulated_nodes`), so a T4 share never draws
an H100's power nor holds its memory. A pod draws at most 92 % of its units' power and holds at most
88 % of their memory; the hottest GPU stays at 80 °C or below, under any card's thermal slowdown.

A node whose GPUs are shared (GPU Feature Discovery's `nvidia.com/gpu.replicas` label above 1: a
time-sliced or MPS pool) hands its replicas out as NVIDIA's device plugin does, the lowest free ones
in the order pods start, `replicas` to a card, and reports each card as DCGM does: once per replica
held, every series with the whole card's figures (busy as its pods together are, at most 100 %), so
the real and the simulated door divide a shared card's time the same way.

Tests (and the contract suite) can set a pod's engine active, an XID, or an exporter outage on
the door they hold; nothing else changes its values.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

from portal.hooks import Hook
from portal.kube import gateway
from portal.kube.dra import RESOURCE_API
from portal.metrics.base import (
    ENERGY_SAMPLE_SECONDS,
    DeviceHours,
    EnergyKey,
    GpuReading,
    PodActivity,
    PodKey,
    PodSpan,
    Point,
    WorkloadSeries,
    XidReport,
    range_step,
)

KIND_LABEL = "gpu-portal.io/workload-kind"  # set on every workload pod (tenants.manifests.WORKLOAD_KIND_LABEL)
BUSY_THEN_IDLE_SECONDS = 20 * 60


@dataclass(frozen=True)
class TelemetryProfile:
    """How a kind's pods use their GPUs on the simulated door: the engine's shape over time and
    the share of their units' memory they hold."""

    shape: Literal["steady", "daily", "busy_then_idle"]
    memory_share: float


# A pod of no kind the portal knows (or none) keeps its GPUs busy, as training does.
STEADY = TelemetryProfile("steady", 0.88)
# Each workload kind's profile, by the name its pods carry (jobs fills it from jobs/kinds/).
KindProfile = Callable[[str], "TelemetryProfile | None"]
KIND_PROFILES = Hook[KindProfile]("portal.metrics.simulated.KIND_PROFILES", by="jobs")
FIRST_REPORT_SECONDS = 15  # dcgm-exporter's first scrape of a new pod
SAMPLE_SECONDS = 60
# What one GPU unit of a simulated node holds (MiB) and draws at most (mW): a MIG slice its own
# memory, a share of a GPU its share. Node labels, as GPU Feature Discovery labels real nodes.
UNIT_MEMORY_LABEL = "gpu-portal.io/simulated-unit-memory-mib"
UNIT_MILLIWATTS_LABEL = "gpu-portal.io/simulated-unit-milliwatts"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # GPU Feature Discovery's: how many ways each GPU is shared
# How many ways a simulated node's cards are shared where no GPU Feature Discovery label says so (a
# vGPU layer such as HAMi splits cards by its own config): the simulated cluster's own label.
UNITS_PER_CARD_LABEL = "gpu-portal.io/simulated-units-per-card"
# A node that does not say (not the catalog's): the smallest data-centre card's, as the catalog's
# GENERIC_GPU, so nothing drawn is more than a real card could hold or draw.
DEFAULT_UNIT_MEMORY_MIB = 16 * 1024
DEFAULT_UNIT_MILLIWATTS = 70_000
IDLE_POWER_SHARE = 0.12  # of the power limit, drawn with the engine idle
BUSY_POWER_SHARE = 0.80  # added at 100 % engine active


@dataclass(frozen=True)
class SimulatedPod:
    namespace: str
    name: str
    kind: str
    gpus: int
    started_at: float  # Unix seconds
    mig_profile: str = ""
    running: bool = True  # finished pods still answer for their past, as Prometheus keeps it
    ended_at: float | None = None  # Unix seconds, for a finished pod
    node: str = ""
    unit_memory_mib: int = DEFAULT_UNIT_MEMORY_MIB  # each GPU unit's, as its node says
    unit_milliwatts: int = DEFAULT_UNIT_MILLIWATTS
    replicas: int = 1  # how many ways its node shares each GPU (1: its GPUs are its own)

    def holds(self, at: float) -> bool:
        """Whether it holds its GPUs at `at`: from its start to its end."""
        return self.started_at <= at and (self.running or at <= (self.ended_at or 0.0))


@dataclass(frozen=True)
class _Holding:
    device: str  # the card's (or the pod's own GPU's) UUID
    slots: int  # replicas of it the pod holds (1 on an unshared GPU)


@dataclass(frozen=True)
class _Layout:
    """Which device each pod's units are on, and who holds each device, for one question."""

    holdings: dict[PodKey, tuple[_Holding, ...]]
    holders: dict[str, tuple[tuple[SimulatedPod, int], ...]]


def _layout(pods: Sequence[SimulatedPod]) -> _Layout:
    """A pod on an unshared node has GPUs of its own; on a shared node each unit takes the lowest
    replica not held by a pod still running when it started, `replicas` to a card."""
    holdings: dict[PodKey, tuple[_Holding, ...]] = {}
    holders: dict[str, list[tuple[SimulatedPod, int]]] = {}
    taken: dict[str, dict[int, SimulatedPod]] = {}  # per shared node: replica → its last holder
    for pod in sorted(pods, key=lambda p: (p.started_at, p.name)):
        if pod.replicas <= 1:
            held = tuple(_Holding(f"GPU-sim-{pod.name}-{index}", 1) for index in range(pod.gpus))
        else:
            slots = taken.setdefault(pod.node, {})
            free = (slot for slot in range(100_000) if slot not in slots or not slots[slot].holds(pod.started_at))
            chosen = [next(free) for _ in range(pod.gpus)]
            cards: dict[str, int] = {}
            for slot in chosen:
                slots[slot] = pod
                card = f"GPU-sim-{pod.node}-{slot // pod.replicas}"
                cards[card] = cards.get(card, 0) + 1
            held = tuple(_Holding(card, count) for card, count in cards.items())
        holdings[PodKey(pod.namespace, pod.name)] = held
        for holding in held:
            holders.setdefault(holding.device, []).append((pod, holding.slots))
    return _Layout(holdings, {device: tuple(pods) for device, pods in holders.items()})


@dataclass(frozen=True)
class _Card:
    """A device at one time, as DCGM reports it: busy as its pods together are, the series on it
    (one per replica held) and the pods."""

    percent: float
    series: int
    pods: int


@dataclass
class _Setting:
    engine_active: float | None = None  # percent, replaces the kind's profile
    xid: tuple[int, float] | None = None  # (code, when)


def _noise(*parts: object) -> float:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


# What HAMi's vGPU units ask for beside their devices: each device's memory and compute, not devices.
VGPU_SHARES = ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores")


def _gpus_of(pod: dict) -> int:
    total = 0.0
    for container in pod.get("spec", {}).get("containers", []):
        resources = container.get("resources", {})
        for name, value in (resources.get("limits") or resources.get("requests") or {}).items():
            if name.startswith("nvidia.com/") and name not in VGPU_SHARES:
                try:
                    total += float(value)
                except ValueError:
                    total += 1
    return math.ceil(total)


def _claimed_gpus(claims: list[dict]) -> dict[tuple[str, str], int]:
    """(namespace, claim) -> the NVIDIA GPUs allocated to it: a pod's DRA devices, which DCGM
    reports as it does a device plugin's (the kubelet tells dcgm-exporter of both)."""
    found = {}
    for claim in claims:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        found[claim["metadata"].get("namespace", ""), claim["metadata"]["name"]] = sum(
            1 for result in results if str(result.get("driver", "")).endswith("nvidia.com"))
    return found


def _label_number(labels: dict[str, str], name: str, default: int) -> int:
    value = labels.get(name, "")
    return int(value) if value.isascii() and value.isdigit() else default


def _cluster_pods() -> list[SimulatedPod]:
    """The pods of the cluster the portal uses that hold GPUs, as the exporter saw them, each
    with what its node's GPU units hold and draw."""
    cluster = gateway()
    nodes = {node["metadata"]["name"]: node["metadata"].get("labels") or {} for node in cluster.list("v1", "Node")[0]}
    listed = cluster.list("v1", "Pod")[0]
    # Claims are read only where a pod has some (DRA devices), so a cluster without any reads none.
    claiming = any((pod.get("status") or {}).get("resourceClaimStatuses") for pod in listed)
    claimed = _claimed_gpus(cluster.list(RESOURCE_API, "ResourceClaim")[0]) if claiming else {}
    pods = []
    for pod in listed:
        status = pod.get("status", {})
        if not status.get("startTime"):
            continue
        namespace = pod["metadata"].get("namespace", "")
        gpus = _gpus_of(pod) + sum(claimed.get((namespace, claim.get("resourceClaimName", "")), 0)
                                   for claim in status.get("resourceClaimStatuses") or [])
        if not gpus:
            continue
        meta = pod["metadata"]
        started = dt.datetime.strptime(status["startTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
        node = pod.get("spec", {}).get("nodeName", "")
        labels = nodes.get(node, {})
        pods.append(SimulatedPod(namespace=meta.get("namespace", ""), name=meta["name"],
                                 kind=meta.get("labels", {}).get(KIND_LABEL, ""), gpus=gpus, started_at=started,
                                 running=status.get("phase") == "Running", ended_at=_pod_end(status), node=node,
                                 unit_memory_mib=_label_number(labels, UNIT_MEMORY_LABEL, DEFAULT_UNIT_MEMORY_MIB),
                                 unit_milliwatts=_label_number(labels, UNIT_MILLIWATTS_LABEL, DEFAULT_UNIT_MILLIWATTS),
                                 replicas=max(_label_number(labels, REPLICAS_LABEL,
                                                            _label_number(labels, UNITS_PER_CARD_LABEL, 1)), 1)))
    return pods


def _cluster_clock() -> float:
    cluster = gateway()
    now = getattr(cluster, "now", None)
    return float(now()) if callable(now) else time.time()


@dataclass
class SimulatedMetrics:
    pods: Callable[[], list[SimulatedPod]] = _cluster_pods
    clock: Callable[[], float] = _cluster_clock
    settings: dict[PodKey, _Setting] = field(default_factory=dict)
    outage: bool = False

    # --- What tests set ----------------------------------------------------------------------

    def set_engine_active(self, *, namespace: str, pod: str, percent: float | None) -> None:
        self.settings.setdefault(PodKey(namespace, pod), _Setting()).engine_active = percent

    def set_xid(self, *, namespace: str, pod: str, code: int) -> None:
        self.settings.setdefault(PodKey(namespace, pod), _Setting()).xid = (code, self.clock())

    def set_outage(self, down: bool) -> None:
        self.outage = down

    # --- The values ----------------------------------------------------------------------------

    def percent(self, pod: SimulatedPod, at: float) -> float:
        setting = self.settings.get(PodKey(pod.namespace, pod.name))
        if setting and setting.engine_active is not None:
            return setting.engine_active
        minute = int(at // SAMPLE_SECONDS)
        noise = _noise(pod.namespace, pod.name, minute)
        shape = _profile(pod).shape
        if shape == "busy_then_idle":
            return 40 + 40 * noise if at - pod.started_at < BUSY_THEN_IDLE_SECONDS else 0.2 + 1.6 * noise
        if shape == "daily":
            day = math.sin(2 * math.pi * ((at / 3600) % 24) / 24)
            return 30 + 15 * day + 10 * (noise - 0.5)
        return 80 + 15 * noise

    def _memory_share(self, pod: SimulatedPod) -> float:
        return _profile(pod).memory_share

    def _card(self, layout: _Layout, device: str, at: float, asking: SimulatedPod | None = None) -> _Card:
        """`device` at `at` with the pods holding it then (`asking` counts whenever it is asked about:
        a page may ask of a time its records place in the pod's life)."""
        holding = [(pod, slots) for pod, slots in layout.holders[device] if pod is asking or pod.holds(at)]
        return _Card(percent=min(100.0, sum(self.percent(pod, at) for pod, _ in holding)),
                     series=sum(slots for _, slots in holding) or 1, pods=len(holding))

    def _pod_percent(self, layout: _Layout, pod: SimulatedPod, at: float) -> float:
        """What the exporter reports for the pod: its devices' engine active, one series a replica."""
        holdings = layout.holdings[PodKey(pod.namespace, pod.name)]
        total = sum(h.slots * self._card(layout, h.device, at, pod).percent for h in holdings)
        return total / max(sum(h.slots for h in holdings), 1)

    @staticmethod
    def _watts(pod: SimulatedPod, percent: float) -> float:
        """A device's power at this engine active: idle draw plus a share of its limit (a shared
        card is `replicas` of its node's units)."""
        milliwatts = pod.unit_milliwatts * pod.replicas
        return milliwatts / 1000 * (IDLE_POWER_SHARE + BUSY_POWER_SHARE * min(max(percent, 0), 100) / 100)

    def _memory(self, layout: _Layout, device: str, at: float) -> tuple[int, int]:
        """A device's memory used and total (MiB): what the pods on it hold of its units."""
        holders = layout.holders[device]
        total = holders[0][0].unit_memory_mib * holders[0][0].replicas
        used = sum(slots * int(pod.unit_memory_mib * self._memory_share(pod)) for pod, slots in holders if pod.holds(at))
        return min(used, total), total

    @staticmethod
    def _temperature(percent: float) -> float:
        return 30 + 0.5 * min(max(percent, 0), 100)

    # --- The door ------------------------------------------------------------------------------

    def _scene(self) -> tuple[float, list[SimulatedPod], _Layout]:
        """Now, the pods, and who holds which device: what every answer starts from."""
        pods = self.pods()
        return self.clock(), pods, _layout(pods)

    def engine_active(self, *, namespaces: Collection[str], window: dt.timedelta) -> PodActivity:
        if self.outage:
            return PodActivity(window=window)
        now, pods, layout = self._scene()
        wanted = set(namespaces)
        by_pod = {}
        for pod in pods:
            if not pod.running or pod.namespace not in wanted or now - pod.started_at < FIRST_REPORT_SECONDS:
                continue
            begin = max(pod.started_at, now - window.total_seconds())
            samples = [self._pod_percent(layout, pod, t) for t in _minutes(begin, now)]
            by_pod[PodKey(pod.namespace, pod.name)] = sum(samples) / len(samples)
        return PodActivity(window=window, by_pod=by_pod)

    def workload_series(self, *, namespace: str, pods: Sequence[PodSpan], start: dt.datetime, end: dt.datetime) -> WorkloadSeries:
        step = range_step(start, end)
        if self.outage or not pods:
            return WorkloadSeries(step_seconds=step)
        now, everyone, layout = self._scene()
        known = {p.name: p for p in everyone if p.namespace == namespace}
        series: dict[str, list[Point]] = {name: [] for name in ("engine", "used", "total", "power", "temp", "sharers")}
        t = math.ceil(start.timestamp() / step) * step
        while t <= min(end.timestamp(), now):
            alive = []
            for span in pods:
                ended = span.ended_at.timestamp() if span.ended_at else now
                pod = known.get(span.name)
                if pod is not None and span.started_at.timestamp() + FIRST_REPORT_SECONDS <= t <= ended:
                    alive.append(pod)
            if alive:
                held = [(pod, h, self._card(layout, h.device, t, pod)) for pod in alive
                        for h in layout.holdings[PodKey(pod.namespace, pod.name)]]
                # As the recording rules: each pod's GPUs (a replica each, a device once), then its pods.
                mine = [[(h, card) for p, h, card in held if p is pod] for pod in alive]
                engine = [sum(h.slots * card.percent for h, card in pod) / sum(h.slots for h, _ in pod) for pod in mine if pod]
                memory = [self._memory(layout, device, t) for pod in mine for device in sorted({h.device for h, _ in pod})]
                series["engine"].append(Point(t, sum(engine) / len(engine)))
                series["used"].append(Point(t, sum(used for used, _ in memory)))
                series["total"].append(Point(t, sum(total for _, total in memory)))
                series["power"].append(Point(t, sum(self._watts(pod, card.percent) * h.slots / card.series
                                                    for pod, h, card in held)))
                series["temp"].append(Point(t, max(self._temperature(card.percent) for _, _, card in held)))
                series["sharers"].append(Point(t, max(card.pods for _, _, card in held)))
            t += step
        return WorkloadSeries(step_seconds=step, engine_active=tuple(series["engine"]), memory_used_mib=tuple(series["used"]),
                              memory_total_mib=tuple(series["total"]), power_watts=tuple(series["power"]),
                              temperature_c=tuple(series["temp"]), sharers=tuple(series["sharers"]))

    def gpu_readings(self, *, window: dt.timedelta) -> list[GpuReading]:
        if self.outage:
            return []
        now, pods, layout = self._scene()
        readings = {}
        for pod in sorted(pods, key=lambda p: (p.started_at, p.name)):
            if not pod.running or now - pod.started_at < FIRST_REPORT_SECONDS:
                continue
            times = _minutes(max(pod.started_at, now - window.total_seconds()), now)
            for holding in layout.holdings[PodKey(pod.namespace, pod.name)]:
                if holding.device in readings:  # a shared card, reported already with its first pod
                    continue
                engine = sum(self._card(layout, holding.device, t, pod).percent for t in times) / len(times)
                readings[holding.device] = GpuReading(
                    node=pod.node, gpu=holding.device, namespace=pod.namespace, pod=pod.name, engine_active=engine,
                    temperature_c=self._temperature(self._card(layout, holding.device, now, pod).percent))
        return list(readings.values())

    def device_hours(self, *, namespaces: Collection[str], start: dt.datetime, end: dt.datetime) -> dict[str, DeviceHours]:
        if self.outage:
            return {}
        now, pods, layout = self._scene()
        wanted = set(namespaces)
        busy: dict[str, float] = {}
        covered: dict[str, float] = {}
        for pod in pods:
            if pod.namespace not in wanted:
                continue
            until = now if pod.running else pod.ended_at
            lower, upper = max(pod.started_at + FIRST_REPORT_SECONDS, start.timestamp()), min(until or 0, end.timestamp())
            samples = _minutes(lower, upper) if upper > lower else []
            if not samples:
                continue
            if pod.replicas <= 1:  # GPUs of its own: share 1, the pod's own busy
                pod_busy = sum(self.percent(pod, t) for t in samples) / 100 * pod.gpus
                pod_covered = float(len(samples) * pod.gpus)
            else:  # each replica at its share of its card (1 / the replicas held on it), and of its busy
                pod_busy = pod_covered = 0.0
                for t in samples:
                    for holding in layout.holdings[PodKey(pod.namespace, pod.name)]:
                        card = self._card(layout, holding.device, t, pod)
                        pod_covered += holding.slots / card.series
                        pod_busy += card.percent / 100 * holding.slots / card.series
            busy[pod.namespace] = busy.get(pod.namespace, 0.0) + pod_busy * SAMPLE_SECONDS / 3600
            covered[pod.namespace] = covered.get(pod.namespace, 0.0) + pod_covered * SAMPLE_SECONDS / 3600
        return {namespace: DeviceHours(busy=busy[namespace], covered=hours) for namespace, hours in covered.items()}

    def energy_hours(self, *, namespaces: Collection[str], start: dt.datetime, end: dt.datetime) -> dict[EnergyKey, float]:
        if self.outage:
            return {}
        now, pods, layout = self._scene()
        wanted = set(namespaces)
        found: dict[EnergyKey, float] = {}
        hour = start
        while hour < end:
            for t in range(int(hour.timestamp()) + ENERGY_SAMPLE_SECONDS, int(hour.timestamp()) + 3601, ENERGY_SAMPLE_SECONDS):
                if t > now:
                    break
                for pod in pods:
                    if pod.namespace not in wanted or not pod.holds(t) or t - pod.started_at < FIRST_REPORT_SECONDS:
                        continue
                    watts = 0.0
                    for holding in layout.holdings[PodKey(pod.namespace, pod.name)]:
                        card = self._card(layout, holding.device, t, pod)
                        watts += self._watts(pod, card.percent) * holding.slots / card.series
                    key = EnergyKey(pod.namespace, hour)
                    found[key] = found.get(key, 0.0) + watts * ENERGY_SAMPLE_SECONDS / 3600
            hour += dt.timedelta(hours=1)
        return found

    def xid_errors(self, *, namespaces: Collection[str], window: dt.timedelta) -> list[XidReport]:
        if self.outage:
            return []
        now, pods, layout = self._scene()
        running = {PodKey(p.namespace, p.name): p for p in pods if p.running}
        reports = []
        for key, setting in sorted(self.settings.items()):
            if setting.xid is None or key.namespace not in namespaces or key not in running:
                continue
            code, at = setting.xid
            if now - at <= window.total_seconds():
                holdings = layout.holdings[key]
                reports.append(XidReport(namespace=key.namespace, pod=key.pod,
                                         gpu=holdings[0].device if holdings else f"GPU-sim-{key.pod}-0",
                                         node=running[key].node, code=code))
        return reports


def _pod_end(status: dict) -> float | None:
    for container in status.get("containerStatuses") or []:
        finished = (container.get("state", {}).get("terminated") or {}).get("finishedAt")
        if finished:
            return dt.datetime.strptime(finished, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    return None


def _minutes(begin: float, end: float) -> list[float]:
    """The sample times of a window, one a minute, ending at its end (at least one)."""
    times: list[float] = []
    t = end
    while t >= begin and len(times) < 100_000:
        times.append(t)
        t -= SAMPLE_SECONDS
    return times or [end]


def _profile(pod: SimulatedPod) -> TelemetryProfile:
    return KIND_PROFILES.call(pod.kind) or STEADY

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
from portal.metrics.base import (
    DeviceHours,
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


@dataclass
class _Setting:
    engine_active: float | None = None  # percent, replaces the kind's profile
    xid: tuple[int, float] | None = None  # (code, when)


def _noise(*parts: object) -> float:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


def _gpus_of(pod: dict) -> int:
    total = 0.0
    for container in pod.get("spec", {}).get("containers", []):
        resources = container.get("resources", {})
        for name, value in (resources.get("limits") or resources.get("requests") or {}).items():
            if name.startswith("nvidia.com/"):
                try:
                    total += float(value)
                except ValueError:
                    total += 1
    return math.ceil(total)


def _label_number(labels: dict[str, str], name: str, default: int) -> int:
    value = labels.get(name, "")
    return int(value) if value.isascii() and value.isdigit() else default


def _cluster_pods() -> list[SimulatedPod]:
    """The pods of the cluster the portal uses that hold GPUs, as the exporter saw them, each
    with what its node's GPU units hold and draw."""
    cluster = gateway()
    nodes = {node["metadata"]["name"]: node["metadata"].get("labels") or {} for node in cluster.list("v1", "Node")[0]}
    pods = []
    for pod in cluster.list("v1", "Pod")[0]:
        status = pod.get("status", {})
        if not status.get("startTime"):
            continue
        gpus = _gpus_of(pod)
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
                                 unit_milliwatts=_label_number(labels, UNIT_MILLIWATTS_LABEL, DEFAULT_UNIT_MILLIWATTS)))
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

    @staticmethod
    def _watts(pod: SimulatedPod, percent: float) -> float:
        """One GPU unit's power at this engine active: idle draw plus a share of its limit."""
        return pod.unit_milliwatts / 1000 * (IDLE_POWER_SHARE + BUSY_POWER_SHARE * min(max(percent, 0), 100) / 100)

    @staticmethod
    def _temperature(percent: float) -> float:
        return 30 + 0.5 * min(max(percent, 0), 100)

    # --- The door ------------------------------------------------------------------------------

    def engine_active(self, *, namespaces: Collection[str], window: dt.timedelta) -> PodActivity:
        if self.outage:
            return PodActivity(window=window)
        now = self.clock()
        wanted = set(namespaces)
        by_pod = {}
        for pod in self.pods():
            if not pod.running or pod.namespace not in wanted or now - pod.started_at < FIRST_REPORT_SECONDS:
                continue
            begin = max(pod.started_at, now - window.total_seconds())
            samples = [self.percent(pod, t) for t in _minutes(begin, now)]
            by_pod[PodKey(pod.namespace, pod.name)] = sum(samples) / len(samples)
        return PodActivity(window=window, by_pod=by_pod)

    def workload_series(self, *, namespace: str, pods: Sequence[PodSpan], start: dt.datetime, end: dt.datetime) -> WorkloadSeries:
        step = range_step(start, end)
        if self.outage or not pods:
            return WorkloadSeries(step_seconds=step)
        known = {p.name: p for p in self.pods() if p.namespace == namespace}
        now = self.clock()
        series: dict[str, list[Point]] = {name: [] for name in ("engine", "used", "total", "power", "temp")}
        t = math.ceil(start.timestamp() / step) * step
        while t <= min(end.timestamp(), now):
            alive = []
            for span in pods:
                ended = span.ended_at.timestamp() if span.ended_at else now
                pod = known.get(span.name)
                if pod is not None and span.started_at.timestamp() + FIRST_REPORT_SECONDS <= t <= ended:
                    alive.append(pod)
            if alive:
                gpu_values = [(pod, self.percent(pod, t)) for pod in alive for _ in range(pod.gpus)]
                engine = sum(v for _, v in gpu_values) / len(gpu_values)
                series["engine"].append(Point(t, engine))
                series["used"].append(Point(t, sum(int(p.unit_memory_mib * self._memory_share(p)) for p, _ in gpu_values)))
                series["total"].append(Point(t, sum(p.unit_memory_mib for p, _ in gpu_values)))
                series["power"].append(Point(t, sum(self._watts(p, v) for p, v in gpu_values)))
                series["temp"].append(Point(t, max(self._temperature(v) for _, v in gpu_values)))
            t += step
        return WorkloadSeries(step_seconds=step, engine_active=tuple(series["engine"]), memory_used_mib=tuple(series["used"]),
                              memory_total_mib=tuple(series["total"]), power_watts=tuple(series["power"]),
                              temperature_c=tuple(series["temp"]))

    def gpu_readings(self, *, window: dt.timedelta) -> list[GpuReading]:
        if self.outage:
            return []
        now = self.clock()
        readings = []
        for pod in self.pods():
            if not pod.running or now - pod.started_at < FIRST_REPORT_SECONDS:
                continue
            samples = [self.percent(pod, t) for t in _minutes(max(pod.started_at, now - window.total_seconds()), now)]
            engine = sum(samples) / len(samples)
            temperature = self._temperature(self.percent(pod, now))
            for index in range(pod.gpus):
                readings.append(GpuReading(node=pod.node, gpu=f"GPU-sim-{pod.name}-{index}", namespace=pod.namespace,
                                           pod=pod.name, engine_active=engine, temperature_c=temperature))
        return readings

    def device_hours(self, *, namespaces: Collection[str], start: dt.datetime, end: dt.datetime) -> dict[str, DeviceHours]:
        if self.outage:
            return {}
        now = self.clock()
        wanted = set(namespaces)
        busy: dict[str, float] = {}
        covered: dict[str, float] = {}
        for pod in self.pods():
            if pod.namespace not in wanted:
                continue
            until = now if pod.running else pod.ended_at
            lower, upper = max(pod.started_at + FIRST_REPORT_SECONDS, start.timestamp()), min(until or 0, end.timestamp())
            samples = _minutes(lower, upper) if upper > lower else []
            if not samples:
                continue
            device_hours = SAMPLE_SECONDS / 3600 * pod.gpus
            busy[pod.namespace] = busy.get(pod.namespace, 0.0) + sum(self.percent(pod, t) for t in samples) / 100 * device_hours
            covered[pod.namespace] = covered.get(pod.namespace, 0.0) + len(samples) * device_hours
        return {namespace: DeviceHours(busy=busy[namespace], covered=hours) for namespace, hours in covered.items()}

    def xid_errors(self, *, namespaces: Collection[str], window: dt.timedelta) -> list[XidReport]:
        if self.outage:
            return []
        now = self.clock()
        running = {PodKey(p.namespace, p.name): p for p in self.pods() if p.running}
        reports = []
        for key, setting in sorted(self.settings.items()):
            if setting.xid is None or key.namespace not in namespaces or key not in running:
                continue
            code, at = setting.xid
            if now - at <= window.total_seconds():
                reports.append(XidReport(namespace=key.namespace, pod=key.pod, gpu=f"GPU-sim-{key.pod}-0",
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

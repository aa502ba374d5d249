"""The metrics door's interface: what the portal asks of GPU telemetry, in its own terms.

The methods are domain questions (how busy was each pod lately, one workload's charts, which
GPUs reported an XID), each answered with one query, so that the simulated door never has to
evaluate PromQL and no page or sweep ever sends one query per workload.

Metric names and labels are dcgm-exporter's: per GPU (or MIG instance, with `GPU_I_PROFILE` and
`GPU_I_ID`), with the `namespace`, `pod` and `container` of the pod that holds it.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Protocol

ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # a ratio 0..1; the one that works for MIG slices
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent; whole GPUs only
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
FB_FREE = "DCGM_FI_DEV_FB_FREE"  # MiB
POWER = "DCGM_FI_DEV_POWER_USAGE"  # W
TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP"  # °C
XID = "DCGM_FI_DEV_XID_ERRORS"  # the code of the last XID error the GPU reported (0: none yet)

# Prometheus refuses a range query of more than 11,000 points per series; charts need far fewer.
MAX_POINTS = 11_000
CHART_POINTS = 720
NICE_STEPS = (15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


class MetricsError(Exception):
    """Telemetry could not be read. The message says why in words; callers show "no metrics"."""

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


@dataclass(frozen=True, order=True)
class PodKey:
    namespace: str
    pod: str


@dataclass(frozen=True)
class PodSpan:
    """One pod of a workload and when it held its GPUs (ended_at None: still running)."""

    name: str
    started_at: dt.datetime
    ended_at: dt.datetime | None = None


@dataclass(frozen=True)
class Point:
    at: float  # Unix seconds
    value: float


@dataclass(frozen=True)
class WorkloadSeries:
    """One workload's telemetry over a period, one point per step, each figure taken per pod and
    then over its pods (what the per-pod recording rules hold): engine active in percent (averaged
    over a pod's GPUs, then its pods), frame-buffer memory used and total in MiB (summed over each
    pod's devices, a device once however many replicas of it the pod holds; a card two of its pods
    share counts for each), power in W (summed) and the hottest GPU's temperature in °C. On a
    shared GPU (time-sliced, MPS) the engine, memory and temperature are the card's (DCGM has no
    per-process figures); power is the workload's share, the card's divided among the pods
    (replicas) on it; `sharers` is the most pods on any of its GPUs (1: it had them to itself)."""

    step_seconds: int
    engine_active: tuple[Point, ...] = ()
    memory_used_mib: tuple[Point, ...] = ()
    memory_total_mib: tuple[Point, ...] = ()
    power_watts: tuple[Point, ...] = ()
    temperature_c: tuple[Point, ...] = ()
    sharers: tuple[Point, ...] = ()

    @property
    def has_data(self) -> bool:
        return bool(self.engine_active or self.memory_used_mib or self.power_watts or self.temperature_c)


@dataclass(frozen=True)
class XidReport:
    """A GPU held by a pod whose last XID changed to `code` within the window asked about."""

    namespace: str
    pod: str
    gpu: str  # the GPU's UUID (or index when the exporter gives none)
    node: str
    code: int
    mig_instance: str = ""


@dataclass(frozen=True)
class GpuReading:
    """One GPU (or MIG instance) now: its engine active over the window (percent; None where the
    exporter gives none), its temperature, and the pod holding it (empty: nobody)."""

    node: str
    gpu: str
    mig_instance: str = ""
    namespace: str = ""
    pod: str = ""
    engine_active: float | None = None
    temperature_c: float | None = None


@dataclass(frozen=True)
class PodActivity:
    """Engine active averaged over a window for each pod with fresh telemetry. A pod missing
    from `by_pod` has no metrics: the exporter is down or the pod has just started."""

    window: dt.timedelta
    by_pod: dict[PodKey, float] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceHours:
    """A namespace's GPU time as telemetry saw it: `covered` device-hours reported engine active
    at all, `busy` of them were engine active (a device 50 % busy for 2 h is 2 covered, 1 busy).
    A shared device counts at each pod's share (a card two pods share for 2 h is 1 covered each).
    Hours the exporter did not report are in neither: nobody knows whether they were idle."""

    busy: float
    covered: float


@dataclass(frozen=True, order=True)
class EnergyKey:
    namespace: str
    hour: dt.datetime  # the hour's start


ENERGY_SAMPLE_SECONDS = 60  # power is read once a minute for energy, each sample standing for its minute


def kwh(watt_hours: Decimal) -> Decimal:
    """The one rounding of GPU energy, on every surface: kWh to two places, half-even."""
    return (watt_hours / 1000).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)


class Metrics(Protocol):
    """What the portal may ask of GPU telemetry. Every method is one query."""

    def engine_active(self, *, namespaces: Collection[str], window: dt.timedelta) -> PodActivity:
        """Each pod's engine active (percent, averaged over its GPUs and the window), for pods
        in these namespaces that reported within the last scrape or so."""

    def workload_series(self, *, namespace: str, pods: Sequence[PodSpan], start: dt.datetime, end: dt.datetime) -> WorkloadSeries:
        """The charts of one workload's pods between start and end, at `range_step(start, end)`."""

    def xid_errors(self, *, namespaces: Collection[str], window: dt.timedelta) -> list[XidReport]:
        """GPUs held by pods in these namespaces whose XID code changed within the window."""

    def gpu_readings(self, *, window: dt.timedelta) -> list[GpuReading]:
        """Every GPU the exporters report now (for the capacity page), whoever holds it."""

    def device_hours(self, *, namespaces: Collection[str], start: dt.datetime, end: dt.datetime) -> dict[str, DeviceHours]:
        """Per namespace, the device-hours (GPUs or MIG instances) its pods reported between start
        and end, and how many of them were busy: engine active summed over devices and hours."""

    def energy_hours(self, *, namespaces: Collection[str], start: dt.datetime, end: dt.datetime) -> dict[EnergyKey, float]:
        """Per namespace and whole hour in [start, end) (both on the hour), the watt-hours its pods'
        GPUs drew: power sampled each minute, each pod's part of its card's (a card's draw split
        among the series that report it: MIG instances, or the pods on a shared card). Hours a
        namespace drew nothing are left out."""


def range_step(start: dt.datetime, end: dt.datetime, *, points: int = CHART_POINTS) -> int:
    """The smallest round step (seconds) that draws start..end in at most `points` points, so
    30 days stay far under Prometheus's 11,000 points per series."""
    span = max((end - start).total_seconds(), 1)
    wanted = span / min(points, MAX_POINTS - 1)
    for step in NICE_STEPS:
        if step >= wanted:
            return step
    return int(math.ceil(wanted / 86400) * 86400)

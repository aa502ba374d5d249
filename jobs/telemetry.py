"""A workload's GPU telemetry for its page: four server-drawn SVG charts over its life (engine
active, memory used of total, power, temperature) from one metrics query, and a plain verdict."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.utils import timezone

from jobs import idle_policy
from jobs.models import IdleDefaults, RunInterval, Workload
from portal.metrics import MetricsError, PodKey, PodSpan, Point, metrics
from portal.metrics.base import WorkloadSeries, kwh

WIDTH, HEIGHT = 600, 120
SHARED_MODES = ("time-sliced", "mps")
# Fewer samples than this draw a dot or a stub, not a chart (a minute at the 15 s step): the page
# says when the charts come instead of showing empty boxes.
MIN_CHART_POINTS = 5


@dataclass(frozen=True)
class Chart:
    title: str
    path: str  # the SVG polyline's points, in a WIDTH × HEIGHT box
    latest: str
    scale: str  # what the top of the box stands for


@dataclass(frozen=True)
class WorkloadTelemetry:
    charts: tuple[Chart, ...] = ()
    verdict: str = ""
    shared: str = ""  # what the figures are on a shared GPU: the card's, and its share of the power
    unavailable: str = ""  # why there are no charts at all
    early: str = ""  # why the charts are not drawn yet (too few samples), shown with the latest figures
    kwh: Decimal | None = None  # the energy its GPUs drew (its part of a shared card's), from the power chart

    @property
    def width(self) -> int:
        return WIDTH

    @property
    def height(self) -> int:
        return HEIGHT


def _polyline(points: Sequence[Point], *, start: float, end: float, top: float) -> str:
    span = max(end - start, 1.0)
    top = max(top, 1e-9)
    return " ".join(f"{(p.at - start) / span * WIDTH:.1f},{HEIGHT - min(p.value, top) / top * HEIGHT:.1f}" for p in points)


def _verdict(engine: Sequence[Point], *, running: bool, threshold: int) -> str:
    if running:
        trailing = 0
        for point in reversed(engine):
            if point.value >= threshold:
                break
            trailing += 1
        if trailing >= 2:
            # From the first idle sample to the last: what the samples show, whatever their phase.
            idle_seconds = engine[-1].at - engine[-trailing].at
            return f"Idle for {int(idle_seconds // 60)} minutes: its GPUs under {threshold} % engine active."
    average = sum(p.value for p in engine) / len(engine)
    return f"Busy {average:.0f} % of its GPU time (engine active, averaged over its life)."


def workload_telemetry(*, workload: Workload, now: dt.datetime | None = None) -> WorkloadTelemetry:
    if workload.flavor.is_cpu:
        return WorkloadTelemetry(unavailable=f"It runs on {workload.flavor.name}, CPUs without a GPU: there is no GPU use "
                                             "to show.")
    intervals = list(workload.intervals.all())
    if not intervals:
        return WorkloadTelemetry(unavailable="It has not run on a GPU yet.")
    now = now or timezone.now()
    start = min(i.started_at for i in intervals)
    end = min(max((i.ended_at or now) for i in intervals), now)
    spans = [PodSpan(i.pod_name, started_at=i.started_at, ended_at=i.ended_at) for i in intervals]
    try:
        series = metrics().workload_series(namespace=workload.team.namespace, pods=spans, start=start, end=end)
    except MetricsError as error:
        return WorkloadTelemetry(unavailable=f"Telemetry could not be read: {error}.")
    if not series.engine_active:
        return WorkloadTelemetry(unavailable="No metrics: the GPU exporter has not reported this workload's pods.")
    first, last = start.timestamp(), end.timestamp()
    memory = [Point(u.at, 100 * u.value / t.value) for u, t in zip(series.memory_used_mib, series.memory_total_mib, strict=False)
              if t.value]
    charts = [Chart("GPU engine active", _polyline(series.engine_active, start=first, end=last, top=100),
                    f"{series.engine_active[-1].value:.0f} %", "100 %")]
    if memory:
        used, total = series.memory_used_mib[-1].value / 1024, series.memory_total_mib[-1].value / 1024
        charts.append(Chart("Memory used of total", _polyline(memory, start=first, end=last, top=100),
                            f"{used:.1f} of {total:.1f} GiB", "100 %"))
    if series.power_watts:
        top = max(p.value for p in series.power_watts) * 1.1
        charts.append(Chart("Power", _polyline(series.power_watts, start=first, end=last, top=top),
                            f"{series.power_watts[-1].value:.0f} W", f"{top:.0f} W"))
    if series.temperature_c:
        charts.append(Chart("Hottest GPU's temperature", _polyline(series.temperature_c, start=first, end=last, top=100),
                            f"{series.temperature_c[-1].value:.0f} °C", "100 °C"))
    threshold = idle_policy.effective_policy(workload.template_version, IdleDefaults.current()).threshold_percent
    shared = _shared(workload, series)
    running = workload.phase == Workload.Phase.RUNNING
    early = ""
    if len(series.engine_active) < MIN_CHART_POINTS:
        early = ("Charts appear after its first minutes of running." if running
                 else "It ran too briefly for charts: these are its last figures.")
    drawn = kwh(Decimal(sum(point.value for point in series.power_watts) * series.step_seconds / 3600))
    return WorkloadTelemetry(charts=tuple(charts), shared=shared, early=early, verdict=_verdict(
        series.engine_active, running=running, threshold=threshold), kwh=drawn if series.power_watts else None)


def _shared(workload: Workload, series: WorkloadSeries) -> str:
    """What the charts of a workload on a shared GPU are: the card's figures, as DCGM reports a
    time-sliced or MPS card whole to each pod on it, and its share of the card's power."""
    most = int(max((point.value for point in series.sharers), default=1))
    mode = workload.flavor.get_sharing_mode_display().lower()
    if most > 1:
        return (f"Its GPU is shared ({mode}), with up to {most} pods on it: engine active, memory and temperature are the "
                "whole card's, as DCGM has no figures per process, so its own use cannot be told from its neighbours'; "
                "power is its share of the card's, divided among the pods by the replicas each holds.")
    if workload.flavor.sharing_mode in SHARED_MODES:
        return (f"{workload.flavor.name} GPUs are shared ({mode}), but no other pod was on this workload's card: "
                "the figures are the card's, and all of them its own.")
    return ""


@dataclass(frozen=True)
class GpuUse:
    """A running workload's last 5 minutes of GPU engine active, for lists (None: no metrics)."""

    percent: float | None
    shared: bool  # the figure is the whole shared GPU's

    def __str__(self) -> str:
        return "no metrics" if self.percent is None else f"{self.percent:.0f} %"


def gpu_use(*, workloads: Sequence[Workload]) -> dict[int, GpuUse]:
    """Each running workload's GPU use: one query for all of them, one for their pods."""
    running = [w for w in workloads if w.phase == Workload.Phase.RUNNING]
    if not running:
        return {}
    pods = RunInterval.objects.filter(workload__in=running, ended_at__isnull=True).values_list("workload_id", "pod_name")
    try:
        by_pod = metrics().engine_active(namespaces={w.team.namespace for w in running},
                                         window=dt.timedelta(minutes=5)).by_pod
    except MetricsError:
        by_pod = {}
    namespace = {w.pk: w.team.namespace for w in running}
    values: dict[int, list[float]] = {w.pk: [] for w in running}
    for workload_id, pod in pods:
        found = by_pod.get(PodKey(namespace[workload_id], pod))
        if found is not None:
            values[workload_id].append(found)
    return {w.pk: GpuUse(sum(values[w.pk]) / len(values[w.pk]) if values[w.pk] else None,
                        shared=w.flavor.sharing_mode in SHARED_MODES) for w in running}

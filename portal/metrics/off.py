"""No telemetry configured: a real cluster without PROMETHEUS_URL. Every answer is "no metrics",
so nothing is judged idle and the pages say telemetry is not set up."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence

from portal.metrics.base import DeviceHours, EnergyKey, GpuReading, PodActivity, PodSpan, WorkloadSeries, XidReport, range_step


class NoMetrics:
    def engine_active(self, *, namespaces: Collection[str], window: dt.timedelta) -> PodActivity:
        return PodActivity(window=window)

    def workload_series(self, *, namespace: str, pods: Sequence[PodSpan], start: dt.datetime, end: dt.datetime) -> WorkloadSeries:
        return WorkloadSeries(step_seconds=range_step(start, end))

    def xid_errors(self, *, namespaces: Collection[str], window: dt.timedelta) -> list[XidReport]:
        return []

    def device_hours(self, *, namespaces: Collection[str], start: dt.datetime, end: dt.datetime) -> dict[str, DeviceHours]:
        return {}

    def gpu_readings(self, *, window: dt.timedelta) -> list[GpuReading]:
        return []

    def energy_hours(self, *, namespaces: Collection[str], start: dt.datetime, end: dt.datetime) -> dict[EnergyKey, float]:
        return {}

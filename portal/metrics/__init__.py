"""The one door to GPU telemetry (DCGM metrics through Prometheus). Nothing else queries Prometheus.

    from portal.metrics import metrics
    activity = metrics().engine_active(namespaces=["vision"], window=dt.timedelta(minutes=30))

`metrics()` returns the implementation settings choose (`PORTAL_METRICS`): the real Prometheus
(`PROMETHEUS_URL`), the simulated one that follows the simulated cluster's pods (the embedded
default), or none ("off": every answer is "no metrics").
"""

from portal.metrics.base import (
    DeviceHours,
    EnergyKey,
    Metrics,
    MetricsError,
    PodActivity,
    PodKey,
    PodSpan,
    Point,
    WorkloadSeries,
    XidReport,
    range_step,
)
from portal.metrics.select import metrics, reset_metrics

__all__ = [
    "DeviceHours",
    "EnergyKey",
    "Metrics",
    "MetricsError",
    "PodActivity",
    "PodKey",
    "PodSpan",
    "Point",
    "WorkloadSeries",
    "XidReport",
    "metrics",
    "range_step",
    "reset_metrics",
]

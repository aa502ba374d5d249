from __future__ import annotations

import threading

from django.conf import settings

from portal.metrics.base import Metrics

_lock = threading.Lock()
_metrics: Metrics | None = None


def metrics() -> Metrics:
    """The process's metrics door, made once (the real one keeps a connection pool)."""
    global _metrics
    with _lock:
        if _metrics is None:
            if settings.PORTAL_METRICS == "prometheus":
                from portal.metrics.prometheus import PrometheusMetrics

                _metrics = PrometheusMetrics.from_settings()
            elif settings.PORTAL_METRICS == "simulated":
                from portal.metrics.simulated import SimulatedMetrics

                _metrics = SimulatedMetrics()
            else:
                from portal.metrics.off import NoMetrics

                _metrics = NoMetrics()
        return _metrics


def reset_metrics(replacement: Metrics | None = None) -> None:
    """Drops the cached door (tests point the portal at another Prometheus with it)."""
    global _metrics
    with _lock:
        _metrics = replacement

from __future__ import annotations

import threading

from django.conf import settings

from portal.kube.base import Gateway

_lock = threading.Lock()
_gateway: Gateway | None = None


def gateway() -> Gateway:
    """The process's gateway, made once (the real one keeps a connection pool and rate limit)."""
    global _gateway
    with _lock:
        if _gateway is None:
            if settings.PORTAL_CLUSTER == "kubernetes":
                from portal.kube.kubernetes import KubernetesGateway

                _gateway = KubernetesGateway.from_settings()
            else:
                from portal.kube.simulated import SimulatedGateway

                _gateway = SimulatedGateway()
        return _gateway


def reset_gateway(replacement: Gateway | None = None) -> None:
    """Drops the cached gateway (tests point the portal at another cluster with it)."""
    global _gateway
    with _lock:
        _gateway = replacement

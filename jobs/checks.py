"""A site stays on one queue backend while workloads run on it: switching PORTAL_QUEUE_BACKEND with
workloads still active on the other would leave them unread, unstoppable by their queue and
unbilled. `manage.py migrate` (the chart's migrate job runs it before a release starts, so a
release with the switch never starts) and `manage.py check --database default` refuse it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.core.checks import CheckMessage, Error, Tags, register
from django.db import DatabaseError

from jobs.models import Workload
from tenants import queueing

SWITCH_WITH_ACTIVE_WORKLOADS = "jobs.E001"


def switch_problem() -> str:
    """Why the site cannot run on its queue backend yet: workloads still active on another; "" when none is."""
    others = (Workload.objects.filter(phase__in=Workload.ACTIVE_PHASES)
              .exclude(queue_backend=settings.PORTAL_QUEUE_BACKEND).values_list("queue_backend", flat=True))
    found = sorted(set(others))
    if not found:
        return ""
    count = Workload.objects.filter(phase__in=Workload.ACTIVE_PHASES, queue_backend__in=found).count()
    labels = " and ".join(queueing.BACKENDS[name]().label if name in queueing.BACKENDS else name for name in found)
    return (f"PORTAL_QUEUE_BACKEND is “{settings.PORTAL_QUEUE_BACKEND}”, but {count} workload"
            f"{'s' if count != 1 else ''} launched on {labels} {'are' if count != 1 else 'is'} still active. Drain them "
            "first (stop them, or let them finish) on the backend they run on, then switch.")


@register(Tags.database)
def queue_backend_switch(app_configs: Sequence[AppConfig] | None, databases: Sequence[str] | None = None,
                         **kwargs: Any) -> list[CheckMessage]:
    if not databases:
        return []
    try:
        problem = switch_problem()
    except DatabaseError:  # before the column's migration: no workload records a backend yet
        return []
    return [Error(problem, hint="docs/queue-backends.md says how a site moves.", id=SWITCH_WITH_ACTIVE_WORKLOADS)] \
        if problem else []


OPEN_GATEWAY_ROUTES = "jobs.W002"
UNGATED_INGRESS_CLASS = "jobs.W003"


@register(Tags.security, deploy=True)
def endpoints_gated(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[CheckMessage]:
    """Workload endpoints that nothing in the portal's configuration puts behind its gate: the
    gate only works where the router asks it, and a router that ignores the ask lets everyone in."""
    if not settings.PORTAL_INGRESS_DOMAIN:
        return []
    if settings.PORTAL_ENDPOINT_ROUTES == "gateway":
        if settings.PORTAL_GATEWAY_AUTH_SERVICE is None:
            return [checks.Warning(
                "Workload HTTPRoutes carry no ExternalAuth filter (PORTAL_GATEWAY_AUTH_SERVICE is empty): inference "
                "servers and notebooks are open to anyone who reaches the Gateway unless the Gateway itself sends every "
                "request to the portal's gate, /auth/gateway/ followed by the request's path.",
                hint="Set PORTAL_GATEWAY_AUTH_SERVICE to the portal's Service (namespace/name:port), or attach the "
                     "gate at the Gateway; docs/operator.md, Workload endpoints.", id=OPEN_GATEWAY_ROUTES)]
        return []
    if "nginx" not in settings.PORTAL_INGRESS_CLASS.lower():
        return [checks.Warning(
            f"PORTAL_INGRESS_CLASS is “{settings.PORTAL_INGRESS_CLASS or '(the default class)'}”: workload Ingresses "
            "reach the portal's gate through ingress-nginx's external authentication annotations, which other "
            "controllers ignore, so inference servers and notebooks would be open to anyone.",
            hint="Use ingress-nginx, or route through a Gateway (PORTAL_ENDPOINT_ROUTES=gateway).",
            id=UNGATED_INGRESS_CLASS)]
    return []

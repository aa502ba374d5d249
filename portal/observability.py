"""Request ids, the portal's own Prometheus metrics, and the log filter that ties them together."""

from __future__ import annotations

import contextvars
import hmac
import logging
import re
import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.registry import Collector

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")

HTTP_REQUESTS = Counter(
    "portal_http_requests_total", "HTTP requests answered, by route and status class.", ["route", "method", "status"]
)
HTTP_LATENCY = Histogram(
    "portal_http_request_duration_seconds", "Time to answer an HTTP request, by route.", ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
QUOTA_DECISIONS = Counter("portal_quota_decisions_total", "Quota requests decided, by outcome.", ["outcome"])


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class RequestIdMiddleware:
    """Takes the proxy's X-Request-ID when it is sane, else makes one; logs and the response carry it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-ID", "")
        request_id = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex
        token = request_id_var.set(request_id)
        request.request_id = request_id  # type: ignore[attr-defined]
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response["X-Request-ID"] = request_id
        return response


class MetricsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        # Label by route name, never by raw path: ids in paths would explode the series.
        route = (match.view_name if match else "") or "unmatched"
        HTTP_LATENCY.labels(route).observe(time.perf_counter() - started)
        HTTP_REQUESTS.labels(route, request.method, f"{response.status_code // 100}xx").inc()
        return response


def metrics_refusal(request: HttpRequest) -> HttpResponse | None:
    """Why this caller may not read /metrics, as the response to send; None when it may.

    With METRICS_TOKEN set, only `Authorization: Bearer <token>` reads them. Without it they are
    open in the embedded setup and closed to everyone in production: a loopback exception would
    let every outside caller in through a reverse proxy on the same host.
    """
    token: str = settings.METRICS_TOKEN
    if not token:
        if settings.PRODUCTION:
            return HttpResponse(
                "Metrics are off: set METRICS_TOKEN and scrape with Authorization: Bearer <token>.\n",
                status=403, content_type="text/plain",
            )
        return None
    scheme, _, offered = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not offered.strip():
        response = HttpResponse("Metrics need Authorization: Bearer <METRICS_TOKEN>.\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    # Compared in constant time, so response timing does not spell the token out.
    if not hmac.compare_digest(offered.strip().encode(), token.encode()):
        return HttpResponse("That token does not read metrics.\n", status=403, content_type="text/plain")
    return None


def scrape_collector_register(collector: Collector) -> None:
    """Adds a collector that reads the database when /metrics is scraped (an app's ready() calls it).

    The web, the worker and the watcher are separate processes, and only the web answers
    /metrics: what the worker or the watcher do is exported from what they record in the database,
    read at scrape time, so every web process answers the same. A collector must define
    describe(), or registering it would query the database while the apps load."""
    if any(type(known) is type(collector) for known in _SCRAPE_COLLECTORS):
        return  # ready() ran again in this process (tests); one of each is enough
    REGISTRY.register(collector)
    _SCRAPE_COLLECTORS.append(collector)


_SCRAPE_COLLECTORS: list[Collector] = []

"""An inference server: replicas of a Deployment behind a Service and, where the site has a domain, an
Ingress gated by the portal; its team uses it."""

from __future__ import annotations

from typing import Any

from jobs import manifests as m
from jobs.kinds.base import Kind, derive_server
from portal.metrics.simulated import TelemetryProfile


def make_inference(*, spec: m.WorkloadSpec) -> list[dict[str, Any]]:
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": m.meta(spec, spec.queue_labels),
        "spec": {
            "replicas": spec.workers,
            "selector": {"matchLabels": {m.WORKLOAD_LABEL: str(spec.workload_id)}},
            "template": m.pod_template(spec, m.container(spec), restart="Always"),
        },
    }
    objects = [m.http_service(spec), deployment]
    if spec.ingress:
        objects.append(m.route_object(spec, spec.ingress))
    return objects


KIND = Kind(
    name="inference", label="Inference", noun="inference server", plural="inference",
    build=lambda spec: make_inference(spec=spec), owner=("apps/v1", "Deployment"), derive=derive_server,
    telemetry=TelemetryProfile("daily", 0.62), pod_noun="replica", scalable=True, serves_http=True, opened_by="team",
    try_it="openai",
)

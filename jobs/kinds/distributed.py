"""Distributed training: workers of an Indexed Job, admitted all together or not at all, that find each
other through a headless Service."""

from __future__ import annotations

from typing import Any

from jobs import manifests as m
from jobs.kinds.base import Kind, derive_batch_job
from portal.metrics.simulated import TelemetryProfile


def make_distributed_job(*, spec: m.WorkloadSpec) -> list[dict[str, Any]]:
    """An Indexed Job whose workers find each other through a headless Service; Kueue admits
    all of its pods together or none."""
    rendezvous = (
        ("WORLD_SIZE", str(spec.workers)),
        ("MASTER_ADDR", spec.pod_host(0)),
        ("MASTER_PORT", "29500"),
    )
    template = m.pod_template(spec, m.container(spec, extra_env=rendezvous), restart="Never", subdomain=spec.service_name)
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": m.meta(spec, spec.queue_labels),
        "spec": {
            "suspend": True,
            "completionMode": "Indexed",
            "completions": spec.workers,
            "parallelism": spec.workers,
            "backoffLimit": 0,
            "activeDeadlineSeconds": spec.max_runtime_seconds,
            "ttlSecondsAfterFinished": m.TTL_AFTER_FINISHED,
            "template": template,
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": m.meta(spec, spec.labels),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": {m.WORKLOAD_LABEL: str(spec.workload_id)},
                 "ports": [{"name": "rendezvous", "port": 29500}]},
    }
    return [service, job]


KIND = Kind(
    name="distributed", label="Distributed training", noun="distributed training run", plural="distributed training runs",
    build=lambda spec: make_distributed_job(spec=spec), owner=("batch/v1", "Job"), derive=derive_batch_job,
    telemetry=TelemetryProfile("steady", 0.88), runs_to_completion=True, pod_noun="worker",
    starts_together=True,
)

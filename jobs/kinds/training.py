"""A training run: one pod of a batch Job that Kueue resumes when it admits it, and that ends by itself."""

from __future__ import annotations

from typing import Any

from jobs import manifests as m
from jobs.kinds.base import Kind, derive_batch_job
from portal.metrics.simulated import TelemetryProfile


def make_training_job(*, spec: m.WorkloadSpec) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": m.meta(spec, spec.queue_labels),
        "spec": {
            "suspend": True,
            "backoffLimit": 2,
            "activeDeadlineSeconds": spec.max_runtime_seconds,
            "ttlSecondsAfterFinished": m.TTL_AFTER_FINISHED,
            "template": m.pod_template(spec, m.container(spec), restart="Never"),
        },
    }


KIND = Kind(
    name="training", label="Training", noun="training run", plural="training runs",
    build=lambda spec: [make_training_job(spec=spec)], owner=("batch/v1", "Job"), derive=derive_batch_job,
    telemetry=TelemetryProfile("steady", 0.88), runs_to_completion=True,
)

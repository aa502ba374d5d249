"""A notebook: one JupyterLab pod of a StatefulSet with an optional home volume, a token of its own in a
Secret, reached through the portal's gate by its owner only; the portal asks it how idle it is."""

from __future__ import annotations

import base64
from typing import Any

from jobs import manifests as m
from jobs.kinds.base import Kind, derive_server
from portal.metrics.simulated import TelemetryProfile

TOKEN_KEY = "token"  # the key of the token in the notebook's Secret


def make_secret(*, spec: m.WorkloadSpec) -> dict[str, Any]:
    """The notebook's token, for its pod only: members' `view` role reads pod specs but not Secrets."""
    token = base64.b64encode(spec.notebook_token.encode()).decode()
    return {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": m.meta(spec, spec.labels, spec.token_secret_name),
        "type": "Opaque",
        "data": {TOKEN_KEY: token},
    }


def make_notebook(*, spec: m.WorkloadSpec) -> list[dict[str, Any]]:
    return make_interactive(spec=spec, token_variable="JUPYTER_TOKEN", home="/home/jovyan/work")


def make_interactive(*, spec: m.WorkloadSpec, token_variable: str, home: str) -> list[dict[str, Any]]:
    """A server one person opens: its token in a Secret, handed to the server as `token_variable`,
    its home volume (if the template asks for storage) at `home`, a Service and its Ingress."""
    token = {"name": token_variable, "valueFrom": {"secretKeyRef": {"name": spec.token_secret_name, "key": TOKEN_KEY}}}
    main = m.container(spec, secret_env=(token,))
    template = m.pod_template(spec, main, restart="Always")
    statefulset: dict[str, Any] = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": m.meta(spec, spec.queue_labels),
        "spec": {
            "replicas": 1,
            "serviceName": spec.service_name,
            "selector": {"matchLabels": {m.WORKLOAD_LABEL: str(spec.workload_id)}},
            "template": template,
        },
    }
    if spec.storage_gib:
        main["volumeMounts"] = [{"name": "home", "mountPath": home}, *main.get("volumeMounts", [])]
        statefulset["spec"]["volumeClaimTemplates"] = [{
            "metadata": {"name": "home", "labels": dict(spec.labels)},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{spec.storage_gib}Gi"}}},
        }]
    objects = [make_secret(spec=spec), m.http_service(spec), statefulset]
    if spec.ingress:
        objects.append(m.route_object(spec, spec.ingress))
    return objects


KIND = Kind(
    name="notebook", label="Notebook", noun="notebook", plural="notebooks",
    build=lambda spec: make_notebook(spec=spec), owner=("apps/v1", "StatefulSet"), derive=derive_server,
    telemetry=TelemetryProfile("busy_then_idle", 0.35), serves_http=True, opened_by="owner", has_token=True,
    activity="jupyter", local_port=8888, asks_storage=True, legacy_idle_minutes=True, runs_on_cpu=True,
)

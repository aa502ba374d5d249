"""Served workloads on both clusters: the API server accepts their Ingress with TLS and the
portal's gate, a notebook's token lives in its own Secret (its pods name it, never hold it), and
stopping deletes both."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from jobs import access, manifests, services
from jobs.models import Workload
from portal.kube import ObjectRef, gateway
from tests.contract.scenarios import HOLD, launch, phase_of

pytestmark = pytest.mark.django_db

AUTH = "nginx.ingress.kubernetes.io"
CASES = {
    "notebook": {"PORTAL_INGRESS_CLUSTER_ISSUER": "letsencrypt", "PORTAL_INGRESS_TLS_SECRET": ""},
    "inference": {"PORTAL_INGRESS_CLUSTER_ISSUER": "", "PORTAL_INGRESS_TLS_SECRET": "apps-wildcard"},
}


def _get(kind: str, api_version: str, name: str, namespace: str) -> dict[str, Any] | None:
    return gateway().get(ObjectRef(api_version, kind, name, namespace))


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_served_workload_gets_a_gated_ingress_with_tls_and_a_notebook_its_token_secret(
    cluster, site, templates, settings, kind, django_capture_on_commit_callbacks,
):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    settings.PORTAL_INGRESS_DOMAIN = "apps.example.com"
    settings.PORTAL_INGRESS_AUTH_URL = "http://gpu-portal.gpu-portal.svc.cluster.local"
    for name, value in CASES[kind].items():
        setattr(settings, name, value)
    team = site.team(f"served-{kind[:3]}", gpus=4)
    lead = team.memberships.get().user
    workload = launch(team, lead, templates[kind], site.flavor, django_capture_on_commit_callbacks, units=1)
    assert workload.phase == Workload.Phase.QUEUED, workload.reason
    name, namespace, host = workload.k8s_name, team.namespace, services.ingress_host(workload)

    ingress = _get("Ingress", "networking.k8s.io/v1", name, namespace)
    assert ingress is not None
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": [host], "secretName": CASES[kind]["PORTAL_INGRESS_TLS_SECRET"] or f"{name}-tls"}]
    annotations = ingress["metadata"]["annotations"]
    assert annotations[f"{AUTH}/auth-url"] == f"http://gpu-portal.gpu-portal.svc.cluster.local/auth/workloads/{workload.pk}/"
    assert annotations[f"{AUTH}/auth-signin"].endswith(f"/workloads/{workload.pk}/open/?rd=$escaped_request_uri")
    assert annotations.get("cert-manager.io/cluster-issuer", "") == CASES[kind]["PORTAL_INGRESS_CLUSTER_ISSUER"]
    assert services.endpoint(workload) == f"https://{host}/"

    secret_name = f"{name}-token"
    if kind == "notebook":
        secret = _get("Secret", "v1", secret_name, namespace)
        assert secret is not None and secret["metadata"]["labels"][manifests.WORKLOAD_LABEL] == str(workload.pk)
        assert base64.b64decode(secret["data"]["token"]).decode() == access.notebook_token(workload)
        cluster.wait_for(lambda: phase_of(workload) == Workload.Phase.RUNNING, what="the notebook to run")
        pods = gateway().list("v1", "Pod", namespace=namespace, labels={manifests.WORKLOAD_LABEL: str(workload.pk)})[0]
        assert pods
        for pod in pods:
            env = {e["name"]: e for e in pod["spec"]["containers"][0].get("env", [])}
            assert env["JUPYTER_TOKEN"] == {"name": "JUPYTER_TOKEN", "valueFrom": {"secretKeyRef": {
                "name": secret_name, "key": "token"}}}
            assert access.notebook_token(workload) not in repr(pod)
    else:
        assert _get("Secret", "v1", secret_name, namespace) is None

    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=workload)
    assert _get("Ingress", "networking.k8s.io/v1", name, namespace) is None
    assert _get("Secret", "v1", secret_name, namespace) is None

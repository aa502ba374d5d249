"""Workload manifests, whole, and validated offline against the pinned Kubernetes schemas."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from jobs import kinds
from jobs import manifests as m
from jobs.kinds import distributed, inference, notebook, training
from tenants.queueing.kueue import KueueBackend

SPEC = m.WorkloadSpec(
    workload_id=42, name="wl-42", namespace="vision", team="vision", kind="training",
    image="pytorch/pytorch:2.5", command=("python", "train.py"), args=("--epochs", "3"), env=(("TAG", "2.5"),),
    gpu=(("nvidia.com/gpu", 2),), cpu=8, memory_gib=32, priority="high", max_runtime_seconds=3600,
    queue=tuple(KueueBackend().workload_labels(priority="high").items()),  # as jobs.services.workload_spec asks the backend
)
LABELS = {"app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/team": "vision", "gpu-portal.io/workload": "42"}
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                      "seccompProfile": {"type": "RuntimeDefault"}}


def golden_training_job(**pod_spec: Any) -> dict[str, Any]:
    """SPEC's training Job as the portal must write it, with these pod spec fields added."""
    resources = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}
    job: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "wl-42", "namespace": "vision", "labels": {
            **LABELS, "kueue.x-k8s.io/queue-name": "default", "kueue.x-k8s.io/priority-class": "gpu-portal-high"}},
        "spec": {
            "suspend": True, "backoffLimit": 2, "activeDeadlineSeconds": 3600, "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": {**LABELS, "gpu-portal.io/workload-kind": "training"}},
                "spec": {
                    "automountServiceAccountToken": False, "enableServiceLinks": False,
                    "priorityClassName": "gpu-portal-high", "securityContext": POD_SECURITY, "restartPolicy": "Never",
                    "containers": [{
                        "name": "training", "image": "pytorch/pytorch:2.5", "env": [{"name": "TAG", "value": "2.5"}],
                        "resources": {"requests": resources, "limits": resources},
                        "securityContext": CONTAINER_SECURITY,
                        "command": ["python", "train.py"], "args": ["--epochs", "3"],
                    }],
                },
            },
        },
    }
    job["spec"]["template"]["spec"].update(pod_spec)
    return job


def test_a_training_job_is_suspended_queued_bounded_and_locked_down():
    assert training.make_training_job(spec=SPEC) == golden_training_job()


def test_a_distributed_job_is_indexed_and_its_workers_find_each_other():
    service, job = distributed.make_distributed_job(spec=m.WorkloadSpec(**{**SPEC.__dict__, "kind": "distributed", "workers": 4}))
    assert service["spec"] == {"clusterIP": "None", "publishNotReadyAddresses": True,
                               "selector": {"gpu-portal.io/workload": "42"}, "ports": [{"name": "rendezvous", "port": 29500}]}
    assert (job["spec"]["completionMode"], job["spec"]["completions"], job["spec"]["parallelism"]) == ("Indexed", 4, 4)
    assert job["spec"]["template"]["spec"]["subdomain"] == "wl-42"
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env == {"TAG": "2.5", "WORLD_SIZE": "4", "MASTER_ADDR": "wl-42-0.wl-42", "MASTER_PORT": "29500"}


GATED = m.IngressSpec(
    host="wl-42-vision.apps.example.com", class_name="nginx",
    auth_url="http://gpu-portal.gpu-portal.svc/auth/workloads/42/",
    signin_url="https://portal.example.com/workloads/42/open/?rd=$escaped_request_uri",
)
GATE_ANNOTATIONS = {
    "nginx.ingress.kubernetes.io/auth-url": "http://gpu-portal.gpu-portal.svc/auth/workloads/42/",
    "nginx.ingress.kubernetes.io/auth-response-headers": "X-Portal-User, Authorization",
    "nginx.ingress.kubernetes.io/auth-signin": "https://portal.example.com/workloads/42/open/?rd=$escaped_request_uri",
}
RULES = [{"host": "wl-42-vision.apps.example.com", "http": {"paths": [{
    "path": "/", "pathType": "Prefix", "backend": {"service": {"name": "wl-42", "port": {"name": "http"}}}}]}}]


def test_an_inference_server_gets_a_deployment_a_service_and_an_ingress_when_asked():
    spec = m.WorkloadSpec(**{**SPEC.__dict__, "kind": "inference", "workers": 2, "port": 8000, "ingress": GATED})
    service, deployment, ingress = inference.make_inference(spec=spec)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert deployment["spec"]["template"]["spec"]["restartPolicy"] == "Always"
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 8000}]
    assert ingress["spec"]["rules"][0]["host"] == "wl-42-vision.apps.example.com"
    assert len(inference.make_inference(spec=m.WorkloadSpec(**{**spec.__dict__, "ingress": None}))) == 2


def test_an_ingress_without_a_certificate_is_gated_by_the_portal_and_claims_no_tls():
    spec = m.WorkloadSpec(**{**SPEC.__dict__, "kind": "inference", "port": 8000, "ingress": GATED})
    assert inference.make_inference(spec=spec)[2] == {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "wl-42", "namespace": "vision", "labels": LABELS, "annotations": GATE_ANNOTATIONS},
        "spec": {"ingressClassName": "nginx", "rules": RULES},
    }


def test_an_ingress_with_a_wildcard_certificate_names_its_secret():
    gated = m.IngressSpec(**{**GATED.__dict__, "tls_secret": "apps-wildcard"})
    spec = m.WorkloadSpec(**{**SPEC.__dict__, "kind": "notebook", "port": 8888, "ingress": gated})
    assert notebook.make_notebook(spec=spec)[-1] == {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "wl-42", "namespace": "vision", "labels": LABELS, "annotations": GATE_ANNOTATIONS},
        "spec": {"ingressClassName": "nginx", "rules": RULES,
                 "tls": [{"hosts": ["wl-42-vision.apps.example.com"], "secretName": "apps-wildcard"}]},
    }


def test_through_a_gateway_a_served_workload_gets_an_httproute_on_it_behind_the_gates_external_auth():
    routed = m.IngressSpec(host="wl-42-vision.apps.example.com", gateway=("gateways", "apps", "https"),
                           auth_service=("gpu-portal", "gpu-portal", 80))
    spec = m.WorkloadSpec(**{**SPEC.__dict__, "kind": "notebook", "port": 8888, "ingress": routed})
    assert notebook.make_notebook(spec=spec)[-1] == {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "wl-42", "namespace": "vision", "labels": LABELS},
        "spec": {
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "gateways", "name": "apps",
                            "sectionName": "https"}],
            "hostnames": ["wl-42-vision.apps.example.com"],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                       "backendRefs": [{"name": "wl-42", "port": 80}],
                       "filters": [{"type": "ExternalAuth", "externalAuth": {
                           "protocol": "HTTP", "backendRef": {"name": "gpu-portal", "namespace": "gpu-portal", "port": 80},
                           "http": {"path": "/auth/gateway", "allowedHeaders": ["Cookie", "Accept"],
                                    "allowedResponseHeaders": ["X-Portal-User", "Authorization"]}}}]}],
        },
    }
    # The gateway asks the gate itself (its own external authorization): the route carries no filter.
    bare = m.IngressSpec(host="wl-42-vision.apps.example.com", gateway=("gateways", "apps"))
    route = m.route_object(spec, bare)
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "namespace": "gateways", "name": "apps"}]
    assert "filters" not in route["spec"]["rules"][0]
    assert m.route_object(spec, GATED)["kind"] == "Ingress"


def test_an_ingress_with_a_cluster_issuer_asks_cert_manager_for_its_own_certificate():
    gated = m.IngressSpec(**{**GATED.__dict__, "cluster_issuer": "letsencrypt"})
    spec = m.WorkloadSpec(**{**SPEC.__dict__, "kind": "inference", "port": 8000, "ingress": gated})
    assert inference.make_inference(spec=spec)[2] == {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "wl-42", "namespace": "vision", "labels": LABELS,
                     "annotations": {**GATE_ANNOTATIONS, "cert-manager.io/cluster-issuer": "letsencrypt"}},
        "spec": {"ingressClassName": "nginx", "rules": RULES,
                 "tls": [{"hosts": ["wl-42-vision.apps.example.com"], "secretName": "wl-42-tls"}]},
    }


def test_a_notebook_is_one_pod_whose_token_comes_from_its_own_secret():
    spec = m.WorkloadSpec(**{**SPEC.__dict__, "kind": "notebook", "port": 8888, "notebook_token": "t0k-s3cret",
                             "storage_gib": 20})
    secret, service, statefulset = notebook.make_notebook(spec=spec)
    assert secret == {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "wl-42-token", "namespace": "vision", "labels": LABELS},
        "type": "Opaque", "data": {"token": "dDBrLXMzY3JldA=="},
    }
    pod = statefulset["spec"]["template"]["spec"]
    assert statefulset["spec"]["replicas"] == 1 and statefulset["spec"]["serviceName"] == "wl-42"
    assert pod["containers"][0]["env"] == [
        {"name": "TAG", "value": "2.5"},
        {"name": "JUPYTER_TOKEN", "valueFrom": {"secretKeyRef": {"name": "wl-42-token", "key": "token"}}},
    ]
    # Members' view role reads pod specs and Services: the token is in neither, in any encoding.
    assert "t0k-s3cret" not in repr([service, statefulset]) and "dDBrLXMzY3JldA" not in repr([service, statefulset])
    assert pod["containers"][0]["volumeMounts"] == [{"name": "home", "mountPath": "/home/jovyan/work"}]
    assert statefulset["spec"]["volumeClaimTemplates"][0]["spec"]["resources"] == {"requests": {"storage": "20Gi"}}


H100 = m.Placement(node_labels=(("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),),
                   tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},))
A100 = m.Placement(node_labels=(("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"), ("pool", "a100")),
                   tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                {"key": "pool", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}))


def pod_specs(**changes: object) -> list[dict]:
    return [obj["spec"]["template"]["spec"] for kind in ("training", "distributed", "inference", "notebook")
            for obj in kinds.workload_objects(spec=m.WorkloadSpec(**{**SPEC.__dict__, "kind": kind, "port": 8080, **changes}))
            if "template" in obj.get("spec", {})]


def test_a_workload_is_held_to_the_one_flavor_it_names_by_that_flavors_node_labels_and_tolerations():
    # Kueue admits a workload only on a flavor whose node labels its pods' selector accepts, so a
    # launch on H100 cannot be admitted on another flavor of nvidia.com/gpu.
    for pod in pod_specs(placements=(H100,)):
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert "affinity" not in pod and "nodeName" not in pod
        assert not any(c.get("securityContext", {}).get("privileged") for c in pod["containers"])


def test_a_workload_accepting_several_flavors_may_run_on_any_of_their_nodes_and_nowhere_else():
    for pod in pod_specs(placements=(A100, H100)):
        assert "nodeSelector" not in pod
        assert pod["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]},
                                  {"key": "pool", "operator": "In", "values": ["a100"]}]},
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}]},
        ]}}}
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                      {"key": "pool", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}]


# An H100 pool on K3s: containerd's default runtime stays runc, so pods name NVIDIA's RuntimeClass.
H100_K3S = m.Placement(node_labels=(("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"), ("pool", "k3s")),
                       tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
                       runtime_class="nvidia")
A100_K3S = m.Placement(node_labels=(("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"), ("pool", "k3s")),
                       runtime_class="nvidia")


def test_a_training_job_on_a_flavor_with_a_runtime_class_names_it_in_its_pods():
    assert training.make_training_job(spec=m.WorkloadSpec(**{**SPEC.__dict__, "placements": (H100_K3S,)})) == (
        golden_training_job(
            nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": "k3s"},
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            runtimeClassName="nvidia"))


def test_every_kinds_pods_carry_the_flavors_runtime_class_and_none_without_one():
    for pod in pod_specs(placements=(H100_K3S,)):
        assert pod["runtimeClassName"] == "nvidia"
    for pod in pod_specs(placements=(A100_K3S, H100_K3S)):
        assert pod["runtimeClassName"] == "nvidia"
    for pod in pod_specs(placements=(H100,)):
        assert "runtimeClassName" not in pod
    assert len(pod_specs(placements=(H100_K3S,))) == 4  # training, distributed, inference, notebook


def test_flavors_accepted_together_must_share_a_runtime_class_a_pod_has_one():
    # jobs.services refuses such a launch in words before anything is built.
    with pytest.raises(ValueError, match="different runtime classes"):
        pod_specs(placements=(A100, H100_K3S))


ALL = [pytest.param(obj, id=f"{len(placements)}-flavor-{placements[0].runtime_class or 'default'}-{obj['kind']}-"
                            f"{obj['metadata']['name']}")
       for placements in ((H100,), (A100, H100), (H100_K3S,)) for kind in ("training", "distributed", "inference", "notebook")
       for obj in kinds.workload_objects(spec=m.WorkloadSpec(**{**SPEC.__dict__, "kind": kind, "port": 8080, "workers": 2,
                                                                   "ingress": GATED, "notebook_token": "t", "storage_gib": 5,
                                                                   "placements": placements}))]


CLAIMED = m.WorkloadSpec(**{**SPEC.__dict__, "gpu": (), "claim": ("gpu.nvidia.com", 2)})
ALL += [pytest.param(obj, id=f"dra-{kind}-{obj['kind']}")
        for kind in ("training", "distributed", "inference", "notebook")
        for obj in kinds.workload_objects(spec=m.WorkloadSpec(**{**CLAIMED.__dict__, "kind": kind, "port": 8080, "workers": 2,
                                                                 "notebook_token": "t", "storage_gib": 5}))]


def test_a_workload_on_a_device_class_claims_its_units_of_devices_through_its_own_template():
    template, job = kinds.workload_objects(spec=CLAIMED)
    assert template == {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "wl-42-gpu", "namespace": "vision", "labels": LABELS},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}}]}}},
    }
    resources = {"cpu": "8", "memory": "32Gi"}  # no device plugin's resource: the claim holds the GPUs
    golden = golden_training_job(resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "wl-42-gpu"}])
    golden["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": resources, "limits": resources, "claims": [{"name": "gpu"}]}
    assert job == golden


@pytest.mark.parametrize("obj", ALL)
def test_every_workload_object_validates_against_the_pinned_schema(obj):
    kubernetes_validate.validate(obj, "1.36.0", strict=True)

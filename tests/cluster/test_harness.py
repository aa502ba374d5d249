"""End-to-end checks of the local control plane (etcd, kube-apiserver, controllers,
scheduler, Kueue v1beta2, KWOK fake GPU nodes)."""

from __future__ import annotations

import uuid

import pytest

from .harness import ANNOTATION_RUN_DURATION, read_versions, wait_for

pytestmark = pytest.mark.cluster

KUEUE = ("kueue.x-k8s.io", "v1beta2")


def _k8s():
    import kubernetes.client

    return kubernetes.client


@pytest.fixture(scope="module")
def clients(control_plane):
    k = _k8s()
    api = control_plane.api_client()
    yield {
        "core": k.CoreV1Api(api),
        "batch": k.BatchV1Api(api),
        "custom": k.CustomObjectsApi(api),
        "ext": k.ApiextensionsV1Api(api),
        "version": k.VersionApi(api),
    }
    api.close()


@pytest.fixture(scope="module")
def gpu_queue(control_plane, clients):
    """A fake 8-GPU node, a ResourceFlavor pinned to it, a ClusterQueue with 2 GPUs of
    nominal quota in a cohort, and a namespace with a LocalQueue pointing at it."""
    sfx = uuid.uuid4().hex[:6]
    pool = f"harness-{sfx}"
    node = f"harness-gpu-{sfx}"
    control_plane.add_gpu_node(node, labels={"gpu-portal/pool": pool, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                               allocatable={"nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "56",
                                            "nvidia.com/gpu.shared": "16"})
    custom, core = clients["custom"], clients["core"]
    flavor, cq, ns = f"a100-{sfx}", f"cq-{sfx}", f"team-{sfx}"
    custom.create_cluster_custom_object(*KUEUE, "resourceflavors", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor},
        "spec": {"nodeLabels": {"gpu-portal/pool": pool}}})
    custom.create_cluster_custom_object(*KUEUE, "clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq},
        "spec": {
            "cohortName": f"cohort-{sfx}",
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [{"name": flavor, "resources": [
                    {"name": "cpu", "nominalQuota": "16"},
                    {"name": "memory", "nominalQuota": "64Gi"},
                    {"name": "nvidia.com/gpu", "nominalQuota": "2"},
                ]}],
            }],
        }})
    core.create_namespace({"metadata": {"name": ns}})
    custom.create_namespaced_custom_object(*KUEUE, ns, "localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "default", "namespace": ns},
        "spec": {"clusterQueue": cq}})

    def cq_active():
        obj = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", cq)
        return any(c["type"] == "Active" and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))

    wait_for(cq_active, timeout=30, message=f"ClusterQueue {cq} to become Active")
    # pods are refused until the namespace's default ServiceAccount exists
    wait_for(lambda: core.read_namespaced_service_account("default", ns), timeout=30,
             message=f"default ServiceAccount in {ns}")
    yield {"namespace": ns, "queue": "default", "cluster_queue": cq, "flavor": flavor, "node": node}
    core.delete_namespace(ns)


def _gpu_job(name: str, queue: str, gpus: int, run: str = "3s") -> dict:
    res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {ANNOTATION_RUN_DURATION: run}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "train", "image": "registry.invalid/train:latest",
                                    "resources": {"requests": res, "limits": res}}],
                },
            },
        },
    }


def _workload_for(custom, ns: str, job_name: str) -> dict | None:
    for wl in custom.list_namespaced_custom_object(*KUEUE, ns, "workloads")["items"]:
        if any(o.get("kind") == "Job" and o.get("name") == job_name for o in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def test_the_apiserver_answers_and_reports_the_pinned_kubernetes_version(clients):
    info = clients["version"].get_code()
    assert info.git_version == read_versions()["KUBERNETES_VERSION"]
    assert clients["core"].read_namespace("default").status.phase == "Active"


def test_kueue_crds_are_served_and_stored_at_v1beta2(clients):
    for plural in ("clusterqueues", "localqueues", "resourceflavors", "workloads", "cohorts"):
        crd = clients["ext"].read_custom_resource_definition(f"{plural}.kueue.x-k8s.io")
        versions = {v.name: v for v in crd.spec.versions}
        assert versions["v1beta2"].served and versions["v1beta2"].storage, plural
        clients["custom"].list_cluster_custom_object(*KUEUE, plural)


def test_a_fake_gpu_node_is_ready_and_advertises_its_gpu_resources(clients, gpu_queue):
    node = clients["core"].read_node(gpu_queue["node"])
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert node.status.allocatable["nvidia.com/mig-1g.10gb"] == "56"
    assert node.status.allocatable["nvidia.com/gpu.shared"] == "16"
    assert not node.spec.unschedulable


def test_a_suspended_job_in_a_local_queue_is_admitted_and_runs_to_success_on_a_fake_gpu_node(clients, gpu_queue):
    core, batch, custom = clients["core"], clients["batch"], clients["custom"]
    ns = gpu_queue["namespace"]
    name = f"train-{uuid.uuid4().hex[:6]}"
    batch.create_namespaced_job(ns, _gpu_job(name, gpu_queue["queue"], gpus=1))

    wait_for(lambda: batch.read_namespaced_job(name, ns).spec.suspend is False, timeout=30,
             message=f"Kueue to admit (unsuspend) job {name}")
    wl = _workload_for(custom, ns, name)
    assert wl is not None
    assert wl["status"]["admission"]["clusterQueue"] == gpu_queue["cluster_queue"]

    def running_pod():
        pods = core.list_namespaced_pod(ns, label_selector=f"job-name={name}").items
        return next((p for p in pods if p.status.phase in ("Running", "Succeeded")), None)

    pod = wait_for(running_pod, timeout=30, message=f"a pod of job {name} to run")
    assert pod.spec.node_name == gpu_queue["node"]
    # Kueue injected the flavor's node labels as a node selector
    assert pod.spec.node_selector.get("gpu-portal/pool", "").startswith("harness-")

    def complete():
        job = batch.read_namespaced_job(name, ns)
        return any(c.type == "Complete" and c.status == "True" for c in (job.status.conditions or [])) and job

    job = wait_for(complete, timeout=60, message=f"job {name} to complete")
    assert job.status.succeeded == 1

    def finished():
        w = _workload_for(custom, ns, name)
        return w is not None and any(c["type"] == "Finished" and c["status"] == "True" for c in w["status"].get("conditions", []))

    wait_for(finished, timeout=30, message=f"the Workload of job {name} to be Finished")


def test_a_job_that_exceeds_the_cluster_queue_quota_stays_suspended_with_a_quota_message(clients, gpu_queue):
    batch, custom = clients["batch"], clients["custom"]
    ns = gpu_queue["namespace"]
    name = f"too-big-{uuid.uuid4().hex[:6]}"
    batch.create_namespaced_job(ns, _gpu_job(name, gpu_queue["queue"], gpus=4))

    def pending_message():
        wl = _workload_for(custom, ns, name)
        if not wl:
            return None
        for c in wl.get("status", {}).get("conditions", []):
            if c["type"] == "QuotaReserved" and c["status"] == "False" and "quota" in c.get("message", ""):
                return c["message"]
        return None

    message = wait_for(pending_message, timeout=30, message=f"a quota message on the Workload of job {name}")
    assert "nvidia.com/gpu" in message
    assert batch.read_namespaced_job(name, ns).spec.suspend is True
    batch.delete_namespaced_job(name, ns, propagation_policy="Background")


def test_a_deployment_in_a_local_queue_is_admitted_by_kueue_and_its_pods_run_on_the_fake_gpu_node(
        control_plane, clients, gpu_queue):
    k = _k8s()
    apps = k.AppsV1Api(control_plane.api_client())
    core, custom = clients["core"], clients["custom"]
    ns, name = gpu_queue["namespace"], f"serve-{uuid.uuid4().hex[:6]}"
    res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    apps.create_namespaced_deployment(ns, {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": gpu_queue["queue"]}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{
                     "name": "serve", "image": "registry.invalid/serve:latest",
                     "resources": {"requests": res, "limits": res}}]}}}})

    def running():
        pods = core.list_namespaced_pod(ns, label_selector=f"app={name}").items
        return [p for p in pods if p.status.phase == "Running"]

    (pod,) = wait_for(running, timeout=30, message=f"the pod of deployment {name} to run")
    assert pod.spec.node_name == gpu_queue["node"]
    wls = custom.list_namespaced_custom_object(*KUEUE, ns, "workloads")["items"]
    assert any(o.get("name") == pod.metadata.name for w in wls for o in w["metadata"].get("ownerReferences", []))
    apps.delete_namespaced_deployment(name, ns)


def test_a_deleted_fake_node_disappears(control_plane, clients):
    name = f"harness-tmp-{uuid.uuid4().hex[:6]}"
    control_plane.add_gpu_node(name, labels={}, allocatable={"nvidia.com/gpu": "1"})
    control_plane.delete_node(name)
    assert name not in [n.metadata.name for n in clients["core"].list_node().items]

"""A launch that mounts one of the team's data volumes and fetches a git repository is accepted
under the team namespace's Pod Security `restricted` on both clusters: the claim is read through
the gateway at launch, and the Job's pod, init container and volumes included, is created. On
the real control plane the pod's creation is the proof that Pod Security admitted it (it checks
pods only, and a refused pod is never created)."""

from __future__ import annotations

import pytest

from jobs import manifests, services
from jobs.models import Workload, WorkloadKind
from portal.kube import ObjectRef, gateway
from tests.contract.scenarios import HOLD, existing, launch

pytestmark = pytest.mark.django_db


def test_a_workload_with_a_data_volume_and_a_repository_is_admitted_under_restricted(
    cluster, site, settings, django_capture_on_commit_callbacks
):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    settings.PORTAL_GIT_SOURCES = ["github.com/acme"]
    settings.PORTAL_GIT_IMAGE = "registry.example.com/tools/git:2.47"
    team = site.team("data", gpus=1)
    assert existing(ObjectRef("v1", "Namespace", team.namespace))["metadata"]["labels"][
        "pod-security.kubernetes.io/enforce"] == "restricted"
    gateway().apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": "corpus", "namespace": team.namespace},
                     "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    template = services.template_create(
        user=site.admin, slug=f"data-{site.flavor.slug}"[:40], name="Data and code", kind=WorkloadKind.TRAINING,
        flavors=[site.flavor], image="registry.example.com/ml/runtime:1", command=["python"], args=["/code/train.py"],
        max_units=1, default_cpu=1, default_memory_gib=1, parameters=[
            {"name": "data", "type": "volume", "mount_path": "/data"},
            {"name": "code", "type": "git", "mount_path": "/code"}])

    workload = launch(team, team.memberships.get().user, template, site.flavor, django_capture_on_commit_callbacks,
                      units=1, parameters={"data": "corpus",
                                           "code": {"url": "https://github.com/acme/vision.git", "revision": "v1.0"}})
    assert workload.phase != Workload.Phase.FAILED, workload.reason

    def pods() -> list[dict]:
        return gateway().list("v1", "Pod", namespace=team.namespace,
                              labels={manifests.WORKLOAD_LABEL: str(workload.pk)})[0]

    (pod,) = cluster.wait_for(pods, what="the pod with a data volume and a git fetch to be created")
    spec = pod["spec"]
    assert {"name": "data-0", "persistentVolumeClaim": {"claimName": "corpus", "readOnly": True}} in spec["volumes"]
    (fetch,) = spec["initContainers"]
    assert (fetch["name"], fetch["image"]) == ("fetch-repo-0", "registry.example.com/tools/git:2.47")
    assert {"name": "REPO_REVISION", "value": "v1.0"} in fetch["env"]
    assert fetch["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "repo-0", "mountPath": "/code"} in spec["containers"][0]["volumeMounts"]

"""A launch with a person's own image, arguments and variables still satisfies Pod Security
`restricted`, which the team namespace enforces: on the real control plane its pods are admitted
and run. (Pod Security checks pods only, so only a running pod proves it.)"""

from __future__ import annotations

import pytest

from jobs import manifests, services, sync
from jobs.models import Workload, WorkloadKind
from portal.kube import ObjectRef, gateway
from tests.contract.scenarios import HOLD, launch

pytestmark = [pytest.mark.django_db, pytest.mark.cluster]


@pytest.mark.parametrize("cluster", ["real"], indirect=True)
def test_a_launch_of_ones_own_work_runs_under_pod_security_restricted(cluster, site, settings,
                                                                      django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    team = site.team("own", gpus=1)
    template = services.template_create(
        user=site.admin, slug=f"own-{site.flavor.slug}"[:40], name="Own work", kind=WorkloadKind.TRAINING,
        flavors=[site.flavor], image="registry.example.com/ml/runtime:1", command=["python"], args=["main.py"],
        max_units=1, default_cpu=1, default_memory_gib=1, parameters=[
            {"name": "image", "type": "image", "default": "registry.example.com/ml/runtime:1"},
            {"name": "extra", "type": "args"}, {"name": "vars", "type": "env", "names": ["DATA_DIR"]}])
    workload = launch(team, team.memberships.get().user, template, site.flavor, django_capture_on_commit_callbacks,
                      units=1, parameters={"image": "registry.example.com/ml/mine:7", "extra": ["--fast"],
                                           "vars": {"DATA_DIR": "/data"}})
    namespace = gateway().get(ObjectRef("v1", "Namespace", team.namespace)) or {}
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"

    def running() -> bool:
        sync.sync_all()
        workload.refresh_from_db()
        return workload.phase == Workload.Phase.RUNNING

    cluster.wait_for(running, what="the pod of one's own image to be admitted and run")
    (pod,) = gateway().list("v1", "Pod", namespace=team.namespace, labels={manifests.WORKLOAD_LABEL: str(workload.pk)})[0]
    container = pod["spec"]["containers"][0]
    assert (container["image"], container["args"]) == ("registry.example.com/ml/mine:7", ["main.py", "--fast"])

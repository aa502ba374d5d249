"""A flavor's runtime class, on both clusters (issue 24 §4): where the RuntimeClass exists the
pods run with it; where the cluster lacks it, the API server's RuntimeClass admission would refuse
every pod, so the portal flags the flavor on the catalog and refuses a launch on it in words,
creating nothing. The RuntimeClasses are made in the test through the gateway, as a site's GPU
operator (or K3s) would make them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.urls import reverse

from jobs import services
from jobs.models import Workload
from portal.errors import DomainError
from portal.kube import KubeError, ObjectRef, gateway
from tenants import services as tenant_services
from tenants.models import Flavor
from tests.conftest import login
from tests.contract.scenarios import HOLD, launch, pods_of, running
from tests.helpers import ensure_priced

pytestmark = pytest.mark.django_db


def runtime_class_ref(name: str) -> ObjectRef:
    return ObjectRef("node.k8s.io/v1", "RuntimeClass", name)


@pytest.fixture
def k3s(cluster, site, django_capture_on_commit_callbacks) -> Iterator[Flavor]:
    """A flavor on a node pool whose containerd needs the pods to name NVIDIA's runtime: its
    RuntimeClass is not made here, each test decides whether the cluster has it."""
    with django_capture_on_commit_callbacks(execute=True):
        flavor = tenant_services.flavor_save(actor=site.admin, flavor=Flavor(
            name=cluster.unique("H100 on K3s"), slug=cluster.unique("h100-k3s"), resource_name="nvidia.com/gpu",
            gpu_model="H100", capacity_units=4, node_labels={"gpu-portal.io/test-flavor": cluster.unique("h100-k3s")},
            runtime_class_name=cluster.unique("nvidia"),
        ))
    cluster.add_gpu_node(cluster.unique("k3s-node"), labels={"gpu-portal.io/test-flavor": flavor.slug},
                         allocatable={"nvidia.com/gpu": 4})
    ensure_priced(flavor)
    yield flavor
    gateway().delete(runtime_class_ref(flavor.runtime_class_name))  # the real cluster outlives the test


def test_a_flavor_whose_runtime_class_the_cluster_has_runs_its_pods_with_it(
        cluster, site, k3s, templates, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    gateway().apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                     "metadata": {"name": k3s.runtime_class_name}, "handler": "nvidia"})
    template = templates["training"]
    services.template_revise(user=site.admin, template=template, flavors=[site.flavor, k3s])
    team = site.team("rc")
    lead = team.memberships.get().user
    site.grant(team, lead, 1, of=k3s)
    assert 'data-testid="runtime-class-missing"' not in login(site.admin).get(reverse("tenants:flavor-list")).content.decode()

    workload = launch(team, lead, template, k3s, django_capture_on_commit_callbacks, units=1)
    cluster.wait_for(lambda: running(workload), what="the launch on the K3s flavor to run")
    (pod,) = pods_of(workload)
    assert pod["spec"]["runtimeClassName"] == k3s.runtime_class_name
    (node,) = [n for n in gateway().list("v1", "Node")[0] if n["metadata"]["name"] == pod["spec"]["nodeName"]]
    assert node["metadata"]["labels"]["gpu-portal.io/test-flavor"] == k3s.slug

    with django_capture_on_commit_callbacks(execute=True):
        services.workload_stop(user=lead, workload=workload)


def test_a_flavor_whose_runtime_class_the_cluster_lacks_is_flagged_and_a_launch_on_it_refused_creating_nothing(
        cluster, site, k3s, templates, django_capture_on_commit_callbacks):
    missing = k3s.runtime_class_name
    # What the portal spares its users: the API server forbids a pod naming a missing RuntimeClass.
    team = site.team("rc-missing")
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": team.namespace},
             "spec": {"runtimeClassName": missing, "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                                                       "seccompProfile": {"type": "RuntimeDefault"}},
                      "containers": [{"name": "probe", "image": "registry.example.com/probe:1",
                                      "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
                                      "securityContext": {"allowPrivilegeEscalation": False,
                                                          "capabilities": {"drop": ["ALL"]}}}]}}
    with pytest.raises(KubeError) as forbidden:
        gateway().apply(probe)
    assert forbidden.value.status == 403
    assert f'pods "probe" is forbidden: pod rejected: RuntimeClass "{missing}" not found' in str(forbidden.value)

    page = login(site.admin).get(reverse("tenants:flavor-list")).content.decode()
    assert 'data-testid="runtime-class-missing"' in page and f"the RuntimeClass “{missing}”, which the cluster" in page

    template = templates["training"]
    services.template_revise(user=site.admin, template=template, flavors=[site.flavor, k3s])
    lead = team.memberships.get().user
    site.grant(team, lead, 1, of=k3s)
    with pytest.raises(DomainError) as refused:
        launch(team, lead, template, k3s, django_capture_on_commit_callbacks, units=1)
    assert refused.value.field == "flavor" and refused.value.message.startswith(
        f"{k3s.name} cannot run anything: its pods run with the RuntimeClass “{missing}”, which the cluster does not have")
    assert not Workload.objects.filter(team=team).exists()
    assert gateway().list("batch/v1", "Job", namespace=team.namespace)[0] == []
    assert gateway().list("v1", "Pod", namespace=team.namespace)[0] == []

"""What would get past the portal's own checks does not get past the API server: a team's
namespace enforces Pod Security `restricted`, so a pod that asks for the host, privilege or root is
refused by the real API server (server-side dry run: admission runs, nothing is stored), while the
portal's own pod shape is admitted. Real control plane only: the simulated cluster plays no
admission plugins, and the portal never relies on it for this."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.contract.scenarios import probe_job

pytestmark = [pytest.mark.django_db, pytest.mark.cluster]

HOSTILE = {
    "privileged": lambda pod: pod["containers"][0]["securityContext"].update(privileged=True,
                                                                              allowPrivilegeEscalation=True),
    "hostPath volume": lambda pod: pod.update(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
    "hostNetwork": lambda pod: pod.update(hostNetwork=True),
    "hostPID": lambda pod: pod.update(hostPID=True),
    "runAsUser 0": lambda pod: pod["securityContext"].update(runAsUser=0, runAsNonRoot=False),
    "added capability": lambda pod: pod["containers"][0]["securityContext"].update(capabilities={"add": ["SYS_ADMIN"]}),
    "privilege escalation": lambda pod: pod["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
    "host port": lambda pod: pod["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]),
}


def pod_from(namespace: str, name: str, change: Any = None) -> dict[str, Any]:
    template = copy.deepcopy(probe_job(namespace, name, gpus=0)["spec"]["template"])
    if change is not None:
        change(template["spec"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": template["spec"]}


@pytest.mark.parametrize("cluster", ["real"], indirect=True)
def test_the_api_server_refuses_in_a_team_namespace_every_pod_that_asks_for_more(cluster, site):
    team = site.team("psa")
    # The client takes plain dicts as bodies (as the gateway sends them); its stubs ask for V1Pod.
    core: Any = client.CoreV1Api(config.new_client_from_config(str(cluster.control_plane.kubeconfig_path)))

    core.create_namespaced_pod(team.namespace, pod_from(team.namespace, "fine"), dry_run="All")
    refused = {}
    for what, change in HOSTILE.items():
        with pytest.raises(ApiException) as raised:
            core.create_namespaced_pod(team.namespace, pod_from(team.namespace, "hostile", change), dry_run="All")
        refused[what] = (raised.value.status, "violates PodSecurity" in str(raised.value.body))
    assert refused == dict.fromkeys(HOSTILE, (403, True))

"""The MPI kind on Volcano, real and simulated: a launcher and its workers start together, Volcano's
ssh and svc plugins give them one key pair and their host names, the run ends when the launcher
does, and a site on Kueue is refused it in words.

KWOK runs no container, so no sshd or mpirun runs here: what is proven is every object and field
Volcano makes for them and the phases the portal reads (the scripts are held by tests/jobs/test_mpi_kind.py)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from jobs import selectors
from jobs import services as job_services
from jobs.kinds import mpi
from jobs.models import RunInterval, Workload
from portal.errors import DomainError
from portal.kube import KubeError, ObjectRef, gateway
from tests.contract.conftest import clusters
from tests.contract.scenarios import HOLD, launch, phase_of, pods_of, running

pytestmark = pytest.mark.django_db

# What finishes one pod now, on KWOK and on the simulated kubelet.
FINISH = {"kwok.gpu-portal.test/outcome": "Succeeded", "kwok.gpu-portal.test/run-duration": "1s",
          "gpu-portal.io/simulated-run-seconds": "0"}


cluster = clusters("simulated-volcano", "volcano")


def task_of(pod: dict[str, Any]) -> str:
    return pod["metadata"]["annotations"]["volcano.sh/task-spec"]


def finish(pod: dict[str, Any]) -> bool:
    """The pod told to finish now; False when it changed meanwhile (read again and retry)."""
    fresh = gateway().get(ObjectRef("v1", "Pod", pod["metadata"]["name"], pod["metadata"]["namespace"]))
    assert fresh is not None
    fresh["metadata"]["annotations"] = {**fresh["metadata"].get("annotations", {}), **FINISH}
    try:
        gateway().replace(fresh)
    except KubeError as error:
        if error.status == 409:
            return False
        raise
    return True


def test_an_mpi_job_runs_its_launcher_and_workers_together_with_keys_and_host_names_and_ends_with_its_launcher(
        cluster, site, templates, settings, django_capture_on_commit_callbacks):
    settings.PORTAL_POD_ANNOTATIONS = HOLD
    capture = django_capture_on_commit_callbacks
    team = site.team("mpi", gpus=4)
    workload = launch(team, team.memberships.get().user, templates["mpi"], site.flavor, capture, units=1,
                      parameters={"workers": 2})
    # Bound together (the gang), each pod is reported Running by its kubelet in its own time: wait for all three.
    cluster.wait_for(lambda: running(workload) and workload.reason == "3 of 3 pods running",
                     what="the MPI job's launcher and both workers to run")
    name, namespace = workload.k8s_name, team.namespace
    pods = {pod["metadata"]["name"]: pod for pod in pods_of(workload)}
    assert sorted(pods) == [f"{name}-launcher-0", f"{name}-worker-0", f"{name}-worker-1"]

    # The svc plugin: each pod its own host name in the Job's subdomain, the launcher the workers'.
    hosts = gateway().get(ObjectRef("v1", "ConfigMap", f"{name}-svc", namespace))
    assert hosts is not None
    assert hosts["data"]["worker.host"].split("\n") == [f"{name}-worker-0.{name}", f"{name}-worker-1.{name}"]
    for pod_name, pod in pods.items():
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (pod_name, name)
    # The ssh plugin: one key pair for the Job, mounted where the portal's scripts read it.
    keys = gateway().get(ObjectRef("v1", "Secret", f"{name}-ssh", namespace))
    assert keys is not None and set(keys["data"]) == {"id_rsa", "id_rsa.pub", "authorized_keys", "config"}
    assert base64.b64decode(keys["data"]["authorized_keys"]) == base64.b64decode(keys["data"]["id_rsa.pub"])
    for pod in pods.values():
        (main,) = pod["spec"]["containers"]
        assert {"mountPath": mpi.SSH_KEYS_PATH, "subPath": ".ssh"}.items() <= next(
            m for m in main["volumeMounts"] if m["mountPath"] == mpi.SSH_KEYS_PATH).items()
        assert any(m["mountPath"] == "/etc/volcano" for m in main["volumeMounts"])
        gpus = main["resources"]["limits"].get("nvidia.com/gpu")
        assert gpus == (None if task_of(pod) == "launcher" else "1")
        assert pod["spec"]["securityContext"]["runAsNonRoot"] and not pod["spec"]["automountServiceAccountToken"]

    # The launcher finishing ends the run: the portal reads it succeeded and the workers go.
    launcher = pods[f"{name}-launcher-0"]
    cluster.wait_for(lambda: finish(launcher), what="the launcher to be told to finish")
    cluster.wait_for(lambda: phase_of(workload) == Workload.Phase.SUCCEEDED, what="the MPI job to succeed with its launcher",
                     timeout=90)
    cluster.wait_for(lambda: not [p for p in pods_of(workload) if (p.get("status") or {}).get("phase") == "Running"
                                  and not p["metadata"].get("deletionTimestamp")],
                     what="the workers to be stopped once the launcher finished")
    # Billed from its pods, as every kind: the launcher held no GPU, each worker its unit.
    cluster.wait_for(lambda: RunInterval.objects.filter(workload=workload).count() == 3, what="an interval per pod")
    assert sorted(RunInterval.objects.filter(workload=workload).values_list("pod_name", "units")) == [
        (f"{name}-launcher-0", 0), (f"{name}-worker-0", 1), (f"{name}-worker-1", 1)]


def test_a_site_on_kueue_is_refused_mpi_templates_and_launches_in_words(cluster, site, templates, settings,
                                                                        django_capture_on_commit_callbacks):
    team = site.team("mpi-kueue", gpus=2)
    member = team.memberships.get().user
    assert templates["mpi"] in selectors.templates_for_user(user=member)
    settings.PORTAL_QUEUE_BACKEND = "kueue"  # the site switched (drained first, as docs/queue-backends.md says)
    refusal = "MPI jobs run only where the site's queue backend is Volcano; this site runs Kueue."
    with pytest.raises(DomainError, match=refusal) as refused:
        launch(team, member, templates["mpi"], site.flavor, django_capture_on_commit_callbacks, units=1)
    assert refused.value.field == "template" and not Workload.objects.filter(team=team).exists()
    assert templates["mpi"] not in selectors.templates_for_user(user=member)
    with pytest.raises(DomainError, match=refusal) as refused:
        job_services.template_create(user=site.admin, slug="mpi-again", name="MPI again", kind="mpi", flavors=[site.flavor],
                                     image="registry.example.com/ml/runtime:1", command=["mpirun"])
    assert refused.value.field == "kind"

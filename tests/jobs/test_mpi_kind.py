"""The MPI kind (jobs/kinds/mpi.py): a launcher and its workers as one Volcano Job whose ssh and svc
plugins give them keys and host names, on a Volcano site, and refused in words elsewhere."""

from __future__ import annotations

import pytest

from jobs import kinds
from jobs.kinds import mpi
from jobs.manifests import Placement, WorkloadSpec
from tenants.queueing import volcano

SPEC = WorkloadSpec(
    workload_id=9, name="wl-9", namespace="vision", team="vision", kind="mpi", image="registry.example.com/mpi:1",
    command=("mpirun",), args=("--hostfile", "/etc/volcano/worker.host", "python", "allreduce.py"), env=(("NCCL_DEBUG", "INFO"),),
    gpu=(("nvidia.com/gpu", 2),), workers=3, priority="high", team_queue="vision", flavor="h100-80gb",
    placements=(Placement(node_labels=(("gpu-portal.io/flavor", "h100-80gb"),)),), max_runtime_seconds=3600,
)


@pytest.fixture
def on_volcano(settings):
    settings.PORTAL_QUEUE_BACKEND = "volcano"


def built() -> dict:
    (job,) = kinds.workload_objects(spec=SPEC)
    return job


def tasks(job: dict) -> dict[str, dict]:
    return {task["name"]: task for task in job["spec"]["tasks"]}


def test_an_mpi_job_is_one_volcano_job_of_a_launcher_and_its_workers_all_started_together(on_volcano):
    job = built()
    assert (job["apiVersion"], job["kind"]) == (volcano.BATCH, "Job")
    spec = job["spec"]
    # Every pod in one gang, the launcher's too, in the flavor's Queue at the launch's tier.
    assert (spec["minAvailable"], spec["queue"], spec["priorityClassName"]) == (4, "vision.h100-80gb", "gpu-portal-high")
    assert {name: task["replicas"] for name, task in tasks(job).items()} == {"launcher": 1, "worker": 3}
    # The run ends when the launcher does; an eviction restarts it whole; a failure ends it.
    assert tasks(job)["launcher"]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert spec["policies"] == [dict(policy) for policy in volcano.POLICIES]
    assert spec["plugins"] == {"ssh": ["--ssh-key-file-path=/etc/gpu-portal/ssh"], "svc": ["--disable-network-policy=true"]}
    assert job["metadata"]["labels"][volcano.FLAVOR_LABEL] == "h100-80gb"


def test_the_workers_hold_the_gpus_and_the_launcher_none(on_volcano):
    launcher, worker = (tasks(built())[name]["template"]["spec"] for name in ("launcher", "worker"))
    assert worker["containers"][0]["resources"]["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}
    assert launcher["containers"][0]["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    for pod in (launcher, worker):
        assert pod["schedulerName"] == "volcano" and pod["activeDeadlineSeconds"] == 3600
        assert pod["nodeSelector"] == {"gpu-portal.io/flavor": "h100-80gb"}
        assert pod["securityContext"]["runAsNonRoot"] and pod["restartPolicy"] == "Never"
        assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert (env["MPI_HOSTFILE"], env["MPI_WORKERS"], env["NCCL_DEBUG"]) == ("/etc/volcano/worker.host", "3", "INFO")


def test_what_the_template_says_reaches_the_launcher_only_as_arguments_after_the_portals_script(on_volcano, settings):
    hostile = WorkloadSpec(**{**SPEC.__dict__, "command": ("sh",), "args": ("-c", "rm -rf / ; $(id) `id`")})
    (job,) = kinds.workload_objects(spec=hostile)
    launcher = tasks(job)["launcher"]["template"]["spec"]["containers"][0]
    worker = tasks(job)["worker"]["template"]["spec"]["containers"][0]
    assert launcher["command"] == ["sh", "-c", mpi.LAUNCHER_SCRIPT, "launcher"]
    assert launcher["args"] == ["sh", "-c", "rm -rf / ; $(id) `id`"]  # "$@": arguments, never parsed by the script
    assert mpi.LAUNCHER_SCRIPT.endswith('exec "$@"\n')
    # The workers run the portal's SSH server and nothing the template said.
    assert worker["command"] == ["sh", "-c", mpi.WORKER_SCRIPT] and "args" not in worker
    assert "rm -rf" not in mpi.WORKER_SCRIPT + mpi.LAUNCHER_SCRIPT


def test_the_scripts_keep_the_key_private_and_serve_ssh_unprivileged():
    # Volcano's ssh plugin mounts the keys readable by all where the path is not /root/.ssh; ssh
    # refuses such a private key, so both roles copy them into ~/.ssh, readable by the user alone.
    assert 'chmod 600 "$HOME/.ssh/"*' in mpi.SSH_SETUP and mpi.SSH_KEYS_PATH in mpi.SSH_SETUP
    assert f"-p {mpi.SSH_PORT}" in mpi.WORKER_SCRIPT and mpi.SSH_PORT > 1024
    assert f"Port {mpi.SSH_PORT}" in mpi.SSH_SETUP  # the launcher reaches every worker on that port


def test_on_kueue_the_kind_is_refused_in_words_and_not_offered(settings):
    settings.PORTAL_QUEUE_BACKEND = "kueue"
    assert kinds.refusal("mpi") == "MPI jobs run only where the site's queue backend is Volcano; this site runs Kueue."
    assert "mpi" not in kinds.runnable() and "training" in kinds.runnable()
    with pytest.raises(ValueError, match="MPI jobs run only"):
        kinds.workload_objects(spec=SPEC)
    settings.PORTAL_QUEUE_BACKEND = "volcano"
    assert kinds.refusal("mpi") == "" and "mpi" in kinds.runnable()

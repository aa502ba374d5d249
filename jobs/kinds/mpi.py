"""An MPI job: a launcher that runs the template's command (`mpirun …`) and workers that run an SSH
server, all started together, as a Volcano Job whose `ssh` plugin gives every pod one key pair and
whose `svc` plugin gives each its host name and the launcher the workers' hostfile. The run ends
when the launcher does (its TaskCompleted policy); the workers are then stopped.

Runs where the site's queue backend is Volcano: Kueue runs MPI through the Kubeflow MPI Operator's
MPIJob, which the portal does not install. The image carries an SSH server and the MPI runtime,
and a user of uid 1000 with a home directory; the portal's fixed scripts put the keys there (the
plugin mounts them readable by everyone, which ssh refuses for a private key) and start `sshd` on
an unprivileged port, as that user, with no capability."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from jobs import manifests as m
from jobs.kinds.base import VOLCANO_BATCH, Kind, derive_batch_job
from portal.metrics.simulated import TelemetryProfile

LAUNCHER, WORKER = "launcher", "worker"
# Where Volcano's ssh plugin mounts the job's keys (`--ssh-key-file-path`; not /root/.ssh, since the
# pods do not run as root), where its svc plugin mounts the hostfiles, and the workers' SSH port.
SSH_KEYS_PATH = "/etc/gpu-portal/ssh"
HOSTFILE = f"/etc/volcano/{WORKER}.host"
SSH_PORT = 2222
# The launcher needs no GPU: it starts the ranks on the workers and waits for them.
LAUNCHER_CPU, LAUNCHER_MEMORY_GIB = 1, 2

# Both roles: the keys copied into the user's ~/.ssh, readable by that user alone, and every host
# reached on the workers' port. Fixed text: nothing a user typed is part of it.
SSH_SETUP = (
    'set -eu\n'
    'mkdir -p "$HOME/.ssh"\nchmod 700 "$HOME/.ssh"\n'
    f'for key in id_rsa id_rsa.pub authorized_keys config; do cp "{SSH_KEYS_PATH}/$key" "$HOME/.ssh/$key"; done\n'
    'chmod 600 "$HOME/.ssh/"*\n'
    f'printf "Host *\\n  Port {SSH_PORT}\\n" >> "$HOME/.ssh/config"\n'
)
# A worker serves SSH for the launcher until the run ends; its host key is the job's key.
WORKER_SCRIPT = SSH_SETUP + (
    f'exec /usr/sbin/sshd -D -e -p {SSH_PORT} -h "$HOME/.ssh/id_rsa" -o PidFile=none -o UsePAM=no '
    '-o AuthorizedKeysFile="$HOME/.ssh/authorized_keys"\n'
)
# The launcher runs the template's command and arguments, given after the script as "$@".
LAUNCHER_SCRIPT = SSH_SETUP + 'exec "$@"\n'


def make_mpi_job(*, spec: m.WorkloadSpec) -> dict[str, Any]:
    """The Volcano Job of an MPI run, without what the queue backend adds (its Queue, its tier, its
    gang of every pod, the launcher's too, and its eviction policy: tenants.queueing.volcano's
    `queued_job`)."""
    hosts = (("MPI_HOSTFILE", HOSTFILE), ("MPI_WORKERS", str(spec.workers)), ("MPI_SSH_PORT", str(SSH_PORT)))
    launcher_spec = replace(spec, gpu=(), claim=None, cpu=LAUNCHER_CPU, memory_gib=LAUNCHER_MEMORY_GIB, port=0)
    launcher = m.container(launcher_spec, extra_env=hosts)
    launcher.update(command=["sh", "-c", LAUNCHER_SCRIPT, LAUNCHER], args=[*spec.command, *spec.args])
    worker = m.container(spec, extra_env=hosts)
    worker.pop("args", None)
    worker.update(command=["sh", "-c", WORKER_SCRIPT], ports=[{"name": "ssh", "containerPort": SSH_PORT}])
    tasks = [
        {"name": LAUNCHER, "replicas": 1, "template": _pod(launcher_spec, launcher),
         "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}]},
        {"name": WORKER, "replicas": spec.workers, "template": _pod(spec, worker)},
    ]
    return {
        "apiVersion": VOLCANO_BATCH, "kind": "Job",
        "metadata": m.meta(spec, spec.queue_labels),
        "spec": {
            "ttlSecondsAfterFinished": m.TTL_AFTER_FINISHED,
            "plugins": {"ssh": [f"--ssh-key-file-path={SSH_KEYS_PATH}"], "svc": ["--disable-network-policy=true"]},
            "tasks": tasks,
        },
    }


def _pod(spec: m.WorkloadSpec, main: dict[str, Any]) -> dict[str, Any]:
    """One role's pod: the run time limit on the pod (a restarted run gets it afresh), run to the end."""
    template = m.pod_template(spec, main, restart="Never")
    template["spec"]["activeDeadlineSeconds"] = spec.max_runtime_seconds
    return template


KIND = Kind(
    name="mpi", label="MPI job", noun="MPI job", plural="MPI jobs",
    build=lambda spec: [make_mpi_job(spec=spec)], owner=(VOLCANO_BATCH, "Job"), derive=derive_batch_job,
    telemetry=TelemetryProfile("steady", 0.85), runs_to_completion=True, pod_noun="worker",
    starts_together=True, companion_pods=1, queues=("volcano",),
)

"""How a training's Volcano Job reads in the portal's phases (jobs.kinds.base.derive_volcano_job):
by the phase Volcano's job controller keeps, a restart read as a preemption (the portal's policies
restart a run only after an eviction and end it at a failure)."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.kinds import base
from jobs.kinds.base import derive_batch_job
from tenants.queueing.base import Admission

WAITING = Admission(pending=True, waiting="Waiting for room: Volcano cannot place all 2 of its pods yet")
PLACED = Admission(starting="Placed by Volcano; starting its pods")


def volcano_job(phase: str, *, retries: int = 0, replicas: int = 2) -> dict:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "wl-7", "uid": "u"},
            "spec": {"minAvailable": replicas, "tasks": [{"name": "worker", "replicas": replicas}]},
            "status": {"state": {"phase": phase}, "retryCount": retries} if phase else {}}


def pod(phase: str, *, exit_code: int | None = None, reason: str = "", index: int = 0, job_uid: str = "u",
        deleting: bool = False) -> dict:
    status: dict = {"phase": phase, **({"reason": reason} if reason else {})}
    if exit_code is not None:
        status["containerStatuses"] = [{"name": "main", "state": {"terminated": {"exitCode": exit_code, "reason": "Error"}}}]
    meta: dict = {"name": f"wl-7-worker-{index}", "ownerReferences": [{"kind": "Job", "uid": job_uid}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-28T10:00:00Z"
    return {"metadata": meta, "status": status}


@pytest.mark.parametrize(("phase", "retries", "pods", "admission", "expected"), [
    ("", 0, [], WAITING, (base.QUEUED, WAITING.waiting)),
    ("Pending", 0, [pod("Pending"), pod("Pending")], WAITING, (base.QUEUED, WAITING.waiting)),
    ("Pending", 0, [pod("Pending"), pod("Pending")], PLACED, (base.ADMITTED, PLACED.starting)),
    ("Running", 0, [pod("Running"), pod("Running", index=1)], PLACED, (base.RUNNING, "2 of 2 pods running")),
    ("Running", 1, [pod("Running"), pod("Running", index=1)], PLACED,
     (base.RUNNING, "2 of 2 pods running (started again 1 time after Volcano evicted it)")),
    ("Completed", 0, [pod("Succeeded"), pod("Succeeded", index=1)], PLACED, (base.SUCCEEDED, "Finished successfully")),
    ("Running", 0, [pod("Succeeded"), pod("Succeeded", index=1)], PLACED, (base.SUCCEEDED, "Finished successfully")),
    ("Running", 0, [pod("Succeeded"), pod("Running", index=1)], PLACED, (base.RUNNING, "1 of 2 pods running")),
    ("Running", 0, [pod("Succeeded"), pod("Succeeded", index=1, job_uid="an-earlier-job"), pod("Running", index=1)],
     PLACED, (base.RUNNING, "1 of 2 pods running")),
    ("Running", 0, [pod("Succeeded"), pod("Succeeded", index=1, deleting=True)], PLACED, (base.ADMITTED, PLACED.starting)),
    ("Terminated", 0, [pod("Failed", exit_code=3), pod("Running")], PLACED,
     (base.FAILED, "A pod failed (Error, exit code 3), and Volcano stopped the rest of the run")),
    ("Terminated", 0, [pod("Failed", reason="DeadlineExceeded")], PLACED, (base.FAILED, base.OVERRAN)),
    ("Failed", 20, [], WAITING,
     (base.FAILED, "Started again 20 times after evictions, the most Volcano allows it; it was not run again")),
], ids=["unseen", "waiting", "placed", "running", "running-again", "completed", "every-pod-succeeded", "one-of-two",
        "earlier-job", "killed-pod", "a-pod-failed", "overran", "too-many-restarts"])
def test_a_volcano_job_reads_as_its_controllers_phase_says(phase, retries, pods, admission, expected):
    assert derive_batch_job(volcano_job(phase, retries=retries), pods, admission) == expected


@pytest.mark.parametrize("phase", ["Restarting", "Pending"])
def test_a_volcano_job_started_again_after_an_eviction_reads_preempted_until_it_runs(phase):
    verdict, reason = derive_batch_job(volcano_job(phase, retries=1), [], WAITING)
    assert verdict == base.PREEMPTED and reason.startswith("Preempted and queued again: Volcano evicted its pods")
    assert "all 2 start again" in reason
    single = derive_batch_job(volcano_job(phase, retries=1, replicas=1), [], WAITING)
    assert single[0] == base.PREEMPTED and "evicted its pod " in single[1]


def test_a_batch_job_that_ran_out_of_retries_says_how_its_pods_failed_in_the_portals_words():
    job: dict[str, Any] = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "wl-7"}, "spec": {},
           "status": {"failed": 3, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}
    assert derive_batch_job(job, [pod("Failed", exit_code=1)], PLACED) == (
        base.FAILED, "Its pods failed 3 times (Error, exit code 1), and it is not retried again")
    job["status"]["conditions"][0]["reason"] = "DeadlineExceeded"
    assert derive_batch_job(job, [], PLACED) == (base.FAILED, base.OVERRAN)

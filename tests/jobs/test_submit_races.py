"""The submit task against what happens while it creates a workload's objects: the status sync
sees them first, or the owner stops the workload. A later phase is never undone, and a stopped
workload keeps no objects in the cluster."""

from __future__ import annotations

from typing import Any

import pytest

from jobs import services
from jobs.models import Workload
from portal.kube import FIELD_MANAGER, ObjectRef, reset_gateway
from portal.kube.simulated import SimulatedGateway
from tests.helpers import launch
from tests.scripted_gateway import ScriptedGateway

pytestmark = pytest.mark.django_db


class RacingGateway(ScriptedGateway):
    """Runs `meanwhile` once, right after the first object is applied: another process acting
    on the workload while the submit task is still creating the rest."""

    def __init__(self, cluster: SimulatedGateway, meanwhile: Any) -> None:
        super().__init__(cluster)
        self.meanwhile = meanwhile

    def apply(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER, force: bool = True) -> dict[str, Any]:
        applied = super().apply(obj, field_manager=field_manager, force=force)
        if self.meanwhile is not None:
            action, self.meanwhile = self.meanwhile, None
            action()
        return applied


def only(phase: str) -> Workload:
    (workload,) = Workload.objects.all()
    assert workload.phase == phase, (workload.phase, workload.reason)
    return workload


def test_the_submit_task_never_moves_a_workload_the_sync_saw_running_back_to_queued(
    ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks
):
    def sync_sees_it_running() -> None:
        workload = Workload.objects.get()
        services.record_transition(workload, Workload.Phase.RUNNING, "1 of 1 pods running")

    reset_gateway(RacingGateway(simulated, sync_sees_it_running))
    with django_capture_on_commit_callbacks(execute=True):
        launch(member, ready_team, training, flavor)

    workload = only(Workload.Phase.RUNNING)
    assert workload.submitted_at is not None
    assert [t.phase for t in workload.transitions.all()] == ["submitting", "running"]


def test_a_workload_stopped_while_its_objects_were_created_keeps_none_of_them(
    ready_team, member, training, flavor, simulated, django_capture_on_commit_callbacks
):
    def owner_stops_it() -> None:
        services.workload_stop(user=member, workload=Workload.objects.get())

    reset_gateway(RacingGateway(simulated, owner_stops_it))
    with django_capture_on_commit_callbacks(execute=True):
        launch(member, ready_team, training, flavor)

    workload = only(Workload.Phase.STOPPED)
    job = ObjectRef("batch/v1", "Job", workload.k8s_name, ready_team.namespace)
    assert simulated.get(job) is None

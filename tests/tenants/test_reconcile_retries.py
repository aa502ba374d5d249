"""What the team tasks do when the cluster refuses or stays away: a refusal is recorded on the
team at once and not retried; an outage is retried a few times, then recorded."""

from __future__ import annotations

import pytest

from portal.kube import ObjectRef, reset_gateway
from portal.tasks import CLUSTER_TASK_RETRIES
from tenants import manifests, tasks
from tests.scripted_gateway import ScriptedGateway, refusal, unavailable

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _retries_run_at_once(settings):
    # Eager Celery runs a retry at once, in place of queueing it, but only when it does not
    # propagate the Retry to the caller: as in a worker, the caller gets the task's result.
    settings.CELERY_TASK_EAGER_PROPAGATES = False


def test_a_team_the_cluster_refuses_is_recorded_once_with_the_reason_and_not_retried(team, flavor, simulated):
    cluster = ScriptedGateway(simulated, always=refusal("rejected as invalid: spec.cohortName: Invalid value"))
    reset_gateway(cluster)

    result = tasks.team_reconcile.delay(team.pk)

    team.refresh_from_db()
    assert result.successful()  # recorded, so the task ends: nothing for Celery to retry or report
    assert cluster.attempts == 1
    assert team.sync_error == "rejected as invalid: spec.cohortName: Invalid value"
    assert team.sync_state == "error"


def test_a_team_reconcile_during_an_outage_is_retried_a_bounded_number_of_times_then_recorded(team, flavor, simulated):
    cluster = ScriptedGateway(simulated, always=unavailable("etcdserver: request timed out"))
    reset_gateway(cluster)

    result = tasks.team_reconcile.delay(team.pk)

    team.refresh_from_db()
    assert result.successful()
    assert cluster.attempts == 1 + CLUSTER_TASK_RETRIES
    assert team.sync_error == "etcdserver: request timed out"


def test_a_team_reconcile_that_outlasts_a_short_outage_applies_the_team_and_clears_the_error(team, flavor, simulated):
    cluster = ScriptedGateway(simulated, unavailable(), unavailable())
    reset_gateway(cluster)

    result = tasks.team_reconcile.delay(team.pk)

    team.refresh_from_db()
    assert result.get() is True and cluster.failures == 2
    assert team.sync_error == "" and team.applied_version == team.config_version
    assert simulated.get(ObjectRef("v1", "Namespace", "vision")) is not None


def test_a_bug_in_a_team_task_is_raised_and_not_retried(team, flavor, simulated):
    cluster = ScriptedGateway(simulated, always=ZeroDivisionError("a bug, not the weather"))
    reset_gateway(cluster)

    result = tasks.team_reconcile.delay(team.pk)

    assert result.state == "FAILURE" and isinstance(result.result, ZeroDivisionError)
    assert cluster.attempts == 1


UID = "6f1c2b1e-0000-4000-8000-000000000001"
PROOF = {"labels": {manifests.MANAGED_BY_LABEL: manifests.MANAGER}, "annotations": {manifests.TEAM_UID_ANNOTATION: UID}}


class StillTerminating(ScriptedGateway):
    """A cluster whose namespaces take longer to go than the teardown is willing to wait."""

    looks = 0

    def get(self, ref: ObjectRef) -> dict | None:
        if ref.kind == "Namespace":
            self.looks += 1
            metadata = {"name": ref.name, "deletionTimestamp": "2026-11-23T10:00:00Z", **PROOF}
            return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
        return super().get(ref)


def test_a_teardown_looks_again_a_bounded_number_of_times_for_a_terminating_namespace(simulated):
    cluster = StillTerminating(simulated)
    reset_gateway(cluster)

    result = tasks.team_teardown.delay("vision", UID)

    assert result.successful()
    # Each run reads the namespace twice (before deleting, then to see whether it is gone), and
    # deletes nothing that is already terminating.
    assert (cluster.looks, cluster.attempts) == (2 * (1 + tasks.TEARDOWN_POLLS), 0)


def test_a_teardown_the_cluster_refuses_is_not_retried(simulated):
    simulated.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vision", **PROOF}})
    cluster = ScriptedGateway(simulated, always=refusal("namespaces \"vision\" is forbidden", status=403))
    reset_gateway(cluster)

    result = tasks.team_teardown.delay("vision", UID)

    assert result.successful() and cluster.attempts == 1

"""A launch no worker takes does not sit 'Submitting' in silence: the periodic pass says why and
sends it again."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from jobs import tasks
from jobs.models import Workload
from tests.helpers import launch

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    """What the pass hands to the broker, held back so the workload stays as no worker left it."""
    calls: list[tuple[Any, dict[str, Any]]] = []
    monkeypatch.setattr(tasks.workload_submit, "apply_async", lambda args, **kwargs: calls.append((args, kwargs)))
    return calls


def _created_minutes_ago(workload: Workload, minutes: float) -> None:
    Workload.objects.filter(pk=workload.pk).update(created_at=timezone.now() - dt.timedelta(minutes=minutes))


def test_a_workload_submitting_beyond_the_bound_says_why_on_its_page_and_in_the_api(
        ready_team, member, training, flavor, sent, as_user):
    workload = launch(member, ready_team, training, flavor)
    _created_minutes_ago(workload, 5)

    assert tasks.workloads_resubmit_lost() == 1

    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.SUBMITTING
    assert workload.reason == ("Not submitted yet: no worker has taken it for 5 minutes; "
                               "the portal's worker may be down — it is being retried.")
    assert sent == [((workload.pk,), {"expires": 60})]
    client = as_user(member)
    assert client.get(f"/api/workloads/{workload.pk}/").json()["reason"] == workload.reason
    assert "no worker has taken it for 5 minutes" in client.get(f"/workloads/{workload.pk}/").content.decode()


def test_a_workload_within_the_bound_is_left_alone(ready_team, member, training, flavor, sent, settings):
    settings.PORTAL_SUBMITTING_BOUND_SECONDS = 120
    workload = launch(member, ready_team, training, flavor)
    _created_minutes_ago(workload, 1)

    assert tasks.workloads_resubmit_lost() == 0

    workload.refresh_from_db()
    assert workload.reason == ""
    assert sent == []


def test_the_reason_counts_the_attempts_a_worker_already_made(ready_team, member, training, flavor, sent):
    workload = launch(member, ready_team, training, flavor)
    Workload.objects.filter(pk=workload.pk).update(submit_attempts=3)
    _created_minutes_ago(workload, 3)

    tasks.workloads_resubmit_lost()

    workload.refresh_from_db()
    assert workload.reason.startswith("Not submitted yet: no worker has taken it for 3 minutes (3 attempts so far);")


def test_a_resubmitted_workload_is_submitted_and_its_reason_replaced(ready_team, member, training, flavor, simulated):
    workload = launch(member, ready_team, training, flavor)
    _created_minutes_ago(workload, 4)

    tasks.workloads_resubmit_lost()

    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.QUEUED
    assert workload.reason == "Waiting for Kueue to admit it"

"""Poison input to tasks: a task handed an id whose row is gone (deleted while the message waited
in the broker), or a workload whose template was withdrawn, ends at once with the reason
recorded (in the log where no row is left to carry it, on the workload where one is) and is
never retried: nothing about the input will change by trying again.

The tasks come from the Celery app's own registry, so a new task cannot escape: one that takes
arguments needs its poison case here, one that takes none has no id to poison."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from celery.signals import task_retry

from jobs import tasks as job_tasks
from jobs.models import Workload, WorkloadTemplate
from portal.celery import app
from portal.kube import ObjectRef
from tests.helpers import launch

pytestmark = pytest.mark.django_db

MISSING = 987_654_321
# Every task that takes arguments: the arguments of something that no longer exists, and what its log says.
POISON: dict[str, tuple[tuple[Any, ...], str]] = {
    "jobs.tasks.workload_submit": ((MISSING,), f"submit: workload {MISSING} no longer exists; nothing to do"),
    "jobs.tasks.workload_apply": ((MISSING,), f"apply: workload {MISSING} no longer exists; nothing to do"),
    "jobs.tasks.workload_teardown": ((MISSING,), f"teardown: workload {MISSING} no longer exists; nothing to do"),
    "tenants.tasks.team_reconcile": ((MISSING,), f"team {MISSING} no longer exists; nothing to reconcile"),
    "jobs.tasks.person_limit_release": ((MISSING,), f"person limits: team {MISSING} no longer exists; nothing to release"),
    # A deleted team's teardown whose objects are gone too (deleted by hand, or by an earlier run).
    "tenants.tasks.team_teardown": (("gone-team", "00000000-0000-0000-0000-000000000000"),
                                    "team gone-team: nothing of it is left in the cluster"),
}


@functools.cache
def portal_tasks() -> dict[str, Any]:
    # Autodiscovery is lazy: import every app's tasks now. Celery's Django fixup sets up Django,
    # and so its logging, again each time: hence once, and the log is captured only after it.
    app.loader.import_default_modules()
    return {name: task for name, task in app.tasks.items() if not name.startswith("celery.")}


class Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def said() -> Iterator[list[str]]:
    portal_tasks()
    handler = Said()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler.messages
    root.removeHandler(handler)
    root.setLevel(level)


def parameters(task: Any) -> list[str]:
    signature = inspect.signature(task.run)
    return [name for name in signature.parameters if name != "self"]


@pytest.fixture
def retries() -> Iterator[list[str]]:
    seen: list[str] = []

    def count(sender: Any = None, **kwargs: Any) -> None:
        seen.append(sender.name)

    task_retry.connect(count, weak=False)
    yield seen
    task_retry.disconnect(count)


@pytest.fixture(autouse=True)
def _retries_run_in_place(settings):
    # Eager Celery runs a retry at once in place of queueing it, when it does not hand the Retry to the caller.
    settings.CELERY_TASK_EAGER_PROPAGATES = False


def test_every_task_that_takes_arguments_has_a_poison_case_and_the_rest_take_none():
    registered = portal_tasks()
    with_arguments = {name for name, task in registered.items() if parameters(task)}
    assert with_arguments == set(POISON), (
        "a task that takes arguments needs its poison case in POISON (or one listed here no longer exists)")
    assert len(registered) > len(POISON)  # the registry really was read: the periodic tasks are in it too


@pytest.mark.parametrize("name", sorted(POISON))
def test_a_task_given_something_that_no_longer_exists_ends_with_the_reason_logged_and_no_retry(
        name, simulated, retries, said):
    task = portal_tasks()[name]

    arguments, reason = POISON[name]

    result = task.apply(arguments)

    assert result.successful(), result.traceback
    assert retries == []
    assert reason in said, said


def test_a_lost_submission_of_a_withdrawn_template_fails_with_the_reason_and_is_not_sent_again(
        ready_team, member, training, flavor, simulated, retries, settings):
    workload = launch(member, ready_team, training, flavor)  # recorded; its task was lost (eager tasks wait for commit)
    WorkloadTemplate.objects.filter(pk=training.pk).update(is_active=False)
    settings.PORTAL_SUBMITTING_BOUND_SECONDS = -1

    assert job_tasks.workloads_resubmit_lost.delay().get() == 1

    workload.refresh_from_db()
    assert workload.phase == Workload.Phase.FAILED
    assert workload.reason == (f"Not created in the cluster: The template “{training.name}” is no longer available "
                               f"to {ready_team.slug}; launch it again from another template.")
    assert simulated.get(ObjectRef("batch/v1", "Job", workload.k8s_name, ready_team.namespace)) is None
    assert retries == []
    assert job_tasks.workloads_resubmit_lost.delay().get() == 0  # the periodic pass leaves it be

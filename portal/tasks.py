"""The portal's own tasks, and the one retry policy every task that talks to a cluster follows.

The gateway already retries what is transient (429, 5xx, a dropped connection) with its own
budget of attempts and backoff, so a task sees a transient KubeError only after that budget is
spent. Retrying such a task 6 to 8 times on top multiplied one outage into dozens of calls, and
`autoretry_for=(Exception,)` retried refusals (a 422) that can never succeed. The policy here:

- a KubeError the gateway calls retriable: the task runs again a few times, later each time,
  with jitter so that tasks failing together do not come back together;
- a KubeError that is a refusal (4xx), or a transient one whose retries are spent: the task
  records the reason where people see it (`gave_up`) at once and ends;
- any other exception is a bug, not weather: it is raised and not retried.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from celery import Task, shared_task
from django.db import transaction
from kombu.exceptions import OperationalError

from portal.backoff import backoff_delay
from portal.celery import app
from portal.health import WORKER, heartbeat_record
from portal.kube import KubeError, gateway

log = logging.getLogger(__name__)

# Few: each task attempt already spent the gateway's own retries. What still fails after these
# is recorded, and the periodic passes (cluster reconcile, resubmitting lost workloads) repair it.
CLUSTER_TASK_RETRIES = 3
RETRY_DELAY_BASE = 10.0
RETRY_DELAY_MAX = 120.0


def retry_delay(retries: int, *, rand: Callable[[], float] = random.random) -> float:
    """Seconds before retry number `retries + 1`: doubling from the base up to the cap, each
    drawn at random from its upper half so that a crowd of failed tasks spreads out."""
    return backoff_delay(retries, base=RETRY_DELAY_BASE, most=RETRY_DELAY_MAX, least=0.5, more=0.5, rand=rand)


GaveUp = Callable[..., None]


class ClusterTask(Task):
    """Base of every task that talks to a cluster: acknowledged late, and retried only as the
    module docstring says. A task names how to record that it gave up with `gave_up=`."""

    acks_late = True
    max_retries = CLUSTER_TASK_RETRIES
    # Called as gave_up(error, *task_args, **task_kwargs); None only logs (the periodic pass repairs).
    gave_up: GaveUp | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except KubeError as error:
            request = self.request
            if error.retriable and not request.called_directly and request.retries < self.max_retries:
                raise self.retry(exc=error, countdown=retry_delay(request.retries)) from error
            log.warning("%s gave up after %d retries: %s", self.name, request.retries or 0, error)
            if self.gave_up is not None:
                self.gave_up(error, *args, **kwargs)
            return None


def cluster_task(*, gave_up: GaveUp | None = None, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`@shared_task` with the cluster retry policy; `gave_up` records why the task ended."""
    if gave_up is not None:
        options["gave_up"] = staticmethod(gave_up)
    return shared_task(base=ClusterTask, **options)


_LOADING = threading.Lock()


def task_named(name: str) -> Task:
    """The task registered as `name`, its dotted path. A service enqueues by name the task that
    calls it back, so that neither module imports the other (an app's tasks module is an adapter
    on top of its services, as its views are). A name not registered yet makes the tasks modules
    load as a worker loads them at start (Celery's autodiscovery); an unknown one raises at once,
    before anything is recorded."""
    if name not in app.tasks:
        # One thread loads them; the others wait for it. Celery marks the loading begun before it
        # ends, so a second thread asking meanwhile was answered at once, without the task: the
        # web process's first concurrent launches failed.
        with _LOADING:
            if name not in app.tasks:
                app.loader.import_default_modules()
    return app.tasks[name]


def send_on_commit(task: Any, *args: Any, unsent: Callable[[], None] | None = None) -> None:
    """Sends `task(*args)` to the workers once the current transaction commits; `task` is a task
    or its name (`task_named`). When the broker does not take it (Redis down or unreachable), what
    the transaction recorded stands and the request that recorded it still answers: the periodic
    pass that repairs this kind of change sends it again, and `unsent()` (run after the commit,
    outside any transaction) can mark it for the very next pass rather than waiting out the pass's
    bound."""
    if isinstance(task, str):
        task = task_named(task)

    def send() -> None:
        try:
            task.apply_async(args)
        except OperationalError as error:
            log.warning("%s%s was recorded but not sent to the workers (the broker did not answer: %s); "
                        "the periodic pass sends it again", task.name, args, error)
            if unsent is not None:
                unsent()

    transaction.on_commit(send)


@shared_task(acks_late=True, ignore_result=True)
def simulated_cluster_tick() -> None:
    """Lets the simulated cluster's controllers move on (pods finish, queues admit); a real
    cluster ignores it. The name stays so the schedules beat already stored keep working."""
    gateway().tick()


@shared_task(acks_late=True, ignore_result=True)
def heartbeat() -> None:
    """Proves to readiness that a worker takes tasks off the broker; beat sends it on a schedule."""
    heartbeat_record(name=WORKER)

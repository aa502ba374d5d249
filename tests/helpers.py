"""Small helpers the test modules share."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from billing.models import Rate
from jobs import services as job_services
from portal.celery import app as celery_app
from tenants import reconcile, services
from tenants.models import Flavor, QuotaRequest, Team
from tests.factories import QuotaGrantFactory


def wait_for(predicate: Callable[[], Any], *, what: str, timeout: float = 60, interval: float = 0.05) -> Any:
    """Polls until predicate() is truthy and returns that value; fails saying what it waited for."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return value


def use_queue(name: str) -> None:
    """Sends this process's tasks to the queue `name`. Celery keeps the queues and the router it
    built from the first send, so those go too, or later tests would still send here."""
    celery_app.conf.task_default_queue = name
    for cached in ("queues", "default_queue", "router"):
        celery_app.amqp.__dict__.pop(cached, None)


def api(user: Any = None) -> APIClient:
    """An API client, logged in as the user when one is given."""
    client = APIClient()
    if user is not None:
        client.force_login(user)
    return client


def file_request(team: Team, requester: Any, flavor: Flavor, units: int = 4, **options: Any) -> QuotaRequest:
    """A quota request filed through the service, as the form and the API would."""
    return services.quota_request_create(
        requester=requester, team=team, lines=[services.LineInput(flavor=flavor, units=units)],
        justification=options.pop("justification", "Fine-tuning the detector"), **options,
    )


TRAINING_PARAMS = [
    {"name": "epochs", "type": "int", "default": 10, "min": 1, "max": 1000},
    {"name": "learning_rate", "type": "float", "default": 0.001, "min": 0.0000001, "max": 1},
    {"name": "image_tag", "type": "choice", "default": "2.5", "choices": ["2.4", "2.5"]},
]


def launch(user: Any, team: Team, template: Any, flavor: Flavor, **kwargs: Any) -> Any:
    """A workload launched through the service, as the form and the API would."""
    request = job_services.LaunchRequest(team=team, template=template, flavor=flavor, **kwargs)
    return job_services.workload_launch(user=user, request=request)


# The price make_ready gives a flavor the rate card has none for: nothing launches on an unpriced
# flavor, and a price from long ago covers any moment a test meters. A test that sets prices of its
# own (tests.billing.factories.rate) takes this one away first: its figures are about its prices.
LAUNCH_PRICE_FROM = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
LAUNCH_PRICE_NOTE = "priced for the test's launches"


def ensure_priced(flavor: Flavor, price: str = "1.00") -> Flavor:
    """Gives the flavor a rate from LAUNCH_PRICE_FROM unless it has one, so launches may use it."""
    if not Rate.objects.filter(flavor=flavor).exists():
        Rate.objects.create(flavor=flavor, price_per_gpu_hour=Decimal(price), effective_from=LAUNCH_PRICE_FROM,
                            note=LAUNCH_PRICE_NOTE)
    return flavor


def own_prices(flavor: Flavor) -> None:
    """Takes away the price ensure_priced gave, for a test that prices the flavor itself."""
    Rate.objects.filter(flavor=flavor, note=LAUNCH_PRICE_NOTE).delete()


def make_ready(team: Team, flavor: Flavor, units: int = 4, *, may_borrow: bool = True) -> Team:
    """Grants the team units of the flavor, prices the flavor if it is not, and provisions the team
    in the current cluster."""
    ensure_priced(flavor)
    QuotaGrantFactory(team=team, flavor=flavor, units=units)
    team.may_borrow = may_borrow
    team.save()
    reconcile.platform_reconcile()
    reconcile.team_reconcile(team_id=team.pk)
    team.refresh_from_db()
    return team


def child_database_url(why: str) -> str:
    """The test database as a DATABASE_URL for a child process (a worker, a watcher) of the test;
    only PostgreSQL can be shared that way, and `why` says what needs it when it is not."""
    db = connection.settings_dict
    if connection.vendor != "postgresql":
        pytest.fail(f"{why}: run this through scripts/with-services.sh, which starts PostgreSQL")
    return f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST']}:{db['PORT']}/{db['NAME']}"

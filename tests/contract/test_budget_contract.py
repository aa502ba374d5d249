"""A hard-stopped budget holds the team's LocalQueue: the same scenario and assertions on the
simulated cluster and on the real control plane (Kueue honours stopPolicy: Hold)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from billing import periods
from billing.budgets import services as budgets
from portal.kube import ObjectRef, gateway
from tenants.queueing.kueue import KUEUE
from tests.billing.budget_helpers import priced, use
from tests.contract.scenarios import condition, existing, is_admitted, probe_job, workload_of
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def inactive(namespace: str, job: str) -> str:
    reserved = condition(workload_of(namespace, job), "QuotaReserved")
    message: str = reserved.get("message", "")
    return message if reserved.get("status") == "False" and "is inactive" in message else ""


def test_a_held_queue_admits_nothing_and_lifting_the_hold_admits(cluster, site, django_capture_on_commit_callbacks):
    team = site.team("budget", gpus=2)
    finance = UserFactory.create(username=cluster.unique("fin"), is_finance=True)
    priced(site.flavor)
    use(team, site.flavor, gpu_hours=20, at=periods.hour_floor(timezone.now()))  # 200 USD
    ns = team.slug

    gateway().apply(probe_job(ns, "before", gpus=1))
    cluster.wait_for(lambda: is_admitted(ns, "before"), what="a job to be admitted before the stop")

    with django_capture_on_commit_callbacks(execute=True):
        budgets.budget_set(actor=finance, team=team, amount="100", currency="USD", hard_stop=True)
    assert existing(ObjectRef(KUEUE, "LocalQueue", "default", ns))["spec"]["stopPolicy"] == "Hold"

    gateway().apply(probe_job(ns, "held", gpus=1))
    message = cluster.wait_for(lambda: inactive(ns, "held"), what="Kueue to say the held queue is inactive")
    assert message == "LocalQueue default is inactive"
    assert not is_admitted(ns, "held")
    assert existing(ObjectRef("batch/v1", "Job", "held", ns))["spec"]["suspend"] is True
    assert is_admitted(ns, "before")  # Hold, not HoldAndDrain: admitted work keeps its quota

    with django_capture_on_commit_callbacks(execute=True):
        budgets.budget_set(actor=finance, team=team, amount="1000", currency="USD", hard_stop=True)
    assert existing(ObjectRef(KUEUE, "LocalQueue", "default", ns))["spec"]["stopPolicy"] == "None"
    cluster.wait_for(lambda: is_admitted(ns, "held"), what="the held job to be admitted once the hold is lifted")

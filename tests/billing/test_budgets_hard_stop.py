"""The hard stop: at 100 % of a hard-stopped budget new launches are refused with the numbers
and who can raise it, and the team's LocalQueue is held (Kueue's stopPolicy: Hold) so nothing new
is admitted while running work continues; raising the budget or the new month lifts it."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from billing import periods
from billing.budgets import services as budgets
from billing.models import Budget
from jobs import sync
from jobs.models import Workload
from portal.errors import DomainError
from portal.kube import ObjectRef, gateway
from tenants.queueing.kueue import KUEUE
from tests.billing.budget_helpers import priced, use
from tests.contract.scenarios import condition, is_admitted, probe_job, workload_of
from tests.helpers import api, launch

pytestmark = pytest.mark.django_db


def now_hour() -> dt.datetime:
    return periods.hour_floor(timezone.now())


def stop_policy(slug: str) -> str:
    queue = gateway().get(ObjectRef(KUEUE, "LocalQueue", "default", slug)) or {}
    return str(queue.get("spec", {}).get("stopPolicy"))


@pytest.fixture
def over_budget(ready_team, flavor, finance_user):
    priced(flavor)
    budget = budgets.budget_set(actor=finance_user, team=ready_team, amount="100", currency="USD", hard_stop=True)
    use(ready_team, flavor, gpu_hours=12, at=now_hour())  # 120 USD
    return budget


REFUSAL = ("vision has spent 120.00 USD of its 100.00 USD budget for {month} (120 %), and its budget has a hard stop: "
           "no new launches until finance or a platform admin raises the budget, or the month ends. "
           "Running workloads continue.")


def test_a_hard_stopped_team_over_budget_cannot_launch_and_is_told_the_numbers_and_who_can_raise_it(
        over_budget, ready_team, member, training, flavor):
    month = periods.current_month().strftime("%B %Y")
    with pytest.raises(DomainError) as refusal:
        launch(member, ready_team, training, flavor)
    assert refusal.value.message == REFUSAL.format(month=month)
    assert not Workload.objects.exists()

    response = api(member).post("/api/workloads/", {"team": "vision", "template": "pytorch-train", "flavor": flavor.slug},
                                format="json")
    assert response.status_code == 400 and response.json()["message"] == REFUSAL.format(month=month)


def test_a_budget_without_hard_stop_only_warns(ready_team, member, training, flavor, finance_user):
    priced(flavor)
    budgets.budget_set(actor=finance_user, team=ready_team, amount="100", currency="USD", hard_stop=False)
    use(ready_team, flavor, gpu_hours=12, at=now_hour())
    budgets.budgets_check()
    assert launch(member, ready_team, training, flavor).pk
    assert stop_policy("vision") == "None" and not Budget.objects.get().held


def test_below_the_budget_a_hard_stopped_team_launches(ready_team, member, training, flavor, finance_user):
    priced(flavor)
    budgets.budget_set(actor=finance_user, team=ready_team, amount="1000", currency="USD", hard_stop=True)
    use(ready_team, flavor, gpu_hours=12, at=now_hour())
    assert launch(member, ready_team, training, flavor).pk


def test_the_check_holds_the_queue_running_work_continues_and_raising_the_budget_lifts_it(
        over_budget, ready_team, member, training, flavor, finance_user, simulated, django_capture_on_commit_callbacks):
    Budget.objects.filter(pk=over_budget.pk).update(hard_stop=False)  # let one launch through before the stop
    with django_capture_on_commit_callbacks(execute=True):
        running = launch(member, ready_team, training, flavor)
    simulated.advance(1)
    sync.sync_all()
    Budget.objects.filter(pk=over_budget.pk).update(hard_stop=True)

    with django_capture_on_commit_callbacks(execute=True):
        result = budgets.budgets_check()
    assert result.held == ["vision"] and stop_policy("vision") == "Hold"
    gateway().apply(probe_job("vision", "after-the-stop", gpus=1))
    simulated.advance(5)
    assert not is_admitted("vision", "after-the-stop")
    reserved = condition(workload_of("vision", "after-the-stop"), "QuotaReserved")
    assert (reserved["status"], reserved["message"]) == ("False", "LocalQueue default is inactive")
    sync.sync_all()
    running.refresh_from_db()
    assert running.phase == Workload.Phase.RUNNING  # Hold, not HoldAndDrain: what runs keeps running

    with django_capture_on_commit_callbacks(execute=True):
        assert budgets.budgets_check().held == []  # no change, no reconcile
    with django_capture_on_commit_callbacks(execute=True):
        budgets.budget_set(actor=finance_user, team=ready_team, amount="500", currency="USD", hard_stop=True)
    assert stop_policy("vision") == "None" and not Budget.objects.get().held
    simulated.advance(2)
    assert is_admitted("vision", "after-the-stop")


def test_turning_the_hard_stop_off_lifts_the_hold(over_budget, ready_team, finance_user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        budgets.budgets_check()
    assert stop_policy("vision") == "Hold"
    with django_capture_on_commit_callbacks(execute=True):
        budgets.budget_set(actor=finance_user, team=ready_team, amount="100", currency="USD", hard_stop=False)
    assert stop_policy("vision") == "None"


def test_the_new_month_lifts_the_hold(over_budget, ready_team, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        budgets.budgets_check()
    assert stop_policy("vision") == "Hold"
    next_month = periods.month_bounds(periods.current_month())[1] + dt.timedelta(hours=2)
    with django_capture_on_commit_callbacks(execute=True):
        assert budgets.budgets_check(now=next_month).released == ["vision"]
    assert stop_policy("vision") == "None"


def test_the_periodic_cluster_pass_repairs_a_hold_someone_removed_by_hand(over_budget, ready_team,
                                                                          django_capture_on_commit_callbacks):
    from tenants import reconcile

    with django_capture_on_commit_callbacks(execute=True):
        budgets.budgets_check()
    queue = gateway().get(ObjectRef(KUEUE, "LocalQueue", "default", "vision"))
    assert queue is not None
    queue["spec"]["stopPolicy"] = "None"
    gateway().apply(queue)
    assert stop_policy("vision") == "None"
    reconcile.cluster_reconcile()
    assert stop_policy("vision") == "Hold"

"""Two budget checks at once (two workers, or beat and the rollup task) send each alert once:
the alert's unique key per account × month × threshold is the guarantee, on PostgreSQL."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import IntegrityError, connection, transaction

from billing.budgets import services as budgets
from billing.models import BudgetAlert
from portal.models import Notification
from tests.billing.budget_helpers import UTC, priced, use

NOW = dt.datetime(2026, 11, 29, 12, tzinfo=UTC)


@pytest.mark.django_db
def test_the_database_refuses_a_second_alert_for_the_same_threshold_and_month(team, finance_user, flavor):
    priced(flavor)
    budget = budgets.budget_set(actor=finance_user, team=team, amount="1000")
    fields = {"account": budget.account, "month": dt.date(2026, 11, 1), "threshold": "80", "spent": 800,
              "budget_amount": 1000, "currency": "USD", "message": "m"}
    BudgetAlert.objects.create(**fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        BudgetAlert.objects.create(**fields)
    BudgetAlert.objects.create(**{**fields, "month": dt.date(2026, 12, 1)})  # the next month is another alert


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_two_checks_at_once_send_each_alert_once(team, lead, finance_user, flavor):
    assert connection.vendor == "postgresql", "run with scripts/with-services.sh: the race needs real concurrency"
    priced(flavor)
    budgets.budget_set(actor=finance_user, team=team, amount="1000")
    use(team, flavor, gpu_hours=85, at=NOW - dt.timedelta(days=2))
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def check() -> None:
        try:
            start.wait()
            budgets.budgets_check(now=NOW)
        except BaseException as error:  # noqa: BLE001 (reported below, in the test's thread)
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=check) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(BudgetAlert.objects.values_list("threshold", flat=True)) == ["50", "80"]
    assert list(Notification.objects.filter(recipient=lead).values_list("message", flat=True)) == [
        "vision has spent 850.00 USD of its 1,000.00 USD budget for November 2026 (85 %)."]

"""Closed statements on PostgreSQL, as production runs them: the triggers refuse raw SQL that
would change a closed statement, and two finance users closing the same month at the same moment
get one statement between them."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, connections, transaction

from billing.models import Adjustment, Statement, StatementLine
from billing.statements import services as statements
from portal.errors import StateConflict
from tests.billing.factories import account, rate, usage
from tests.factories import FlavorFactory

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

UTC = dt.UTC
AFTER = dt.datetime(2026, 11, 2, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _postgresql():
    if connection.vendor != "postgresql":
        pytest.fail("These tests need PostgreSQL: run them through scripts/with-services.sh (as `make test` does)")


@pytest.fixture
def closed(finance_user, team):
    h100 = FlavorFactory.create(name="H100 80GB", slug="h100-80gb")
    price = rate(h100, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    usage(account=account(team), flavor=h100, hour=dt.datetime(2026, 10, 3, 4, tzinfo=UTC), unit_seconds=3600, rate=price)
    statement = statements.statement_close(actor=finance_user, month=dt.date(2026, 10, 1), now=AFTER)
    statements.adjustment_add(actor=finance_user, statement=statement, account=account(team), amount="-0.50",
                              reason="GPU 3 was broken for 15 minutes")
    return statement


@pytest.mark.parametrize("sql", [
    "UPDATE billing_statementline SET amount = 0",
    "UPDATE billing_statementline SET account_slug = 'someone-else'",
    "DELETE FROM billing_statementline",
    ("INSERT INTO billing_statementline (statement_id, kind, account_slug, account_name, cost_center, flavor_id, flavor_slug,"
    " flavor_name, period_start, period_end, fraction_numerator, fraction_denominator, guaranteed_unit_seconds,"
    " borrowed_unit_seconds, guaranteed_gpu_hours, borrowed_gpu_hours, amount) SELECT statement_id, kind, account_slug,"
    " account_name, cost_center, flavor_id, flavor_slug, flavor_name, period_start, period_end, fraction_numerator,"
    " fraction_denominator, guaranteed_unit_seconds, borrowed_unit_seconds, guaranteed_gpu_hours, borrowed_gpu_hours, 9"
    " FROM billing_statementline"),
    "UPDATE billing_statement SET charged_total = 0",
    "UPDATE billing_statement SET sealed = false",
    "DELETE FROM billing_statement",
    "UPDATE billing_adjustment SET amount = -500",
    "DELETE FROM billing_adjustment",
])
def test_postgresql_refuses_raw_sql_that_would_change_a_closed_statement(closed, sql):
    with pytest.raises(IntegrityError, match="a closed statement never changes"), transaction.atomic(), \
            connection.cursor() as cursor:
        cursor.execute(sql)

    line = StatementLine.objects.get()
    assert (line.amount, line.account_slug) == (Decimal("2.00"), "vision")
    assert Statement.objects.get().charged_total == Decimal("2.00")
    assert Adjustment.objects.get().amount == Decimal("-0.50")


def test_deleting_the_finance_user_keeps_the_closed_statement_and_their_name(closed, finance_user):
    finance_user.delete()
    statement = Statement.objects.get()
    assert (statement.closed_by_id, statement.closed_by_name) == (None, "fiona")
    assert (Adjustment.objects.get().created_by_id, Adjustment.objects.get().created_by_name) == (None, "fiona")


def test_two_closes_of_the_same_month_at_once_make_one_statement_and_one_clear_refusal(finance_user, admin_user, team,
                                                                                        monkeypatch):
    h100 = FlavorFactory.create(name="H100 80GB", slug="h100-80gb")
    price = rate(h100, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    usage(account=account(team), flavor=h100, hour=dt.datetime(2026, 10, 3, 4, tzinfo=UTC), unit_seconds=3600, rate=price)
    # Both closes pass the "already closed?" check before either writes: the race the unique month settles.
    both_checked = threading.Barrier(2, timeout=20)
    checked = threading.local()
    original = statements._refuse_if_closed

    def check_then_wait(first: dt.date) -> None:
        original(first)
        if not getattr(checked, "once", False):
            checked.once = True
            both_checked.wait()

    monkeypatch.setattr(statements, "_refuse_if_closed", check_then_wait)
    outcomes: dict[str, object] = {}

    def close(user) -> None:
        try:
            outcomes[user.username] = statements.statement_close(actor=user, month=dt.date(2026, 10, 1), now=AFTER)
        except Exception as error:  # the outcome is what the test inspects
            outcomes[user.username] = error
        finally:
            connections.close_all()

    threads = [threading.Thread(target=close, args=(user,)) for user in (finance_user, admin_user)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    statement = Statement.objects.get()
    winner = statement.closed_by_name
    loser = ({"fiona", "root"} - {winner}).pop()
    assert isinstance(outcomes[winner], Statement)
    refusal = outcomes[loser]
    assert isinstance(refusal, StateConflict), refusal
    assert f"October 2026 was already closed by {winner}" in refusal.message
    assert StatementLine.objects.filter(statement=statement).count() == 1

"""Adjustments: the only way a closed statement's total changes, each with an amount, a reason and
who made it; credits are negative. Bad input is refused in words and writes nothing."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied

from billing.models import Adjustment, StatementLine
from billing.statements import selectors as statement_selectors
from billing.statements.services import adjustment_add, statement_close
from portal.errors import DomainError
from portal.models import AuditEvent
from tests.billing.factories import account, rate, usage
from tests.factories import FlavorFactory

pytestmark = pytest.mark.django_db

UTC = dt.UTC


@pytest.fixture
def closed(finance_user, team, other_team):
    h100 = FlavorFactory.create(name="H100 80GB", slug="h100-80gb")
    price = rate(h100, "2.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    usage(account=account(team), flavor=h100, hour=dt.datetime(2026, 10, 3, 4, tzinfo=UTC), unit_seconds=36000, rate=price)
    usage(account=account(other_team), flavor=h100, hour=dt.datetime(2026, 10, 3, 4, tzinfo=UTC), unit_seconds=3600,
          rate=price)
    return statement_close(actor=finance_user, month=dt.date(2026, 10, 1), now=dt.datetime(2026, 11, 2, tzinfo=UTC))


def test_a_credit_is_a_negative_adjustment_that_changes_the_total_but_no_line(closed, finance_user, team):
    lines_before = list(StatementLine.objects.values_list("id", "amount"))

    credit = adjustment_add(actor=finance_user, statement=closed, account=account(team), amount="-12.5",
                            reason="  Node gpu-7 was broken on the 12th: 6.25 GPU-hours lost  ")

    assert (credit.amount, credit.reason, credit.created_by_name) == (
        Decimal("-12.50"), "Node gpu-7 was broken on the 12th: 6.25 GPU-hours lost", "fiona")
    assert list(StatementLine.objects.values_list("id", "amount")) == lines_before
    picture = statement_selectors.statement_picture(user=finance_user, statement=closed)
    vision = next(section for section in picture.teams if section.slug == "vision")
    assert (vision.charged, vision.adjusted, vision.total) == (Decimal("20.00"), Decimal("-12.50"), Decimal("7.50"))
    assert (picture.charged, picture.total) == (Decimal("22.00"), Decimal("9.50"))
    event = AuditEvent.objects.get(action="statement.adjusted")
    assert event.message == ("fiona added a credit of -12.50 USD for vision to October 2026: "
                             "Node gpu-7 was broken on the 12th: 6.25 GPU-hours lost")
    assert event.team_id == team.pk


@pytest.mark.parametrize(("amount", "reason", "message"), [
    ("-10", "", "An adjustment needs a reason"),
    ("-10", "   ", "An adjustment needs a reason"),
    ("ten dollars", "refund", "“ten dollars” is not an amount; give a number such as -120.50"),
    ("", "refund", "Give the amount as a number"),
    (None, "refund", "Give the amount as a number"),
    (True, "refund", "Give the amount as a number"),
    ("NaN", "refund", "“NaN” is not an amount"),
    ("-Infinity", "refund", "“-Infinity” is not an amount"),
    ("0", "refund", "An adjustment of zero changes nothing"),
    ("1.005", "refund", "An amount in USD has at most 2 decimals"),
    ("1e20", "refund", "An amount in USD is at most 999,999,999,999,999.99"),
    ("9" * 16, "refund", "An amount in USD is at most 999,999,999,999,999.99"),
    ("1" * 400, "refund", "An amount in USD is at most 999,999,999,999,999.99"),
])
def test_bad_adjustments_are_refused_in_words_and_nothing_is_written(closed, finance_user, team, amount, reason, message):
    with pytest.raises(DomainError, match=message):
        adjustment_add(actor=finance_user, statement=closed, account=account(team), amount=amount, reason=reason)
    assert not Adjustment.objects.exists()
    assert not AuditEvent.objects.filter(action="statement.adjusted").exists()


def test_trailing_zeros_beyond_the_minor_unit_are_not_extra_decimals(closed, finance_user, team):
    adjustment = adjustment_add(actor=finance_user, statement=closed, account=account(team), amount="3.5000", reason="fee")
    assert adjustment.amount == Decimal("3.50")


def test_only_finance_and_platform_admins_adjust_a_statement(closed, lead, admin_user, team):
    with pytest.raises(PermissionDenied):
        adjustment_add(actor=lead, statement=closed, account=account(team), amount="-1", reason="my own credit")
    assert adjustment_add(actor=admin_user, statement=closed, account=account(team), amount="1", reason="fee").amount == 1

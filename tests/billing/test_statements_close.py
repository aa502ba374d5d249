"""Closing a month: golden datasets with answers computed by hand, and every refusal.

October 2026 in UTC unless a test says otherwise. H100 is a whole GPU per unit; the MIG slice is
1/7 of a GPU per unit. Rates: H100 2.00 USD per GPU-hour until 15 October 00:00, then 3.00.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from fractions import Fraction

import pytest
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, connection, transaction

from billing import ledger, periods
from billing.models import CapacityHour, Statement, StatementLine
from billing.statements import lines
from billing.statements import selectors as statement_selectors
from billing.statements import services as statements
from billing.statements.exports import statement_csv
from billing.statements.services import statement_close
from portal.errors import DomainError, StateConflict
from portal.models import AuditEvent
from tests.billing.factories import account, rate, usage
from tests.factories import FlavorFactory, TeamFactory

pytestmark = pytest.mark.django_db

UTC = dt.UTC
OCTOBER = dt.date(2026, 10, 1)
AFTER = dt.datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def at(day: int, hour: int, month: int = 10) -> dt.datetime:
    return dt.datetime(2026, month, day, hour, tzinfo=UTC)


@pytest.fixture
def h100(db):
    return FlavorFactory.create(name="H100 80GB", slug="h100-80gb", capacity_units=16)


@pytest.fixture
def slice_flavor(db):
    return FlavorFactory.create(name="A100 1g.10gb", slug="a100-1g10gb", resource_name="nvidia.com/mig-1g.10gb",
                                sharing_mode="mig", fraction_denominator=7, capacity_units=56)


@pytest.fixture
def prices(h100):
    return rate(h100, "2.00", effective_from=dt.datetime(2026, 9, 1, tzinfo=UTC)), \
        rate(h100, "3.00", effective_from=dt.datetime(2026, 10, 15, tzinfo=UTC))


def close(user, month=OCTOBER, now=AFTER) -> Statement:
    return statement_close(actor=user, month=month, now=now)


def lines_of(statement: Statement, kind: str = StatementLine.Kind.USAGE) -> list[tuple]:
    return [(line.account_slug, line.flavor_slug, line.period_start, line.period_end, line.guaranteed_unit_seconds,
             line.borrowed_unit_seconds, line.guaranteed_gpu_hours, line.borrowed_gpu_hours, line.price_per_gpu_hour,
             line.amount)
            for line in statement.lines.filter(kind=kind).order_by("account_slug", "flavor_slug", "period_start")]


def test_a_price_change_mid_month_splits_the_line_at_the_change(finance_user, team, h100, prices):
    old, new = prices
    vision = account(team)
    usage(account=vision, flavor=h100, hour=at(10, 10), unit_seconds=7200, rate=old)  # 2 GPUs for an hour
    usage(account=vision, flavor=h100, hour=at(20, 10), unit_seconds=5400, rate=new)  # 1.5 GPU-hours guaranteed
    usage(account=vision, flavor=h100, hour=at(20, 10), unit_seconds=1800, rate=new, borrowed=True, owner="bob")
    usage(account=vision, flavor=h100, hour=at(21, 3), unit_seconds=1800, rate=new, borrowed=True)

    statement = close(finance_user)

    assert lines_of(statement) == [
        ("vision", "h100-80gb", at(1, 0), at(15, 0), 7200, 0, Decimal("2.000000"), Decimal("0"), Decimal("2.0000"),
         Decimal("4.000")),
        # 1.5 h guaranteed + 1.0 h borrowed at 3.00 = 7.50
        ("vision", "h100-80gb", at(15, 0), at(1, 0, month=11), 5400, 3600, Decimal("1.500000"), Decimal("1.000000"),
         Decimal("3.0000"), Decimal("7.500")),
    ]
    assert (statement.currency, statement.charged_total, statement.unallocated_total) == ("USD", Decimal("11.5"), Decimal(0))
    assert statement.sealed and statement.closed_by_name == "fiona"
    assert (statement.period_start, statement.period_end) == (at(1, 0), at(1, 0, month=11))


def test_a_mig_slice_is_billed_exactly_and_rounded_once_per_line_half_even(finance_user, team, h100, slice_flavor):
    vision = account(team)
    cheap = rate(slice_flavor, "0.10", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    quarter = rate(h100, "0.25", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    # Three 10-minute stretches on one slice: 1800 unit-s = 1800/7 GPU-s = 1/14 GPU-hour, 0.00714… USD.
    # Rounded per row each would be 0.00; rounded once per line it is 0.01.
    for day in (3, 4, 5):
        usage(account=vision, flavor=slice_flavor, hour=at(day, 9), unit_seconds=600, rate=cheap)
    # Half an H100-hour at 0.25 is 0.125 exactly: half-even gives 0.12 (half-up would say 0.13).
    usage(account=vision, flavor=h100, hour=at(6, 9), unit_seconds=1800, rate=quarter)

    statement = close(finance_user)

    line = statement.lines.get(flavor=slice_flavor)
    assert (line.guaranteed_unit_seconds, line.fraction_numerator, line.fraction_denominator) == (1800, 1, 7)
    assert line.gpu_seconds == Fraction(1800, 7)
    assert line.guaranteed_gpu_hours == Decimal("0.071429")
    assert line.amount == Decimal("0.01")
    assert statement.lines.get(flavor=h100).amount == Decimal("0.12")
    assert statement.charged_total == Decimal("0.13")  # the sum of the rounded lines


def test_a_team_deleted_mid_month_is_still_billed_under_its_name_and_cost_center(finance_user, h100, prices):
    speech = TeamFactory.create(slug="speech", name="Speech", cost_center="CC-778")
    gone = account(speech)
    usage(account=gone, flavor=h100, hour=at(3, 12), unit_seconds=3600, rate=prices[0])
    speech.delete()

    statement = close(finance_user)

    (line,) = statement.lines.all()
    assert (line.account_id, line.account_slug, line.account_name, line.cost_center) == (gone.pk, "speech", "Speech",
                                                                                          "CC-778")
    assert line.amount == Decimal("2.00")


def test_a_flavor_with_no_usage_has_no_usage_line_only_its_unallocated_capacity(finance_user, team, h100, prices):
    idle = FlavorFactory.create(name="L4", slug="l4", capacity_units=4)
    rate(idle, "1.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    usage(account=account(team), flavor=h100, hour=at(10, 10), unit_seconds=7200, rate=prices[0])
    CapacityHour.objects.create(hour=at(10, 10), flavor=idle, fraction_numerator=1, fraction_denominator=1,
                                unit_seconds=4 * 3600)

    statement = close(finance_user)

    assert not statement.lines.filter(flavor=idle, kind=StatementLine.Kind.USAGE).exists()
    (unused,) = statement.lines.filter(flavor=idle)
    assert (unused.kind, unused.account_id, unused.guaranteed_unit_seconds, unused.amount) == ("unallocated", None, 14400,
                                                                                               Decimal("4.00"))
    assert statement.charged_total == Decimal("4.00")  # the H100 line; unallocated is not charged to a team
    assert statement.unallocated_total == Decimal("4.00")


def test_unallocated_capacity_is_priced_per_rate_period_and_teams_plus_unallocated_equal_capacity(
        finance_user, team, other_team, h100, prices):
    old, new = prices
    for hour, price in ((at(10, 10), old), (at(20, 10), new)):
        CapacityHour.objects.create(hour=hour, flavor=h100, fraction_numerator=1, fraction_denominator=1,
                                    unit_seconds=16 * 3600)
        usage(account=account(team), flavor=h100, hour=hour, unit_seconds=5400, rate=price)
        usage(account=account(other_team), flavor=h100, hour=hour, unit_seconds=1800, rate=price, borrowed=True)

    statement = close(finance_user)

    assert lines_of(statement, StatementLine.Kind.UNALLOCATED) == [
        ("", "h100-80gb", at(1, 0), at(15, 0), 50400, 0, Decimal("14.000000"), Decimal("0"), Decimal("2.0000"),
         Decimal("28.000")),
        ("", "h100-80gb", at(15, 0), at(1, 0, month=11), 50400, 0, Decimal("14.000000"), Decimal("0"), Decimal("3.0000"),
         Decimal("42.000")),
    ]
    used = sum(line.guaranteed_unit_seconds + line.borrowed_unit_seconds for line in statement.lines.all())
    assert used == 2 * 16 * 3600  # conservation: every unit-second of capacity is on exactly one line
    # The statement reads capacity and usage in one pass; the ledger's own answer agrees with it.
    assert ledger.unallocated(start=at(1, 0), end=at(15, 0)) == {h100.pk: 50400}
    assert ledger.unallocated(start=at(15, 0), end=at(1, 0, month=11)) == {h100.pk: 50400}


def test_idle_capacity_of_the_hour_a_price_changed_in_goes_with_the_new_price(finance_user, team, h100):
    old = rate(h100, "2.00", effective_from=dt.datetime(2026, 9, 1, tzinfo=UTC))
    changed = dt.datetime(2026, 10, 15, 10, 30, tzinfo=UTC)
    new = rate(h100, "3.00", effective_from=changed)
    usage(account=account(team), flavor=h100, hour=at(15, 10), unit_seconds=1800, rate=old)
    usage(account=account(team), flavor=h100, hour=at(15, 10), unit_seconds=1800, rate=new)
    CapacityHour.objects.create(hour=at(15, 10), flavor=h100, fraction_numerator=1, fraction_denominator=1,
                                unit_seconds=16 * 3600)

    statement = close(finance_user)

    assert [(line.period_start, line.amount) for line in statement.lines.filter(kind="usage").order_by("period_start")] == [
        (at(1, 0), Decimal("1.00")), (changed, Decimal("1.50"))]
    # 16 GPU-hours of capacity minus the 1 used, all at the new price: 15 × 3.00.
    (idle,) = statement.lines.filter(kind="unallocated")
    assert (idle.period_start, idle.guaranteed_unit_seconds, idle.amount) == (changed, 54000, Decimal("45.00"))
    assert ledger.unallocated(start=at(15, 10), end=at(1, 0, month=11)) == {h100.pk: 54000}


def test_a_month_in_a_zone_with_an_offset_starts_at_its_local_midnight(settings, finance_user, team, h100):
    settings.BILLING_TIME_ZONE = "Europe/Berlin"
    price = rate(h100, "1.00", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    vision = account(team)
    # 22:00 UTC on 30 September is midnight on 1 October in Berlin; the hour before is September's.
    usage(account=vision, flavor=h100, hour=dt.datetime(2026, 9, 30, 22, tzinfo=UTC), unit_seconds=3600, rate=price)
    usage(account=vision, flavor=h100, hour=dt.datetime(2026, 9, 30, 21, tzinfo=UTC), unit_seconds=7200, rate=price)
    # October ends at 1 November 00:00 CET (23:00 UTC): an hour later than UTC, with the clocks back on 25 October.
    usage(account=vision, flavor=h100, hour=dt.datetime(2026, 10, 31, 22, tzinfo=UTC), unit_seconds=10800, rate=price)
    usage(account=vision, flavor=h100, hour=dt.datetime(2026, 10, 31, 23, tzinfo=UTC), unit_seconds=36000, rate=price)

    statement = close(finance_user)

    assert (statement.period_start, statement.period_end) == (dt.datetime(2026, 9, 30, 22, tzinfo=UTC),
                                                              dt.datetime(2026, 10, 31, 23, tzinfo=UTC))
    assert statement.time_zone == "Europe/Berlin"
    assert statement.lines.get().guaranteed_unit_seconds == 3600 + 10800


def test_closing_twice_is_refused_and_the_first_statement_stands(finance_user, team, h100, prices):
    usage(account=account(team), flavor=h100, hour=at(10, 10), unit_seconds=3600, rate=prices[0])
    first = close(finance_user)

    with pytest.raises(StateConflict, match="October 2026 was already closed by fiona"):
        close(finance_user, month=dt.date(2026, 10, 17))

    assert list(Statement.objects.all()) == [first]
    assert AuditEvent.objects.filter(action="statement.closed").count() == 1


@pytest.mark.parametrize(("now", "closes"), [
    (dt.datetime(2026, 10, 31, 23, 59, 59, tzinfo=UTC), False),
    (dt.datetime(2026, 11, 1, 0, 0, tzinfo=UTC), True),
])
def test_a_month_closes_only_once_it_has_ended_in_the_billing_zone(finance_user, now, closes):
    if closes:
        assert close(finance_user, now=now).month == OCTOBER
        return
    with pytest.raises(DomainError, match=r"October 2026 has not ended yet in the billing time zone \(UTC\): "
                                          r"it can be closed from 2026-11-01 00:00"):
        close(finance_user, now=now)
    assert not Statement.objects.exists()


def test_the_current_month_cannot_be_closed(finance_user):
    with pytest.raises(DomainError, match="has not ended yet"):
        statement_close(actor=finance_user, month=periods.current_month())


def test_only_finance_and_platform_admins_close_a_month(lead, member, admin_user):
    for user in (lead, member):
        with pytest.raises(PermissionDenied):
            close(user)
    assert close(admin_user).closed_by_name == "root"


def test_a_flavor_priced_in_two_currencies_in_the_month_is_refused_by_name_and_nothing_is_written(
        finance_user, team, h100, prices):
    euro = rate(h100, "2.80", effective_from=dt.datetime(2026, 10, 20, tzinfo=UTC), currency="EUR")
    usage(account=account(team), flavor=h100, hour=at(21, 10), unit_seconds=3600, rate=euro)
    usage(account=account(team), flavor=h100, hour=at(2, 10), unit_seconds=3600, rate=prices[0])

    with pytest.raises(DomainError, match="H100 80GB was priced in EUR and USD during the month; a statement has one currency"):
        close(finance_user)

    assert not Statement.objects.exists() and not StatementLine.objects.exists()
    assert not AuditEvent.objects.filter(action="statement.closed").exists()


def test_two_flavors_in_different_currencies_are_refused_naming_both(finance_user, team, h100, slice_flavor, prices):
    yen = rate(slice_flavor, "100", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC), currency="JPY")
    usage(account=account(team), flavor=slice_flavor, hour=at(2, 10), unit_seconds=3600, rate=yen)
    usage(account=account(team), flavor=h100, hour=at(2, 10), unit_seconds=3600, rate=prices[0])

    with pytest.raises(DomainError, match=r"more than one currency \(A100 1g.10gb in JPY, H100 80GB in USD\)"):
        close(finance_user)
    assert not Statement.objects.exists()


def test_a_failure_after_the_lines_are_written_leaves_no_statement_behind(finance_user, team, h100, prices, monkeypatch):
    usage(account=account(team), flavor=h100, hour=at(10, 10), unit_seconds=3600, rate=prices[0])
    write_lines = statements._write_lines

    def written_then_broken(rows):
        write_lines(rows)
        assert StatementLine.objects.count() == 1  # the lines were there inside the transaction
        raise RuntimeError("the disk filled up")

    monkeypatch.setattr(statements, "_write_lines", written_then_broken)
    with pytest.raises(RuntimeError):
        close(finance_user)

    assert not Statement.objects.exists() and not StatementLine.objects.exists()
    assert not AuditEvent.objects.filter(action="statement.closed").exists()
    monkeypatch.undo()
    assert close(finance_user).charged_total == Decimal("2.00")


def test_usage_before_a_flavor_had_a_price_is_on_the_statement_free(finance_user, team, h100):
    usage(account=account(team), flavor=h100, hour=at(4, 4), unit_seconds=3600, rate=None)
    rate(h100, "5.00", effective_from=dt.datetime(2026, 10, 10, tzinfo=UTC))

    statement = close(finance_user)

    (line,) = statement.lines.all()
    assert (line.period_start, line.period_end, line.price_per_gpu_hour, line.amount) == (at(1, 0), at(10, 0), None, Decimal(0))
    assert line.guaranteed_gpu_hours == 1


def test_reclosing_the_same_usage_into_a_new_statement_gives_byte_identical_csv(finance_user, team, other_team, h100,
                                                                                 slice_flavor, prices):
    cheap = rate(slice_flavor, "0.70", effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    for index, (who, flavor, price) in enumerate([(team, h100, prices[0]), (other_team, slice_flavor, cheap),
                                                  (team, h100, prices[1]), (other_team, h100, prices[1])]):
        usage(account=account(who), flavor=flavor, hour=at(5 + 7 * (index % 3), index), unit_seconds=1000 + 333 * index,
              rate=price, borrowed=index == 3)
    CapacityHour.objects.create(hour=at(5, 0), flavor=h100, fraction_numerator=1, fraction_denominator=1,
                                unit_seconds=16 * 3600)

    class Undo(Exception):
        pass

    def close_and_export() -> bytes:
        statement = close(finance_user)
        picture = statement_selectors.statement_picture(user=finance_user, statement=statement)
        return statement_csv(picture)

    with pytest.raises(Undo), transaction.atomic():
        first = close_and_export()  # the statement and its lines exist only inside this block
        raise Undo
    assert not Statement.objects.exists()
    second = close_and_export()

    assert first == second
    again = statement_csv(statement_selectors.statement_picture(user=finance_user, statement=Statement.objects.get()))
    assert again == second
    text = second.decode()
    assert text.splitlines()[0].startswith("record,month,currency,team,team_name,cost_center,flavor")
    assert "total_charged" in text and "unallocated" in text


# --- The database refuses to change a closed statement ---------------------------------------


@pytest.fixture
def closed(finance_user, team, h100, prices) -> Statement:
    usage(account=account(team), flavor=h100, hour=at(10, 10), unit_seconds=3600, rate=prices[0])
    return close(finance_user)


def refused(sql: str, params: list) -> None:
    with pytest.raises(IntegrityError, match="a closed statement never changes"), transaction.atomic(), \
            connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_the_database_refuses_to_update_delete_or_add_lines_of_a_closed_statement(closed):
    line = closed.lines.get()
    refused("UPDATE billing_statementline SET amount = 0 WHERE id = %s", [line.pk])
    refused("DELETE FROM billing_statementline WHERE id = %s", [line.pk])
    refused("INSERT INTO billing_statementline (statement_id, kind, account_slug, account_name, cost_center, flavor_id, "
            "flavor_slug, flavor_name, period_start, period_end, fraction_numerator, fraction_denominator, "
            "guaranteed_unit_seconds, borrowed_unit_seconds, guaranteed_gpu_hours, borrowed_gpu_hours, amount) "
            "SELECT statement_id, kind, account_slug, account_name, cost_center, flavor_id, flavor_slug, flavor_name, "
            "period_start, period_end, fraction_numerator, fraction_denominator, guaranteed_unit_seconds, "
            "borrowed_unit_seconds, guaranteed_gpu_hours, borrowed_gpu_hours, 999 FROM billing_statementline WHERE id = %s",
            [line.pk])
    line.refresh_from_db()
    assert line.amount == Decimal("2.00") and closed.lines.count() == 1


def test_the_database_refuses_to_change_or_delete_a_closed_statement(closed):
    refused("UPDATE billing_statement SET charged_total = 0 WHERE id = %s", [closed.pk])
    refused("UPDATE billing_statement SET sealed = %s WHERE id = %s", [False, closed.pk])
    refused("DELETE FROM billing_statement WHERE id = %s", [closed.pk])
    closed.refresh_from_db()
    assert closed.charged_total == Decimal("2.00") and closed.sealed


def test_deleting_the_user_who_closed_the_month_keeps_the_statement_and_the_name(closed, finance_user):
    finance_user.delete()
    closed.refresh_from_db()
    assert (closed.closed_by_id, closed.closed_by_name, closed.charged_total) == (None, "fiona", Decimal("2.00"))


def test_the_orm_cannot_change_a_closed_line_either(closed):
    line = closed.lines.get()
    line.amount = Decimal("0.01")
    with pytest.raises(IntegrityError), transaction.atomic():
        line.save()
    with pytest.raises(IntegrityError), transaction.atomic():
        StatementLine.objects.filter(pk=line.pk).delete()


def test_statements_module_names_months_in_words():
    assert statements.month_label(OCTOBER) == "October 2026"


def test_the_displayed_gpu_hours_round_half_even_exactly_as_billing_money_does():
    from billing.money import round_places

    samples = [(1800, 1, 7), (3600, 1, 1), (1, 1, 3600), (9, 1, 4), (18, 1, 1), (7 * 3600 * 5, 1, 7), (123456789, 3, 7)]
    samples += [(seconds, 1, denominator) for seconds in range(0, 40000, 613) for denominator in (1, 2, 4, 7, 8)]
    for unit_seconds, numerator, denominator in samples:
        draft = lines.Draft(kind="usage", account=None, flavor=None, period=None,  # type: ignore[arg-type]
                                  numerator=numerator, denominator=denominator)
        assert draft.hours(unit_seconds) == round_places(Fraction(unit_seconds * numerator, denominator * 3600), 6), \
            (unit_seconds, numerator, denominator)
    # Exact ties: 9 unit-s at 1/5000 GPU is 0.0000005 GPU-hours, which half-even keeps at 0.000000
    # (half-up would say 0.000001); 27 unit-s is 0.0000015, which goes to the even 0.000002.
    tie = lines.Draft(kind="usage", account=None, flavor=None, period=None,  # type: ignore[arg-type]
                            numerator=1, denominator=5000)
    assert (tie.hours(9), tie.hours(27)) == (Decimal("0.000000"), Decimal("0.000002"))
